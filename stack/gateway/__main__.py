"""Run the gateway of a stack config: ``python -m stack.gateway --config FILE``."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import uvicorn

from stack.config import load_stack_config
from stack.gateway.app import create_app


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m stack.gateway")
    parser.add_argument("--config", required=True, help="stack profile name or YAML path")
    parser.add_argument("--log-level", default="info")
    parser.add_argument(
        "--state-dir", default=None, help="where agent checkpoints are kept (the stack's state)"
    )
    args = parser.parse_args()
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    # One line per request comes from the gateway itself; httpx's own lines would double it.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    stack = load_stack_config(args.config)
    app = create_app(stack, Path(args.state_dir) if args.state_dir else None)
    uvicorn.run(
        app,
        host=stack.gateway.bind or stack.host,
        port=stack.gateway.port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
    )


if __name__ == "__main__":
    main()
