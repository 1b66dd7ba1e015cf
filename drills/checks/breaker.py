"""Circuit breakers: ``breaker_opened_within`` (from the fault to the opening) and
``breaker_opens`` (how often in a window)."""

from __future__ import annotations

from drills.checks.base import (
    Evaluation,
    applied_at,
    applied_faults,
    counter_increase,
    result,
    series,
)
from drills.model.journal import CheckResult
from drills.model.scenario import Check

__all__ = ["check_breaker_opened_within", "check_breaker_opens"]


def check_breaker_opened_within(check: Check, ev: Evaluation) -> CheckResult:
    faults = applied_faults(ev, check.target) or [
        f for f in applied_faults(ev) if not f.kind.startswith("toxiproxy.")
    ]
    if not faults:
        return result(
            check, "breaker_opened_within", None, 0, f"no fault on {check.target} was applied"
        )
    applied = min(applied_at(f) for f in faults)
    # The gateway stamps the wall-clock time of every opening; the probes carry it.
    opened = [
        v
        for t, v in series(
            ev,
            "gateway",
            "drills_gateway_breaker_opened_timestamp_seconds",
            {"upstream": check.target or ""},
            applied,
            ev.run_window[1] + 30,
        )
        if v >= applied
    ]
    if not opened:
        return result(
            check,
            "breaker_opened_within",
            None,
            0,
            f"the breaker of {check.target} never opened after the fault began",
        )
    return result(check, "breaker_opened_within", min(opened) - applied, len(opened))


def check_breaker_opens(check: Check, ev: Evaluation) -> CheckResult:
    """How many times the breaker of ``target`` opened in the window."""
    start, end = ev.window(check.during)
    value = counter_increase(
        ev,
        "gateway",
        "drills_gateway_breaker_transitions_total",
        lambda labels: labels.get("upstream") == check.target and labels.get("to") == "open",
        start,
        end,
    )
    if value is None:
        return result(check, "breaker_opens", None, 0, "no scrape of the gateway in the window")
    return result(check, "breaker_opens", value, 1)
