"""The drill on the team's dashboards: a Prometheus endpoint the harness serves while a drill
runs, for the team's Prometheus to scrape (``stack.attach.exporter``, ``--exporter``).

- ``drills_fault_active{drill, run, fault, kind, target}``: 1 from a fault's application to its
  revert, else 0;
- ``drills_phase{drill, run, phase}``: 1 for the phase that runs, else 0;
- ``drills_run_active{drill, run}``: 1 while the drill runs.

A Grafana annotation query on ``drills_fault_active == 1`` marks the fault windows on every
dashboard of the stack; an alert rule can be silenced by it (``unless on() drills_run_active``)
when a team wants its drills quiet. The exporter binds before anything is applied: a taken
address is bad input. When the drill ends it stops, and Prometheus marks the series stale.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Gauge, start_http_server

from drills.common.errors import InputError
from drills.engine.pager import parse_listen

__all__ = ["DrillExporter"]


class DrillExporter:
    """Serves the drill's state at ``listen`` (``HOST:PORT``) until ``stop``."""

    def __init__(self, listen: str, drill: str, run_id: str) -> None:
        self.address = parse_listen(listen)
        self.drill, self.run_id = drill, run_id
        self.registry = CollectorRegistry()
        self.fault = Gauge(
            "drills_fault_active",
            "1 while a drill's fault is applied (from its application to its revert)",
            ["drill", "run", "fault", "kind", "target"],
            registry=self.registry,
        )
        self.phase = Gauge(
            "drills_phase",
            "1 for the phase of a drill that runs",
            ["drill", "run", "phase"],
            registry=self.registry,
        )
        self.active = Gauge(
            "drills_run_active", "1 while a drill runs", ["drill", "run"], registry=self.registry
        )
        self._server: Any = None

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}/metrics"

    def start(self) -> None:
        host, port = self.address
        try:
            self._server, _ = start_http_server(port, host, self.registry)
        except OSError as exc:
            raise InputError(
                f"stack.attach.exporter: the harness cannot serve its metrics at {host}:{port}: "
                f"{exc.strerror or exc} (give a free HOST:PORT that your Prometheus scrapes)"
            ) from None
        self.active.labels(self.drill, self.run_id).set(1)

    def observe(self, event: str, detail: dict[str, Any]) -> None:
        """Follow the run's events: faults applied and reverted, phases begun and ended."""
        if event in ("fault_applied", "fault_reverted"):
            self.fault.labels(
                self.drill,
                self.run_id,
                str(detail.get("fault")),
                str(detail.get("kind")),
                str(detail.get("target")),
            ).set(1 if event == "fault_applied" else 0)
        elif event in ("phase_start", "phase_end"):
            self.phase.labels(self.drill, self.run_id, str(detail.get("phase"))).set(
                1 if event == "phase_start" else 0
            )

    def stop(self) -> None:
        if self._server is not None:
            self.active.labels(self.drill, self.run_id).set(0)
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> DrillExporter:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
