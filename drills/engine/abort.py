"""A drill's abort conditions (``abort_when``), judged on the live records while it runs:
``error_rate`` or ``fallback_rate`` above a share for the whole of the last ``for``, or
``answer_rate`` (answers per second) below a floor. The runner asks every second; the first
that holds stops the drill, and every fault is reverted.

A share holds the way an alert rule's ``for:`` holds: at every second of the last ``for``, the
share of the requests that *ended* in the ``SHARE_WINDOW`` seconds before that second must be
above the bound. One second at or below it breaks the run of seconds. A share of the requests
*sent* over the whole window would not do: requests that fail fast outnumber the slow answers
around them, so a 30 s outage whose failures came back in 60 ms (54 of them) passed for 45 s of
errors while the recovered stack's first two answers were still on their way (measured, the
vector-DB outage's twin: 54 of 56 = 0.964 > 0.95, 12 s into its recovery)."""

from __future__ import annotations

import math
from typing import Any

from drills.checks import is_error
from drills.model.expect import AbortCondition
from drills.model.records import Record

__all__ = ["SHARE_WINDOW", "abort_reason"]

SHARE_WINDOW = 10.0
"""Seconds of ended requests behind each judged second of a share's ``for``."""


def abort_reason(
    conditions: list[AbortCondition], live: list[Record], now: float, t0: float
) -> dict[str, Any] | None:
    """The first of ``conditions`` that holds at ``now`` on the records so far (the drill's
    phases began at ``t0``), as the journal's ``abort``; ``None`` while none holds."""
    for condition in conditions:
        if condition.check == "answer_rate":
            reason = _stalled(condition, live, now, t0)
        else:
            reason = _share_held(condition, live, now, t0)
        if reason is not None:
            return reason
    return None


def _share_held(
    condition: AbortCondition, live: list[Record], now: float, t0: float
) -> dict[str, Any] | None:
    """``error_rate``/``fallback_rate``: the share above ``above`` at every second of the last
    ``for`` (a second with no request ended in the ``SHARE_WINDOW`` before it is not judged:
    a dead stack whose requests end only at a client timeout still aborts). Judged once the
    phases have run ``for``, so the warm-up is not the drill's last ``for``; and only with at
    least ``min_requests`` requests ended in all those seconds' windows together."""
    assert condition.above is not None  # validated
    if now - t0 < condition.for_:
        return None
    since = now - condition.for_
    ended = [
        (r.start + r.e2e, r)
        for r in live
        if r.e2e is not None and since - SHARE_WINDOW < r.start + r.e2e <= now
    ]
    if len(ended) < condition.min_requests:
        return None
    bad = is_error if condition.check == "error_rate" else _fallback
    lowest: float | None = None
    for k in range(math.floor(condition.for_) + 1):
        second = now - k
        window = [r for end, r in ended if second - SHARE_WINDOW < end <= second]
        if not window:
            continue
        share = sum(bad(r) for r in window) / len(window)
        if share <= condition.above:
            return None
        lowest = share if lowest is None else min(lowest, share)
    if lowest is None:
        return None
    return {
        "cause": "abort_condition",
        "check": condition.check,
        "observed": round(lowest, 3),
        "above": condition.above,
        "for": condition.for_,
        "reason": f"above {condition.above:g} at every second of the last "
        f"{condition.for_:g}s ({len(ended)} requests ended; the lowest share "
        f"{lowest:.3f} of those that ended in the {SHARE_WINDOW:g}s before a second)",
    }


def _fallback(record: Record) -> bool:
    return record.fallback


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
