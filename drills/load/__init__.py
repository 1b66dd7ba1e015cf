"""Load for drills: Locust, run as its own processes (gevent monkey-patches at import, so it
stays out of the runner), with an LLM user that records one JSON line per request.

``LoadProcess`` starts and stops it (one process, or a master and its workers);
``RecordReader`` follows the records file as it grows; ``run_worker`` makes this process a
worker of a drill's master elsewhere (``drills load-worker``).
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drills.common.errors import InputError, LoadError
from drills.common.ports import free_port
from drills.common.redact import redact_url
from drills.load.report import sent_log_path, started_path, workers_log_path
from drills.model.gateways import BUILTIN as BUILTIN_ADAPTERS
from drills.model.gateways import GatewayAdapter
from drills.model.records import Record
from drills.model.references import read_prompts
from drills.model.scenario import FallbackRule, LoadConfig, expand_env

__all__ = ["LoadProcess", "RecordReader", "describe_load", "load_prompts", "run_worker"]

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
    """The Locust processes sending the scenario's load to ``gateway``: one, or a master with
    local workers (and remote ones, which connect to it by themselves)."""

    gateway: str
    load: LoadConfig
    fallback: FallbackRule
    prompts: list[list[dict[str, str]]]
    records: Path
    run_time: float
    adapter: GatewayAdapter = field(default_factory=lambda: BUILTIN_ADAPTERS["drills"])
    """Which headers say the route, the upstream and a fallback."""
    process: subprocess.Popen[bytes] | None = None
    """The single Locust process, or the master."""
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    """Local worker processes, under the master."""

    def _fallback(self) -> dict[str, Any]:
        """The scenario's rule; without a header of its own, the adapter's fallback header."""
        rule = self.fallback.model_dump()
        if rule["header"] is None and self.adapter.fallback_header:
            rule["header"] = self.adapter.fallback_header
            rule["header_values"] = self.adapter.fallback_values
        return rule

    def _config(self) -> dict[str, Any]:
        """What every load process runs by (workers get it from the master)."""
        return {
            "gateway": redact_url(self.gateway),
            "records": str(self.records),
            "sent_log": str(sent_log_path(self.records)),
            "started_file": str(started_path(self.records)),
            "workers_log": str(workers_log_path(self.records)),
            "origin_file": str(self.records.with_suffix(".origin")),
            "workers_expected": self.load.expected_workers(),
            "users": self.load.users,
            "rate": self.load.rate,
            "arrival": self.load.arrival,
            "burstiness": self.load.burstiness,
            "max_in_flight": self.load.max_in_flight,
            "stop_timeout": self.stop_timeout,
            "spawn_rate": self.load.spawn_rate,
            # Seconds as numbers: the model's dump writes durations back as text ("15s").
            "shape": {k: getattr(self.load.shape, k) for k in type(self.load.shape).model_fields},
            "prompts": self.prompts,
            "max_tokens": self.load.max_tokens,
            "min_tokens": self.load.max_tokens if self.load.pin_length else None,
            "stream": self.load.stream,
            "wait": self.load.wait,
            "wait_jitter": self.load.wait_jitter,
            "timeout": self.load.timeout,
            "model": self.load.model,
            "endpoint": self.load.endpoint,
            "workflows": dict(self.load.workflows or {"brief": 1.0, "lookup": 1.0}),
            "resume": (
                {"attempts": self.load.resume.attempts, "after": self.load.resume.after}
                if self.load.resume
                else None
            ),
            "client": self.load.client,
            "fallback": self._fallback(),
            "route_header": self.adapter.route,
            "upstream_header": self.adapter.upstream.header if self.adapter.upstream else None,
            "upstream_map": self.adapter.upstream.map if self.adapter.upstream else {},
            # Locust ignores --run-time when a load shape is in use; the shape stops itself.
            "run_time": self.run_time + 30,
        }

    def start(self) -> None:
        """Start the load: one Locust process, or a master and the local workers (remote ones
        connect to the master by themselves)."""
        config_path = self.records.with_suffix(".load.json")
        config_path.write_text(json.dumps(self._config()))
        self.records.touch()
        env = {
            **os.environ,
            "DRILLS_LOAD_CONFIG": str(config_path),
            # In the environment, not on the command line: the URL may carry credentials, and
            # a command line is visible to every user (ps).
            "LOCUST_HOST": self.gateway,
            # Headers may carry credentials: they travel in the child's environment, never in
            # a file of the run directory.
            "DRILLS_LOAD_HEADERS": json.dumps(
                {k: expand_env(v) for k, v in self.load.headers.items()}
            ),
        }
        expected = self.load.expected_workers()
        command = [
            "--headless",
            "--run-time",
            f"{int(self.run_time) + 60}s",
            "--only-summary",
            "--stop-timeout",
            f"{self.stop_timeout:g}",
        ]
        if expected:
            host, port = self._master_address()
            wait = self.load.remote.wait if self.load.remote else 60.0
            command += [
                "--master",
                "--master-bind-host",
                host,
                "--master-bind-port",
                str(port),
                "--expect-workers",
                str(expected),
                "--expect-workers-max-wait",
                f"{wait:g}",
            ]
        self.process = _locust(command, env, self.records.with_suffix(".locust.log"))
        for index in range(self.load.local_workers() if expected else 0):
            log = self.records.with_suffix(f".worker{index}.log")
            self.workers.append(
                _locust(["--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
                        env, log)
            )  # fmt: skip
        logger.info(
            "load: %s against %s (pid %d%s)",
            describe_load(self.load),
            redact_url(self.gateway),
            self.process.pid,
            f", {expected} worker(s): {len(self.workers)} here" if expected else "",
        )

    def _master_address(self) -> tuple[str, int]:
        """Where the master listens: the remote workers' ``bind``, else a free loopback port."""
        if self.load.remote is not None:
            host, _, port = self.load.remote.bind.rpartition(":")
            return host, int(port)
        return "127.0.0.1", free_port()

    def fleet(self) -> dict[str, Any]:
        """The fleet's health as the master last wrote it (empty before it wrote any)."""
        try:
            return dict(json.loads(workers_log_path(self.records).read_text()))
        except (OSError, ValueError):
            return {}

    def wait_for_workers(self) -> None:
        """Return once every expected worker has connected; raise ``LoadError`` naming how
        many came when the master gave up waiting (or died)."""
        expected = self.load.expected_workers()
        proc = self.process
        if not expected or proc is None:
            return
        wait = self.load.remote.wait if self.load.remote else 60.0
        deadline = time.monotonic() + wait + 10
        while time.monotonic() < deadline:
            workers = [p for p in self.fleet().get("processes", []) if p.get("role") == "worker"]
            if len(workers) >= expected:
                return
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        raise LoadError(self._missing(expected))

    def wait_started(self, timeout: float = 60.0) -> float:
        """Wait until the load has sent its first request (a single process says so; a fleet's
        first record says so); return when it did (epoch seconds). Raises ``LoadError`` when
        the load process ended first, or nothing was sent within ``timeout``: a drill whose
        windows opened before its load ran judged its first seconds on no load at all."""
        marker, deadline = started_path(self.records), time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                return float(marker.read_text())
            except (OSError, ValueError):
                pass
            if self.records.exists() and self.records.stat().st_size > 0:
                return time.time()
            if self.process is not None and self.process.poll() is not None:
                log = self.records.with_suffix(".locust.log")
                raise LoadError(
                    f"the load process exited with code {self.process.returncode} before it "
                    f"sent a request; see {log}"
                )
            time.sleep(0.05)
        raise LoadError(f"the load sent no request within {timeout:g}s of its start")

    def _missing(self, expected: int) -> str:
        came = [p["id"] for p in self.fleet().get("processes", []) if p.get("role") == "worker"]
        dead = [
            f"local worker {i} (pid {w.pid}) exited with code {w.returncode}"
            for i, w in enumerate(self.workers)
            if w.poll() is not None
        ]
        remote = self.load.remote
        where = f" at {remote.bind}" if remote else ""
        return (
            f"only {len(came)} of {expected} load workers connected to the master{where}"
            + (f" ({', '.join(came)})" if came else "")
            + (f"; {'; '.join(dead)}" if dead else "")
            + ": the load would have fallen short, so the drill did not start its phases"
        )

    @property
    def stop_timeout(self) -> float:
        """Seconds requests in flight get to finish when the load stops (Locust's
        ``--stop-timeout``): the request timeout, at most ``MAX_STOP_TIMEOUT``. One still
        waiting then is recorded as unfinished, an error."""
        return min(float(self.load.timeout), MAX_STOP_TIMEOUT)

    def mark_origin(self, t0: float) -> None:
        """The drill's timeline begins at ``t0`` (epoch seconds, after the warm-up): a step or
        spike shape counts its ``every`` and ``at`` from here, not from the load's start."""
        path = self.records.with_suffix(".origin")
        path.with_suffix(".tmp").write_text(repr(t0))
        path.with_suffix(".tmp").replace(path)

    def stop(self) -> None:
        """Stop the load; requests in flight get ``stop_timeout`` to finish. The master stops
        its workers, which send their last records first; any process left is killed."""
        for proc in [self.process, *self.workers]:
            if proc is None or proc.poll() is not None:
                continue
            if proc is self.process:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=self.stop_timeout + 10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _locust(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """One Locust process of the load, in its own session (so a signal to the runner's group
    does not reach it) that ends with the runner."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "locust",
                "-f",
                str(LOCUSTFILE),
                *args,
                "--loglevel",
                "WARNING",
                "--skip-log-setup",
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_stop_with_parent,
        )


def run_worker(master: str, wait: float) -> int:
    """Be a load worker of the drill whose master listens at ``master`` (HOST:PORT): once it
    can be reached (tried for ``wait`` seconds), this process becomes a Locust worker, takes
    its configuration from the master and sends it its records. An address that is not
    HOST:PORT, or a master that cannot be reached, is bad input (exit 2)."""
    host, _, port = master.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"--master {master!r}: expected HOST:PORT (e.g. 10.0.0.5:5557)")
    deadline = time.monotonic() + wait
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            break
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise InputError(
                    f"--master {master}: the load master cannot be reached ({exc}; tried for "
                    f"{wait:g}s): is a drill with load.remote running, and does its "
                    "load.remote.bind listen where this host can reach it?"
                ) from None
            time.sleep(0.5)
    argv = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--worker"]
    os.execv(sys.executable, [*argv, "--master-host", host, "--master-port", port])


def describe_load(load: LoadConfig) -> str:
    """The load in a few words: ``4 users`` or ``20 requests/s (poisson, open loop)``."""
    if load.users is not None:
        return f"{load.users} user(s)"
    shape = f"gamma {load.burstiness:g}" if load.arrival == "gamma" else load.arrival
    return (
        f"{load.rate:g} requests/s ({shape} arrivals, open loop, "
        f"at most {load.max_in_flight} in flight)"
    )


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
