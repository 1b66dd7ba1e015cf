"""The game day's combined report, from ``gameday.json`` alone: ``index.html`` (the post-mortem
page: verdicts, who confirmed what, a minute-by-minute timeline, runbook coverage, observer
notes), ``summary.md`` and ``junit.xml`` (a suite per drill and one for the checkpoints)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from markupsafe import Markup

from drills.model.gameday_journal import DayEvent, DayJournal, DayStep
from drills.model.journal import DetectionSign
from reports import load_journal
from reports.common import md_cell, score_suffix
from reports.html import COLORS, CSS, environment
from reports.junit import XML_HEADER, junit_suite

__all__ = ["render_gameday"]


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def _since(t: float, start: float) -> str:
    minutes, seconds = divmod(max(int(t - start), 0), 60)
    return f"T+{minutes:02d}:{seconds:02d}"


def _describe(day_event: DayEvent) -> str:
    # The event's own fields as one dict: its details differ by event.
    event: dict[str, Any] = day_event.model_dump()
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


_ENV = environment()
_ENV.filters["clock"] = _clock


def _rel(target: str, out: Path) -> str:
    return os.path.relpath(target, out.resolve())


def _after(sign: DetectionSign) -> str:
    return f"+{sign.after:.1f}s"


def _alerted(sign: DetectionSign) -> str:
    runbook = f" -> {sign.runbook}" if sign.runbook else ", names no runbook step"
    return f"{sign.what} {_after(sign)}{runbook}"


def detection_rows(day: DayJournal) -> list[dict[str, Any]]:
    """Who saw each fault of the day, how fast: per drill and fault, the first sign at any
    layer, the alerts that fired, the pages (who got them, for what, when, naming which
    runbook step). A drill that did not run has no row; a fault with no sign, "not detected"."""
    rows = []
    for step in day.drills():
        for fault in step.detection:
            seen = [s for s in fault.signs if s.after is not None]
            first = min(seen, key=lambda s: s.after or 0.0, default=None)
            fired = [s for s in seen if s.layer == "alert firing"]
            pages = [s for s in seen if s.layer == "page"]
            unread = {s.layer for s in fault.signs if s.what.startswith("not read")}
            rows.append(
                {
                    "drill": step.drill,
                    "fault": f"{fault.what} ({fault.phase})",
                    "detected": fault.detected,
                    "first": f"{first.layer} {_after(first)}: {first.what}"
                    if first
                    else "not detected",
                    "alerts": [_alerted(s) for s in fired]
                    or ["alerts not read" if "alerts" in unread else "no alert fired"],
                    "pages": [_alerted(s) for s in pages]
                    or ["no pager ran" if "page" in unread else "nobody was paged"],
                    "alerted": bool(fired),
                    "paged": bool(pages),
                }
            )
    return rows


def _drill_rows(day: DayJournal, out: Path) -> list[dict[str, Any]]:
    """The day's drills as the page's table shows them."""
    drills = []
    for step in day.drills():
        failed = [c for c in step.checks if not c.passed]
        drills.append(
            {
                "drill": step.drill,
                "ok": step.verdict == "passed",
                "verdict": str(step.verdict),
                "score": _score_text(step),
                "failed": "; ".join(
                    f"{c.label}: observed {c.observed_text}, expected {c.expected}" for c in failed
                )
                or step.error
                or "-",
                "report": f"{_rel(step.run_dir, out)}/index.html" if step.run_dir else None,
            }
        )
    return drills


def render_html(day: DayJournal, out: Path) -> str:
    """The post-mortem page (``templates/gameday.html.j2``)."""
    start = day.started_at
    drills = _drill_rows(day, out)
    timeline, last_minute = [], None
    for event in day.timeline:
        minute = int(max(event.time - start, 0) // 60)
        label = f"{minute:02d}" if minute != last_minute else ""
        last_minute = minute
        timeline.append({"minute": label, "time": event.time, "text": _describe(event)})
    runbooks = [
        {
            "link": _rel(r.runbook, out),
            "name": Path(r.runbook).name,
            "steps": [
                {
                    **step.model_dump(),
                    "by": "; ".join(
                        f"{b['by']} ({'passed' if b['passed'] else 'FAILED'})" for b in step.by
                    ),
                }
                for step in r.steps
            ],
        }
        for r in day.runbooks
    ]
    return _ENV.get_template("gameday.html.j2").render(
        day=day,
        css=Markup(CSS),
        color=COLORS.get(day.verdict, "#57606a"),
        drills=drills,
        skipped=[s for s in day.skipped if s.kind == "drill"],
        checkpoints=day.checkpoints(),
        timeline=timeline,
        runbooks=runbooks,
        detection=detection_rows(day),
        since=lambda t: _since(t, start),
    )


def _score_text(step: DayStep) -> str:
    return f"{step.score.value:g}" if step.score else "-"


def render_markdown(day: DayJournal) -> str:
    lines = [
        f"## Game day `{day.gameday}`: **{day.verdict.upper()}**",
        "",
        f"{day.title}  ",
        f"status {day.status}"
        + (f" ({day.stop_reason})" if day.stop_reason else "")
        + f", {(day.ended_at - day.started_at) / 60:.1f} min"
        + score_suffix(day.score.model_dump() if day.score else None),
        "",
    ]
    detection = detection_rows(day)
    if detection:
        lines += [
            "Who saw it, how fast:",
            "",
            "| drill | fault | first sign | alerts fired | paged |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| `{r['drill']}` | {md_cell(r['fault'])} | {md_cell(r['first'])} | "
            f"{md_cell('; '.join(r['alerts']))} | {md_cell('; '.join(r['pages']))} |"
            for r in detection
        ]
        lines.append("")
    lines += [
        "| step | what | result |",
        "|---|---|---|",
    ]
    for step in day.steps:
        if step.kind == "drill":
            score = f", score {step.score.value:g}" if step.score else ""
            lines.append(f"| drill | `{step.drill}` | {step.verdict}{score} |")
        elif step.kind == "checkpoint":
            answer = step.answer if step.answer is not None else "no answer"
            lines.append(
                f"| checkpoint | {step.ask} | {answer} by {step.by or '-'} ({step.source}) |"
            )
    for skipped in day.skipped:
        lines.append(f"| {skipped.kind} | {skipped.what or '-'} | not reached |")
    never = [
        f"{Path(r.runbook).name}#{s.anchor}"
        for r in day.runbooks
        for s in r.steps
        if not s.exercised
    ]
    lines += ["", f"Runbook steps never reached: {', '.join(never) if never else 'none'}", ""]
    return "\n".join(lines)


def render_junit(day: DayJournal) -> str:
    root = ET.Element("testsuites", name=f"gameday:{day.gameday}")
    for step in day.drills():
        if step.run_dir:
            root.append(junit_suite(load_journal(Path(step.run_dir))))
    checkpoints = day.checkpoints()
    suite = ET.SubElement(
        root,
        "testsuite",
        name=f"gameday:{day.gameday}:checkpoints",
        tests=str(len(checkpoints)),
        failures=str(sum(not s.confirmed for s in checkpoints)),
    )
    for step in checkpoints:
        case = ET.SubElement(suite, "testcase", classname="drills.gameday", name=str(step.id))
        if not step.confirmed:
            failure = ET.SubElement(case, "failure", message=f"not confirmed: {step.ask}")
            failure.text = f"answer {step.answer!r} by {step.by}"
    ET.indent(root)
    return XML_HEADER + ET.tostring(root, encoding="unicode")


def render_gameday(path: Path) -> dict[str, Path]:
    path = path / "gameday.json" if path.is_dir() else path
    day = DayJournal.load(path)
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
