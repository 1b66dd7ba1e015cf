"""Successful requests per second in a window: ``throughput``."""

from __future__ import annotations

from drills.checks.base import (
    Evaluation,
    is_error,
    result,
)
from drills.model.expect import Check
from drills.model.journal import CheckResult

__all__ = ["check_throughput"]


def check_throughput(check: Check, ev: Evaluation) -> CheckResult:
    start, end = ev.window(check.during)
    records = [r for r in ev.requests_in(start, end) if not is_error(r)]
    if not records:
        return result(check, "throughput", None, 0, "no successful request in the window")
    return result(check, "throughput", len(records) / max(end - start, 1e-9), len(records))
