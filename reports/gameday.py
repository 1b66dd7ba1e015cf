"""The game day's combined report, from ``gameday.json`` alone: ``index.html`` (the post-mortem
page: verdicts, who confirmed what, a minute-by-minute timeline, runbook coverage, observer
notes), ``summary.md`` and ``junit.xml`` (a suite per drill and one for the checkpoints)."""

from __future__ import annotations

import json
import os
import time
from html import escape
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from reports.html import COLORS, CSS
from reports.junit import XML_HEADER, junit_suite

__all__ = ["render_gameday"]


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def _since(t: float, start: float) -> str:
    minutes, seconds = divmod(max(int(t - start), 0), 60)
    return f"T+{minutes:02d}:{seconds:02d}"


def _describe(event: dict[str, Any]) -> str:
    kind = event["event"]
    if kind == "note" and event["source"] == "observer":
        return f"note by {event.get('by')}: {event.get('text')}"
    if kind == "note":
        return f"note to the room: {event.get('text')}"
    if kind == "asked":
        return f"checkpoint {event.get('id')} asked: {event.get('ask')}"
    if kind in ("answered", "unanswered"):
        if kind == "unanswered":
            return f"checkpoint {event.get('id')}: no answer ({event.get('via')})"
        return (
            f"checkpoint {event.get('id')}: {event.get('answer')} by {event.get('by')} "
            f"({event.get('via')})"
        )
    if kind in ("drill_start", "drill_end"):
        tail = f": {event.get('verdict')}" if kind == "drill_end" else ""
        return f"drill {event.get('drill')} {'starts' if kind == 'drill_start' else 'ends'}{tail}"
    if kind == "phase_start":
        return f"{event['source']}: phase {event.get('phase')}"
    if kind in ("fault_applied", "fault_reverted"):
        verb = "applied" if kind == "fault_applied" else "reverted"
        return f"{event['source']}: {event.get('kind')} on {event.get('target')} {verb}"
    detail = {k: v for k, v in event.items() if k not in ("time", "source", "event")}
    return f"{event['source']}: {kind} {json.dumps(detail, default=str) if detail else ''}"


def _rel(target: str, out: Path) -> str:
    return os.path.relpath(target, out.resolve())


def render_html(day: dict[str, Any], out: Path) -> str:
    verdict = day["verdict"]
    start = day["started_at"]
    html = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>game day {escape(day['gameday'])}: {escape(verdict)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<div class='verdict' id='verdict' style='background:{COLORS.get(verdict, '#57606a')}'>"
        f"{escape(verdict.upper())}</div>",
        f"<h1>{escape(day['title'])}</h1>",
        f"<p class='muted'>game day <code>{escape(day['gameday'])}</code> &middot; "
        f"{_clock(start)}&ndash;{_clock(day['ended_at'])} "
        f"({(day['ended_at'] - start) / 60:.1f} min) &middot; status {escape(day['status'])}"
        + (f" ({escape(str(day['stop_reason']))})" if day.get("stop_reason") else "")
        + (f" &middot; facilitator {escape(day['facilitator'])}" if day.get("facilitator") else "")
        + "</p>",
    ]
    if day.get("description"):
        html.append(f"<p>{escape(day['description'])}</p>")

    html.append(
        "<h2>Drills</h2><table id='drills'><tr><th>drill</th><th>verdict</th>"
        "<th>failed checks</th><th>report</th></tr>"
    )
    for step in (s for s in day["steps"] if s["kind"] == "drill"):
        ok = step.get("verdict") == "passed"
        failed = [c for c in step.get("checks", []) if not c["passed"]]
        failed_text = "; ".join(
            f"{c['label']}: observed {c['observed_text']}, expected {c['expected']}" for c in failed
        ) or escape(step.get("error", "") or "-")
        report = (
            f"<a href='{escape(_rel(step['run_dir'], out))}/index.html'>report</a>"
            if step.get("run_dir")
            else "-"
        )
        html.append(
            f"<tr class='{'pass' if ok else 'fail'}'><td>{escape(step['drill'])}</td>"
            f"<td class='{'pass' if ok else 'fail'}'>{escape(str(step.get('verdict')))}</td>"
            f"<td>{escape(failed_text)}</td><td>{report}</td></tr>"
        )
    for skipped in (s for s in day["skipped"] if s["kind"] == "drill"):
        html.append(
            f"<tr class='fail'><td>{escape(str(skipped['what']))}</td><td>not run</td>"
            f"<td>the day stopped before this step</td><td>-</td></tr>"
        )
    html.append("</table>")

    html.append(
        "<h2>Checkpoints</h2><table id='checkpoints'><tr><th>checkpoint</th><th>asked of</th>"
        "<th>answer</th><th>by</th><th>when</th></tr>"
    )
    for step in (s for s in day["steps"] if s["kind"] == "checkpoint"):
        ok = bool(step.get("confirmed"))
        answer = step.get("answer") if step.get("answer") is not None else "no answer"
        html.append(
            f"<tr class='{'pass' if ok else 'fail'}'><td>{escape(step['ask'])}</td>"
            f"<td>{escape(step.get('who') or '-')}</td><td>{escape(str(answer))}</td>"
            f"<td>{escape(str(step.get('by') or '-'))} ({escape(str(step.get('source')))})</td>"
            f"<td>{_since(step.get('answered_at') or start, start)}</td></tr>"
        )
    html.append("</table>")

    html.append(
        "<h2>Timeline, minute by minute</h2><table id='timeline'>"
        "<tr><th>minute</th><th>clock</th><th>what happened</th></tr>"
    )
    last_minute = None
    for event in day["timeline"]:
        minute = int(max(event["time"] - start, 0) // 60)
        label = f"{minute:02d}" if minute != last_minute else ""
        last_minute = minute
        html.append(
            f"<tr><td>{label}</td><td>{_clock(event['time'])} "
            f"<span class='muted'>{_since(event['time'], start)}</span></td>"
            f"<td>{escape(_describe(event))}</td></tr>"
        )
    html.append("</table>")

    html.append("<h2>Runbook steps</h2>")
    for runbook in day["runbooks"]:
        html.append(
            f"<h3><a href='{escape(_rel(runbook['runbook'], out))}'>"
            f"{escape(Path(runbook['runbook']).name)}</a></h3><table class='runbook'>"
            "<tr><th>step</th><th>exercised</th><th>by</th></tr>"
        )
        for step in runbook["steps"]:
            link = f"{_rel(runbook['runbook'], out)}#{step['anchor']}"
            by = "; ".join(
                f"{b['by']} ({'passed' if b['passed'] else 'FAILED'})" for b in step["by"]
            )
            html.append(
                f"<tr class='{'pass' if step['exercised'] else 'fail'}'>"
                f"<td><a href='{escape(link)}'>{escape(step['title'])}</a></td>"
                f"<td>{'exercised' if step['exercised'] else 'never reached'}</td>"
                f"<td>{escape(by or '-')}</td></tr>"
            )
        html.append("</table>")

    html.append("<h2>Observer notes</h2>")
    if day["notes"]:
        html.append("<table id='notes'><tr><th>when</th><th>by</th><th>note</th></tr>")
        for note in day["notes"]:
            html.append(
                f"<tr><td>{_since(note['time'], start)}</td><td>{escape(str(note['by']))}</td>"
                f"<td>{escape(str(note['text']))}</td></tr>"
            )
        html.append("</table>")
    else:
        html.append("<p class='muted'>No notes were taken.</p>")
    html.append("</body></html>")
    return "\n".join(html)


def render_markdown(day: dict[str, Any]) -> str:
    lines = [
        f"## Game day `{day['gameday']}`: **{day['verdict'].upper()}**",
        "",
        f"{day['title']}  ",
        f"status {day['status']}"
        + (f" ({day['stop_reason']})" if day.get("stop_reason") else "")
        + f", {(day['ended_at'] - day['started_at']) / 60:.1f} min",
        "",
        "| step | what | result |",
        "|---|---|---|",
    ]
    for step in day["steps"]:
        if step["kind"] == "drill":
            lines.append(f"| drill | `{step['drill']}` | {step.get('verdict')} |")
        elif step["kind"] == "checkpoint":
            answer = step.get("answer") if step.get("answer") is not None else "no answer"
            lines.append(
                f"| checkpoint | {step['ask']} | {answer} by {step.get('by') or '-'} "
                f"({step.get('source')}) |"
            )
    for skipped in day["skipped"]:
        lines.append(f"| {skipped['kind']} | {skipped['what'] or '-'} | not reached |")
    never = [
        f"{Path(r['runbook']).name}#{s['anchor']}"
        for r in day["runbooks"]
        for s in r["steps"]
        if not s["exercised"]
    ]
    lines += ["", f"Runbook steps never reached: {', '.join(never) if never else 'none'}", ""]
    return "\n".join(lines)


def render_junit(day: dict[str, Any]) -> str:
    from reports import load_journal

    root = ET.Element("testsuites", name=f"gameday:{day['gameday']}")
    for step in day["steps"]:
        if step["kind"] == "drill" and step.get("run_dir"):
            root.append(junit_suite(load_journal(Path(step["run_dir"]))))
    checkpoints = [s for s in day["steps"] if s["kind"] == "checkpoint"]
    suite = ET.SubElement(
        root,
        "testsuite",
        name=f"gameday:{day['gameday']}:checkpoints",
        tests=str(len(checkpoints)),
        failures=str(sum(not s.get("confirmed") for s in checkpoints)),
    )
    for step in checkpoints:
        case = ET.SubElement(suite, "testcase", classname="drills.gameday", name=step["id"])
        if not step.get("confirmed"):
            failure = ET.SubElement(case, "failure", message=f"not confirmed: {step['ask']}")
            failure.text = f"answer {step.get('answer')!r} by {step.get('by')}"
    ET.indent(root)
    return XML_HEADER + ET.tostring(root, encoding="unicode")


def render_gameday(path: Path) -> dict[str, Path]:
    path = path / "gameday.json" if path.is_dir() else path
    day = json.loads(path.read_text())
    out = path.parent
    paths = {
        "html": out / "index.html",
        "markdown": out / "summary.md",
        "junit": out / "junit.xml",
    }
    paths["html"].write_text(render_html(day, out))
    paths["markdown"].write_text(render_markdown(day))
    paths["junit"].write_text(render_junit(day))
    return paths
