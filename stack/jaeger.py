"""A real Jaeger, started on loopback: the stand-in for a team's tracing backend that the
drills' OpenTelemetry traces are sent to (``drills.engine.tracing``) in the tests and the
benchmarks. Jaeger v2 (``stack.provision.ensure_jaeger``, built once into the cache from the
Go module proxy), with its in-memory store, its OTLP/HTTP receiver and its query API on free
ports; nothing of the embedded stack uses it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from drills.common.ports import free_port
from stack.monitoring import wait_ready
from stack.provision import ensure_jaeger

__all__ = ["Jaeger", "running_jaeger"]

CONFIG = """\
service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:{health}
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp}
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


@dataclass(frozen=True)
class Jaeger:
    otlp: str
    """The OTLP/HTTP receiver's base URL (``/v1/traces`` under it)."""
    query: str
    """The query API's base URL (``/api/traces/ID``)."""

    def trace(self, trace_id: str, spans: int, timeout: float = 30.0) -> dict[str, Any]:
        """The trace as the query API returns it, once it holds ``spans`` spans (the receiver
        batches what it stores)."""
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            answer = httpx.get(f"{self.query}/api/traces/{trace_id}", timeout=5)
            if answer.status_code == 200:
                data = answer.json()["data"]
                if data and len(data[0]["spans"]) >= spans:
                    return dict(data[0])
                last = len(data[0]["spans"]) if data else data
            else:
                last = answer.status_code
            time.sleep(0.2)
        raise AssertionError(f"Jaeger holds no trace {trace_id} of {spans} spans (last: {last})")


@contextlib.contextmanager
def running_jaeger() -> Iterator[Jaeger]:
    """Jaeger, up and healthy, until the block ends (stopped by its process group)."""
    binary = ensure_jaeger()
    root = Path(tempfile.mkdtemp(prefix="drills-jaeger-"))
    ports = {k: free_port() for k in ("health", "query", "query_grpc", "otlp")}
    config = root / "jaeger.yaml"
    config.write_text(CONFIG.format(**ports))
    log = open(root / "jaeger.log", "wb")  # noqa: SIM115 - closed when the block ends
    server = subprocess.Popen(
        [str(binary), "--config", str(config)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=root,
    )
    try:
        health = f"http://127.0.0.1:{ports['health']}/status"
        wait_ready("jaeger", health, server, root / "jaeger.log", 60)
        yield Jaeger(f"http://127.0.0.1:{ports['otlp']}", f"http://127.0.0.1:{ports['query']}")
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                # It holds nothing to keep (an in-memory store); its graceful stop took 9 s.
                server.wait(timeout=2)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        log.close()
