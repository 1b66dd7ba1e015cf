"""The load's Locust processes as one fleet: a single process, or a master with workers (local
processes, or on other hosts), whose records reach one file, on the master's clock.

Imported by the locustfile, inside the Locust processes only (gevent is patched there). Workers
get everything from the master over Locust's own master/worker channel, so that a worker on
another host needs nothing but the drills package and the master's address:

- worker -> master ``drills_hello``: sent once the worker listens for the messages below (a
  message that arrives before its handler is registered is dropped, so the master waits for it
  rather than for Locust's own connect);
- master -> worker ``drills_config``: the load's configuration, with this worker's share of an
  open-loop rate and of its in-flight slots (the answer to hello, before any spawn: Locust's
  master spawns only once every expected worker has connected);
- master -> worker ``drills_clock`` ``{t}``: a clock probe, answered at once with the worker's
  own time; the master keeps each worker's offset from the probe with the shortest round trip
  (NTP's rule: the error is at most half that round trip) and moves the worker's record times
  onto its own clock;
- worker -> master ``drills_records``: record lines, in batches;
- worker -> master ``drills_sent``: the worker's account of its open-loop schedule.

The master (or the single process) writes the records file, the schedule's account
(``<records>.sent.json``) and the fleet's health (``<records>.workers.json``: each worker's
clock offset, records, and CPU peak, so a report can say when the load generator, not the
stack, was the bottleneck).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from typing import Any

import gevent  # type: ignore[import-untyped]
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

__all__ = ["Fleet", "Sink", "serve_worker", "write_json"]
FLUSH_EVERY = 0.25
PROBE_EVERY = 2.0


def write_json(path: str, data: Any) -> None:
    """Write ``data`` so that a reader never sees half a file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as out:
        json.dump(data, out)
    os.replace(tmp, path)


class Sink:
    """Where record lines go: the records file (a single process, the master), or batches to
    the master (a worker)."""

    def __init__(self) -> None:
        self._file: Any = None
        self._buffer: list[str] = []
        self._runner: WorkerRunner | None = None
        self.written = 0
        """Lines written to the file by this process (workers' lines included, on a master)."""

    def open_file(self, path: str) -> None:
        # Open for the life of the process: one line per request, flushed at each newline.
        self._file = open(path, "a", buffering=1)  # noqa: SIM115

    def to_master(self, runner: WorkerRunner) -> None:
        self._runner = runner
        gevent.spawn(self._flusher)

    def write(self, line: str) -> None:
        if self._runner is not None:
            self._buffer.append(line)
        elif self._file is not None:
            self._file.write(line + "\n")
            self.written += 1

    def flush(self) -> None:
        """Send what is buffered to the master (a worker); nothing to do otherwise."""
        if self._runner is not None and self._buffer:
            batch, self._buffer = self._buffer, []
            self._runner.send_message("drills_records", {"lines": batch})

    def _flusher(self) -> None:
        while True:
            gevent.sleep(FLUSH_EVERY)
            self.flush()


class Fleet:
    """The master's (or the single process's) view of the load processes: clock offsets,
    records received, CPU peaks, and each worker's schedule account."""

    def __init__(
        self, environment: Environment, config: dict[str, Any], sink: Sink, headers: dict[str, str]
    ) -> None:
        self.environment = environment
        self.config = config
        self.sink = sink
        self.headers = headers
        self.workers: dict[str, dict[str, Any]] = {}
        self.sent: dict[str, dict[str, Any]] = {}
        role = "master" if config.get("workers_expected") else "single"
        self.local: dict[str, Any] = {"id": role, "role": role, "records": 0, "cpu_peak": 0.0}

    # -- the master side ----------------------------------------------------------------------

    def serve(self, runner: MasterRunner) -> None:
        runner.register_message("drills_hello", self._on_hello)
        runner.register_message("drills_clock", self._on_clock)
        runner.register_message("drills_records", self._on_records)
        runner.register_message("drills_sent", self._on_sent)
        gevent.spawn(self._watch, runner)

    def _on_hello(self, environment: Environment, msg: Any, **_: Any) -> None:
        runner = self.environment.runner
        assert runner is not None
        client_id = msg.node_id
        self.workers.setdefault(
            client_id,
            {
                "id": client_id,
                "role": "worker",
                "connected_at": time.time(),
                "offset": None,
                "rtt": None,
                "records": 0,
                "cpu_peak": 0.0,
            },
        )
        runner.send_message("drills_config", self.share(), client_id)
        runner.send_message("drills_clock", {"t": time.time()}, client_id)
        self.write_health()

    def share(self) -> dict[str, Any]:
        """The configuration a worker runs: an open-loop rate and its in-flight slots split
        evenly between the workers, and the request headers (over Locust's channel, which is
        not encrypted: keep remote workers inside the network the gateway is in)."""
        count = max(1, int(self.config.get("workers_expected") or 1))
        config = {**self.config, "headers": self.headers}
        if config.get("rate") is not None:
            config["rate"] = config["rate"] / count
            config["max_in_flight"] = max(1, math.ceil(config["max_in_flight"] / count))
        return config

    def _on_clock(self, environment: Environment, msg: Any, **_: Any) -> None:
        received = time.time()
        sent, theirs = msg.data["t"], msg.data["tw"]
        rtt = received - sent
        worker = self.workers.get(msg.node_id)
        if worker is not None and (worker["rtt"] is None or rtt < worker["rtt"]):
            worker["rtt"] = rtt
            worker["offset"] = theirs - (sent + received) / 2

    def _on_records(self, environment: Environment, msg: Any, **_: Any) -> None:
        worker = self.workers.get(msg.node_id) or {"offset": None, "records": 0}
        offset = worker["offset"] or 0.0
        lines = msg.data["lines"]
        for line in lines:
            record = json.loads(line)
            record["start"] -= offset  # onto the master's clock
            record["worker"] = msg.node_id
            self.sink.write(json.dumps(record))
        worker["records"] += len(lines)

    def _on_sent(self, environment: Environment, msg: Any, **_: Any) -> None:
        account = dict(msg.data)
        offset = (self.workers.get(msg.node_id) or {}).get("offset") or 0.0
        account["not_sent_at"] = [t - offset for t in account.get("not_sent_at") or []]
        self.sent[msg.node_id] = account
        self.write_sent(final=bool(account.get("final")))

    def write_sent(self, *, final: bool = False) -> None:
        """The schedule's account of every worker together (``<records>.sent.json``)."""
        accounts = list(self.sent.values())
        write_json(
            self.config["sent_log"],
            {
                "scheduled": sum(a["scheduled"] for a in accounts),
                "sent": sum(a["sent"] for a in accounts),
                "not_sent": sum(a["not_sent"] for a in accounts),
                "not_sent_at": sorted(t for a in accounts for t in a["not_sent_at"]),
                "peak_in_flight": sum(a["peak_in_flight"] for a in accounts),
                "workers": len(accounts),
                "final": final and all(a.get("final") for a in accounts),
            },
        )

    def _watch(self, runner: MasterRunner) -> None:
        while True:
            for client in runner.clients.values():
                worker = self.workers.get(client.id)
                if worker is not None:
                    worker["cpu_peak"] = max(worker["cpu_peak"], float(client.cpu_usage or 0))
                    runner.send_message("drills_clock", {"t": time.time()}, client.id)
            self.local["cpu_peak"] = max(self.local["cpu_peak"], runner.current_cpu_usage)
            self.write_health()
            gevent.sleep(PROBE_EVERY)

    # -- a single process ---------------------------------------------------------------------

    def watch_local(self, runner: Any) -> None:
        def loop() -> None:
            while True:
                self.local["cpu_peak"] = max(self.local["cpu_peak"], runner.current_cpu_usage)
                self.write_health()
                gevent.sleep(PROBE_EVERY)

        gevent.spawn(loop)

    def write_health(self) -> None:
        """``<records>.workers.json``: the fleet as the master (or the one process) sees it:
        how many workers were expected (0: a single process), and each process."""
        self.local["records"] = self.sink.written
        write_json(
            self.config["workers_log"],
            {
                "expected": int(self.config.get("workers_expected") or 0),
                "processes": [self.local, *self.workers.values()],
            },
        )


def serve_worker(runner: WorkerRunner, configure: Callable[[dict[str, Any]], None]) -> None:
    """A worker's side: take the master's configuration, answer its clock probes."""

    def on_config(environment: Environment, msg: Any, **_: Any) -> None:
        configure(msg.data)

    def on_clock(environment: Environment, msg: Any, **_: Any) -> None:
        runner.send_message("drills_clock", {"t": msg.data["t"], "tw": time.time()})

    runner.register_message("drills_config", on_config)
    runner.register_message("drills_clock", on_clock)
    runner.send_message("drills_hello", {})
