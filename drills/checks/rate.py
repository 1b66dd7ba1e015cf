"""Shares of the requests in a window: ``error_rate``, ``fallback_rate``, ``success_rate``,
``truncated_rate`` (answers shorter than the pinned length: ``load.pin_length``)."""

from __future__ import annotations

from drills.checks.base import (
    Evaluation,
    conclusive,
    is_error,
    result,
)
from drills.common.stats import wilson
from drills.model.expect import Check
from drills.model.journal import CheckResult

__all__ = ["check_rate"]


def check_rate(check: Check, ev: Evaluation) -> CheckResult:
    start, end = ev.window(check.during)
    records = ev.requests_in(start, end)
    if not records:
        return result(check, "rate", None, 0, "no requests started in the window")
    if check.check == "error_rate":
        hits = sum(is_error(r) for r in records)
    elif check.check == "fallback_rate":
        hits = sum(bool(r.fallback) for r in records)
    elif check.check == "truncated_rate":
        hits = sum(r.truncated for r in records)
    else:
        hits = sum(not is_error(r) and not r.fallback for r in records)
    low, high = wilson(hits, len(records), ev.confidence)
    judged = result(check, "rate", hits / len(records), len(records))
    return judged.model_copy(
        update={
            "interval": (low, high),
            "conclusive": conclusive(check, low, high),
            "confidence": ev.confidence,
        }
    )
