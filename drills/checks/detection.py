"""The detection matrix: for each fault, how long until each layer showed it.

A game day asks first whether the team saw the failure, and how fast. For every applied fault
(and a load spike: ``drills.checks.onset``) this reads, from what the run recorded, the time
from the fault's application (the spike's start) to the first sign at each layer, or says that
the layer did not show it:

- ``client``: the first answer after the fault that was an error or the degraded path's
  (the time the client got it);
- ``gateway, seen at the hop``: the gateway stopped sending to the faulted upstream (its
  breaker, judged from the L7 hop: ``drills.checks.observed``);
- ``gateway, its claim``: its own breaker signal, by its adapter (a second opinion);
- ``engine, its metrics``: each engine whose own metrics (``vllm:*``, scraped by the harness)
  changed after the fault: its endpoint stopped answering, its process started anew
  (``process_start_time_seconds``) or its waiting queue (``vllm:num_requests_waiting``) rose
  above anything it showed before the fault;
- ``alert pending`` / ``alert firing``: each alert of the team's Prometheus that became
  pending or fired after the fault (its ``ALERTS`` series), with the runbook its rule names;
- ``page``: each notification that reached the harness's pager after the fault.

A fault that no layer showed is ``not detected``. Alerts that were already firing when the
fault was applied are left out: they cannot tell this fault.
"""

from __future__ import annotations

from typing import Any

import httpx

from drills.checks import observed
from drills.checks.base import Evaluation
from drills.checks.breaker import claimed_opening
from drills.checks.engine import ENGINE_METRICS, engine_sources
from drills.checks.onset import Onset, onsets
from drills.checks.promql import client_for
from drills.common.prometheus import PrometheusQueryError
from drills.model.journal import Detection, DetectionSign, FaultRecord, Probe

__all__ = ["alert_history", "detection_matrix"]


def alert_history(ev: Evaluation) -> list[dict[str, Any]] | None:
    """Each alert series of the team's Prometheus over the run: its labels and the times it
    was pending and firing (``None``: no Prometheus, or it could not be read)."""
    if ev.prometheus is None:
        return None
    start, end = ev.run_window
    step = max(0.25, (end - start) / 10000)
    try:
        with client_for(ev.prometheus) as prometheus:
            series = prometheus.query_range("ALERTS", start, end, step)
            rules = prometheus.get_data("/api/v1/rules", {"type": "alert"}) or {}
    except (httpx.HTTPError, PrometheusQueryError):
        return None
    runbooks = {
        str(rule.get("name")): str((rule.get("annotations") or {}).get("runbook_url"))
        for group in rules.get("groups") or []
        for rule in group.get("rules") or []
        if (rule.get("annotations") or {}).get("runbook_url")
    }
    return [
        {
            "labels": labels,
            "state": labels.get("alertstate"),
            "times": [t for t, _ in points],
            "runbook": runbooks.get(labels.get("alertname", "")),
        }
        for labels, points in series
        if points
    ]


def _sign(layer: str, after: float | None, what: str, runbook: str | None = None) -> DetectionSign:
    return DetectionSign(layer=layer, after=after, what=what, runbook=runbook)


def _client(ev: Evaluation, onset: Onset, applied: float) -> DetectionSign:
    end = onset.ended_at or ev.run_window[1]
    seen = []
    for record in ev.records:
        answered = record.start + (record.e2e or 0.0)
        if record.start > end or answered < applied:
            continue
        if record.is_error or record.fallback:
            # What the client got: the degraded path's answer, or the error as it saw it (a
            # stream that broke after its 200 is an error, not "HTTP 200").
            kind = (
                "fallback" if record.fallback else (record.error or f"HTTP {record.status}")[:100]
            )
            seen.append((answered, kind))
    if not seen:
        during = "the fault" if onset.fault is not None else "the spike"
        return _sign("client", None, f"every answer during {during} was a normal one")
    at, kind = min(seen)
    count = len(seen)
    window = "the fault window" if onset.fault is not None else "the spike"
    return _sign("client", max(0.0, at - applied), f"first {kind} ({count} in {window})")


def _gateway(ev: Evaluation, fault: FaultRecord, applied: float) -> list[DetectionSign]:
    hop = fault.target
    signs: list[DetectionSign] = []
    if ev.hop_records is not None and not observed.behind_hop(ev, hop):
        return signs  # not an upstream the gateway sends to through the hop: nothing to read
    refused = observed.refused_at_hop(ev, hop, applied, ev.run_window[1])
    if refused:
        signs.append(_sign("gateway, seen at the hop", None, refused))
    elif ev.hop_records is not None:
        seen, needed = observed.openings(ev, hop, applied, ev.run_window[1])
        signs.append(
            _sign(
                "gateway, seen at the hop",
                seen[0] - applied if seen else None,
                f"stopped sending to {hop}"
                if seen
                else f"kept sending to {hop} (never {needed} requests in a row that missed it)",
            )
        )
    claimed, claim = claimed_opening(ev, hop, applied)
    signs.append(_sign("gateway, its claim", claimed, claim))
    return signs


WAITING = ENGINE_METRICS["waiting"].names[0]
STARTED = "process_start_time_seconds"


def _total(probe: Probe, name: str) -> float | None:
    values = [s.value for s in probe.samples if s.name == name]
    return sum(values) if values else None


def _engine_change(
    probes: list[Probe], applied: float, it: str = "the fault"
) -> tuple[float, str] | None:
    """The first time after ``applied`` one engine's own metrics showed something, and what."""
    before = [p for p in probes if p.time < applied and p.error is None]
    waited = [w for p in before if (w := _total(p, WAITING)) is not None]
    started = next((_total(p, STARTED) for p in reversed(before) if _total(p, STARTED)), None)
    for probe in (p for p in probes if p.time >= applied):
        if probe.error is not None:
            if before:
                return probe.time, f"its metrics stopped answering ({probe.error})"
            continue
        now = _total(probe, STARTED)
        if started is not None and now is not None and now != started:
            return probe.time, "a new process: it restarted"
        waiting = _total(probe, WAITING)
        if waited and waiting is not None and waiting > max(waited):
            return (
                probe.time,
                f"requests waiting rose to {waiting:g} (before {it}: at most {max(waited):g})",
            )
    return None


def _engines(ev: Evaluation, applied: float, end: float, it: str) -> list[DetectionSign]:
    sources = engine_sources(ev)
    signs = []
    for source in sources:
        probes = sorted(
            (p for p in ev.probes if p.source == source and p.time <= end), key=lambda p: p.time
        )
        change = _engine_change(probes, applied, it)
        if change is not None:
            signs.append(
                _sign("engine, its metrics", change[0] - applied, f"{source}: {change[1]}")
            )
    if sources and not signs:
        shown = ", ".join(sources)
        signs.append(_sign("engine, its metrics", None, f"no change in the metrics of {shown}"))
    return signs


def _alerts(history: list[dict[str, Any]] | None, applied: float) -> list[DetectionSign]:
    if history is None:
        return []
    firing_at_apply = {
        _key(h["labels"])
        for h in history
        if h["state"] == "firing" and any(abs(t - applied) <= 1.0 for t in h["times"])
    }
    signs = []
    for h in sorted(history, key=lambda h: min(h["times"])):
        key = _key(h["labels"])
        after = [t for t in h["times"] if t >= applied]
        if key in firing_at_apply or not after:
            continue
        signs.append(_sign(f"alert {h['state']}", after[0] - applied, key, h.get("runbook")))
    return signs


def _key(labels: dict[str, str]) -> str:
    shown = ",".join(
        f"{k}={v}"
        for k, v in sorted(labels.items())
        if k not in ("alertname", "alertstate", "__name__")
    )
    return f"{labels.get('alertname', '?')}{{{shown}}}"


def _pages(ev: Evaluation, applied: float) -> list[DetectionSign]:
    signs = []
    seen: set[str] = set()
    for page in ev.pages or []:
        if page.received_at < applied:
            continue
        for alert in page.alerts:
            if alert.status != "firing" or alert.name in seen:
                continue
            seen.add(alert.name)
            signs.append(
                _sign(
                    "page",
                    page.received_at - applied,
                    f"{alert.name} reached the pager"
                    + (f" (receiver {page.receiver})" if page.receiver else ""),
                    alert.annotations.get("runbook_url"),
                )
            )
    return signs


def detection_matrix(ev: Evaluation, history: list[dict[str, Any]] | None) -> list[Detection]:
    """One row per applied fault, and one for a load spike: the first sign of it at each
    layer."""
    rows = []
    for onset in onsets(ev):
        applied = onset.at
        fault = onset.fault
        it = "the fault" if fault is not None else "the spike"
        signs = [
            _client(ev, onset, applied),
            *(_gateway(ev, fault, applied) if fault is not None else []),
            *_engines(ev, applied, onset.ended_at or ev.run_window[1], it),
            *_alerts(history, applied),
            *_pages(ev, applied),
        ]
        layers = {s.layer for s in signs}
        if history is None:
            signs.append(_sign("alerts", None, "not read: the drill names no Prometheus"))
        elif "alert firing" not in layers:
            signs.append(_sign("alert firing", None, f"no alert fired after {it}"))
        if ev.pages is None:
            signs.append(_sign("page", None, "not read: the drill runs no pager"))
        elif "page" not in layers:
            signs.append(_sign("page", None, f"no page reached the pager after {it}"))
        rows.append(
            Detection(
                fault=fault.index if fault is not None else None,
                what=onset.what,
                phase=onset.phase or "",
                applied_at=applied,
                signs=signs,
                detected=any(s.after is not None for s in signs),
            )
        )
    return rows
