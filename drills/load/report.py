"""What a drill's load delivered against what its scenario asked (``Journal.load``).

An open-loop load (``load.rate``) must send every request its schedule has: an arrival that
found ``max_in_flight`` requests unanswered was not sent, the load fell short, and the run
says so in its verdict rather than judging the stack on less traffic than it was meant to
carry. The arrivals actually sent are measured too (rate and the dispersion of their gaps,
against the model's), and how late the generator sent them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from drills.common.stats import percentile
from drills.load.arrivals import dispersion, expected_cv
from drills.model.journal import LoadProcessHealth, LoadReport
from drills.model.records import Record
from drills.model.scenario import LoadConfig

__all__ = ["LAG_WARNING", "load_report", "sent_log_path", "workers_log_path"]

CPU_SATURATED = 90.0
"""Percent of one core: a load process above this was likely the bottleneck (Locust warns at
the same)."""
LAG_WARNING = 0.05
"""Seconds: a p99 send lag above this says the load generator, not the stack, set the pace."""


def sent_log_path(records: Path) -> Path:
    """Where the open-loop schedule's log of ``records`` is written (by the Locust process)."""
    return records.with_suffix(".sent.json")


def started_path(records: Path) -> Path:
    """Where the load process writes when it sent its first request (epoch seconds)."""
    return records.with_suffix(".started")


def workers_log_path(records: Path) -> Path:
    """Where the load processes' health is written (by the master, or the single process)."""
    return records.with_suffix(".workers.json")


def load_report(
    load: LoadConfig,
    records_path: Path,
    records: Sequence[Record],
    phases: Mapping[str, tuple[float, float]],
) -> LoadReport:
    """The load's report: requests sent, and for an open loop what its schedule did."""
    starts = [r.start for r in records]
    first = min((s for s, _ in phases.values()), default=None)
    last = max((e for _, e in phases.values()), default=None)
    in_phases = [s for s in starts if first is not None and last is not None and first <= s < last]
    measured = dispersion(in_phases)
    fleet = _fleet(records_path)
    if load.rate is None:
        report = LoadReport(
            mode="closed",
            users=load.users,
            sent=len(records),
            observed_rate=measured[0] if measured else None,
            **fleet,
        )
        report.warning = _saturated(report)
        return report
    assert load.arrival is not None  # the scenario model requires it with a rate
    lags = [r.lag for r in records if r.lag is not None]
    report = LoadReport(
        mode="open",
        asked_rate=load.rate,
        arrival=load.arrival,
        burstiness=load.burstiness,
        max_in_flight=load.max_in_flight,
        sent=len(records),
        observed_rate=measured[0] if measured else None,
        observed_cv=measured[1] if measured else None,
        expected_cv=expected_cv(load.arrival, load.burstiness),
        lag_p50=percentile(lags, 50) if lags else None,
        lag_p99=percentile(lags, 99) if lags else None,
        **fleet,
    )
    _schedule(report, load, records_path, phases)
    report.warning = report.warning or _saturated(report)
    return report


def _schedule(
    report: LoadReport,
    load: LoadConfig,
    records_path: Path,
    phases: Mapping[str, tuple[float, float]],
) -> None:
    """What the open-loop schedule did (its account, ``<records>.sent.json``): arrivals not sent
    make the load short; requests sent late, a warning."""
    assert load.rate is not None
    try:
        log = json.loads(sent_log_path(records_path).read_text())
    except (OSError, ValueError) as exc:
        report.short = f"the load process left no account of its schedule ({exc}): it did not run"
        return
    report.scheduled = int(log.get("scheduled", 0))
    report.not_sent = int(log.get("not_sent", 0))
    report.peak_in_flight = int(log.get("peak_in_flight", 0))
    report.not_sent_by_phase = _by_phase(log.get("not_sent_at") or [], phases)
    if report.not_sent:
        where = ", ".join(f"{n} in {p}" for p, n in report.not_sent_by_phase.items())
        report.short = (
            f"{report.not_sent} of {report.scheduled} scheduled requests were not sent "
            f"({where or 'during the warm-up'}): all {load.max_in_flight} in-flight slots "
            "(load.max_in_flight) held unanswered requests, so the stack carried less than "
            f"{load.rate:g} requests/s; raise max_in_flight or lower the rate"
        )
    elif report.lag_p99 is not None and report.lag_p99 > LAG_WARNING:
        report.warning = (
            f"the load generator sent requests late (p99 {report.lag_p99 * 1000:.0f} ms after "
            "their scheduled time): it, not the stack, may have set the pace"
        )


def _fleet(records_path: Path) -> dict[str, Any]:
    """The load processes' health as the master (or the single process) last wrote it."""
    try:
        data = json.loads(workers_log_path(records_path).read_text())
    except (OSError, ValueError):
        return {}
    return {
        "workers_expected": int(data.get("expected") or 0),
        "processes": [LoadProcessHealth.model_validate(p) for p in data.get("processes") or []],
    }


def _saturated(report: LoadReport) -> str | None:
    """A load process that ran out of CPU: its timings, not the stack's, may be what the checks
    saw."""
    hot = [p for p in report.processes if p.cpu_peak >= CPU_SATURATED and p.role != "master"]
    if not hot:
        return None
    named = ", ".join(f"{p.id} {p.cpu_peak:.0f}%" for p in hot)
    return (
        f"load process CPU peaked at {named} of a core: the load generator, not the stack, may "
        "have been the bottleneck (add load.workers, or hosts with load.remote)"
    )


def _by_phase(times: Sequence[float], phases: Mapping[str, tuple[float, float]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in times:
        for name, (start, end) in phases.items():
            if start <= t < end:
                counts[name] = counts.get(name, 0) + 1
                break
    return counts
