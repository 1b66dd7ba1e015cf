"""Latency percentiles of the requests that ran inside a window: ``ttft.pNN``, ``itl.pNN``,
``e2e.pNN``; and their jitter, ``spread.ttft``, ``spread.itl``, ``spread.e2e``: the p99 over
the p50 of the same window (1 when every request took the same time; a queue inside the engine
that stalls running streams for new prompts' prefill shows as a high ``spread.itl``)."""

from __future__ import annotations

from drills.checks.base import (
    Evaluation,
    conclusive,
    result,
)
from drills.common.stats import percentile, quantile_interval
from drills.model.expect import Check
from drills.model.journal import CheckResult
from drills.model.records import Record

__all__ = ["check_latency", "check_spread"]


def _values(metric: str, records: list[Record]) -> list[float]:
    values: list[float] = []
    if metric == "ttft":
        values = [r.ttft for r in records if r.ttft is not None]
    elif metric == "e2e":
        values = [r.e2e for r in records if r.e2e is not None]
    else:
        for r in records:
            values.extend(r.itl or ())
    return values


def check_latency(check: Check, ev: Evaluation) -> CheckResult:
    metric, q = check.check.split(".p")
    records = ev.requests_in(*ev.window(check.during))
    values = _values(metric, records)
    if not values:
        return result(
            check,
            "latency",
            None,
            0,
            f"no {metric} samples among {len(records)} requests in the window",
        )
    pct = float(q) / (10 if len(q) == 3 else 1)
    judged = result(check, "latency", percentile(values, pct), len(values))
    if metric == "itl":  # a stream's gaps are not independent samples: no interval
        return judged
    low, high = quantile_interval(values, pct / 100, ev.confidence)
    return judged.model_copy(
        update={
            "interval": (low, high),
            "conclusive": conclusive(check, low, high),
            "confidence": ev.confidence,
        }
    )


def check_spread(check: Check, ev: Evaluation) -> CheckResult:
    metric = check.check.split(".", 1)[1]
    records = ev.requests_in(*ev.window(check.during))
    values = _values(metric, records)
    if not values:
        return result(
            check,
            "spread",
            None,
            0,
            f"no {metric} samples among {len(records)} requests in the window",
        )
    p50, p99 = percentile(values, 50), percentile(values, 99)
    spread = p99 / max(p50, 1e-9)
    outcome = result(check, "spread", spread, len(values))
    outcome.observed_text = f"{spread:.2f}x"
    outcome.reason = (
        f"{metric} p99 {p99 * 1000:.0f}ms over p50 {p50 * 1000:.0f}ms: {spread:.2f}x "
        f"({len(values)} samples)" + ("" if outcome.passed else f"; expected {outcome.expected}")
    )
    return outcome
