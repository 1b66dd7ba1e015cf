"""Latency percentiles of the requests that ran inside a window: ``ttft.pNN``, ``itl.pNN``,
``e2e.pNN``."""

from __future__ import annotations

from drills.checks.base import (
    Evaluation,
    result,
)
from drills.common.stats import percentile
from drills.model.journal import CheckResult
from drills.model.scenario import Check

__all__ = ["check_latency"]


def check_latency(check: Check, ev: Evaluation) -> CheckResult:
    metric, q = check.check.split(".p")
    start, end = ev.window(check.during)
    records = ev.requests_in(start, end)
    values: list[float] = []
    if metric == "ttft":
        values = [r.ttft for r in records if r.ttft is not None]
    elif metric == "e2e":
        values = [r.e2e for r in records if r.e2e is not None]
    else:
        for r in records:
            values.extend(r.itl or ())
    if not values:
        return result(
            check,
            "latency",
            None,
            0,
            f"no {metric} samples among {len(records)} requests in the window",
        )
    pct = float(q) / (10 if len(q) == 3 else 1)
    return result(check, "latency", percentile(values, pct), len(values))
