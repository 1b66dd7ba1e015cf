"""A real Jaeger for the trace-export tests: the tracing backend a team sends OpenTelemetry
traces to. Jaeger v2 (``stack.provision.ensure_jaeger``, built once into the cache from the Go
module proxy; CI builds it before the tests), with its in-memory store, its OTLP/HTTP receiver
and its query API on free loopback ports, started for each test module that uses it."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from drills.common.ports import free_port
from stack.provision import cache_root, ensure_jaeger, jaeger_built

__all__ = ["Jaeger", "jaeger"]

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

    def trace(self, trace_id: str, spans: int, timeout: float = 30.0) -> dict[str, object]:
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


def pytest_collection_finish(session: pytest.Session) -> None:
    """On a machine that has not built Jaeger yet, build it now, before the first test, when a
    collected test needs it: a compile beside the tests distorts their timings (see
    tests/kube_env.py). CI builds it before pytest (``python -m stack.install jaeger``)."""
    wanted = any("jaeger" in getattr(item, "fixturenames", ()) for item in session.items)
    if not wanted or jaeger_built():
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(
            "building Jaeger before the tests (once per version; minutes; log in "
            f"{cache_root() / 'logs'})"
        )
    ensure_jaeger()


@pytest.fixture(scope="module")
def jaeger() -> Iterator[Jaeger]:
    """A Jaeger for one test module: started in about a second, and not left running beside
    the rest of the suite's timing tests."""
    binary = ensure_jaeger()
    root = Path(tempfile.mkdtemp(prefix="drills-jaeger-"))
    ports = {k: free_port() for k in ("health", "query", "query_grpc", "otlp")}
    config = root / "jaeger.yaml"
    config.write_text(CONFIG.format(**ports))
    log = open(root / "jaeger.log", "wb")  # noqa: SIM115 - closed at teardown
    server = subprocess.Popen(
        [str(binary), "--config", str(config)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=root,
    )
    found = Jaeger(f"http://127.0.0.1:{ports['otlp']}", f"http://127.0.0.1:{ports['query']}")
    try:
        deadline = time.monotonic() + 60
        while True:
            if server.poll() is not None:
                raise RuntimeError(
                    f"jaeger exited ({server.returncode}): "
                    + (root / "jaeger.log").read_text(errors="replace")[-3000:]
                )
            try:
                if httpx.get(f"http://127.0.0.1:{ports['health']}/status", timeout=2).is_success:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("jaeger did not become healthy in 60 s")
            time.sleep(0.2)
        yield found
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
