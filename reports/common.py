"""What every report needs from a journal: runbook links and per-window series."""

from __future__ import annotations

import math
import os
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from drills.common.stats import percentile
from drills.model.journal import CheckResult, Journal, LoadReport
from drills.model.records import Record
from drills.model.references import check_link

__all__ = [
    "fmt_seconds",
    "interval_text",
    "load_lines",
    "md_cell",
    "page_rows",
    "runbook_link",
    "score_suffix",
    "series",
    "windows",
]


def md_cell(text: str) -> str:
    """``text`` as one cell of a Markdown table."""
    return text.replace("|", "\\|").replace("\n", " ")


def interval_text(check: CheckResult) -> str:
    """A check's confidence interval for a person ("" when it has none), and whether another
    run could turn the verdict. A share is shown as one, a percentile in ms or s; an open side
    says the requests could not bound it."""
    if check.interval is None:
        return ""

    def shown(value: float | None, side: str) -> str:
        if value is None:
            return f"no {side} bound"
        return f"{value:.3f}" if check.check.endswith("_rate") else fmt_seconds(value)

    low, high = check.interval
    level = f"{(check.confidence or 0.95) * 100:g}%"
    text = f"{level} CI {shown(low, 'lower')} to {shown(high, 'upper')}, n={check.samples}"
    return text if check.conclusive else f"{text}: not conclusive, too few requests to be sure"


def runbook_link(journal: Journal, runbook: str | None, out_dir: Path) -> str | None:
    """A link to ``runbook`` (``path#anchor``, relative to the scenario file) usable from
    ``out_dir``; http(s) URLs are kept as they are, and anything else with a scheme
    (``javascript:``, ``file:``, ``data:``) is no link at all (``None``)."""
    runbook = runbook or journal.runbook
    if not runbook:
        return None
    if check_link(runbook) is not None:
        return None
    if urlsplit(runbook).scheme:
        return runbook
    path, _, anchor = runbook.partition("#")
    scenario = journal.scenario_path
    base = Path(scenario).parent if scenario else Path.cwd()
    target = (base / path).resolve()
    rel = os.path.relpath(target, out_dir.resolve())
    return rel + (f"#{anchor}" if anchor else "")


def load_lines(journal: Journal) -> list[str]:
    """The load as asked and as delivered, in sentences (first: the shortfall, if any)."""
    load = journal.load
    if load is None:
        return []
    rate = f"{load.observed_rate:.2f} requests/s" if load.observed_rate is not None else None
    if load.mode == "closed":
        lines = [
            f"Closed loop: {load.users} user(s) sent {load.sent} requests"
            + (f" ({rate} over the phases)." if rate else ".")
        ]
        if load.warning:
            lines.append(f"Warning: {load.warning}.")
        return lines + _fleet_lines(load)
    lines = [f"LOAD FELL SHORT: {load.short}"] if load.short else []
    model = f"gamma (burstiness {load.burstiness:g})" if load.arrival == "gamma" else load.arrival
    line = (
        f"Open loop: asked {load.asked_rate:g} requests/s, {model} arrivals, at most "
        f"{load.max_in_flight} in flight; sent {load.sent} of {load.scheduled} scheduled"
    )
    if rate:
        line += f", {rate} over the phases"
    if load.observed_cv is not None and load.expected_cv is not None:
        line += (
            f"; gaps' coefficient of variation {load.observed_cv:.2f} "
            f"(the model's: {load.expected_cv:.2f})"
        )
    if load.lag_p99 is not None:
        line += (
            f"; sent late by {fmt_seconds(load.lag_p50)} median, {fmt_seconds(load.lag_p99)} p99"
        )
    lines.append(line + f"; at most {load.peak_in_flight} in flight at once.")
    if load.warning:
        lines.append(f"Warning: {load.warning}.")
    return lines + _fleet_lines(load)


def _fleet_lines(load: LoadReport) -> list[str]:
    """One line per load worker: its records, its clock against the master's, its CPU."""
    if not load.workers_expected:
        return []
    lines = [f"Load processes: a master and {load.workers_expected} worker(s)."]
    for p in load.processes:
        if p.role != "worker":
            continue
        clock = (
            f"clock {p.offset * 1000:+.1f} ms from the master's (within "
            f"{(p.rtt or 0) * 500:.1f} ms), "
            if p.offset is not None
            else "clock offset not measured, "
        )
        lines.append(f"Worker {p.id}: {p.records} requests, {clock}CPU peak {p.cpu_peak:.0f}%.")
    return lines


def fmt_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if value < 10 else f"{value:.1f} s"


def series(journal: Journal, bucket: float = 5.0) -> list[dict[str, Any]]:
    """Per ``bucket`` seconds from t0: requests, errors, fallbacks, e2e/ttft p50 and p99, and
    (with an L7 hop) the calls that arrived at each model hop per client request sent
    (``calls:HOP``, ``None`` when no request was sent)."""
    t0 = journal.origin
    count = max(0, math.ceil((journal.ended_at - t0) / bucket))
    # One pass over each list into its buckets (a scan of every record per bucket took 8.5 s
    # for a one-hour drill: bench/journal_size.py).
    sent: list[list[Record]] = [[] for _ in range(count)]
    for record in journal.records:
        index = math.floor((record.start - t0) / bucket)
        if 0 <= index < count:
            sent[index].append(record)
    hops = sorted({h.hop for h in journal.hop_records})
    arrived: list[Counter[str]] = [Counter() for _ in range(count)]
    for hop_record in journal.hop_records:
        index = math.floor((hop_record.arrived_at - t0) / bucket)
        if 0 <= index < count:
            arrived[index][hop_record.hop] += 1
    rows = []
    for index, window in enumerate(sent):
        calls = {
            f"calls:{hop}": (arrived[index][hop] / len(window) if window else None) for hop in hops
        }
        e2e = [r.e2e for r in window if r.e2e is not None]
        ttft = [r.ttft for r in window if r.ttft is not None]
        rows.append(
            {
                "t": index * bucket,
                "requests": len(window),
                "rps": len(window) / bucket,
                "errors": sum(r.is_error for r in window),
                "fallbacks": sum(r.fallback for r in window),
                "e2e_p50": percentile(e2e, 50) if e2e else None,
                "e2e_p99": percentile(e2e, 99) if e2e else None,
                "ttft_p50": percentile(ttft, 50) if ttft else None,
                "ttft_p99": percentile(ttft, 99) if ttft else None,
                **calls,
            }
        )
    return rows


def windows(journal: Journal, examples: int = 3) -> list[dict[str, Any]]:
    """Per window a request can count in (``drills.model.windows``), in time order: how many
    requests count there, how many failed, and the straddling ones (with a few of their
    reasons). Windows nobody counted in are left out."""
    order = ["warmup", *(p.name for p in journal.phases), "after"]
    rows = []
    for name in order:
        counted = [r for r in journal.records if r.phase == name]
        if not counted:
            continue
        straddling = [r for r in counted if r.straddles]
        rows.append(
            {
                "phase": name,
                "requests": len(counted),
                "errors": sum(r.is_error for r in counted),
                "straddling": len(straddling),
                "examples": [r.straddles for r in straddling[:examples]],
            }
        )
    return rows


def page_rows(journal: Journal) -> list[dict[str, str]]:
    """Each alert of each notification the pager received, in the order they came: when (from
    the first phase's start), its status, the alert with its labels, and the runbook it named."""
    origin = journal.t0 or journal.started_at
    rows = []
    for page in journal.pages or []:
        for alert in page.alerts:
            labels = ",".join(
                f"{k}={v}" for k, v in sorted(alert.labels.items()) if k != "alertname"
            )
            rows.append(
                {
                    "at": f"{page.received_at - origin:+.1f}s",
                    "status": alert.status,
                    "alert": f"{alert.name}{{{labels}}}" if labels else alert.name,
                    "runbook": alert.annotations.get("runbook_url", ""),
                }
            )
    return rows


def score_suffix(score: dict[str, Any] | None) -> str:
    """A Markdown line break and the resilience score (``drills.model.score``), or nothing for
    a run or day that has none."""
    if not score:
        return ""
    return f"  \nresilience score **{score['value']:g}**/100 ({score['why']})"
