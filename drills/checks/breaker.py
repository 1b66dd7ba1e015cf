"""Circuit breakers: ``breaker_opened_within`` (from the fault to the opening) and
``breaker_opens`` (how often in a window).

Both read the gateway's own account of its breakers (ejections, cooldowns), where its adapter
says it is (``drills.model.gateways``): an ``opened_at`` timestamp, a ``state`` gauge or a
``counter``. That is the gateway's claim about itself, and each result says so."""

from __future__ import annotations

from drills.checks.base import (
    Evaluation,
    applied_at,
    applied_faults,
    counter_increase,
    result,
)
from drills.model.gateways import BreakerSignal
from drills.model.journal import CheckResult
from drills.model.scenario import Check

__all__ = ["check_breaker_opened_within", "check_breaker_opens"]


def _points(
    ev: Evaluation, signal: BreakerSignal, hop: str, start: float, end: float
) -> list[tuple[float, float]]:
    """``(scrape time, value)`` of ``signal`` for ``hop`` in the gateway's scrapes."""
    points = []
    for probe in ev.probes:
        if probe.source != "gateway" or probe.error or not (start <= probe.time <= end):
            continue
        values = [
            s.value
            for s in probe.samples
            if s.name == signal.metric and signal.hop_of(s.labels) == hop
        ]
        if values:
            points.append((probe.time, max(values)))
    return points


def _claim(ev: Evaluation, signal: BreakerSignal) -> str:
    return f"the gateway's claim: {signal.metric} ({ev.adapter.name} adapter)"


def _opened_at(ev: Evaluation, signal: BreakerSignal, hop: str, applied: float) -> list[float]:
    """When the breaker of ``hop`` opened after ``applied``, as the signal tells it."""
    points = _points(ev, signal, hop, applied, ev.run_window[1] + 30)
    if signal.kind == "opened_at":
        return [v for _, v in points if v >= applied]
    if signal.kind == "state":
        return [t for t, v in points if v in signal.open_values]
    before = _points(ev, signal, hop, float("-inf"), applied)
    base = before[-1][1] if before else 0.0
    return [t for t, v in points if v > base]


def check_breaker_opened_within(check: Check, ev: Evaluation) -> CheckResult:
    name = "breaker_opened_within"
    faults = applied_faults(ev, check.target) or [
        f for f in applied_faults(ev) if not f.kind.startswith("toxiproxy.")
    ]
    if not faults:
        return result(check, name, None, 0, f"no fault on {check.target} was applied")
    signal = ev.adapter.breaker_opened
    if signal is None:
        return result(
            check, name, None, 0, f"the {ev.adapter.name} adapter names no breaker signal"
        )
    applied = min(applied_at(f) for f in faults)
    opened = _opened_at(ev, signal, check.target or "", applied)
    if not opened:
        return result(
            check,
            name,
            None,
            0,
            f"the breaker of {check.target} never opened after the fault began "
            f"({_claim(ev, signal)})",
        )
    outcome = result(check, name, min(opened) - applied, len(opened))
    outcome.reason += f" ({_claim(ev, signal)})"
    return outcome


def check_breaker_opens(check: Check, ev: Evaluation) -> CheckResult:
    """How many times the breaker of ``target`` opened in the window."""
    name = "breaker_opens"
    start, end = ev.window(check.during)
    signal = ev.adapter.breaker_opens or ev.adapter.breaker_opened
    if signal is None:
        return result(
            check, name, None, 0, f"the {ev.adapter.name} adapter names no breaker signal"
        )
    hop = check.target or ""
    if signal.kind == "counter":
        value = counter_increase(
            ev,
            "gateway",
            signal.metric,
            lambda labels: signal.hop_of(labels) == hop,
            start,
            end,
        )
    else:  # a state gauge, or opening timestamps: count the changes into "open"
        points = _points(ev, signal, hop, start, end)
        value = float(_openings(points, signal, start, end)) if points else None
    if value is None:
        return result(check, name, None, 0, "no scrape of the gateway in the window")
    outcome = result(check, name, value, 1)
    outcome.reason += f" ({_claim(ev, signal)})"
    return outcome


def _openings(
    points: list[tuple[float, float]], signal: BreakerSignal, start: float, end: float
) -> int:
    """Openings inside ``[start, end]``: distinct opening times, or changes into an open
    state from one scrape to the next."""
    if signal.kind == "opened_at":
        return len({v for _, v in points if start <= v <= end})
    opened = [v in signal.open_values for _, v in points]
    return sum(1 for a, b in zip([False, *opened], opened, strict=False) if b and not a)
