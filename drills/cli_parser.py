"""The ``drills`` command line's parser: every subcommand and option, with its help, one
function per subcommand (``drills.cli`` parses with it and runs what was asked)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from drills import __version__
from drills.common.errors import EXIT_USAGE
from drills.common.stats import CONFIDENCE

__all__ = ["EXIT_CODES", "build_parser"]

DESCRIPTION = "The ``drills`` command line: parse, call the engine, map outcomes to exit codes."
"""The first line of ``drills --help`` (kept as it was when the parser lived in ``drills.cli``)."""
STATE_HELP = (
    "where the stack keeps its state (default: $DRILLS_STATE_DIR or ~/.local/state/drills/stack)"
)

EXIT_CODES = """exit codes:
  0  passed (a drill, a gate, a game day), or the command did what it was asked
  1  failed: a check failed, a twin did not hold, the drill aborted or was interrupted, the
     load fell short
  2  bad input (scenario, stack config, adapter, plan, command line), a refusal by the safety
     policy, or another drill holds the stack: nothing was applied
  3  a fault is still in force: a revert failed, or the chain after the drill differs from
     the chain before it (`drills faults`, `drills abort`)
  130  interrupted (Ctrl-C) before any fault was applied
  141  the reader of the output went away (a closed pipe); a running drill still reverted"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


if TYPE_CHECKING:
    _Commands = argparse._SubParsersAction[_Parser]


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, in the order `drills --help` lists it; nothing here runs or
    decides (``drills.cli`` does)."""
    parser = _Parser(
        prog="drills",
        description=DESCRIPTION,
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"drills {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _stack_commands(commands)
    _run_command(commands)
    _gate_command(commands)
    _gameday_command(commands)
    _during_a_run_commands(commands)
    _lint_command(commands)
    _probe_command(commands)
    _file_commands(commands)
    return parser


def _stack_commands(commands: _Commands) -> None:
    """``drills stack up|status|down``: the embedded serving stack."""
    stack = commands.add_parser("stack", help="the embedded serving stack")
    stack_cmds = stack.add_subparsers(dest="stack_command", required=True, parser_class=_Parser)

    up = stack_cmds.add_parser("up", help="bring the stack up and wait until it is healthy")
    up.add_argument("--profile", default="sound", help="profile name (sound, unsound) or YAML path")
    up.add_argument("--state-dir", type=Path, help=STATE_HELP)
    up.add_argument("--json", action="store_true", help="print the status as JSON")

    st = stack_cmds.add_parser("status", help="show each component, its health and its proxy")
    st.add_argument("--state-dir", type=Path, help=STATE_HELP)
    st.add_argument("--json", action="store_true", help="print the status as JSON")

    dn = stack_cmds.add_parser("down", help="stop everything the stack started")
    dn.add_argument("--state-dir", type=Path, help=STATE_HELP)


def _run_command(commands: _Commands) -> None:
    """``drills run``: one drill."""
    run = commands.add_parser("run", help="run a drill scenario and write its journal and reports")
    run.add_argument("scenario", type=Path)
    run.add_argument("--profile", help="stack profile to bring up (overrides the scenario's)")
    _attach_args(run)
    run.add_argument(
        "--out", type=Path, default=Path("runs"), help="where runs go (default: runs/)"
    )
    run.add_argument("--state-dir", type=Path, help=STATE_HELP)
    lifecycle = run.add_mutually_exclusive_group()
    lifecycle.add_argument(
        "--keep-stack",
        action="store_true",
        help="leave the profile's stack up as yours: no later run replaces it for another "
        "profile (by default a stack a run brought up stays up, and a later run that needs "
        "another profile replaces it while no other run uses it)",
    )
    lifecycle.add_argument(
        "--stop-stack", action="store_true", help="stop the profile's stack after the drill"
    )
    _with_args(run)
    _safety_args(run)
    _history_args(run)
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="print the resolved targets, faults and timeline; touch nothing",
    )
    run.add_argument(
        "--json",
        action="store_true",
        help="print the outcome as JSON (with --dry-run: the plan); progress stays on stderr",
    )
    run.add_argument(
        "--twin",
        nargs="?",
        const="",
        metavar="NAME",
        help="run the drill on its twin NAME (every twin without NAME): a stack broken on "
        "purpose; it passes when exactly the checks the twin names fail",
    )
    repeat = run.add_mutually_exclusive_group()
    repeat.add_argument(
        "--repeat",
        type=_positive,
        metavar="N",
        help="run the drill N times on the same stack and judge its checks over all of them: "
        "a rate or percentile on the requests of every run together (a narrower interval), "
        "any other check in each run (it passes when it passed in every one)",
    )
    repeat.add_argument(
        "--until-conclusive",
        type=_positive,
        metavar="MAX",
        help="as --repeat, until every check is conclusive (one run when it already is, MAX "
        "at most)",
    )
    _confidence_args(run)


def _gate_command(commands: _Commands) -> None:
    """``drills gate``: drills as a CI gate."""
    gate = commands.add_parser(
        "gate", help="CI resilience gate: run drills, write JUnit + summary, fail on any check"
    )
    gate.add_argument("paths", type=Path, nargs="+", help="scenario files or directories")
    gate.add_argument("--profile", help="stack profile to bring up (overrides the scenarios')")
    _attach_args(gate)
    gate.add_argument("--state-dir", type=Path, help=STATE_HELP)
    _with_args(gate)
    gate.add_argument(
        "--out", type=Path, default=Path("gate"), help="junit.xml, summary.md, runs/ (gate/)"
    )
    gate.add_argument(
        "--concurrency",
        type=int,
        default=1,
        help="drills at once (default 1: drills share the stack and would disturb each other)",
    )
    _safety_args(gate)
    _history_args(gate)
    gate.add_argument("--dry-run", action="store_true", help="print each drill's plan; run none")
    gate.add_argument(
        "--json",
        action="store_true",
        help="print the outcomes as JSON (with --dry-run: the plans); progress stays on stderr",
    )
    gate.add_argument(
        "--twins",
        action="store_true",
        help="run each drill on its twins too, after its own stack (a JUnit suite per twin)",
    )
    _confidence_args(gate)
    gate.add_argument(
        "--inconclusive",
        choices=("pass", "fail", "rerun"),
        default="pass",
        help="what a check that passed on too few requests to be sure does to the gate "
        "(default pass: it passes as observed and is listed; fail: the gate fails; rerun: "
        "the drill runs again, its checks judged over its runs, until they are sure or "
        "--rerun-max runs have been made, and the gate fails if they are still not sure)",
    )
    gate.add_argument(
        "--rerun-max",
        type=_positive,
        default=3,
        metavar="N",
        help="with --inconclusive rerun: the most runs of one drill (default 3)",
    )


def _gameday_command(commands: _Commands) -> None:
    """``drills gameday``: a game-day plan with people in the loop."""
    day = commands.add_parser(
        "gameday", help="run a game-day plan: drills, checkpoints for people, one report"
    )
    day.add_argument("plan", type=Path)
    day.add_argument(
        "--answers", type=Path, help="pre-answered checkpoints (a rehearsal): answers: {ID: yes}"
    )
    day.add_argument("--profile", help="stack profile to bring up (overrides the plan's)")
    _attach_args(day)
    day.add_argument("--state-dir", type=Path, help=STATE_HELP)
    _with_args(day)
    day.add_argument("--out", type=Path, default=Path("runs"), help="where the day goes (runs/)")
    day.add_argument("--as", dest="person", help="the name recorded for terminal answers")
    _safety_args(day)
    _history_args(day)
    day.add_argument("--dry-run", action="store_true", help="print the whole plan; touch nothing")
    day.add_argument(
        "--json",
        action="store_true",
        help="print the day's outcome as JSON (with --dry-run: its plan); progress on stderr",
    )


def _during_a_run_commands(commands: _Commands) -> None:
    """``note``, ``abort``, ``faults``, ``load-worker``: what is done beside running drills."""
    note = commands.add_parser("note", help="add an observer note to the running game day")
    note.add_argument("text")
    note.add_argument("--by", help="who observed it (default: your user name)")

    abort = commands.add_parser(
        "abort", help="kill switch: make running drills revert every fault now and stop"
    )
    abort.add_argument("run_id", nargs="?", help="one run (default: every run on this machine)")
    abort.add_argument("--reason", default="kill switch", help="recorded in the journal")
    abort.add_argument(
        "--ledger", type=Path, help="the ledger of applied faults (default: $DRILLS_LEDGER)"
    )

    faults = commands.add_parser(
        "faults",
        help="list the faults in force on this machine's ledger, by run, with their age, and "
        "what each running drill holds (one drill at a time on a stack or target)",
    )
    faults.add_argument(
        "--ledger", type=Path, help="the ledger of applied faults (default: $DRILLS_LEDGER)"
    )
    faults.add_argument("--json", action="store_true")

    worker = commands.add_parser(
        "load-worker",
        help="be one of a drill's load workers on this host (a drill with load.remote runs the "
        "master; stack/deploy/load-workers.yaml runs these as a Job)",
    )
    worker.add_argument("--master", required=True, help="the drill's master, HOST:PORT")
    worker.add_argument(
        "--wait", default="60s", help="how long to try to reach the master (default 60s)"
    )


def _lint_command(commands: _Commands) -> None:
    """``drills lint``: a stack config's or a rules file's contradictions."""
    lint = commands.add_parser(
        "lint",
        help="check a stack config's timeouts, retries and breakers for contradictions, or a "
        "Prometheus rules file's alerts (too slow for their SLO, no runbook, a missing metric)",
    )
    lint.add_argument(
        "configs",
        nargs="+",
        help="stack config files or profile names, or Prometheus rules files (groups: ...)",
    )
    lint.add_argument(
        "--slo-window",
        help="rules: the SLO window the alerts protect (e.g. 5m); an alert that cannot fire "
        "within it is an error (a rule's own slo_window annotation wins)",
    )
    lint.add_argument(
        "--scrape-interval", default="1m", help="rules: the scrape interval (default 1m)"
    )
    lint.add_argument(
        "--evaluation-interval",
        default="1m",
        help="rules: the evaluation interval (default 1m; a group's interval wins)",
    )
    lint.add_argument(
        "--prometheus",
        help="rules: a Prometheus whose targets must expose each metric the rules read",
    )
    lint.add_argument(
        "--client-timeout",
        help="the timeout of the gateway's clients (e.g. 30s): it must outwait the gateway",
    )
    lint.add_argument("--json", action="store_true", help="print findings as JSON")


def _probe_command(commands: _Commands) -> None:
    """``drills probe retrieval``: the recall probe once."""
    probe = commands.add_parser(
        "probe",
        help="run the retrieval recall probe once: recall@k and latency of the standard queries",
    )
    probe.add_argument("what", choices=["retrieval"])
    probe.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="the embedded stack's state (default: $DRILLS_STATE_DIR or the usual place)",
    )
    probe.add_argument("--stack-config", help="an attached stack's config file (instead)")
    probe.add_argument("--queries", type=Path, help="standard queries YAML (default: the shipped)")
    probe.add_argument("--direct", action="store_true", help="bypass the Toxiproxy proxies")
    probe.add_argument("--min-recall", type=float, default=0.8, help="exit 1 below this recall")
    probe.add_argument("--json", action="store_true")


def _file_commands(commands: _Commands) -> None:
    """``validate``, ``report``, ``schema``, ``history``: reading files and runs."""
    val = commands.add_parser(
        "validate",
        help="check files of ours (drills, game-day plans and answers, stack profiles, safety "
        "policies, recall queries), each recognised by its keys; touches nothing",
    )
    val.add_argument("files", type=Path, nargs="+")
    val.add_argument(
        "--json", action="store_true", help="print each file's kind as JSON (problems: exit 2)"
    )

    rep = commands.add_parser("report", help="re-render the reports of a run from its journal")
    rep.add_argument("run_dir", type=Path)

    schema = commands.add_parser(
        "schema",
        help="print the JSON Schema of a scenario file or a journal (for editors and tools)",
    )
    schema.add_argument("what", choices=["scenario", "journal"])

    history = commands.add_parser(
        "history", help="a drill's last runs from the run history: verdicts and each check"
    )
    history.add_argument("drill", nargs="?", help="the drill's name or file (none: list drills)")
    history.add_argument("--last", type=_positive, default=10, help="how many runs (10)")
    history.add_argument("--label", help="only the runs with this label")
    history.add_argument("--twin", default="", help="the runs on this twin of the drill")
    history.add_argument("--history", metavar="WHERE", help="the run history (as for run)")
    history.add_argument("--json", action="store_true", help="print the runs as JSON")


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number from 1")
    return int(text)


def _safety_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--safety",
        type=Path,
        help="safety policy file (default: $DRILLS_SAFETY, ./drills-safety.yaml, built-in)",
    )
    parser.add_argument(
        "--stack-config", help="attach: the stack's config file, for the stack_lint check"
    )


def _history_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--label",
        help="what this run is of (a release, a git sha): kept in the journal and the history",
    )
    parser.add_argument(
        "--history",
        metavar="WHERE",
        help="the run history: a file, sqlite:///PATH, a team's postgresql://USER@HOST/DB, or "
        "none (default: $DRILLS_HISTORY or ~/.local/state/drills/history.sqlite); "
        "`drills history DRILL` reads it",
    )
    parser.add_argument(
        "--otlp",
        metavar="URL",
        help="send the run as an OpenTelemetry trace to this OTLP/HTTP receiver (a base URL, "
        "e.g. http://collector:4318, or its /v1/traces URL; default: "
        "$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or $OTEL_EXPORTER_OTLP_ENDPOINT, else none); "
        "headers from $OTEL_EXPORTER_OTLP_HEADERS",
    )


def _confidence_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--confidence",
        type=_confidence,
        default=CONFIDENCE,
        help="the confidence of the checks' intervals (default 0.95): a check whose interval "
        "reaches past its bound is inconclusive",
    )


def _confidence(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.5 <= value < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a confidence from 0.5 to below 1 (0.95, 0.99)"
        )
    return value


def _with_args(parser: argparse.ArgumentParser) -> None:
    # Imported here: the parser is built for every command, the kill switch included; the
    # stack's config model only for the commands that take --with (``drills.cli``).
    from stack.config import OPTIONAL_PARTS

    parser.add_argument(
        "--with",
        dest="with_parts",
        action="append",
        choices=sorted(OPTIONAL_PARTS),
        metavar="PART",
        help="start this optional part of the profile even if no drill here needs it; "
        + "; ".join(f"{p}: {what}" for p, what in OPTIONAL_PARTS.items())
        + " (by default a stack is started with only what its drills need)",
    )


def _attach_args(parser: argparse.ArgumentParser) -> None:
    """Attach to a running stack; each one given overrides the scenario's attach section."""
    parser.add_argument(
        "--gateway",
        help="attach: the gateway's base URL (the rest from the scenario's attach section)",
    )
    parser.add_argument(
        "--toxiproxy",
        help="attach: the Toxiproxy API's base URL (needed by drills with toxiproxy.* faults)",
    )
    parser.add_argument(
        "--adapter",
        help="attach: how to read the gateway (drills, litellm, envoy or a plugin's; "
        "default: the scenario's, else drills)",
    )
    parser.add_argument(
        "--hop", help="attach: the control API of the harness's L7 hop (python -m drills.hop)"
    )
    parser.add_argument(
        "--prometheus",
        help="attach: the team's Prometheus (base URL), which promql and alert_* checks query, "
        "read-only",
    )
    parser.add_argument(
        "--alertmanager",
        help="attach: the team's Alertmanager (base URL), read-only: what it holds at the run's "
        "end is kept beside the pages",
    )
    parser.add_argument(
        "--pager",
        metavar="HOST:PORT",
        help="attach: where the harness's pager listens during the drill (a webhook receiver "
        "the team's Alertmanager routes the drill's alerts to; alert_paged judges it)",
    )
    parser.add_argument(
        "--exporter",
        metavar="HOST:PORT",
        help="attach: where the harness serves the drill's metrics during the drill "
        "(drills_fault_active, drills_phase) for the team's Prometheus to scrape",
    )
