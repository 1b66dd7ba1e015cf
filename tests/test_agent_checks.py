"""The agent-task checks (``drills.checks.agent``) on made-up sends and a made-up tool server
audit log: a task is its sends grouped by task_id, a side effect is what the tool server's
audit says it delivered (matched by trace id), and an answer is compared with the same prompt's
uninterrupted one. The real stack's run is tests/test_agent_resume.py."""

from __future__ import annotations

import json
from typing import Any

from drills.checks import Evaluation, evaluate
from drills.model.records import Record
from drills.model.scenario import Scenario
from tests.helpers import problems

T0 = 1_800_000_000.0
ANSWER = "see kb-1; message to oncall sent; 5 rows of drill_results"
CHECKS = [
    {"check": "tasks_resumed", "during": "fault", "above": 0},
    {"check": "tasks_unfinished", "during": "fault", "below": 1},
    {"check": "tasks_duplicate_effects", "during": "fault", "below": 1},
    {"check": "tasks_answer_changed", "during": "fault", "below": 1},
]


def scenario() -> Scenario:
    return Scenario.model_validate(
        {
            "drill": "a",
            "title": "a",
            "load": {"users": 1, "endpoint": "agent", "resume": {"attempts": 3}},
            "phases": [
                {"name": "baseline", "duration": "10s"},
                {"name": "fault", "duration": "10s"},
            ],
            "expect": CHECKS,
        }
    )


def send(task: str, attempt: int, at: float, status: str | None = "done", **kw: Any) -> Record:
    failed = status is None
    return Record(
        start=T0 + at,
        trace_id=f"{task}-{attempt}",
        endpoint="agent",
        task_id=task,
        attempt=attempt,
        prompt=0,
        status=0 if failed else 200,
        error="RemoteProtocolError: Server disconnected" if failed else None,
        agent_status=status,
        text="" if failed else kw.pop("text", ANSWER),
        **kw,
    )


def delivery(task: str, attempt: int, delivered: bool) -> dict[str, Any]:
    content = {"delivered": delivered, "duplicate": not delivered, "key": f"{task}:1"}
    return {
        "time": T0,
        "tool": "send_message",
        "outcome": "ok",
        "trace_id": f"{task}-{attempt}",
        "result": json.dumps({"structuredContent": content}),
    }


def judge(records: list[Record], audit: list[dict[str, Any]] | None) -> dict[str, Any]:
    phases = {"baseline": (T0, T0 + 10), "fault": (T0 + 10, T0 + 20)}
    ev = Evaluation(scenario(), records, phases, (T0, T0 + 20), [], tool_audit=audit)
    return {r.label: r for r in evaluate(ev)}


def test_a_task_resumed_from_its_checkpoint_delivers_once_and_answers_as_uninterrupted() -> None:
    records = [
        send("plain", 1, 1),  # the baseline's uninterrupted answer
        send("t1", 1, 11, None),
        send("t1", 2, 13, resumed_from=2),
        send("t2", 1, 12),
    ]
    # t1's message went out before the crash; its resend was suppressed by its key.
    audit = [delivery("t1", 1, True), delivery("t1", 2, False), delivery("t2", 1, True)]
    results = judge(records, audit)
    assert all(r.passed for r in results.values()), results
    assert results["tasks_resumed during fault"].observed == 1
    assert "the gateway says 1 of them resumed from a checkpoint" in (
        results["tasks_resumed during fault"].reason
    )
    effects = results["tasks_duplicate_effects during fault"]
    assert "(the tool server's audit: 3 calls, 2 delivered, 1 suppressed by their" in (
        effects.reason
    )


def test_a_task_that_starts_over_delivers_twice_and_one_that_never_ends_is_counted() -> None:
    records = [
        send("plain", 1, 1),
        send("t1", 1, 11, None),
        send("t1", 2, 13, text="nothing found"),
        send("t3", 1, 12, None),
        send("t3", 2, 14, None),
    ]
    audit = [delivery("t1", 1, True), delivery("t1", 2, True)]
    results = judge(records, audit)
    effects = results["tasks_duplicate_effects during fault"]
    assert not effects.passed and effects.observed == 1
    assert "e.g. task t1: 2 deliveries" in effects.reason
    unfinished = results["tasks_unfinished during fault"]
    assert not unfinished.passed and "task t3 after 2 sends" in unfinished.reason
    changed = results["tasks_answer_changed during fault"]
    assert not changed.passed and "'nothing found', not" in changed.reason


def test_no_audit_no_task_or_no_interruption_is_no_proof() -> None:
    records = [send("plain", 1, 1), send("t2", 1, 12)]
    results = judge(records, None)
    assert not results["tasks_resumed during fault"].passed  # nothing was interrupted
    assert "no tool server audit log" in results["tasks_duplicate_effects during fault"].reason
    assert not results["tasks_answer_changed during fault"].passed
    results = judge([send("plain", 1, 1)], [])
    assert "no agent task with a task_id counts" in results["tasks_unfinished during fault"].reason
    # The audit has no call of the tool for the window's tasks: nothing to judge, not a pass.
    effects = judge([send("t2", 1, 12)], [])["tasks_duplicate_effects during fault"]
    assert not effects.passed and "saw no send_message call" in effects.reason


def test_resume_is_for_agent_loads_only(tmp_path: Any) -> None:
    path = tmp_path / "drill.yaml"
    path.write_text(
        "drill: a\ntitle: a\nload:\n  users: 1\n  resume: {attempts: 3}\n"
        "phases: [{name: p, duration: 1s}]\nexpect: [{check: error_rate, below: 1}]\n"
    )
    from drills.model.scenario import load_scenario

    [problem] = problems(load_scenario, path)
    assert problem.startswith(f"{path}:5 load.resume:") and "set endpoint: agent" in problem
