"""The ``drills`` command line: parse, call the engine, map outcomes to exit codes.

Exit codes: 0 success; 1 a drill failed, or the stack could not be brought up or reached;
2 bad input or usage (a file that fails validation, an unknown option).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from drills import __version__
from drills.errors import ConfigError, DrillsError, InputError, StackNotRunning

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="drills", description=__doc__.splitlines()[0] if __doc__ else None)
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
    run.add_argument("--gateway", help="attach: the gateway's base URL (with --toxiproxy)")
    run.add_argument("--toxiproxy", help="attach: the Toxiproxy API's base URL")
    run.add_argument(
        "--out", type=Path, default=Path("runs"), help="where runs go (default: runs/)"
    )
    run.add_argument("--state-dir", type=Path, help=state_help)

    val = commands.add_parser("validate", help="check scenario files; touches nothing")
    val.add_argument("scenarios", type=Path, nargs="+")

    rep = commands.add_parser("report", help="re-render the reports of a run from its journal")
    rep.add_argument("run_dir", type=Path)
    return parser


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
    from stack import control

    if args.command == "stack":
        if args.stack_command == "up":
            current = control.up(args.profile, args.state_dir)
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
        if args.stack_command == "down":
            stopped = control.down(args.state_dir)
            print("stack stopped" if stopped else "no stack was running")
            return EXIT_OK
    if args.command == "validate":
        from drills.runner import validate_only

        problems = validate_only(args.scenarios)
        if problems:
            raise ConfigError(problems)
        print(f"{len(args.scenarios)} scenario file(s) valid")
        return EXIT_OK
    if args.command == "report":
        from reports import load_journal, render_all

        journal_path = args.run_dir / "journal.json" if args.run_dir.is_dir() else args.run_dir
        if not journal_path.exists():
            raise InputError(f"{args.run_dir}: no journal.json here; pass a run directory")
        paths = render_all(journal_path)
        print(f"verdict: {load_journal(journal_path)['verdict']}")
        for kind, path in paths.items():
            print(f"{kind}: {path}")
        return EXIT_OK
    if args.command == "run":
        return _run_drill(args)
    raise AssertionError(f"unhandled command {args.command!r}")


def _run_drill(args: argparse.Namespace) -> int:
    from drills.runner import Runner, RunOptions
    from drills.scenario import Attach, load_scenario
    from reports import load_journal

    if bool(args.gateway) != bool(args.toxiproxy):
        raise InputError("--gateway and --toxiproxy go together (attach to a running stack)")
    scenario, doc = load_scenario(args.scenario)
    attach = Attach(gateway=args.gateway, toxiproxy=args.toxiproxy) if args.gateway else None
    options = RunOptions(
        out_dir=args.out,
        profile=args.profile,
        attach=attach,
        state_dir=args.state_dir,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(f"drill {scenario.drill}: {scenario.title} ({scenario.duration:.0f}s)", file=sys.stderr)
    run_dir = Runner(scenario, doc, options).run()
    journal = load_journal(run_dir)
    for check in journal["checks"]:
        mark = "pass" if check["passed"] else "FAIL"
        print(
            f"  {mark}  {check['label']}: observed {check['observed_text']}, "
            f"expected {check['expected']}"
        )
    print(f"verdict: {journal['verdict']}")
    print(f"report: {run_dir / 'index.html'}")
    return EXIT_OK if journal["verdict"] == "passed" else EXIT_FAILED


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
        return _run(args)
    except InputError as exc:
        print(f"drills: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except DrillsError as exc:
        print(f"drills: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("drills: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
