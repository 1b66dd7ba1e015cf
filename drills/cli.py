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
from drills.errors import DrillsError, InputError, StackNotRunning

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
    raise AssertionError(f"unhandled command {args.command!r}")


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
