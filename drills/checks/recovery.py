"""``recovered_within``: from the fault to the first window in which the SLO holds again."""

from __future__ import annotations

from drills.checks.base import (
    Evaluation,
    applied_at,
    applied_faults,
    expected_text,
    is_error,
    result,
    within_bounds,
)
from drills.common.stats import percentile
from drills.common.units import format_duration
from drills.model.expect import Check
from drills.model.journal import CheckResult

__all__ = ["check_recovered_within"]


def check_recovered_within(check: Check, ev: Evaluation) -> CheckResult:
    faults = applied_faults(ev)
    ended = [f.reverted_at for f in faults]
    if not faults or any(e is None for e in ended):
        return result(check, "recovered_within", None, 0, "a fault was never reverted")
    if check.since == "fault_start":
        fault_end = min(applied_at(f) for f in faults)
    else:
        fault_end = max(e for e in ended if e is not None)
    slo = ev.scenario.slo
    bound = slo.e2e_p90
    if bound is None:
        base_name = "baseline" if "baseline" in ev.phases else ev.scenario.phases[0].name
        base = [
            r.e2e
            for r in ev.requests_in(*ev.phases[base_name])
            if not is_error(r) and r.e2e is not None
        ]
        if not base:
            return result(
                check,
                "recovered_within",
                None,
                0,
                f"no successful request in phase {base_name!r} to derive the SLO from",
            )
        bound = 2 * percentile(base, 90)
    run_end = ev.run_window[1]
    t = fault_end
    while t + slo.window <= run_end + 1e-9:
        window = ev.requests_in(t, t + slo.window)
        if len(window) >= 2:
            bad = sum(is_error(r) or bool(r.fallback) for r in window) / len(window)
            p90 = percentile([r.e2e or 0.0 for r in window], 90)
            if bad <= slo.error_rate and p90 <= bound:
                return result(
                    check,
                    "recovered_within",
                    t - fault_end,
                    len(window),
                    ""
                    if within_bounds(check, t - fault_end)
                    else f"the SLO (bad share <= {slo.error_rate}, e2e p90 <= "
                    f"{format_duration(bound)}) held again {t - fault_end:.1f}s after the fault "
                    f"ended; expected {expected_text(check, '')}",
                )
        t += 0.5
    return result(
        check,
        "recovered_within",
        None,
        0,
        f"the SLO (bad share <= {slo.error_rate}, e2e p90 <= {format_duration(bound)}) "
        f"did not hold for any {slo.window:g}s window in the "
        f"{max(run_end - fault_end, 0):.0f}s after the fault ended",
    )
