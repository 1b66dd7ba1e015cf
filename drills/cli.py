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
from typing import TYPE_CHECKING, Any

from drills import __version__
from drills.common.errors import (
    EXIT_FAILED,
    EXIT_FAULT_LEFT,
    EXIT_USAGE,
    ConfigError,
    DrillsError,
    InputError,
    KillSwitch,
    StackNotRunning,
)
from drills.common.stats import CONFIDENCE
from drills.engine.events import FOR_PEOPLE, RunEvent
from drills.model.journal import FORMAT, Journal

if TYPE_CHECKING:
    from drills.common.yamlsrc import YamlDocument
    from drills.engine.options import RunOptions
    from drills.model.scenario import Scenario, Twin

__all__ = ["main"]

EXIT_OK = 0
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
        "master; stack/deploy/kubernetes/40-load-workers.yaml runs these as a Job)",
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
    return parser


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
        "run": _run_drill,
        "gate": _gate,
        "probe": _probe,
        "lint": _lint,
        "gameday": _gameday,
        "note": _note,
        "abort": _abort,
        "faults": _faults,
        "load-worker": _load_worker,
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


def _print_day_plan_json(
    plan: Any, drills: list[Any], answers: dict[str, Any], options: RunOptions
) -> int:
    """``drills gameday --dry-run --json``: each step, a drill's with its plan."""
    drill_iter = iter(drills)
    steps: list[dict[str, Any]] = []
    for step in plan.steps:
        if step.note is not None:
            steps.append({"note": step.note})
        elif step.checkpoint is not None:
            answered = answers.get(step.checkpoint.id)
            pre = {"answer": answered.answer, "by": answered.by} if answered else None
            checkpoint = step.checkpoint.model_dump(mode="json")
            steps.append({"checkpoint": checkpoint, "pre_answered": pre})
        else:
            scenario, doc = next(drill_iter)
            steps.append({"drill": _plan(scenario, doc, options), "on_fail": step.on_fail})
    print(json.dumps({"gameday": plan.gameday, "title": plan.title, "steps": steps}, indent=2))
    return _allowed([s["drill"] for s in steps if "drill" in s])


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


def _options(args: argparse.Namespace) -> RunOptions:
    from drills.engine.options import RunOptions
    from drills.engine.safety import load_policy
    from drills.model.gateways import merged
    from drills.model.scenario import Attach

    if args.toxiproxy and not args.gateway:
        raise InputError(
            "--toxiproxy without --gateway: attaching needs the gateway's URL (--gateway URL)"
        )
    if args.profile and args.gateway:
        raise InputError(
            "--profile brings a stack up; --gateway/--toxiproxy attach to one: not both"
        )
    adapter = getattr(args, "adapter", None)
    if adapter is not None:
        try:
            merged(adapter)
        except ValueError as exc:
            raise InputError(f"--adapter: {exc}") from None
    given = {
        "gateway": args.gateway,
        "toxiproxy": args.toxiproxy,
        "adapter": adapter,
        "hop": getattr(args, "hop", None),
        "prometheus": _endpoint("--prometheus", getattr(args, "prometheus", None)),
        "alertmanager": _endpoint("--alertmanager", getattr(args, "alertmanager", None)),
        "pager": _listen("--pager", getattr(args, "pager", None)),
        "exporter": _listen("--exporter", getattr(args, "exporter", None)),
    }
    # Only what was given: the scenario's attach section gives the rest (``attach_of``), and
    # a scenario without one needs --toxiproxy too (said there, with the scenario's name).
    attach = (
        Attach.model_construct(**{k: v for k, v in given.items() if v is not None})
        if args.gateway
        or any(given[k] for k in ("prometheus", "alertmanager", "pager", "exporter"))
        else None
    )
    return RunOptions(
        out_dir=args.out,
        profile=args.profile,
        attach=attach,
        state_dir=args.state_dir,
        on_event=_print_for_people,
        safety=load_policy(args.safety),
        stack_config=args.stack_config,
        keep_stack=getattr(args, "keep_stack", False),
        with_parts=frozenset(getattr(args, "with_parts", None) or ()),
        confidence=getattr(args, "confidence", CONFIDENCE),
    )


def _endpoint(flag: str, url: str | None) -> Any:
    """``--prometheus URL`` (or ``--alertmanager``) as the attach section's endpoint; bad input
    if no URL."""
    from pydantic import ValidationError

    from drills.model.scenario import PrometheusEndpoint

    if url is None:
        return None
    try:
        return PrometheusEndpoint(url=url)
    except ValidationError:
        raise InputError(f"{flag}: {url!r} is not an http(s):// URL") from None


def _listen(flag: str, value: str | None) -> str | None:
    """``--pager HOST:PORT`` (or ``--exporter``); bad input if it is not one."""
    from drills.engine.pager import parse_listen

    if value is not None:
        try:
            parse_listen(value)
        except ValueError as exc:
            raise InputError(f"{flag}: {exc}") from None
    return value


def _plan(scenario: Scenario, doc: YamlDocument, options: RunOptions) -> dict[str, Any]:
    """A drill's dry run (``drills.dryrun``): what it would do, touching nothing."""
    from drills.dryrun import dry_run

    assert options.safety is not None
    return dry_run(scenario, doc, options, options.safety)


def _print_plan(scenario: Scenario, doc: YamlDocument, options: RunOptions, as_json: bool) -> bool:
    """Print a dry run; return whether the safety policy allows the drill."""
    from drills.dryrun import describe

    plan = _plan(scenario, doc, options)
    if as_json:
        print(json.dumps(plan, indent=2))
    else:
        print("\n".join(describe(plan)))
    return not plan["safety"]["refused"]


def _allowed(plans: list[dict[str, Any]]) -> int:
    return EXIT_USAGE if any(p["safety"]["refused"] for p in plans) else EXIT_OK


def _gate(args: argparse.Namespace) -> int:
    from drills.gate import collect_scenarios, run_gate, validate_all, write_gate_reports
    from drills.model.scenario import load_scenario

    if args.concurrency < 1:
        raise InputError(f"--concurrency: {args.concurrency}; expected 1 or more")
    options = _options(args)
    assert options.safety is not None
    files = collect_scenarios(args.paths)
    if args.dry_run and args.json:
        plans = [_plan(*load_scenario(path), options) for path in files]  # scenario, doc
        print(json.dumps(plans, indent=2))
        return _allowed(plans)
    if args.dry_run:
        allowed = True
        for path in files:
            scenario, doc = load_scenario(path)
            allowed = _print_plan(scenario, doc, options, False) and allowed
            print()
        return EXIT_OK if allowed else EXIT_USAGE
    loaded = validate_all(files, options, options.safety)
    if args.twins:
        without = [str(p) for p, s in loaded if not s.twins]
        if without:
            print(
                "no twins declared (run on their own stack only): " + ", ".join(without),
                file=sys.stderr,
            )
    args.out.mkdir(parents=True, exist_ok=True)
    results = run_gate(
        loaded,
        args.out,
        options,
        safety=args.safety,
        concurrency=args.concurrency,
        twins=args.twins,
        inconclusive=args.inconclusive,
        say=lambda line: print(line, file=sys.stderr, flush=True),
    )
    paths = write_gate_reports(results, args.out)
    if args.json:
        return _print_gate_json(results, paths)
    _print_gate_results(results)
    print(f"junit: {paths['junit']}")
    print(f"summary: {paths['markdown']}")
    return EXIT_OK if all(r.verdict == "passed" for r in results) else EXIT_FAILED


def _print_gate_results(results: list[Any]) -> None:
    """Each drill's verdict, with its failed checks and the ones it passed without being sure."""
    from reports.common import interval_text

    for result in results:
        print(f"{result.verdict.upper():11} {result.name}  ({result.path})")
        outcome = result.journal.twin if result.journal else None
        if outcome is not None:
            if not outcome.held:
                print(f"            {outcome.summary()}")
            continue
        for check in result.failed_checks:
            runbook = check.runbook or (result.journal and result.journal.runbook) or "-"
            print(
                f"            FAIL {check.label}: observed {check.observed_text}, "
                f"expected {check.expected}  runbook: {runbook}"
            )
        for check in result.inconclusive_checks:
            print(f"            UNSURE {check.label}: {interval_text(check)}")


def _print_gate_json(results: list[Any], paths: dict[str, Path]) -> int:
    gated: dict[str, Any] = {
        "verdict": "passed" if all(r.verdict == "passed" for r in results) else "failed",
        "drills": [
            {
                "name": r.name,
                "path": str(r.path),
                "verdict": r.verdict,
                "run": _outcome_json(r.journal) if r.journal else None,
            }
            for r in results
        ],
        "junit": str(paths["junit"]),
        "summary": str(paths["markdown"]),
    }
    print(json.dumps(gated, indent=2))
    return EXIT_OK if gated["verdict"] == "passed" else EXIT_FAILED


def _gameday(args: argparse.Namespace) -> int:
    from drills.gameday import GameDay, TerminalResponder, load_answers, load_plan

    options = _options(args)
    plan, doc, drills = load_plan(args.plan)
    answers = load_answers(args.answers, plan) if args.answers else {}
    day = GameDay(
        plan,
        doc,
        drills,
        options,
        answers,
        TerminalResponder(name=args.person),
        say=lambda line: print(line, file=sys.stderr, flush=True),
    )
    if args.dry_run and args.json:
        return _print_day_plan_json(plan, drills, answers, day._options())
    if args.dry_run:
        allowed = True
        print(f"game day {plan.gameday}: {plan.title}  ({doc.path})")
        drill_iter = iter(drills)
        for i, step in enumerate(plan.steps, 1):
            if step.note is not None:
                print(f"\n{i}. note: {step.note}")
            elif step.checkpoint is not None:
                cp = step.checkpoint
                answered = answers.get(cp.id)
                pre = f" [pre-answered: {answered.answer} by {answered.by}]" if answered else ""
                print(
                    f"\n{i}. checkpoint {cp.id} ({cp.kind}, asks {cp.who or 'the room'}, "
                    f"on no: {cp.on_no}): {cp.ask}{pre}"
                )
            else:
                scenario, sdoc = next(drill_iter)
                print(f"\n{i}. drill (on fail: {step.on_fail})")
                allowed = _print_plan(scenario, sdoc, day._options(), False) and allowed
        return EXIT_OK if allowed else EXIT_USAGE
    day_dir = day.run()
    journal = json.loads((day_dir / "gameday.json").read_text())
    if args.json:
        summary = {k: journal.get(k) for k in ("gameday", "verdict", "steps")}
        where = {"journal": str(day_dir / "gameday.json"), "report": str(day_dir / "index.html")}
        print(json.dumps({**summary, **where}, indent=2))
        return EXIT_OK if journal["verdict"] == "passed" else EXIT_FAILED
    for step in journal["steps"]:
        if step["kind"] == "drill":
            print(f"  drill {step['drill']}: {step.get('verdict')}")
        elif step["kind"] == "checkpoint":
            print(f"  checkpoint {step['id']}: {step.get('answer')} by {step.get('by')}")
    print(f"verdict: {journal['verdict']}")
    print(f"report: {day_dir / 'index.html'}")
    return EXIT_OK if journal["verdict"] == "passed" else EXIT_FAILED


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
    prometheus = _endpoint("--prometheus", args.prometheus)
    slo, scrape, every = values
    assert scrape is not None and every is not None
    return slo, scrape, every, prometheus.url if prometheus else None


def _print_checks(journal: Journal) -> None:
    for check in journal.checks:
        mark = "pass" if check.passed else "FAIL"
        print(f"  {mark}  {check.label}: observed {check.observed_text}, expected {check.expected}")


def _print_load(journal: Journal) -> None:
    """The load's line: an open loop's rate as asked and as sent, and a shortfall loudly."""
    load = journal.load
    if load is None or load.mode != "open":
        return
    sent = f"{load.observed_rate:.2f}/s" if load.observed_rate is not None else "too few to tell"
    print(f"  load: asked {load.asked_rate:g} requests/s ({load.arrival}), sent {sent}")
    if load.short:
        print(f"  LOAD FELL SHORT: {load.short}")
    elif load.warning:
        print(f"  load warning: {load.warning}")


def _run_drill(args: argparse.Namespace) -> int:
    from drills.engine.runner import Runner
    from drills.model.scenario import load_scenario

    options = _options(args)
    scenario, doc = load_scenario(args.scenario)
    if args.twin is not None:
        return _run_twins(scenario, doc, options, args)
    if args.dry_run:
        return EXIT_OK if _print_plan(scenario, doc, options, args.json) else EXIT_USAGE
    print(f"drill {scenario.drill}: {scenario.title} ({scenario.duration:.0f}s)", file=sys.stderr)
    journal = Runner(scenario, doc, options).run()
    if args.json:
        print(json.dumps(_outcome_json(journal), indent=2))
    else:
        _print_checks(journal)
        _print_load(journal)
        print(f"verdict: {journal.verdict}")
        print(f"report: {Path(journal.run_dir) / 'index.html'}")
    if journal.stack.profile:
        _after_the_drill(journal.stack.profile, args)
    if journal.rollbacks.left:
        for line in journal.rollbacks.left:
            print(f"STILL IN FORCE: {line} (`drills faults`, `drills abort`)", file=sys.stderr)
        return EXIT_FAULT_LEFT
    return EXIT_OK if journal.verdict == "passed" else EXIT_FAILED


def _print_twin(twin: Twin) -> None:
    stack = (
        f"profile {twin.profile}"
        if twin.profile
        else f"LiteLLM with {twin.litellm}"
        if twin.litellm
        else f"attach {twin.attach}"
        if twin.attach
        else "the drill's stack"
    )
    if twin.kubernetes is not None:
        stack += ", kubernetes " + str(twin.kubernetes.model_dump(exclude_none=True))
    print(f"twin {twin.key} ({stack}): must fail: {', '.join(twin.must_fail)}")
    if twin.may_fail:
        print(f"  may fail: {', '.join(twin.may_fail)}")
    for hop in twin.absent:
        print(f"  faults on {hop} are not applied (the twin's stack has none)")


def _twin_plan(scenario: Scenario, twin: Twin, options: RunOptions) -> tuple[Scenario, RunOptions]:
    """What a dry run shows of a twin: its faults where the twin has them (``kubernetes``),
    on its attach fields over the drill's."""
    import dataclasses

    from drills.engine.options import attach_of
    from drills.engine.twins import in_twin_cluster
    from drills.model.scenario import Attach

    own = attach_of(scenario, options)
    if twin.attach is not None and own is not None:
        merged = {**own.model_dump(exclude_unset=True), **twin.attach}
        options = dataclasses.replace(options, attach=Attach.model_validate(merged))
    return in_twin_cluster(scenario, twin), options


def _run_twins(
    scenario: Scenario, doc: YamlDocument, options: RunOptions, args: argparse.Namespace
) -> int:
    """``drills run X --twin [NAME]``: the drill on its twins, one after another."""
    from drills.engine.options import attach_of
    from drills.engine.twins import pick_twins, run_twin

    twins = pick_twins(scenario, doc, args.twin or None)
    if args.dry_run and args.json:
        plans: list[dict[str, Any]] = [
            {"twin": twin.key, "plan": _plan(on, doc, opts)}
            for twin in twins
            for on, opts in [_twin_plan(scenario, twin, options)]
        ]
        print(json.dumps(plans, indent=2))
        return _allowed([p["plan"] for p in plans])
    if args.dry_run:
        planned = True
        for twin in twins:
            _print_twin(twin)
            on_twin, twin_options = _twin_plan(scenario, twin, options)
            planned = _print_plan(on_twin, doc, twin_options, args.json) and planned
        return EXIT_OK if planned else EXIT_USAGE
    code = EXIT_OK
    outcomes: list[dict[str, Any]] = []
    for twin in twins:
        print(
            f"drill {scenario.drill} on its twin {twin.key}: {twin.why or scenario.title} "
            f"({scenario.duration:.0f}s)",
            file=sys.stderr,
        )
        journal = run_twin(scenario, doc, twin, options)
        outcome = journal.twin
        assert outcome is not None
        if args.json:
            outcomes.append(_outcome_json(journal))
            code = code if outcome.held else EXIT_FAILED
            if journal.rollbacks.left:
                break
            continue
        _print_twin_checks(journal)
        for skipped in outcome.skipped_faults:
            print(f"  not applied: {skipped}")
        print(outcome.summary())
        print(f"report: {Path(journal.run_dir) / 'index.html'}")
        if journal.rollbacks.left:
            for line in journal.rollbacks.left:
                print(f"STILL IN FORCE: {line} (`drills faults`, `drills abort`)", file=sys.stderr)
            return EXIT_FAULT_LEFT
        if not outcome.held:
            code = EXIT_FAILED
    if args.json:
        print(json.dumps(outcomes, indent=2))
        if outcomes and outcomes[-1]["left_in_force"]:
            for line in outcomes[-1]["left_in_force"]:
                print(f"STILL IN FORCE: {line} (`drills faults`, `drills abort`)", file=sys.stderr)
            return EXIT_FAULT_LEFT
    if attach_of(scenario, options) is None:  # the drill's stack is an embedded profile
        _after_the_twins(args)
    return code


def _print_twin_checks(journal: Journal) -> None:
    """Each check of a twin's run with what the twin declared of it."""
    outcome = journal.twin
    assert outcome is not None
    for check in journal.checks:
        named = (
            "must fail"
            if check.label in outcome.must_fail
            else "may fail"
            if check.label in outcome.may_fail
            else "must pass"
        )
        mark = "pass" if check.passed else "FAIL"
        ok = (check.passed or named != "must pass") and (not check.passed or named != "must fail")
        print(
            f"  {mark}  {check.label} [{named}{'' if ok else ': NOT AS DECLARED'}]: "
            f"observed {check.observed_text}, expected {check.expected}"
        )


def _outcome_json(journal: Journal) -> dict[str, Any]:
    """What ``--json`` prints of a run: its verdict, each check, what it left in force, and
    where its journal and report are (the journal holds everything else)."""
    twin = journal.twin
    return {
        "drill": journal.drill,
        "run_id": journal.run_id,
        "twin": None
        if twin is None
        else {"name": twin.name, "held": twin.held, "missed": twin.missed, "unnamed": twin.unnamed},
        "verdict": journal.verdict,
        "status": journal.status.value,
        "checks": [
            {
                "label": c.label,
                "passed": c.passed,
                "observed": c.observed,
                "expected": c.expected,
                "runbook": c.runbook,
            }
            for c in journal.checks
        ],
        "aborted": journal.aborted,
        "left_in_force": journal.rollbacks.left,
        "journal": str(Path(journal.run_dir) / "journal.json"),
        "report": str(Path(journal.run_dir) / "index.html"),
    }


def _after_the_twins(args: argparse.Namespace) -> None:
    """What the twins' runs left up in the state directory: the drill's own stack, which a
    twin's gateway ran beside (a twin brought up whole replaced it). ``--stop-stack`` stops
    it, as after the drill."""
    from stack import control

    current = control.status(args.state_dir)
    if current.running:
        _after_the_drill(current.stack, args)


def _after_the_drill(profile: str, args: argparse.Namespace) -> None:
    """Say what became of the profile's stack (on stderr: the report's path stays the last
    line of stdout), or stop it (``--stop-stack``)."""
    from stack import control

    if args.stop_stack:
        control.down(args.state_dir)
        print(f"stack {profile!r}: stopped (--stop-stack)", file=sys.stderr)
        return
    whose = (
        "yours: no run replaces it"
        if control.owner(args.state_dir) == "user"
        else "a later drill of another profile replaces it while idle"
    )
    print(
        f"stack {profile!r} is still up ({whose}); `drills stack down` stops it",
        file=sys.stderr,
    )


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


def _print_for_people(event: RunEvent) -> None:
    """The run's live lines on the terminal (its timeline events are logged already)."""
    if event.kind in FOR_PEOPLE:
        print(event.message, file=sys.stderr, flush=True)


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
