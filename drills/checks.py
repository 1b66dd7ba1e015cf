"""Checks: each scenario expectation evaluated over its window of the drill.

A check with no data in its window fails, and says so: a drill that observed nothing proves
nothing. Every result carries the observed value next to what was expected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from drills.check_registry import families
from drills.common.errors import InputError
from drills.common.stats import percentile
from drills.common.units import format_duration
from drills.model.journal import CheckResult, FaultRecord, Probe
from drills.model.records import Record
from drills.scenario import Check, Scenario, bound_value

__all__ = ["CheckResult", "Evaluation", "evaluate", "is_error", "percentile", "result"]


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

    def window(self, during: str | None) -> tuple[float, float]:
        return self.phases[during] if during else self.run_window

    def requests_in(self, start: float, end: float) -> list[Record]:
        """Requests that ran entirely inside ``[start, end)``. One that straddles a boundary
        (sent in the baseline, answered under the fault) belongs to neither side: counting it
        by its start would charge the fault's latency to the baseline."""
        return [r for r in self.records if start <= r.start and r.start + (r.e2e or 0.0) <= end]


def _expected(check: Check, unit: str) -> str:
    parts = []
    for word, value in (("<", check.below), (">", check.above)):
        if value is not None:
            parts.append(f"{word} {value}{unit if not isinstance(value, str) else ''}")
    return " and ".join(parts)


def _verdict(check: Check, observed: float) -> bool:
    below, above = bound_value(check.below), bound_value(check.above)
    return (below is None or observed < below) and (above is None or observed > above)


def _fmt(value: float, family: str) -> str:
    """``value`` as a person reads it, by what the family's bounds compare with."""
    if family == "retry_amplification":
        return f"{value:.2f} attempts/request"
    if family == "throughput":
        return f"{value:.2f} req/s"
    found = next((f for f in families() if f.family == family), None)
    bounds = found.bounds if found else "number"
    if bounds == "duration":
        return f"{value * 1000:.0f}ms" if value < 10 else f"{value:.2f}s"
    if bounds == "share":
        return f"{value:.3f}"
    return f"{value:g}"


def _result(
    check: Check,
    family: str,
    observed: float | None,
    samples: int,
    reason: str = "",
    unit: str = "",
) -> CheckResult:
    runbook = check.runbook
    if observed is None:
        return CheckResult(
            label=check.label,
            check=check.check,
            during=check.during,
            expected=_expected(check, unit),
            observed=None,
            observed_text="no data",
            passed=False,
            reason=reason or "no data in the window",
            samples=samples,
            runbook=runbook,
        )
    passed = _verdict(check, observed)
    text = _fmt(observed, family)
    if not reason:
        reason = (
            "within bounds" if passed else f"observed {text}, expected {_expected(check, unit)}"
        )
    return CheckResult(
        label=check.label,
        check=check.check,
        during=check.during,
        expected=_expected(check, unit),
        observed=observed,
        observed_text=text,
        passed=passed,
        reason=reason,
        samples=samples,
        runbook=runbook,
    )


def result(
    check: Check, family: str, observed: float | None, samples: int, reason: str = ""
) -> CheckResult:
    """The result of ``check`` given what was ``observed`` (``None``: no data, a failure),
    judged against its bounds, with a reason a person can act on. For check families of
    plugins as well as the built-in ones."""
    return _result(check, family, observed, samples, reason)


def check_latency(check: Check, ev: Evaluation) -> CheckResult:
    metric, q = check.check.split(".p")
    start, end = ev.window(check.during)
    records = ev.requests_in(start, end)
    values: list[float] = []
    if metric == "ttft":
        values = [r.ttft for r in records if r.ttft is not None]
    elif metric == "e2e":
        values = [r.e2e for r in records if r.e2e is not None]
    else:
        for r in records:
            values.extend(r.itl or ())
    if not values:
        return _result(
            check,
            "latency",
            None,
            0,
            f"no {metric} samples among {len(records)} requests in the window",
        )
    pct = float(q) / (10 if len(q) == 3 else 1)
    return _result(check, "latency", percentile(values, pct), len(values))


def check_rate(check: Check, ev: Evaluation) -> CheckResult:
    start, end = ev.window(check.during)
    records = ev.requests_in(start, end)
    if not records:
        return _result(check, "rate", None, 0, "no requests started in the window")
    if check.check == "error_rate":
        hits = sum(is_error(r) for r in records)
    elif check.check == "fallback_rate":
        hits = sum(bool(r.fallback) for r in records)
    else:
        hits = sum(not is_error(r) and not r.fallback for r in records)
    return _result(check, "rate", hits / len(records), len(records))


def check_throughput(check: Check, ev: Evaluation) -> CheckResult:
    start, end = ev.window(check.during)
    records = [r for r in ev.requests_in(start, end) if not is_error(r)]
    if not records:
        return _result(check, "throughput", None, 0, "no successful request in the window")
    return _result(check, "throughput", len(records) / max(end - start, 1e-9), len(records))


def _series(
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


def check_prometheus(check: Check, ev: Evaluation) -> CheckResult:
    start, end = ev.window(check.during)
    assert check.source and check.metric
    points = _series(ev, check.source, check.metric, check.labels, start, end)
    if not points and check.source == "gpu":
        status = ev.gpu or {"available": False, "reason": "the drill did not ask for it"}
        if not status.get("available"):
            return _result(
                check,
                "prometheus",
                None,
                0,
                f"unavailable: GPU telemetry could not be read ({status.get('reason')}); "
                "this check is not passed",
            )
    if not points:
        return _result(
            check,
            "prometheus",
            None,
            0,
            f"no scrape of {check.source} had {check.metric} {check.labels or ''}",
        )
    values = [v for _, v in points]
    observed = {
        "increase": values[-1] - values[0],
        "max": max(values),
        "min": min(values),
        "last": values[-1],
    }[check.agg]
    return _result(check, "prometheus", observed, len(points))


def _fault_times(ev: Evaluation, target: str | None = None) -> list[FaultRecord]:
    return [f for f in ev.faults if (target is None or f.target == target) and f.applied_at]


def _at(fault: FaultRecord) -> float:
    """When an applied fault was applied (``_fault_times`` keeps only those)."""
    assert fault.applied_at is not None
    return fault.applied_at


def check_breaker_opened_within(check: Check, ev: Evaluation) -> CheckResult:
    faults = _fault_times(ev, check.target) or [
        f for f in _fault_times(ev) if not f.kind.startswith("toxiproxy.")
    ]
    if not faults:
        return _result(
            check, "breaker_opened_within", None, 0, f"no fault on {check.target} was applied"
        )
    applied = min(_at(f) for f in faults)
    # The gateway stamps the wall-clock time of every opening; the probes carry it.
    opened = [
        v
        for t, v in _series(
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
        return _result(
            check,
            "breaker_opened_within",
            None,
            0,
            f"the breaker of {check.target} never opened after the fault began",
        )
    return _result(check, "breaker_opened_within", min(opened) - applied, len(opened))


def check_recovered_within(check: Check, ev: Evaluation) -> CheckResult:
    faults = _fault_times(ev)
    ended = [f.reverted_at for f in faults]
    if not faults or any(e is None for e in ended):
        return _result(check, "recovered_within", None, 0, "a fault was never reverted")
    if check.since == "fault_start":
        fault_end = min(_at(f) for f in faults)
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
            return _result(
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
                return _result(
                    check,
                    "recovered_within",
                    t - fault_end,
                    len(window),
                    ""
                    if _verdict(check, t - fault_end)
                    else f"the SLO (bad share <= {slo.error_rate}, e2e p90 <= "
                    f"{format_duration(bound)}) held again {t - fault_end:.1f}s after the fault "
                    f"ended; expected {_expected(check, '')}",
                )
        t += 0.5
    return _result(
        check,
        "recovered_within",
        None,
        0,
        f"the SLO (bad share <= {slo.error_rate}, e2e p90 <= {format_duration(bound)}) "
        f"did not hold for any {slo.window:g}s window in the "
        f"{max(run_end - fault_end, 0):.0f}s after the fault ended",
    )


def _kills(ev: Evaluation, target: str | None) -> list[FaultRecord]:
    from drills.scenario import KILL_KINDS

    return [f for f in _fault_times(ev, target) if f.kind in KILL_KINDS]


def check_replacement_ready_within(check: Check, ev: Evaluation) -> CheckResult:
    kills = _kills(ev, check.target)
    if not kills:
        return _result(
            check, "replacement_ready_within", None, 0, f"no kill of {check.target} was applied"
        )
    worst = 0.0
    for kill in kills:
        after = kill.after or {}
        if not after.get("ready_at"):
            return _result(
                check,
                "replacement_ready_within",
                None,
                0,
                f"no replacement of {check.target} was ready before the drill ended"
                + (f" ({after['error']})" if after.get("error") else ""),
            )
        worst = max(worst, after["ready_at"] - _at(kill))
    return _result(check, "replacement_ready_within", worst, len(kills))


def check_requests_lost(check: Check, ev: Evaluation) -> CheckResult:
    """Requests that failed outright (an error, not a fallback) from each kill until its
    replacement was ready (or the drill's end)."""
    kills = _kills(ev, check.target)
    if not kills:
        return _result(check, "requests_lost", None, 0, "no kill fault was applied")
    lost, seen = 0, 0
    for kill in kills:
        ready = (kill.after or {}).get("ready_at") or ev.run_window[1]
        window = [r for r in ev.records if _at(kill) <= r.start < ready]
        seen += len(window)
        lost += sum(is_error(r) for r in window)
    if not seen:
        return _result(check, "requests_lost", None, 0, "no request was sent while it was down")
    return _result(check, "requests_lost", float(lost), seen)


def check_stack_lint(check: Check, ev: Evaluation) -> CheckResult:
    if ev.lint is None:
        return _result(
            check,
            "stack_lint",
            None,
            0,
            "no stack config known to lint (attach with 'config:' or run on a profile)",
        )
    errors = [f for f in ev.lint if f["severity"] == "error"]
    tolerated = int(bound_value(check.below) or 1)
    observed = float(len(errors))
    passed = len(errors) < tolerated
    reason = (
        f"{len(errors)} error finding(s) (< {tolerated} tolerated)"
        if passed
        else "; ".join(f"{f['field']}: [{f['rule']}] {f['message']}" for f in errors)
    )
    return CheckResult(
        label=check.label,
        check=check.check,
        during=None,
        expected=f"< {tolerated} error finding(s)",
        observed=observed,
        observed_text=f"{len(errors)} error(s), {len(ev.lint) - len(errors)} warning(s)",
        passed=passed,
        reason=reason,
        samples=len(ev.lint),
        runbook=check.runbook,
    )


def check_missing_context_share(check: Check, ev: Evaluation) -> CheckResult:
    """Share of RAG answers in the window that declared they had no context. An error is not
    a declaration: it counts against the share."""
    start, end = ev.window(check.during)
    records = [r for r in ev.requests_in(start, end) if r.endpoint == "rag"]
    if not records:
        return _result(check, "missing_context_share", None, 0, "no RAG answer in the window")
    declared = sum(bool(r.missing_context) and not is_error(r) for r in records)
    errors = sum(is_error(r) for r in records)
    share = declared / len(records)
    result = _result(check, "missing_context_share", share, len(records))
    if not result.passed:
        result.reason += f" ({declared} declared no context, {errors} failed outright)"
    return result


def _counter_increase(
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
    inside = [v for t, v in points if start <= t <= end]
    if not inside:
        return None
    before = [v for t, v in points if t < start]
    return inside[-1] - (before[-1] if before else 0.0)


def check_tool_timeouts(check: Check, ev: Evaluation) -> CheckResult:
    """Agent tool-call attempts that timed out, at the gateway, in the window."""
    start, end = ev.window(check.during)
    prefix = f"{ev.tools_hop}:"
    hop = check.target

    def match(labels: dict[str, str]) -> bool:
        name = labels.get("hop", "")
        return labels.get("outcome") == "timeout" and (
            name == hop if hop else name.startswith(prefix)
        )

    value = _counter_increase(ev, "gateway", "drills_gateway_hop_attempts_total", match, start, end)
    if value is None:
        return _result(check, "tool_timeouts", None, 0, "no scrape of the gateway in the window")
    return _result(check, "tool_timeouts", value, 1)


def check_breaker_opens(check: Check, ev: Evaluation) -> CheckResult:
    """How many times the breaker of ``target`` opened in the window."""
    start, end = ev.window(check.during)
    value = _counter_increase(
        ev,
        "gateway",
        "drills_gateway_breaker_transitions_total",
        lambda labels: labels.get("upstream") == check.target and labels.get("to") == "open",
        start,
        end,
    )
    if value is None:
        return _result(check, "breaker_opens", None, 0, "no scrape of the gateway in the window")
    return _result(check, "breaker_opens", value, 1)


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
        return _result(check, "retrieval_recall", None, 0, reason)
    return _result(check, "retrieval_recall", sum(values) / len(values), len(values))


def check_retry_amplification(check: Check, ev: Evaluation) -> CheckResult:
    """Upstream attempts per user request in the window, counted where they arrive.

    Tool hops (``tools`` or ``tools:<tool>``) are counted by the tool server's interception
    layer as they arrive (every call the gateway's agent made, retries and calls it gave up on
    included, whatever the gateway says).
    Other hops (Toxiproxy 2.12 counts bytes, not requests) use the gateway's attempt counter."""
    start, end = ev.window(check.during)
    target = check.target or ""
    requests = [r for r in ev.records if start <= r.start < end]
    if not requests:
        return _result(check, "retry_amplification", None, 0, "no user request in the window")
    if target == ev.tools_hop or target.startswith(f"{ev.tools_hop}:"):
        tool = target.split(":", 1)[1] if ":" in target else None
        where = "the tool server"
        attempts = _counter_increase(
            ev,
            ev.tools_hop,
            "drills_tools_received_total",
            lambda labels: (
                labels.get("agent") == ev.agent_id and (tool is None or labels.get("tool") == tool)
            ),
            start,
            end,
        )
    else:
        where = "the gateway"
        attempts = _counter_increase(
            ev,
            "gateway",
            "drills_gateway_hop_attempts_total",
            lambda labels: labels.get("hop") == target and labels.get("outcome") != "breaker_open",
            start,
            end,
        )
    if attempts is None:
        return _result(
            check,
            "retry_amplification",
            None,
            0,
            f"no scrape of {where} in the window to count attempts at {target}",
        )
    ratio = attempts / len(requests)
    result = _result(check, "retry_amplification", ratio, len(requests))
    result.reason = (
        f"{attempts:g} attempts at {target} (counted by {where}) for {len(requests)} user "
        f"requests: {ratio:.2f} per request"
        + ("" if result.passed else f", expected {_expected(check, '')}")
    )
    return result


def evaluate(ev: Evaluation, checks: Iterable[Check] | None = None) -> list[CheckResult]:
    """Each check's result, by its family's evaluator (``drills.check_registry``)."""
    from drills.check_registry import family_of

    results = []
    for check in checks if checks is not None else ev.scenario.expect:
        family = family_of(check.check)
        if family is None:  # the scenario model refuses unknown checks; a plugin went away
            raise InputError(f"no check family evaluates {check.check!r}")
        results.append(family.evaluate(check, ev))
    return results
