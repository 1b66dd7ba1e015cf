"""The ``drills`` command line: parse, call the engine, map outcomes to exit codes.

Exit codes: 0 success; 1 a drill failed, or the stack could not be brought up or reached;
2 bad input or usage (a file that fails validation, an unknown option).

Each command imports what it uses inside its function, on purpose: ``drills abort`` (the kill
switch), ``validate``, ``faults`` and ``--help`` then answer without loading the engine, the
report renderer or the stack's control. Measured on the 2-core machine (median of 5, while
another job ran): ``import drills.cli`` 0.73 s, with the engine, game day, reports, load and
stack control imported too 1.16 s.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from drills.cli_history import history_command
from drills.cli_parser import build_parser
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
from drills.model.journal import FORMAT, Journal

if TYPE_CHECKING:
    pass

__all__ = ["main"]

EXIT_CLOSED_PIPE = 141  # 128 + SIGPIPE, as a shell reports a command whose reader went away


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
        from drills.model.schema import scenario_schema

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
    args = build_parser().parse_args(argv)
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
