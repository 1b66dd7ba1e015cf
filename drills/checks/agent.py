"""Agent tasks the load resumes (``load.resume``): whether a task interrupted mid-way (its
gateway killed, a tool cut off) finished, ran its side effects once, and gave the answer the
same task gives uninterrupted. Judged from outside the gateway: the client's sends, grouped by
``task_id``, and the tool server's own audit log (what each call did), matched to the sends by
trace id. The gateway's account (``resumed_from`` in its answers) is shown beside them.

- ``tasks_unfinished``: tasks whose last send did not finish (resends ran out, or the run ended);
- ``tasks_resumed``: tasks that finished after more than one send (``above: 0`` says the fault
  did interrupt tasks mid-way, so the other checks had something to judge);
- ``tasks_duplicate_effects``: tasks whose side effect (``target``, default ``send_message``)
  the tool server delivered more than once;
- ``tasks_answer_changed``: resumed tasks whose final answer is not the one the same task gives
  when nothing interrupts it (the most common answer of its prompt's one-send tasks).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any

from drills.checks.base import Evaluation, result
from drills.model.expect import Check
from drills.model.journal import CheckResult
from drills.model.records import Record

__all__ = [
    "check_tasks_answer_changed",
    "check_tasks_duplicate_effects",
    "check_tasks_resumed",
    "check_tasks_unfinished",
]

FINISHED = ("done", "step_limit")
DELIVERED = re.compile(r'"delivered":\s*true')


def _finished(record: Record) -> bool:
    return not record.is_error and record.agent_status in FINISHED


def tasks_in(ev: Evaluation, during: str | None) -> dict[str, list[Record]]:
    """Each task whose first send counts in the window: its sends, in order."""
    start, end = ev.window(during)
    sends: dict[str, list[Record]] = defaultdict(list)
    for record in ev.records:
        if record.task_id:
            sends[record.task_id].append(record)
    tasks = {}
    for task_id, own in sends.items():
        own.sort(key=lambda r: (r.attempt or 0, r.start))
        first = own[0]
        counted = first.counted_at if first.counted_at is not None else first.start
        if start <= counted < end:
            tasks[task_id] = own
    return tasks


def _none(check: Check, name: str) -> CheckResult:
    return result(
        check,
        name,
        None,
        0,
        "no agent task with a task_id counts in the window (the load sends them with "
        "load.resume, to the agent endpoint)",
    )


def check_tasks_unfinished(check: Check, ev: Evaluation) -> CheckResult:
    tasks = tasks_in(ev, check.during)
    if not tasks:
        return _none(check, "tasks_unfinished")
    left = {t: sends for t, sends in tasks.items() if not _finished(sends[-1])}
    reason = ""
    if left:
        task_id, sends = next(iter(left.items()))
        last = sends[-1]
        reason = (
            f"{len(left)} of {len(tasks)} tasks never finished; e.g. task {task_id} after "
            f"{len(sends)} sends: {last.error or f'status {last.agent_status!r}'}"
        )
    return result(check, "tasks_unfinished", float(len(left)), len(tasks), reason)


def check_tasks_resumed(check: Check, ev: Evaluation) -> CheckResult:
    tasks = tasks_in(ev, check.during)
    if not tasks:
        return _none(check, "tasks_resumed")
    resumed = [s for s in tasks.values() if len(s) > 1 and _finished(s[-1])]
    claimed = sum(1 for s in resumed if (s[-1].resumed_from or 0) > 0)
    reason = (
        f"{len(resumed)} of {len(tasks)} tasks finished after an interrupted send; the "
        f"gateway says {claimed} of them resumed from a checkpoint (resumed_from > 0)"
    )
    return result(check, "tasks_resumed", float(len(resumed)), len(tasks), reason)


def _effects(
    audit: list[dict[str, Any]], tool: str, tasks: dict[str, list[Record]]
) -> tuple[dict[str, int], int, int]:
    """Deliveries of ``tool``'s effect per task, the calls of it, and the calls the tool
    server suppressed (a repeated idempotency key), for the tasks' sends (by trace id)."""
    task_of = {r.trace_id: t for t, sends in tasks.items() for r in sends}
    delivered: dict[str, int] = Counter()
    calls = suppressed = 0
    for entry in audit:
        task = task_of.get(str(entry.get("trace_id")))
        if entry.get("tool") != tool or task is None:
            continue
        calls += 1
        if entry.get("outcome") != "ok":
            continue
        if DELIVERED.search(str(entry.get("result") or "")):
            delivered[task] += 1
        else:
            suppressed += 1
    return delivered, calls, suppressed


def check_tasks_duplicate_effects(check: Check, ev: Evaluation) -> CheckResult:
    tool = check.target or "send_message"
    if ev.tool_audit is None:
        return result(
            check,
            "tasks_duplicate_effects",
            None,
            0,
            "no tool server audit log to read (the harness reads the embedded stack's)",
        )
    tasks = tasks_in(ev, check.during)
    if not tasks:
        return _none(check, "tasks_duplicate_effects")
    delivered, calls, suppressed = _effects(ev.tool_audit, tool, tasks)
    if not calls:
        return result(
            check,
            "tasks_duplicate_effects",
            None,
            0,
            f"the tool server saw no {tool} call of the window's {len(tasks)} tasks (do the "
            "tasks ask for one? does the agent pass the client's traceparent on?)",
        )
    twice = {t: n for t, n in delivered.items() if n > 1}
    reason = (
        f"{len(twice)} of {len(delivered)} tasks had their {tool} delivered more than once "
        f"(the tool server's audit: {calls} calls, {sum(delivered.values())} delivered, "
        f"{suppressed} suppressed by their idempotency key)"
    )
    if twice:
        task_id, count = next(iter(twice.items()))
        reason += f"; e.g. task {task_id}: {count} deliveries"
    return result(check, "tasks_duplicate_effects", float(len(twice)), len(delivered), reason)


def check_tasks_answer_changed(check: Check, ev: Evaluation) -> CheckResult:
    everyone = tasks_in(ev, None)
    plain: dict[int | None, Counter[str]] = defaultdict(Counter)
    for sends in everyone.values():
        if len(sends) == 1 and _finished(sends[0]):
            plain[sends[0].prompt][sends[0].text] += 1
    resumed = [s for s in tasks_in(ev, check.during).values() if len(s) > 1 and _finished(s[-1])]
    judged = [s for s in resumed if plain.get(s[-1].prompt)]
    if not judged:
        return result(
            check,
            "tasks_answer_changed",
            None,
            0,
            f"{len(resumed)} resumed tasks, none with an uninterrupted task of the same prompt "
            "to compare with",
        )
    changed = []
    for sends in judged:
        reference = plain[sends[-1].prompt].most_common(1)[0][0]
        if sends[-1].text != reference:
            changed.append((sends, reference))
    reason = f"{len(changed)} of {len(judged)} resumed tasks answered otherwise than uninterrupted"
    if changed:
        sends, reference = changed[0]
        reason += f"; e.g. task {sends[-1].task_id}: {sends[-1].text!r}, not {reference!r}"
    return result(check, "tasks_answer_changed", float(len(changed)), len(judged), reason)
