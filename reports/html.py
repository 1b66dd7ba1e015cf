"""A self-contained HTML report: verdict first, then checks, the timeline with fault windows,
charts over time, events, faults with their evidence and sample answers. No scripts, no external
files; every string that came from the stack or the model is escaped.

The page is ``templates/drill.html.j2`` (Jinja2, autoescape on); the inline SVG charts are built
here, escaping their own text, and passed to it as markup."""

from __future__ import annotations

import time
from html import escape
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from drills.model.journal import Journal
from drills.model.records import Record
from reports.common import (
    fmt_seconds,
    interval_text,
    load_lines,
    page_rows,
    runbook_link,
    series,
    windows,
)

__all__ = ["render_html"]

WIDTH, HEIGHT, PAD = 900, 180, 46
COLORS = {"passed": "#1a7f37", "failed": "#cf222e", "aborted": "#9a6700", "interrupted": "#6e7781"}
PHASE_FILL = ["#eef6ff", "#fff4e5", "#eefbf0", "#f6f0ff", "#fff0f5"]

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;
  max-width:960px;color:#1f2328}
h1{font-size:1.5rem;margin:.2rem 0}
h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #d0d7de}
.verdict{display:inline-block;color:#fff;padding:.3rem .8rem;border-radius:6px;font-weight:700;
  font-size:1.1rem}
table{border-collapse:collapse;width:100%;font-size:.9rem}
th,td{border:1px solid #d0d7de;padding:.35rem .5rem;text-align:left;vertical-align:top}
th{background:#f6f8fa} tr.fail td{background:#ffebe9}
.pass{color:#1a7f37;font-weight:600} .fail{color:#cf222e;font-weight:700}
.muted{color:#57606a;font-size:.85rem} .inconclusive{color:#9a6700;font-size:.85rem}
.disagrees{color:#9a6700;background:#fff8c5}
pre{background:#f6f8fa;padding:.5rem;overflow-x:auto;font-size:.8rem;max-height:16rem}
svg text{font-size:11px;fill:#57606a} .legend span{margin-right:1rem;font-size:.85rem}
"""


def _x(t: float, duration: float) -> float:
    return PAD + (WIDTH - 2 * PAD) * (t / duration if duration else 0)


def _frame(journal: Journal, duration: float, height: int) -> list[str]:
    """Phase bands and fault windows behind a chart."""
    t0 = journal.origin
    parts = []
    for i, phase in enumerate(journal.phases):
        x1, x2 = _x(phase.start - t0, duration), _x(phase.end - t0, duration)
        parts.append(
            f'<rect x="{x1:.1f}" y="10" width="{max(x2 - x1, 0):.1f}" '
            f'height="{height - 30}" fill="{PHASE_FILL[i % len(PHASE_FILL)]}"/>'
        )
        label = phase.name
        if phase.planned_end is not None:  # until: replaced
            label += f" (replaced: {phase.planned_end - phase.end:.0f}s early)"
        parts.append(f'<text x="{x1 + 3:.1f}" y="22">{escape(label)}</text>')
    for fault in journal.faults:
        if fault.applied_at is None:
            continue
        end = fault.reverted_at or journal.ended_at
        x1, x2 = _x(fault.applied_at - t0, duration), _x(end - t0, duration)
        parts.append(
            f'<rect x="{x1:.1f}" y="{height - 22}" width="{max(x2 - x1, 1):.1f}" '
            f'height="4" fill="#cf222e" opacity=".7"/>'
        )
    return parts


def _chart(
    journal: Journal,
    rows: list[dict[str, Any]],
    lines: list[tuple[str, str, str]],
    title: str,
    unit: str,
) -> Markup:
    """An inline SVG line chart over the run, every text in it escaped here."""
    duration = max(journal.ended_at - journal.origin, 1.0)
    values = [r[key] for r in rows for key, _, _ in lines if r.get(key) is not None]
    top = max(values) * 1.15 if values else 1.0
    top = top or 1.0
    parts = [
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img" aria-label="{escape(title)}">'
    ]
    parts += _frame(journal, duration, HEIGHT)
    base = HEIGHT - 28
    for frac in (0, 0.5, 1):
        y = base - (base - 30) * frac
        if unit == "s":
            label = f"{top * frac * 1000:.0f}ms"
        else:  # small ratios (calls per request) need their decimal
            label = f"{top * frac:.1f}" if top < 10 else f"{top * frac:.0f}"
        parts.append(
            f'<line x1="{PAD}" x2="{WIDTH - PAD}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="#d0d7de" stroke-width=".5"/><text x="2" y="{y + 4:.1f}">{label}</text>'
        )
    bucket = rows[1]["t"] - rows[0]["t"] if len(rows) > 1 else 5.0
    for key, color, _ in lines:
        points = [
            f"{_x(r['t'] + bucket / 2, duration):.1f},{base - (base - 30) * (r[key] / top):.1f}"
            for r in rows
            if r.get(key) is not None
        ]
        if points:
            parts.append(
                f'<polyline fill="none" stroke="{color}" stroke-width="2" '
                f'points="{" ".join(points)}"/>'
            )
    for s in range(0, int(duration) + 1, max(int(duration // 8), 1)):
        parts.append(f'<text x="{_x(s, duration) - 6:.1f}" y="{HEIGHT - 4}">{s}s</text>')
    parts.append("</svg>")
    legend = "".join(
        f'<span style="color:{c}">&#9632; {escape(label)}</span>' for _, c, label in lines
    )
    return Markup(f"<h3>{escape(title)}</h3>{''.join(parts)}<div class='legend'>{legend}</div>")


def _distribution(journal: Journal, metric: str, title: str, unit: str) -> Markup | None:
    """The cumulative distribution of ``metric`` (``tokens``, ``e2e``) among each group's
    answered requests (``Record.group``), one step line per group, drawn over one axis: what
    the group comparisons (``group_ratio``, ``group_ks``) judged. ``None``: fewer than two
    groups answered."""
    by_group: dict[str, list[float]] = {}
    for r in journal.records:
        value = float(r.tokens) if metric == "tokens" else r.e2e
        if r.group is not None and not r.is_error and value is not None:
            by_group.setdefault(r.group, []).append(value)
    if len(by_group) < 2:
        return None
    top = max(max(v) for v in by_group.values()) * 1.05 or 1.0
    base, left, right = HEIGHT - 28, PAD, WIDTH - PAD
    palette = ["#0969da", "#cf222e", "#1a7f37", "#8250df"]
    parts = [
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img" aria-label="{escape(title)}">'
    ]
    for frac in (0, 0.5, 1):
        y = base - (base - 20) * frac
        parts.append(
            f'<line x1="{left}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#d0d7de" '
            f'stroke-width=".5"/><text x="2" y="{y + 4:.1f}">{frac:.0%}</text>'
        )
    for frac in (0, 0.25, 0.5, 0.75, 1):
        x = left + (right - left) * frac
        label = f"{top * frac * 1000:.0f}ms" if unit == "s" else f"{top * frac:.0f}"
        parts.append(f'<text x="{x - 8:.1f}" y="{HEIGHT - 4}">{escape(label)}</text>')
    legend = []
    for i, (group, values) in enumerate(sorted(by_group.items())):
        ordered, color = sorted(values), palette[i % len(palette)]
        points, previous = [f"{left:.1f},{base:.1f}"], 0.0
        for k, v in enumerate(ordered, 1):
            x = left + (right - left) * v / top
            points.append(f"{x:.1f},{base - (base - 20) * previous:.1f}")
            previous = k / len(ordered)
            points.append(f"{x:.1f},{base - (base - 20) * previous:.1f}")
        parts.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{" ".join(points)}"/>'
        )
        legend.append(
            f'<span style="color:{color}">&#9632; {escape(group)} ({len(ordered)} answers)</span>'
        )
    parts.append("</svg>")
    return Markup(
        f"<h3>{escape(title)}</h3>{''.join(parts)}<div class='legend'>{''.join(legend)}</div>"
    )


def _distributions(journal: Journal) -> list[Markup]:
    """Each group's answer lengths and end-to-end latency, when the drill compared groups."""
    drawn = [
        _distribution(journal, metric, title, unit)
        for metric, title, unit in (
            ("tokens", "Answer lengths by group (cumulative share of answers, tokens)", "n"),
            ("e2e", "End-to-end latency by group (cumulative share of answers)", "s"),
        )
    ]
    return [d for d in drawn if d is not None]


def environment() -> Environment:
    """The reports' Jinja2 environment: templates from ``reports/templates``, autoescape on,
    and an undefined name is an error (a typo in a template fails the tests, not a user)."""
    env = Environment(
        loader=PackageLoader("reports", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["seconds"] = fmt_seconds
    return env


_ENV = environment()


def _samples(journal: Journal, per_kind: int = 4) -> list[Record]:
    """A few answers of each kind (ok, fallback, error), in order."""
    shown: dict[str, int] = {}
    picked = []
    for record in journal.records:
        kind = "error" if record.error else ("fallback" if record.fallback else "ok")
        if shown.get(kind, 0) < per_kind:
            shown[kind] = shown.get(kind, 0) + 1
            picked.append(record)
    return picked


def _checks(journal: Journal, out_dir: Path) -> list[dict[str, Any]]:
    """Each check's row: its result, a failure's runbook link, a share's interval."""
    return [
        {
            "result": c,
            "link": None if c.passed else runbook_link(journal, c.runbook, out_dir),
            "interval": interval_text(c),
        }
        for c in journal.checks
    ]


def render_html(journal: Journal, out_dir: Path) -> str:
    rows = series(journal)
    charts = [
        _chart(
            journal,
            rows,
            [
                ("e2e_p50", "#0969da", "end-to-end p50"),
                ("e2e_p99", "#cf222e", "end-to-end p99"),
                ("ttft_p99", "#8250df", "time to first token p99"),
            ],
            "Latency",
            "s",
        ),
        _chart(
            journal, rows, [("rps", "#1a7f37", "requests started per second")], "Throughput", "n"
        ),
        _chart(
            journal,
            rows,
            [("errors", "#cf222e", "errors"), ("fallbacks", "#9a6700", "fallback answers")],
            "Errors and fallbacks (per 5 s)",
            "n",
        ),
    ]
    hops = sorted({h.hop for h in journal.hop_records})
    if hops:
        palette = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#9a6700", "#57606a"]
        charts.append(
            _chart(
                journal,
                rows,
                [
                    (f"calls:{hop}", palette[i % len(palette)], f"calls at {hop}")
                    for i, hop in enumerate(hops)
                ],
                "Calls that reached each model hop per client request (seen at the L7 hop, "
                "per 5 s): retry amplification over time",
                "n",
            )
        )
    charts += _distributions(journal)
    return _ENV.get_template("drill.html.j2").render(
        j=journal,
        css=Markup(CSS),
        color=COLORS.get(journal.verdict, "#57606a"),
        stack_name=journal.stack.profile or journal.stack.gateway,
        checks=_checks(journal, out_dir),
        pages=page_rows(journal),
        charts=charts,
        samples=_samples(journal),
        windows=windows(journal),
        load=load_lines(journal),
        history=_history(journal),
    )


def _history(journal: Journal) -> dict[str, Any] | None:
    """Each check of this run beside the same check in the runs before it (oldest first),
    from the journal's ``history``; ``None`` when the run history is off."""
    history = journal.history
    if history is None:
        return None
    runs = [*history.previous]
    columns = [
        {
            "title": r.label or time.strftime("%m-%d %H:%M", time.localtime(r.started_at)),
            "run_id": r.run_id,
            "verdict": r.verdict,
        }
        for r in runs
    ]
    columns.append({"title": journal.label or "this run", "run_id": journal.run_id,
                    "verdict": journal.verdict})  # fmt: skip
    rows = []
    for check in journal.checks:
        cells = []
        for run in runs:
            past = next((c for c in run.checks if c.label == check.label), None)
            cells.append(
                {"text": "-", "cls": "muted"}
                if past is None
                else {"text": past.observed_text, "cls": "pass" if past.passed else "fail"}
            )
        cells.append({"text": check.observed_text, "cls": "pass" if check.passed else "fail"})
        rows.append({"label": check.label, "cells": cells})
    return {"store": history.store, "written": history.written, "reason": history.reason,
            "columns": columns, "rows": rows}  # fmt: skip
