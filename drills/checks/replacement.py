"""Kill faults: ``replacement_ready_within`` and ``requests_lost`` while the target was
down."""

from __future__ import annotations

from drills.checks.base import (
    Evaluation,
    applied_at,
    is_error,
    kill_faults,
    result,
)
from drills.model.expect import Check
from drills.model.journal import CheckResult

__all__ = ["check_replacement_ready_within", "check_requests_lost"]


def check_replacement_ready_within(check: Check, ev: Evaluation) -> CheckResult:
    kills = kill_faults(ev, check.target)
    if not kills:
        return result(
            check, "replacement_ready_within", None, 0, f"no kill of {check.target} was applied"
        )
    worst = 0.0
    for kill in kills:
        after = kill.after or {}
        if not after.get("ready_at"):
            return result(
                check,
                "replacement_ready_within",
                None,
                0,
                f"no replacement of {check.target} was ready before the drill ended"
                + (f" ({after['error']})" if after.get("error") else ""),
            )
        worst = max(worst, after["ready_at"] - applied_at(kill))
    return result(check, "replacement_ready_within", worst, len(kills))


def check_requests_lost(check: Check, ev: Evaluation) -> CheckResult:
    """Requests that failed outright (an error, not a fallback) from each kill until its
    replacement was ready (or the drill's end)."""
    kills = kill_faults(ev, check.target)
    if not kills:
        return result(check, "requests_lost", None, 0, "no kill fault was applied")
    lost, seen = 0, 0
    for kill in kills:
        ready = (kill.after or {}).get("ready_at") or ev.run_window[1]
        window = [r for r in ev.records if applied_at(kill) <= r.start < ready]
        seen += len(window)
        lost += sum(is_error(r) for r in window)
    if not seen:
        return result(check, "requests_lost", None, 0, "no request was sent while it was down")
    return result(check, "requests_lost", float(lost), seen)
