"""Any metric a probe scraped (the gateway, Toxiproxy, an engine, NVML): ``prometheus``."""

from __future__ import annotations

from drills.checks.base import (
    Evaluation,
    increase_of,
    result,
    series,
)
from drills.model.expect import Check
from drills.model.journal import CheckResult

__all__ = ["check_prometheus"]


def check_prometheus(check: Check, ev: Evaluation) -> CheckResult:
    start, end = ev.window(check.during)
    assert check.source and check.metric
    points = series(ev, check.source, check.metric, check.labels, start, end)
    if not points and check.source == "gpu":
        status = ev.gpu or {"available": False, "reason": "the drill did not ask for it"}
        if not status.get("available"):
            return result(
                check,
                "prometheus",
                None,
                0,
                f"unavailable: GPU telemetry could not be read ({status.get('reason')}); "
                "this check is not passed",
            )
    if not points:
        return result(
            check,
            "prometheus",
            None,
            0,
            f"no scrape of {check.source} had {check.metric} {check.labels or ''}",
        )
    values = [v for _, v in points]
    observed = {
        "increase": increase_of(points),
        "max": max(values),
        "min": min(values),
        "avg": sum(values) / len(values),
        "last": values[-1],
    }[check.agg]
    return result(check, "prometheus", observed, len(points))
