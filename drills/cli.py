"""The ``drills`` command line: parse, call the engine, map outcomes to exit codes.

Exit codes: 0 success; 1 a drill failed, or the stack could not be brought up or reached;
2 bad input or usage (a file that fails validation, an unknown option).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from drills import __version__
from drills.cli_history import history_command
from drills.cli_run import (
    endpoint_flag,
    gameday_command,
    gate_command,
    run_command,
)
from drills.common.errors import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    ConfigError,
    DrillsError,
    InputError,
    KillSwitch,
    StackNotRunning,
)
from drills.common.stats import CONFIDENCE
from drills.model.journal import FORMAT, Journal

if TYPE_CHECKING:
    pass

__all__ = ["main"]

EXIT_CLOSED_PIPE = 141  # 128 + SIGPIPE, as a shell reports a command whose reader went away

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


def _parser() -> argparse.ArgumentParser:
    # Long on purpose: one declaration per subcommand and option, in the order `drills --help`
    # lists them; the CLI is wide, and nothing here runs or decides.
    parser = _Parser(
        prog="drills",
        description=__doc__.splitlines()[0] if __doc__ else None,
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"drills {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    stack = commands.add_parser("stack", help="the embedded serving stack")
    stack_cmds = stack.add_subparsers(dest="stack_command", required=True, parser_class=_Parser)
    state_help = (
        "where the stack keeps its state "
        "(default: $DRILLS_STATE_DIR or ~/.local/state/drills/stack)"
    )

    up = stack_cmds.add_parser("up", help="bring the stack up and wait until it is healthy")
    up.add_argument("--profile", default="sound", help="profile name (sound, unsound) or YAML path")
    up.add_argument("--state-dir", type=Path, help=state_help)
    up.add_argument("--json", action="store_true", help="print the status as JSON")

    st = stack_cmds.add_parser("status", help="show each component, its health and its proxy")
    st.add_argument("--state-dir", type=Path, help=state_help)
    st.add_argument("--json", action="store_true", help="print the status as JSON")

    dn = stack_cmds.add_parser("down", help="stop everything the stack started")
    dn.add_argument("--state-dir", type=Path, help=state_help)

    run = commands.add_parser("run", help="run a drill scenario and write its journal and reports")
    run.add_argument("scenario", type=Path)
    run.add_argument("--profile", help="stack profile to bring up (overrides the scenario's)")
    _attach_args(run)
    run.add_argument(
        "--out", type=Path, default=Path("runs"), help="where runs go (default: runs/)"
    )
    run.add_argument("--state-dir", type=Path, help=state_help)
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
    _confidence_args(run)

    gate = commands.add_parser(
        "gate", help="CI resilience gate: run drills, write JUnit + summary, fail on any check"
    )
    gate.add_argument("paths", type=Path, nargs="+", help="scenario files or directories")
    gate.add_argument("--profile", help="stack profile to bring up (overrides the scenarios')")
    _attach_args(gate)
    gate.add_argument("--state-dir", type=Path, help=state_help)
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
        choices=("pass", "fail"),
        default="pass",
        help="what a check that passed on too few requests to be sure does to the gate "
        "(default pass: it passes as observed and is listed; fail: the gate fails)",
    )

    day = commands.add_parser(
        "gameday", help="run a game-day plan: drills, checkpoints for people, one report"
    )
    day.add_argument("plan", type=Path)
    day.add_argument(
        "--answers", type=Path, help="pre-answered checkpoints (a rehearsal): answers: {ID: yes}"
    )
    day.add_argument("--profile", help="stack profile to bring up (overrides the plan's)")
    _attach_args(day)
    day.add_argument("--state-dir", type=Path, help=state_help)
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
    return parser


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


def _print_status(current: object, as_json: bool) -> None:
    from stack.control import StackStatus

    assert isinstance(current, StackStatus)
    if as_json:
        print(json.dumps(current.as_json(), indent=2))
        return
    state = (
        "healthy" if current.healthy else ("running, NOT healthy" if current.running else "stopped")
    )
    print(f"stack {current.stack!r}: {state} (state: {current.state_dir})")
    if current.left_out:
        print(
            f"started without {', '.join(current.left_out)} (no drill it ran needed it; "
            "`drills stack up` starts the whole profile)"
        )
    header = (
        "COMPONENT",
        "KIND",
        "STATUS",
        "HEALTH",
        "ENDPOINT",
        "PROXY (listen)",
        "RESTARTS",
        "TOXICS",
    )
    rows = [header]
    for c in current.components:
        proxy = f"{c.proxy} ({c.proxy_listen})" if c.proxy and c.proxy_listen else (c.proxy or "-")
        rows.append(
            (
                c.name,
                c.kind,
                c.status,
                "ok" if c.healthy else "FAIL",
                c.endpoint,
                proxy,
                str(c.restarts),
                ",".join(c.toxics) or "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _run(args: argparse.Namespace) -> int:
    handler = {
        "stack": _stack,
        "validate": _validate,
        "schema": lambda a: _print_json(_schema(a.what)),
        "report": _report,
        "run": run_command,
        "gate": gate_command,
        "probe": _probe,
        "lint": _lint,
        "gameday": gameday_command,
        "note": _note,
        "abort": _abort,
        "faults": _faults,
        "load-worker": _load_worker,
        "history": history_command,
    }.get(args.command)
    if handler is None:
        raise AssertionError(f"unhandled command {args.command!r}")
    return handler(args)


def _load_worker(args: argparse.Namespace) -> int:
    from drills.common.units import parse_duration
    from drills.load import run_worker

    try:
        wait = parse_duration(args.wait)
    except ValueError as exc:
        raise InputError(f"--wait: {exc}") from None
    return run_worker(args.master, wait)


def _print_json(data: object) -> int:
    print(json.dumps(data, indent=2))
    return EXIT_OK


def _stack(args: argparse.Namespace) -> int:
    from stack import control

    if args.stack_command == "up":
        from drills.engine.safety import active_runs

        # The whole profile; an idle stack a drill started without some of it is replaced.
        current = control.up(args.profile, args.state_dir, idle=lambda: not active_runs())
        _print_status(current, args.json)
        return EXIT_OK
    if args.stack_command == "status":
        try:
            current = control.status(args.state_dir)
        except StackNotRunning as exc:
            print(f"drills: {exc}", file=sys.stderr)
            return EXIT_FAILED
        _print_status(current, args.json)
        return EXIT_OK if current.healthy else EXIT_FAILED
    stopped = control.down(args.state_dir)
    print("stack stopped" if stopped else "no stack was running")
    return EXIT_OK


def _validate(args: argparse.Namespace) -> int:
    from drills.validate import validate_files

    valid, problems = validate_files(args.files)
    if args.json:
        listed = [{"path": str(path), "kind": kind} for path, kind in valid]
        print(json.dumps({"valid": listed, "problems": problems}, indent=2))
        return EXIT_USAGE if problems else EXIT_OK
    for path, kind in valid:
        print(f"{path}: valid {kind}")
    if problems:
        raise ConfigError(problems)
    print(f"{len(valid)} file(s) valid")
    return EXIT_OK


def _report(args: argparse.Namespace) -> int:
    from reports import render_all

    if (args.run_dir / "gameday.json").exists():
        from reports.gameday import render_gameday

        for kind, path in render_gameday(args.run_dir).items():
            print(f"{kind}: {path}")
        return EXIT_OK
    journal_path = args.run_dir / "journal.json" if args.run_dir.is_dir() else args.run_dir
    if not journal_path.exists():
        raise InputError(f"{args.run_dir}: no journal.json here; pass a run directory")
    journal = _read_journal(journal_path)
    paths = render_all(journal, journal_path.parent)
    print(f"verdict: {journal.verdict}")
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return EXIT_OK


def _note(args: argparse.Namespace) -> int:
    from drills.gameday import add_note

    days = add_note(args.text, args.by)
    if not days:
        print("no game day is running on this machine", file=sys.stderr)
        return EXIT_FAILED
    for day in days:
        print(f"noted in {day['what']} ({day['run_dir']})")
    return EXIT_OK


def _abort(args: argparse.Namespace) -> int:
    """Stop every live run (each reverts its own faults); with none alive, revert what the
    ledger holds of runs that are gone, so that the kill switch always clears."""
    from drills.engine.ledger import Ledger
    from drills.engine.safety import request_abort

    ledger = _ledger(args.ledger)
    runs = request_abort(args.run_id, args.reason)
    for run in runs:
        print(f"abort sent to {run['what']} (run {run['run_id']}, pid {run['pid']})")
    if runs:
        return EXIT_OK
    removed = Ledger(ledger).sweep()
    for item in removed:
        print(f"removed {item['kind']} on {item['target']} ({item.get('method')})")
    left = Ledger(ledger).entries()
    if left:
        for key, entry in left.items():
            print(f"could not remove {entry['kind']} on {entry['target']} ({key})", file=sys.stderr)
        return EXIT_FAILED
    print(
        f"no drill is running on this machine; removed {len(removed)} fault(s) from {ledger}"
        if removed
        else "no drill is running on this machine and no fault is in force"
    )
    return EXIT_OK


def _ledger(path: Path | None) -> Path:
    """The ledger to act on; a ``--ledger`` that is not there is bad input (exit 2)."""
    from drills.engine.ledger import default_ledger_path

    if path is not None and not path.exists():
        raise InputError(f"--ledger {path}: no such file")
    return path or default_ledger_path()


def _faults(args: argparse.Namespace) -> int:
    import time as clock

    from drills.common.system import pid_alive
    from drills.engine.ledger import Ledger
    from drills.engine.safety import active_runs

    entries = Ledger(_ledger(args.ledger)).entries()
    rows = [
        {
            "run": key.rsplit("-", 1)[0],
            "kind": e["kind"],
            "target": e["target"],
            "pid": e.get("pid"),
            "run_alive": bool(e.get("pid")) and pid_alive(int(e["pid"])),
            "age_s": round(clock.time() - e["recorded_at"], 1) if e.get("recorded_at") else None,
        }
        for key, e in sorted(entries.items())
    ]
    holders = [
        {k: run.get(k) for k in ("run_id", "what", "pid", "started_at", "claims")}
        for run in active_runs()
    ]
    if args.json:
        return _print_json({"faults": rows, "runs": holders})
    if not rows:
        print("no fault is in force")
    for row in rows:
        age = f"{row['age_s']:.0f}s" if row["age_s"] is not None else "?"
        state = "run alive" if row["run_alive"] else "run gone: `drills abort` removes it"
        print(f"{row['run']}  {row['kind']} on {row['target']}  for {age}  ({state})")
    for run in holders:  # who holds what: one drill at a time on each
        since = clock.time() - float(run["started_at"] or clock.time())
        print(f"run {run['run_id']}: {run['what']}, pid {run['pid']}, for {since:.0f}s, holds:")
        for claim in run["claims"] or []:
            print(f"  {claim}")
    return EXIT_OK


def _history_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--label",
        help="what this run is of (a release, a git sha): kept in the journal and the history",
    )
    parser.add_argument(
        "--history",
        metavar="WHERE",
        help="the run history: a file, sqlite:///PATH, or none (default: $DRILLS_HISTORY or "
        "~/.local/state/drills/history.sqlite); `drills history DRILL` reads it",
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


def _probe(args: argparse.Namespace) -> int:
    from drills.probes.retrieval import RecallProbe, load_queries
    from stack.config import load_stack_config
    from stack.state import default_state_dir

    source = args.stack_config or str((args.state_dir or default_state_dir()) / "stack.yaml")
    if not args.stack_config and not Path(source).exists():
        raise InputError(
            f"{source}: no running embedded stack there; pass --state-dir or --stack-config"
        )
    try:
        probe = RecallProbe(
            load_stack_config(source), load_queries(args.queries), direct=args.direct
        )
    except ValueError as exc:
        raise InputError(f"{source}: {exc}") from None
    result = probe.run()
    if args.json:
        print(json.dumps(result.as_json(), indent=2))
    else:
        from drills.checks import percentile

        lat = result.latencies
        print(
            f"recall@{probe.queries.k} {result.recall:.3f} over {result.queries} queries, "
            f"{result.errors} failed; latency p50 "
            + (
                f"{percentile(lat, 50) * 1000:.0f}ms p99 {percentile(lat, 99) * 1000:.0f}ms"
                if lat
                else "n/a"
            )
        )
        for miss in result.misses:
            print(f"  miss: {miss}")
    return EXIT_OK if result.recall >= args.min_recall else EXIT_FAILED


def _lint(args: argparse.Namespace) -> int:
    from drills.common.units import parse_duration
    from drills.lint import lint_stack
    from drills.lint_rules import is_rules_file, lint_alert_rules

    client = None
    if args.client_timeout:
        try:
            client = parse_duration(args.client_timeout)
        except ValueError as exc:
            raise InputError(f"--client-timeout: {exc}") from None
    findings = []
    for config in args.configs:
        if is_rules_file(config):
            findings.extend(lint_alert_rules(config, *_rule_args(args)))
        else:
            findings.extend(lint_stack(config, client))
    if args.json:
        print(json.dumps([f.as_json() for f in findings], indent=2))
    else:
        for finding in findings:
            print(finding)
        errors = sum(f.severity == "error" for f in findings)
        print(
            f"{len(args.configs)} config(s): {errors} error(s), {len(findings) - errors} warning(s)"
        )
    return EXIT_FAILED if any(f.severity == "error" for f in findings) else EXIT_OK


def _rule_args(args: argparse.Namespace) -> tuple[float | None, float, float, str | None]:
    """``drills lint``'s flags for a rules file: SLO window, scrape and evaluation intervals,
    the Prometheus to ask; bad input (exit code 2) naming the flag otherwise."""
    from drills.common.units import parse_duration

    values = []
    for flag in ("slo_window", "scrape_interval", "evaluation_interval"):
        value = getattr(args, flag)
        try:
            values.append(None if value is None else parse_duration(value))
        except ValueError as exc:
            raise InputError(f"--{flag.replace('_', '-')}: {exc}") from None
    prometheus = endpoint_flag("--prometheus", args.prometheus)
    slo, scrape, every = values
    assert scrape is not None and every is not None
    return slo, scrape, every, prometheus.url if prometheus else None


def _schema(what: str) -> dict[str, object]:
    """The JSON Schema of ``what``: the scenario's with every fault kind and check known in
    this environment (plugins' included), or the journal's."""
    if what == "scenario":
        from drills.model.scenario import scenario_schema

        return scenario_schema()
    schema = Journal.model_json_schema(mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"drills journal (format {FORMAT})"
    return schema


def _read_journal(path: Path) -> Journal:
    """A journal file, or an ``InputError`` naming it and what is wrong with it."""
    from pydantic import ValidationError

    try:
        return Journal.read(path)
    except (ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        raise InputError(f"{path}: not a drills journal (format {FORMAT}): {first}") from None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        code = _run(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except KillSwitch as exc:
        print(f"drills: aborted ({exc}) before any fault was applied", file=sys.stderr)
        return exc.exit_code
    except DrillsError as exc:
        print(f"drills: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("drills: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `drills faults --json | head -1`: the reader went away. No traceback; what is left
        # to print goes nowhere (Python would complain again flushing stdout at exit).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_CLOSED_PIPE


if __name__ == "__main__":
    sys.exit(main())
