"""Detection times against a known truth, and what the monitoring costs.

A target exposes one gauge, ``bench_fault``, that this bench sets to 1 at a known instant (the
"fault") and back to 0 later. A real Prometheus scrapes it and evaluates
``bench_fault == 1`` with ``for: 0s``; a real Alertmanager (``group_wait`` as given) routes the
alert to the harness's pager (``drills.engine.pager``). For each round the bench measures, as
``alert_fired`` and ``alert_paged`` do:

- time to fire: from the instant to the first firing point of ``ALERTS`` (range query at the
  checks' step of 0.25 s); the bound to compare with is one scrape plus one evaluation interval
  (plus the query step);
- time to page: from the instant to the notification reaching the pager;
- time to resolve: from setting it back to 0 to the alert's end.

It also reads Prometheus's and Alertmanager's CPU time (``/proc/PID/stat``) over the rounds:
what they take from a 2-core machine while a drill runs.

    .venv/bin/python bench/detection.py --rounds 10 --interval 1s
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from drills.common.ports import free_port
from drills.common.prometheus import PrometheusAPI
from drills.common.units import parse_duration
from drills.engine.pager import Pager
from stack.monitoring import start_monitoring


class _Target:
    """An HTTP target whose /metrics says ``bench_fault`` (0 or 1)."""

    def __init__(self) -> None:
        self.value = 0
        target = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = (
                    "# HELP bench_fault 1 while the bench's fault is on\n"
                    f"# TYPE bench_fault gauge\nbench_fault {target.value}\n"
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _first(prometheus: PrometheusAPI, expr: str, start: float, end: float) -> float | None:
    series = prometheus.query_range(expr, start, end, 0.25)
    times = sorted(t for _, points in series for t, _ in points)
    return times[0] if times else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--interval", default="1s", help="scrape and evaluation interval")
    parser.add_argument("--group-wait", default="1s", help="Alertmanager's group_wait")
    args = parser.parse_args()
    interval = parse_duration(args.interval)
    target = _Target()
    rules = {
        "groups": [
            {
                "name": "bench",
                "rules": [
                    {
                        "alert": "BenchFault",
                        "expr": "bench_fault == 1",
                        "for": "0s",
                        "annotations": {"runbook_url": "https://example.invalid/bench.md#fault"},
                    }
                ],
            }
        ]
    }
    with tempfile.TemporaryDirectory() as home:
        rules_file = Path(home) / "rules.yml"
        rules_file.write_text(yaml.safe_dump(rules))
        pager = Pager(f"127.0.0.1:{free_port()}")
        pager.start()
        monitoring = start_monitoring(
            Path(home) / "monitoring",
            {"bench": [f"127.0.0.1:{target.port}"]},
            pager.url,
            [rules_file],
            interval=args.interval,
            group_wait=args.group_wait,
        )
        fired, paged, resolved = [], [], []
        try:
            # Prometheus's first scrapes and rule evaluations come a few intervals after it is
            # ready (measured: a round begun 3 s after the start fired after 3 s): warm up.
            time.sleep(10 * interval)
            cpu0 = {p.pid: _cpu_seconds(p.pid) for p in monitoring.processes}
            wall0 = time.monotonic()
            with PrometheusAPI(monitoring.prometheus) as prometheus:
                for _ in range(args.rounds):
                    before = len(pager.received())
                    # A fault comes at any instant of the scrape and evaluation cycle.
                    time.sleep(random.uniform(0, interval))
                    applied = time.time()
                    target.value = 1
                    deadline = time.monotonic() + 30
                    while time.monotonic() < deadline and not any(
                        a.status == "firing" for p in pager.received()[before:] for a in p.alerts
                    ):
                        time.sleep(0.05)
                    page = next(
                        p
                        for p in pager.received()[before:]
                        if any(a.status == "firing" for a in p.alerts)
                    )
                    time.sleep(interval)
                    reverted = time.time()
                    target.value = 0
                    time.sleep(3 * interval + 1)
                    now = time.time()
                    first = _first(
                        prometheus,
                        'ALERTS{alertname="BenchFault",alertstate="firing"}',
                        applied,
                        now,
                    )
                    assert first is not None
                    last_series = prometheus.query_range(
                        'ALERTS{alertname="BenchFault",alertstate="firing"}', applied, now, 0.25
                    )
                    last = max(t for _, pts in last_series for t, _ in pts)
                    fired.append(first - applied)
                    paged.append(page.received_at - applied)
                    resolved.append(last + 0.25 - reverted)
            wall = time.monotonic() - wall0
            cpu = {
                name: _cpu_seconds(p.pid) - cpu0[p.pid]
                for name, p in zip(
                    ("alertmanager", "prometheus"), monitoring.processes, strict=True
                )
            }
        finally:
            monitoring.stop()
            pager.stop()
            target.server.shutdown()

    def line(name: str, values: list[float]) -> str:
        return (
            f"{name:<22} median {statistics.median(values):5.2f}s  min {min(values):5.2f}s  "
            f"max {max(values):5.2f}s"
        )

    print(
        f"{args.rounds} rounds, scrape and evaluation every {args.interval}, group_wait "
        f"{args.group_wait}; bound to fire: {2 * interval + 0.25:.2f}s (scrape + evaluation + step)"
    )
    print(
        "per round (fire, page):",
        [(round(f, 2), round(p, 2)) for f, p in zip(fired, paged, strict=True)],
    )
    print(line("time to fire", fired))
    print(line("time to page", paged))
    print(line("time to resolve", resolved))
    for name, seconds in cpu.items():
        share = 100 * seconds / wall
        print(f"{name:<22} CPU {seconds:.2f}s over {wall:.0f}s: {share:.1f}% of one core")


if __name__ == "__main__":
    main()
