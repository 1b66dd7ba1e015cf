"""What every check family shares: the ``Evaluation`` a check looks at (records, phases,
faults, probes, with absolute epoch times), windows, counters read from probes, and ``result``,
which judges an observation against a check's bounds.

A check with no data in its window fails, and says so: a drill that observed nothing proves
nothing. Every result carries the observed value next to what was expected.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from drills.common.hop import HopRecord
from drills.common.stats import CONFIDENCE, percentile
from drills.model.check_families import families
from drills.model.expect import Check, bound_value
from drills.model.faults import kills
from drills.model.gateways import BUILTIN as BUILTIN_ADAPTERS
from drills.model.gateways import GatewayAdapter
from drills.model.journal import CheckResult, FaultRecord, Page, Probe
from drills.model.records import Record
from drills.model.scenario import PrometheusEndpoint, Scenario
from drills.model.windows import charge

__all__ = [
    "CheckResult",
    "Evaluation",
    "applied_at",
    "applied_faults",
    "conclusive",
    "counter_increase",
    "counter_span",
    "expected_text",
    "formatted",
    "increase_of",
    "is_error",
    "kill_faults",
    "percentile",
    "result",
    "series",
    "within_bounds",
]


def is_error(record: Record) -> bool:
    return record.is_error


@dataclass
class Evaluation:
    """Everything checks look at, with absolute (epoch) times."""

    scenario: Scenario
    records: list[Record]
    phases: dict[str, tuple[float, float]]
    run_window: tuple[float, float]
    faults: list[FaultRecord]
    probes: list[Probe] = field(default_factory=list)
    lint: list[dict[str, Any]] | None = None
    """Findings of ``drills.lint`` on the stack's config; ``None`` when no config is known."""
    gpu: dict[str, Any] | None = None
    """NVML's status when GPU telemetry was asked for."""
    retrieval: dict[str, Any] | None = None
    """The recall probe's status when the drill asked for it."""
    agent_id: str = "gateway-agent"
    """Who the gateway's agent calls tools as (``gateway.agent.agent_id``)."""
    tools_hop: str = "tools"
    """The tool server's hop name (``rag.tools.name``)."""
    adapter: GatewayAdapter = field(default_factory=lambda: BUILTIN_ADAPTERS["drills"])
    """How the gateway reports on itself (its breaker metrics: the gateway's claim)."""
    hop_records: list[HopRecord] | None = None
    """What reached the harness's L7 hop (each attempt at a model hop); ``None``: the stack
    runs no L7 hop, so the checks that need one fall back to the gateway's claim."""
    tool_audit: list[dict[str, Any]] | None = None
    """The tool server's own audit log since the run began (one entry per tool call: tool,
    parameters, outcome, result, trace id); ``None``: none could be read (only the embedded
    stack's is known to the harness)."""
    l7_hops: list[str] | None = None
    """The hops the harness's L7 hop fronts, as it listed them (``None``: not asked)."""
    prometheus: PrometheusEndpoint | None = None
    """The team's Prometheus, which ``promql`` checks query (``stack.attach.prometheus``)."""
    pages: list[Page] | None = None
    """What the harness's pager received during the run (``None``: no pager ran)."""
    confidence: float = CONFIDENCE
    """The confidence of the intervals the checks report (``--confidence``)."""

    def __post_init__(self) -> None:
        charge(self.records, self.phases, self.faults)

    def window(self, during: str | None) -> tuple[float, float]:
        return self.phases[during] if during else self.run_window

    def requests_in(self, start: float, end: float) -> list[Record]:
        """Requests that count inside ``[start, end)``: by the time they were sent, or met a
        fault they were not sent under (``drills.model.windows``). Every request counts in
        exactly one phase: none is invisible, and one sent in the baseline that the fault
        caught counts under the fault, not in the baseline."""
        return [r for r in self.records if start <= _counted_at(r) < end]


def _counted_at(record: Record) -> float:
    return record.counted_at if record.counted_at is not None else record.start


def expected_text(check: Check, unit: str) -> str:
    parts = []
    for word, value in (("<", check.below), (">", check.above)):
        if value is not None:
            parts.append(f"{word} {value}{unit if not isinstance(value, str) else ''}")
    return " and ".join(parts)


def within_bounds(check: Check, observed: float) -> bool:
    below, above = bound_value(check.below), bound_value(check.above)
    return (below is None or observed < below) and (above is None or observed > above)


def conclusive(check: Check, low: float | None, high: float | None) -> bool:
    """Whether the interval ``[low, high]`` lies wholly inside the check's bounds (a pass no
    rerun would turn) or wholly outside them (such a fail). A side that is ``None`` is
    unbounded."""
    lo = -math.inf if low is None else low
    hi = math.inf if high is None else high
    if within_bounds(check, lo) and within_bounds(check, hi):
        return True
    below, above = bound_value(check.below), bound_value(check.above)
    return (below is not None and lo >= below) or (above is not None and hi <= above)


def formatted(value: float, family: str) -> str:
    """``value`` as a person reads it, by what the family's bounds compare with."""
    found = next((f for f in families() if f.family == family), None)
    if found is not None and found.unit is not None:
        return f"{value:.2f} {found.unit}"
    bounds = found.bounds if found else "number"
    if bounds == "duration":
        return f"{value * 1000:.0f}ms" if value < 10 else f"{value:.2f}s"
    if bounds == "share":
        return f"{value:.3f}"
    return f"{value:g}"


def result(
    check: Check,
    family: str,
    observed: float | None,
    samples: int,
    reason: str = "",
    unit: str = "",
) -> CheckResult:
    """The result of ``check`` given what was ``observed`` (``None``: no data, a failure),
    judged against its bounds, with a reason a person can act on; ``family`` picks how the
    value is shown. For check families of plugins as well as the built-in ones."""
    if observed is None:
        passed, text, reason = False, "no data", reason or "no data in the window"
    else:
        passed, text = within_bounds(check, observed), formatted(observed, family)
        if not reason:
            reason = (
                "within bounds"
                if passed
                else f"observed {text}, expected {expected_text(check, unit)}"
            )
    return CheckResult(
        label=check.label,
        check=check.check,
        during=check.during,
        expected=expected_text(check, unit),
        observed=observed,
        observed_text=text,
        passed=passed,
        reason=reason,
        samples=samples,
        runbook=check.runbook,
    )


def series(
    ev: Evaluation, source: str, metric: str, labels: dict[str, str], start: float, end: float
) -> list[tuple[float, float]]:
    points = []
    for probe in ev.probes:
        if probe.source != source or not (start <= probe.time <= end):
            continue
        total, found = 0.0, False
        for sample in probe.samples:
            if sample.name == metric and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
                found = True
        if found:
            points.append((probe.time, total))
    return points


def increase_of(points: list[tuple[float, float]]) -> float:
    """How much a counter grew over ``points`` (time order), as Prometheus' ``increase`` reads
    one: a drop is a restart from zero (a killed process's replacement), not a negative count."""
    total = 0.0
    for (_, before), (_, after) in pairwise(points):
        total += after - before if after >= before else after
    return total


def applied_faults(ev: Evaluation, target: str | None = None) -> list[FaultRecord]:
    return [f for f in ev.faults if (target is None or f.target == target) and f.applied_at]


def applied_at(fault: FaultRecord) -> float:
    """When an applied fault was applied (``_fault_times`` keeps only those)."""
    assert fault.applied_at is not None
    return fault.applied_at


def kill_faults(ev: Evaluation, target: str | None) -> list[FaultRecord]:
    return [f for f in applied_faults(ev, target) if kills(f.kind)]


def counter_increase(
    ev: Evaluation,
    source: str,
    metric: str,
    match: Callable[[dict[str, str]], bool],
    start: float,
    end: float,
) -> float | None:
    """How much a counter (summed over the series ``match`` selects) grew over
    ``[start, end]``, from the scrapes of ``source``; ``None`` when no scrape of it succeeded
    inside the window. A series not yet exported counts as 0 (counters appear on first use)."""
    span = counter_span(ev, source, metric, match, start, end)
    return None if span is None else span[0]


def counter_span(
    ev: Evaluation,
    source: str,
    metric: str,
    match: Callable[[dict[str, str]], bool],
    start: float,
    end: float,
) -> tuple[float, float, float] | None:
    """``counter_increase`` with the times it really spans: from the last scrape before
    ``start`` (``start`` itself if none) to the last scrape inside the window. What the counter
    counted between those two scrapes is what it reports, whatever fell in the window."""
    points: list[tuple[float, float]] = []
    for probe in ev.probes:
        if probe.source != source or probe.error:
            continue
        total = sum(
            sample.value
            for sample in probe.samples
            if sample.name == metric and match(sample.labels)
        )
        points.append((probe.time, total))
    inside = [(t, v) for t, v in points if start <= t <= end]
    if not inside:
        return None
    before = [(t, v) for t, v in points if t < start]
    first = before[-1] if before else (start, 0.0)
    return increase_of([first, *inside]), first[0], inside[-1][0]
