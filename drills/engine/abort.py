"""A drill's abort conditions (``abort_when``), judged on the live records while it runs:
``error_rate`` or ``fallback_rate`` above a share over the last ``for``, or ``answer_rate``
(answers per second) below a floor. The runner asks every second; the first that holds stops
the drill, and every fault is reverted."""

from __future__ import annotations

from typing import Any

from drills.checks import is_error
from drills.model.expect import AbortCondition
from drills.model.records import Record

__all__ = ["abort_reason"]


def abort_reason(
    conditions: list[AbortCondition], live: list[Record], now: float, t0: float
) -> dict[str, Any] | None:
    """The first of ``conditions`` that holds at ``now`` on the records so far (the drill's
    phases began at ``t0``), as the journal's ``abort``; ``None`` while none holds."""
    for condition in conditions:
        if condition.check == "answer_rate":
            stalled = _stalled(condition, live, now, t0)
            if stalled is not None:
                return stalled
            continue
        # Judged once the phases have run as long as the window (as answer_rate is): a
        # window that reaches back into the warm-up is not the drill's last ``for``.
        if now - t0 < condition.for_:
            continue
        window = [r for r in live if r.start >= now - condition.for_]
        if len(window) < condition.min_requests:
            continue
        if condition.check == "error_rate":
            rate = sum(is_error(r) for r in window) / len(window)
        else:
            rate = sum(r.fallback for r in window) / len(window)
        assert condition.above is not None  # validated
        if rate > condition.above:
            return {
                "cause": "abort_condition",
                "check": condition.check,
                "observed": round(rate, 3),
                "above": condition.above,
                "for": condition.for_,
            }
    return None


def _stalled(
    condition: AbortCondition, live: list[Record], now: float, t0: float
) -> dict[str, Any] | None:
    """``answer_rate``: answers (any status but none) that came in the last ``for``, per
    second; judged once the phases have run that long, so the warm-up's ramp is not a
    stall."""
    assert condition.below is not None  # validated
    if now - t0 < condition.for_:
        return None
    since = now - condition.for_
    answered = sum(
        1 for r in live if r.status != 0 and r.e2e is not None and r.start + r.e2e >= since
    )
    rate = answered / condition.for_
    if rate >= condition.below:
        return None
    return {
        "cause": "abort_condition",
        "check": condition.check,
        "observed": round(rate, 3),
        "below": condition.below,
        "for": condition.for_,
        "reason": f"{answered} answers in the last {condition.for_:g}s: the stack stopped "
        "answering",
    }
