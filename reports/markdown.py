"""A Markdown summary fit for a pull-request comment."""

from __future__ import annotations

from pathlib import Path

from drills.model.journal import CheckResult, Journal
from reports.common import (
    interval_text,
    load_lines,
    md_cell,
    page_rows,
    runbook_link,
    score_suffix,
    windows,
)

__all__ = ["render_markdown"]

ICON = {"passed": "PASSED", "failed": "FAILED", "aborted": "ABORTED", "interrupted": "INTERRUPTED"}


def _observed(check: CheckResult) -> str:
    interval = interval_text(check)
    return f"{check.observed_text} ({interval})" if interval else check.observed_text


def _twin_lines(journal: Journal) -> list[str]:
    twin = journal.twin
    if twin is None:
        return []
    lines = [
        f"### Twin `{twin.name}` of drill `{journal.drill}`: "
        f"**{'HELD' if twin.held else 'NOT HELD'}**",
        "",
        f"{md_cell(twin.summary())}  ",
        f"stack: {md_cell(twin.stack)}  ",
        f"must fail: {md_cell(', '.join(twin.must_fail))}"
        + (f"; may fail: {md_cell(', '.join(twin.may_fail))}" if twin.may_fail else ""),
        "",
    ]
    return lines + [f"- not applied: {md_cell(s)}" for s in twin.skipped_faults]


def _twin_role(journal: Journal, label: str, passed: bool) -> str:
    """What the twin says of this check, and whether the run bore it out."""
    twin = journal.twin
    assert twin is not None
    if label in twin.must_fail:
        return "must fail on the twin: " + ("**NOT AS DECLARED**" if passed else "as declared")
    if label in twin.may_fail:
        return "may fail on the twin"
    return "must pass on the twin: " + ("as declared" if passed else "**NOT AS DECLARED**")


def _detection_lines(journal: Journal) -> list[str]:
    """The detection matrix: per fault or load spike, the first sign at each layer (nothing:
    neither)."""
    if not journal.detection:
        return []
    lines = ["", "| fault | layer | after | what |", "|---|---|---|---|"]
    for row in journal.detection:
        fault = f"{row.what}" + ("" if row.detected else " (**not detected**)")
        for sign in row.signs:
            after = f"{sign.after:.1f}s" if sign.after is not None else "not seen"
            runbook = f" ({md_cell(sign.runbook)})" if sign.runbook else ""
            lines.append(
                f"| {md_cell(fault)} | {sign.layer} | {after} | {md_cell(sign.what)}{runbook} |"
            )
            fault = ""
    return lines


def _trace_lines(journal: Journal) -> list[str]:
    """Where the run's OpenTelemetry trace went (nothing when none was sent)."""
    trace = journal.trace
    if trace is None:
        return []
    if trace.exported:
        return ["", f"Trace `{trace.trace_id}` ({trace.spans} spans) sent to `{trace.endpoint}`"]
    return ["", f"The trace was not sent to `{trace.endpoint}`: {md_cell(trace.reason or '')}"]


def _page_lines(journal: Journal) -> list[str]:
    """The pages the pager received, as a table (nothing when no pager ran)."""
    if journal.pages is None:
        return []
    pages = page_rows(journal)
    lines = ["", f"Pages received by the pager: {len(pages) or 'none'}"]
    if pages:
        lines += ["", "| at | status | alert | runbook named |", "|---|---|---|---|"]
        lines += [
            f"| {p['at']} | {p['status']} | {md_cell(p['alert'])} | {md_cell(p['runbook'])} |"
            for p in pages
        ]
    return lines


def render_markdown(journal: Journal, out_dir: Path) -> str:
    if journal.twin is not None:
        lines = [*_twin_lines(journal), "", f"The drill on the twin: **{journal.verdict}**", ""]
    else:
        lines = [
            f"### Drill `{journal.drill}`: **{ICON.get(journal.verdict, journal.verdict)}**",
            "",
        ]
    lines += [
        f"{md_cell(journal.title)}  ",
        f"run `{journal.run_id}`, {journal.ended_at - journal.started_at:.0f} s, "
        f"{len(journal.records)} requests, "
        f"stack `{journal.stack.profile or 'attached'}`"
        + score_suffix(journal.score.model_dump() if journal.score else None),
        "",
        "| check | expected | observed | result |",
        "|---|---|---|---|",
    ]
    for check in journal.checks:
        result = "pass" if check.passed else f"**FAIL**: {md_cell(check.reason)}"
        if not check.passed:
            link = runbook_link(journal, check.runbook, out_dir)
            if link:
                result += f" ([runbook]({link}))"
        if check.disagrees:
            result += f" (the gateway's claim disagrees: {md_cell(check.claim or '')})"
        if journal.twin is not None:
            result += f" ({_twin_role(journal, check.label, check.passed)})"
        lines.append(
            f"| {md_cell(check.label)} | {md_cell(check.expected)} | "
            f"{md_cell(_observed(check))} | {result} |"
        )
    lines += [*_page_lines(journal), *_detection_lines(journal), *_history_lines(journal)]
    lines += [*_trace_lines(journal), *(["", *load_lines(journal)] if journal.load else [])]
    counted = windows(journal)
    if any(row["straddling"] for row in counted):
        lines += ["", "Straddling requests (counted where they met a fault, else where sent):"]
        for row in counted:
            if row["straddling"]:
                why = "; ".join(md_cell(e) for e in row["examples"])
                lines.append(f"- {row['phase']}: {row['straddling']} of {row['requests']} ({why})")
    if journal.aborted:
        lines += ["", f"Aborted: `{journal.aborted}`"]
    if journal.rollbacks.left:
        lines += ["", "Left in force after the drill (failed reverts, or a changed chain):"]
        lines += [f"- {md_cell(e)}" for e in journal.rollbacks.left]
    for action in journal.rollbacks.watchdog:
        done = "reverted" if action.get("event") == "reverted" else "could not revert"
        lines += [
            "",
            f"The run's watchdog {done} {action.get('kind')} on {action.get('target')}: "
            f"{md_cell(str(action.get('why')))}.",
        ]
    if journal.rollbacks.swept:
        lines += [
            "",
            f"Removed {len(journal.rollbacks.swept)} fault(s) left by an earlier run.",
        ]
    return "\n".join(lines) + "\n"


def _history_lines(journal: Journal) -> list[str]:
    """The runs before this one, from the run history, and the checks that passed in the
    last of them and fail now (or the other way round)."""
    history = journal.history
    if history is None:
        return []
    if not history.written:
        return ["", f"This run is not in the run history: {md_cell(history.reason or '')}"]
    if not history.previous:
        return ["", "The first run of this drill in the run history."]
    verdicts = ", ".join(r.verdict for r in history.previous[-5:])
    last = history.previous[-1]
    before = {c.label: c for c in last.checks}
    lines = ["", f"History: the last {min(5, len(history.previous))} run(s) before this one: "
             f"{verdicts} (`drills history {journal.drill}`)."]  # fmt: skip
    for check in journal.checks:
        was = before.get(check.label)
        if was is not None and was.passed != check.passed:
            now = "passes" if check.passed else "**fails**"
            lines.append(
                f"- {md_cell(check.label)} {now} now ({md_cell(check.observed_text)}); the "
                f"last run: {md_cell(was.observed_text)}"
            )
    return lines
