"""Circuit breakers: ``breaker_opened_within`` (from the fault to the opening) and
``breaker_opens`` (how often in a window).

Judged from outside when the stack runs the harness's L7 hop: the gateway stopped sending to
the hop (``drills.checks.observed``). The gateway's own account of its breakers (ejections,
cooldowns), where its adapter says it is (``drills.model.gateways``: an ``opened_at``
timestamp, a ``state`` gauge or a ``counter``), is shown beside it as its claim, and the result
says when the two disagree. Without an L7 hop the claim is all there is, and the result is
marked ``claimed``."""

from __future__ import annotations

from drills.checks import observed
from drills.checks.base import (
    Evaluation,
    applied_at,
    applied_faults,
    counter_increase,
    result,
)
from drills.model.expect import Check
from drills.model.faults import family_of
from drills.model.gateways import BreakerSignal
from drills.model.journal import CheckResult

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
        f for f in applied_faults(ev) if not _on_a_hop(f.kind)
    ]
    if not faults:
        return result(check, name, None, 0, f"no fault on {check.target} was applied")
    applied = min(applied_at(f) for f in faults)
    hop = check.target or ""
    claimed, claim = claimed_opening(ev, hop, applied)
    refused = observed.refused_at_hop(ev, hop, applied, ev.run_window[1])
    if not observed.behind_hop(ev, hop) or refused:
        outcome = result(check, name, claimed, 1 if claimed is not None else 0, claim)
        return _as_claimed(outcome, claim, claimed, ev, hop, refused)
    seen, needed = observed.openings(ev, hop, applied, ev.run_window[1])
    if not seen:
        outcome = result(
            check,
            name,
            None,
            0,
            f"the gateway never stopped sending to {hop} after the fault began (seen at the "
            f"L7 hop: no failed attempt there was followed by {needed} client requests in a "
            "row that all missed it)",
        )
    else:
        outcome = result(check, name, seen[0] - applied, len(seen))
        outcome.reason += f" (seen at the L7 hop: the gateway stopped sending to {hop})"
    return _beside(outcome, claim, None if not seen else seen[0] - applied, claimed)


def _exported(ev: Evaluation, signal: BreakerSignal) -> str | None:
    """Why the gateway makes no claim at all (no metric of that name in any scrape), or None."""
    if ev.adapter.metrics_path is None:
        return (
            f"the gateway makes no claim: its adapter ({ev.adapter.name}) says it publishes "
            "no metrics"
        )
    scrapes = [p for p in ev.probes if p.source == "gateway" and not p.error]
    if any(s.name == signal.metric for p in scrapes for s in p.samples):
        return None
    return (
        f"the gateway makes no claim: none of its {len(scrapes)} scrapes had {signal.metric} "
        f"({ev.adapter.name} adapter)"
    )


def claimed_opening(ev: Evaluation, hop: str, applied: float) -> tuple[float | None, str]:
    """The gateway's claim: seconds from the fault to its breaker's opening, and in words."""
    signal = ev.adapter.breaker_opened
    if signal is None:
        return None, f"the {ev.adapter.name} adapter names no breaker signal"
    silent = _exported(ev, signal)
    if silent is not None and (ev.adapter.metrics_path is None or observed.behind_hop(ev, hop)):
        return None, silent
    opened = _opened_at(ev, signal, hop, applied)
    if not opened:
        return (
            None,
            f"the breaker of {hop} never opened after the fault began ({_claim(ev, signal)})",
        )
    return min(
        opened
    ) - applied, f"opened after {min(opened) - applied:.1f}s ({_claim(ev, signal)})"


def _as_claimed(
    outcome: CheckResult,
    claim: str,
    value: float | None,
    ev: Evaluation,
    hop: str,
    refused: str | None = None,
) -> CheckResult:
    """The gateway's claim as the result, and why nothing was seen from outside: no hop, a
    hop that does not front ``hop``, or one that refused its calls (``refused``)."""
    outcome.source = "claimed"
    if refused:
        outcome.reason += f" ({refused}; {claim})"
    elif value is not None:
        why = (
            "no L7 hop to see it from outside"
            if ev.hop_records is None
            else f"the L7 hop does not front {hop}: no call to it passed there"
        )
        outcome.reason += f" ({why}; {claim})"
    return outcome


def _beside(
    outcome: CheckResult, claim: str, seen: float | None, claimed: float | None
) -> CheckResult:
    """The gateway's claim beside an observed result, and whether the two disagree: one saw an
    opening the other did not, or they are more than a second (and a quarter) apart. A gateway
    that makes no claim (no signal, no such metric) cannot disagree."""
    outcome.claim = claim
    if "makes no claim" in claim or "names no breaker signal" in claim:
        return outcome
    if (seen is None) != (claimed is None):
        outcome.disagrees = True
    elif seen is not None and claimed is not None:
        outcome.disagrees = abs(seen - claimed) > max(1.0, 0.25 * max(seen, claimed))
    if outcome.disagrees:
        outcome.reason += f"; the gateway's claim disagrees: {claim}"
    return outcome


def check_breaker_opens(check: Check, ev: Evaluation) -> CheckResult:
    """How many times the breaker of ``target`` opened in the window."""
    name = "breaker_opens"
    start, end = ev.window(check.during)
    hop = check.target or ""
    claimed, claim = _claimed_opens(ev, hop, start, end)
    refused = observed.refused_at_hop(ev, hop, start, end)
    if not observed.behind_hop(ev, hop) or refused:
        if claimed is None:
            return _as_claimed(result(check, name, None, 0, claim), claim, None, ev, hop, refused)
        return _as_claimed(result(check, name, claimed, 1), claim, claimed, ev, hop, refused)
    seen = float(len(observed.openings(ev, hop, start, end)[0]))
    outcome = result(check, name, seen, len(ev.records))
    outcome.reason += f" (seen at the L7 hop: the gateway stopped sending to {hop} {seen:g} times)"
    outcome.claim = claim
    if claimed is not None and claimed != seen:
        outcome.disagrees = True
        outcome.reason += f"; the gateway's claim disagrees: {claim}"
    return outcome


def _claimed_opens(ev: Evaluation, hop: str, start: float, end: float) -> tuple[float | None, str]:
    signal = ev.adapter.breaker_opens or ev.adapter.breaker_opened
    if signal is None:
        return None, f"the {ev.adapter.name} adapter names no breaker signal"
    silent = _exported(ev, signal)
    if silent is not None and (ev.adapter.metrics_path is None or observed.behind_hop(ev, hop)):
        return None, silent
    if signal.kind == "counter":
        value = counter_increase(
            ev, "gateway", signal.metric, lambda labels: signal.hop_of(labels) == hop, start, end
        )
    else:  # a state gauge, or opening timestamps: count the changes into "open"
        points = _points(ev, signal, hop, start, end)
        value = float(_openings(points, signal, start, end)) if points else None
    if value is None:
        return None, "no scrape of the gateway in the window"
    return value, f"opened {value:g} times ({_claim(ev, signal)})"


def _openings(
    points: list[tuple[float, float]], signal: BreakerSignal, start: float, end: float
) -> int:
    """Openings inside ``[start, end]``: distinct opening times, or changes into an open
    state from one scrape to the next."""
    if signal.kind == "opened_at":
        return len({v for _, v in points if start <= v <= end})
    opened = [v in signal.open_values for _, v in points]
    return sum(1 for a, b in zip([False, *opened], opened, strict=False) if b and not a)


def _on_a_hop(kind: str) -> bool:
    """Whether a fault of ``kind`` acts on a hop (Toxiproxy's or the L7 hop's), whose target
    is the breaker's upstream itself: other faults (a killed container, a deleted pod) name
    their target apart from it."""
    family = family_of(kind)
    return family is not None and (family.on_toxiproxy or family.on_hop)
