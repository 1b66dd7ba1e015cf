"""Retrieval: ``missing_context_share`` of RAG answers and the recall probe's
``retrieval_recall``."""

from __future__ import annotations

from drills.checks.base import (
    Evaluation,
    is_error,
    result,
)
from drills.model.expect import Check
from drills.model.journal import CheckResult

__all__ = ["check_missing_context_share", "check_retrieval_recall"]


def check_missing_context_share(check: Check, ev: Evaluation) -> CheckResult:
    """Share of RAG answers in the window that declared they had no context. An error is not
    a declaration: it counts against the share."""
    start, end = ev.window(check.during)
    records = [r for r in ev.requests_in(start, end) if r.endpoint == "rag"]
    if not records:
        return result(check, "missing_context_share", None, 0, "no RAG answer in the window")
    declared = sum(bool(r.missing_context) and not is_error(r) for r in records)
    errors = sum(is_error(r) for r in records)
    share = declared / len(records)
    outcome = result(check, "missing_context_share", share, len(records))
    if not outcome.passed:
        outcome.reason += f" ({declared} declared no context, {errors} failed outright)"
    return outcome


def check_retrieval_recall(check: Check, ev: Evaluation) -> CheckResult:
    """Mean recall@k of the recall probe's runs in the window."""
    start, end = ev.window(check.during)
    values = [
        sample.value
        for probe in ev.probes
        if probe.source == "retrieval"
        and start <= probe.time
        and (probe.ended or probe.time) <= end
        for sample in probe.samples
        if sample.name == "drills_retrieval_recall"
    ]
    if not values:
        status = ev.retrieval or {"available": False, "reason": "the probe did not run"}
        reason = (
            f"the recall probe is unavailable: {status.get('reason')}"
            if not status.get("available")
            else "no run of the recall probe in the window"
        )
        return result(check, "retrieval_recall", None, 0, reason)
    return result(check, "retrieval_recall", sum(values) / len(values), len(values))
