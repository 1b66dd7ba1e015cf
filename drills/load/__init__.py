"""Load for drills: Locust, run as its own process (gevent monkey-patches at import, so it stays
out of the runner), with an LLM user that records one JSON line per request.

``LoadProcess`` starts and stops it; ``read_records`` follows the records file as it grows.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drills.common.redact import redact_url
from drills.model.gateways import BUILTIN as BUILTIN_ADAPTERS
from drills.model.gateways import GatewayAdapter
from drills.model.records import Record
from drills.model.references import read_prompts
from drills.model.scenario import FallbackRule, LoadConfig, expand_env

__all__ = ["LoadProcess", "RecordReader", "load_prompts"]

logger = logging.getLogger(__name__)
LOCUSTFILE = Path(__file__).with_name("locustfile.py")
MAX_STOP_TIMEOUT = 10.0


def load_prompts(load: LoadConfig, base: Path) -> list[list[dict[str, str]]]:
    """The prompts as chat message lists; a file path is relative to the scenario file."""
    if isinstance(load.prompts, list):
        return [[{"role": "user", "content": p}] for p in load.prompts]
    return read_prompts((base / load.prompts).resolve())


@dataclass
class LoadProcess:
    """One Locust process sending the scenario's load to ``gateway``."""

    gateway: str
    load: LoadConfig
    fallback: FallbackRule
    prompts: list[list[dict[str, str]]]
    records: Path
    run_time: float
    adapter: GatewayAdapter = field(default_factory=lambda: BUILTIN_ADAPTERS["drills"])
    """Which headers say the route, the upstream and a fallback."""
    process: subprocess.Popen[bytes] | None = None

    def _fallback(self) -> dict[str, Any]:
        """The scenario's rule; without a header of its own, the adapter's fallback header."""
        rule = self.fallback.model_dump()
        if rule["header"] is None and self.adapter.fallback_header:
            rule["header"] = self.adapter.fallback_header
            rule["header_values"] = self.adapter.fallback_values
        return rule

    def start(self) -> None:
        # Long on purpose: Everything the Locust process needs, written once and started once: the
        # config file, the environment (headers kept off the command line) and the command.
        config = {
            "gateway": redact_url(self.gateway),
            "records": str(self.records),
            "users": self.load.users,
            "spawn_rate": self.load.spawn_rate,
            "shape": self.load.shape.model_dump(by_alias=False),
            "prompts": self.prompts,
            "max_tokens": self.load.max_tokens,
            "min_tokens": self.load.max_tokens if self.load.pin_length else None,
            "stream": self.load.stream,
            "wait": self.load.wait,
            "timeout": self.load.timeout,
            "model": self.load.model,
            "endpoint": self.load.endpoint,
            "fallback": self._fallback(),
            "route_header": self.adapter.route,
            "upstream_header": self.adapter.upstream.header if self.adapter.upstream else None,
            "upstream_map": self.adapter.upstream.map if self.adapter.upstream else {},
            # Locust ignores --run-time when a load shape is in use; the shape stops itself.
            "run_time": self.run_time + 30,
        }
        config_path = self.records.with_suffix(".load.json")
        config_path.write_text(json.dumps(config))
        self.records.touch()
        log = self.records.with_suffix(".locust.log")
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "locust",
                    "-f",
                    str(LOCUSTFILE),
                    "--headless",
                    "--run-time",
                    f"{int(self.run_time) + 60}s",
                    "--only-summary",
                    "--stop-timeout",
                    f"{self.stop_timeout:g}",
                    "--loglevel",
                    "WARNING",
                    "--skip-log-setup",
                ],
                env={
                    **os.environ,
                    "DRILLS_LOAD_CONFIG": str(config_path),
                    # In the environment, not on the command line: the URL may carry
                    # credentials, and a command line is visible to every user (ps).
                    "LOCUST_HOST": self.gateway,
                    # Headers may carry credentials: they travel in the child's environment,
                    # never in a file of the run directory.
                    "DRILLS_LOAD_HEADERS": json.dumps(
                        {k: expand_env(v) for k, v in self.load.headers.items()}
                    ),
                },
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_stop_with_parent,
            )
        logger.info(
            "load: %d user(s) against %s (pid %d)",
            self.load.users,
            redact_url(self.gateway),
            self.process.pid,
        )

    @property
    def stop_timeout(self) -> float:
        """Seconds requests in flight get to finish when the load stops (Locust's
        ``--stop-timeout``): the request timeout, at most ``MAX_STOP_TIMEOUT``. One still
        waiting then is recorded as unfinished, an error."""
        return min(float(self.load.timeout), MAX_STOP_TIMEOUT)

    def stop(self) -> None:
        """Stop the load; requests in flight get ``stop_timeout`` to finish."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=self.stop_timeout + 10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _stop_with_parent() -> None:
    """In the Locust child: get SIGTERM if the runner dies (even by SIGKILL), so no load is left
    running against a stack nobody watches."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class RecordReader:
    """Follows a JSONL records file, returning the complete lines added since the last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def read_new(self) -> list[Record]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        return [Record.model_validate_json(line) for line in lines if line.strip()]
