"""A self-contained HTML report: verdict first, then checks, the timeline with fault windows,
charts over time, events, faults with their evidence and sample answers. No scripts, no external
files; every string that came from the stack or the model is escaped."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from reports.common import fmt_seconds, runbook_link, series

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
.muted{color:#57606a;font-size:.85rem}
pre{background:#f6f8fa;padding:.5rem;overflow-x:auto;font-size:.8rem;max-height:16rem}
svg text{font-size:11px;fill:#57606a} .legend span{margin-right:1rem;font-size:.85rem}
"""


def _x(t: float, duration: float) -> float:
    return PAD + (WIDTH - 2 * PAD) * (t / duration if duration else 0)


def _frame(journal: dict[str, Any], duration: float, height: int) -> list[str]:
    """Phase bands and fault windows behind a chart."""
    t0 = journal.get("t0") or journal["started_at"]
    parts = []
    for i, phase in enumerate(journal["phases"]):
        x1, x2 = _x(phase["start"] - t0, duration), _x(phase["end"] - t0, duration)
        parts.append(
            f'<rect x="{x1:.1f}" y="10" width="{max(x2 - x1, 0):.1f}" '
            f'height="{height - 30}" fill="{PHASE_FILL[i % len(PHASE_FILL)]}"/>'
        )
        parts.append(f'<text x="{x1 + 3:.1f}" y="22">{escape(phase["name"])}</text>')
    for fault in journal["faults"]:
        if fault.get("applied_at") is None:
            continue
        end = fault.get("reverted_at") or journal["ended_at"]
        x1, x2 = _x(fault["applied_at"] - t0, duration), _x(end - t0, duration)
        parts.append(
            f'<rect x="{x1:.1f}" y="{height - 22}" width="{max(x2 - x1, 1):.1f}" '
            f'height="4" fill="#cf222e" opacity=".7"/>'
        )
    return parts


def _chart(
    journal: dict[str, Any],
    rows: list[dict[str, Any]],
    lines: list[tuple[str, str, str]],
    title: str,
    unit: str,
) -> str:
    duration = max((journal["ended_at"] - (journal.get("t0") or journal["started_at"])), 1.0)
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
        label = f"{top * frac * (1000 if unit == 's' else 1):.0f}{'ms' if unit == 's' else ''}"
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
    return f"<h3>{escape(title)}</h3>{''.join(parts)}<div class='legend'>{legend}</div>"


def render_html(journal: dict[str, Any], out_dir: Path) -> str:
    verdict = journal["verdict"]
    t0 = journal.get("t0") or journal["started_at"]
    rows = series(journal)
    stack_name = journal["stack"].get("profile") or journal["stack"]["gateway"]
    out: list[str] = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{escape(journal['drill'])}: {escape(verdict)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<div class='verdict' id='verdict' style='background:{COLORS.get(verdict, '#57606a')}'>"
        f"{escape(verdict.upper())}</div>",
        f"<h1>{escape(journal['title'])}</h1>",
        f"<p class='muted'>drill <code>{escape(journal['drill'])}</code> &middot; run "
        f"<code>{escape(journal['run_id'])}</code> &middot; "
        f"{journal['ended_at'] - journal['started_at']:.0f} s &middot; "
        f"{len(journal['records'])} requests &middot; stack "
        f"<code>{escape(str(stack_name))}</code></p>",
    ]
    if journal.get("description"):
        out.append(f"<p>{escape(journal['description'])}</p>")
    if journal.get("aborted"):
        out.append(f"<p class='fail'>Aborted: {escape(json.dumps(journal['aborted']))}</p>")
    if journal["revert_errors"]:
        out.append(
            "<p class='fail'>Faults that could not be reverted: "
            + escape("; ".join(journal["revert_errors"]))
            + "</p>"
        )
    if journal.get("leftovers_removed"):
        out.append(
            f"<p class='muted'>Before starting, removed {len(journal['leftovers_removed'])}"
            " fault(s) left behind by an earlier run.</p>"
        )

    out.append(
        "<h2>Checks</h2><table id='checks'><tr><th>check</th><th>expected</th>"
        "<th>observed</th><th>result</th><th>why / what to do</th></tr>"
    )
    for check in journal["checks"]:
        ok = check["passed"]
        action = escape(check["reason"])
        if not ok:
            link = runbook_link(journal, check.get("runbook"), out_dir)
            if link:
                action += f" &mdash; <a class='runbook' href='{escape(link)}'>runbook</a>"
        out.append(
            f"<tr class='{'pass' if ok else 'fail'}'><td>{escape(check['label'])}</td>"
            f"<td>{escape(check['expected'])}</td><td>{escape(check['observed_text'])}</td>"
            f"<td class='{'pass' if ok else 'fail'}'>{'pass' if ok else 'FAIL'}</td>"
            f"<td>{action}</td></tr>"
        )
    out.append("</table>")

    out.append(
        "<h2>Over time</h2><p class='muted'>Phases are shaded; red bars under each chart"
        " are the fault windows (applied to reverted, as read back).</p>"
    )
    out.append(
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
        )
    )
    out.append(
        _chart(
            journal, rows, [("rps", "#1a7f37", "requests started per second")], "Throughput", "n"
        )
    )
    out.append(
        _chart(
            journal,
            rows,
            [("errors", "#cf222e", "errors"), ("fallbacks", "#9a6700", "fallback answers")],
            "Errors and fallbacks (per 5 s)",
            "n",
        )
    )

    out.append(
        "<h2>Timeline</h2><table id='timeline'><tr><th>at</th><th>event</th><th>detail</th></tr>"
    )
    for event in journal["timeline"]:
        detail = {k: v for k, v in event.items() if k not in ("time", "offset", "event")}
        out.append(
            f"<tr><td>{event['time'] - t0:+.2f}s</td><td>{escape(event['event'])}</td>"
            f"<td>{escape(json.dumps(detail))}</td></tr>"
        )
    out.append("</table>")

    out.append("<h2>Faults and evidence</h2>")
    for fault in journal["faults"]:
        applied = fault.get("applied_at")
        reverted = fault.get("reverted_at")
        method = (fault.get("revert") or {}).get("method")
        out.append(
            f"<p><b>{escape(fault['kind'])}</b> on <code>{escape(fault['target'])}</code> in "
            f"phase {escape(fault['phase'])}: scheduled at {fault['scheduled_offset']:.1f}s, "
            "applied "
            f"{'at %+.3fs' % (applied - t0) if applied else 'never'}, reverted "
            f"{'at %+.3fs' % (reverted - t0) if reverted else 'never'}"
            f"{' (' + escape(str(method)) + ')' if reverted else ''}"
            f"{' &mdash; ' + escape(fault['error']) if fault.get('error') else ''}</p>"
            f"<pre>{escape(json.dumps(fault.get('evidence'), indent=1))}</pre>"
        )

    out.append(
        "<h2>Sample answers</h2><table id='samples'><tr><th>at</th><th>status</th>"
        "<th>route</th><th>e2e</th><th>answer</th></tr>"
    )
    shown: dict[str, int] = {}
    for record in journal["records"]:
        kind = "error" if record.get("error") else ("fallback" if record.get("fallback") else "ok")
        if shown.get(kind, 0) >= 4:
            continue
        shown[kind] = shown.get(kind, 0) + 1
        answer = record.get("text") or record.get("error") or ""
        out.append(
            f"<tr><td>{record['start'] - t0:+.1f}s</td><td>{record.get('status')}</td>"
            f"<td>{escape(str(record.get('route')))}</td><td>{fmt_seconds(record.get('e2e'))}"
            f"</td><td>{escape(answer)}</td></tr>"
        )
    out.append("</table></body></html>")
    return "\n".join(out)
