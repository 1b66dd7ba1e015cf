"""``python -m drills.hop --control HOST:PORT --hop NAME HOST:PORT UPSTREAM_URL ...``

Or ``--config FILE``: ``{"control": "HOST:PORT", "hops": [{"name", "listen", "upstream"}]}``.
Runs until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
from pathlib import Path

from drills.hop.server import HopServer, HopSpec


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


def _parse(argv: list[str]) -> tuple[list[HopSpec], tuple[str, int]]:
    parser = argparse.ArgumentParser(prog="python -m drills.hop", description=__doc__)
    parser.add_argument("--config", type=Path, help="a JSON file of hops (see above)")
    parser.add_argument("--control", type=_address, help="the control API's HOST:PORT")
    parser.add_argument(
        "--hop", nargs=3, action="append", default=[], metavar=("NAME", "LISTEN", "UPSTREAM")
    )
    args = parser.parse_args(argv)
    raw = [{"name": n, "listen": listen, "upstream": up} for n, listen, up in args.hop]
    control = args.control
    if args.config is not None:
        data = json.loads(args.config.read_text())
        raw += data.get("hops", [])
        control = control or _address(data["control"])
    if control is None or not raw:
        parser.error("give --control and at least one --hop (or --config)")
    hops = []
    for item in raw:
        host, port = _address(item["listen"])
        hops.append(HopSpec(item["name"], host, port, item["upstream"].rstrip("/")))
    return hops, control


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    hops, control = _parse(sys.argv[1:] if argv is None else argv)
    with contextlib.suppress(ImportError):
        # Imported here: uvloop is optional; the standard event loop serves without it.
        import uvloop

        uvloop.install()
    server = HopServer(hops, control)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await server.start()
        await stop.wait()
        await server.stop()

    asyncio.run(run())


if __name__ == "__main__":
    main()
