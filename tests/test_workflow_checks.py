"""The workflow checks (``drills.checks.workflow``) on made-up workflow requests: a wait is
what the answer says of its tasks, or, for a request that got no answer, the whole time its
client waited; lookups served and fallbacks counted from the answers the client got. The real
stack's run is tests/test_multi_agent_wait.py."""

from __future__ import annotations

from typing import Any

from drills.checks import Evaluation, evaluate
from drills.model.records import Record
from drills.model.scenario import Scenario

T0 = 1_800_000_000.0
CHECKS = [
    {"check": "workflow_wait", "during": "fault", "below": "3s"},
    {"check": "workflows_served", "workflow": "lookup", "during": "fault", "above": 0.95},
    {"check": "workflow_fallbacks", "during": "fault", "above": 0},
]


def scenario() -> Scenario:
    return Scenario.model_validate(
        {
            "drill": "a",
            "title": "a",
            "load": {"users": 1, "endpoint": "workflow"},
            "phases": [
                {"name": "baseline", "duration": "10s"},
                {"name": "fault", "duration": "10s"},
            ],
            "expect": CHECKS,
        }
    )


def sent(kind: str, at: float, **kw: Any) -> Record:
    answered = kw.pop("answered", True)
    return Record(
        start=T0 + at,
        trace_id=f"{kind}-{at}",
        endpoint="workflow",
        workflow=kind,
        status=200 if answered else 0,
        error=None if answered else "unfinished: no answer after 9.0s, when the load stopped",
        e2e=kw.pop("e2e", 0.1),
        **kw,
    )


def judge(records: list[Record]) -> dict[str, Any]:
    phases = {"baseline": (T0, T0 + 10), "fault": (T0 + 10, T0 + 20)}
    ev = Evaluation(scenario(), records, phases, (T0, T0 + 20), [])
    return {r.label: r for r in evaluate(ev)}


def test_briefs_waited_out_at_the_limit_and_lookups_served_pass() -> None:
    checks = judge(
        [
            sent("brief", 1, waited=0.0),
            sent("brief", 11, waited=2.01, fallback=True, e2e=2.05),
            sent("brief", 14, waited=2.02, fallback=True, e2e=2.06),
            sent("lookup", 12),
            sent("lookup", 15),
        ]
    )
    assert all(c.passed for c in checks.values()), checks
    wait = checks["workflow_wait during fault"]
    assert wait.observed == 2.02 and "its answer's account" in wait.reason
    assert checks["workflow_fallbacks during fault"].observed == 2
    assert checks["workflows_served lookup during fault"].observed == 1.0


def test_a_frozen_orchestrator_fails_on_its_unanswered_requests() -> None:
    checks = judge(
        [
            sent("brief", 11, answered=False, e2e=9.0),
            sent("lookup", 12, answered=False, e2e=8.0),
            sent("lookup", 13, answered=False, e2e=7.0),
        ]
    )
    wait = checks["workflow_wait during fault"]
    assert not wait.passed and wait.observed == 9.0
    assert "no answer: the client's own wait" in wait.reason and "3 of 3" in wait.reason
    served = checks["workflows_served lookup during fault"]
    assert not served.passed and served.observed == 0.0 and "0 of 2" in served.reason
    assert not checks["workflow_fallbacks during fault"].passed


def test_no_workflow_in_the_window_is_no_data() -> None:
    checks = judge([sent("brief", 1)])
    assert not checks["workflow_wait during fault"].passed
    assert "no workflow request counts in the window" in checks["workflow_wait during fault"].reason


def test_a_fallback_that_came_only_after_the_thaw_does_not_count_within_its_bound() -> None:
    records = [
        sent("brief", 11, waited=2.01, fallback=True, e2e=2.05),
        # A research call the stall broke, answered as a fallback once the fault ended.
        sent("brief", 10.5, waited=11.4, fallback=True, e2e=11.5),
    ]
    phases = {"baseline": (T0, T0 + 10), "fault": (T0 + 10, T0 + 20)}

    def check(**within: str) -> Any:
        spec = {"check": "workflow_fallbacks", "during": "fault", "above": 1, **within}
        drill = scenario().model_dump(mode="json", exclude_none=True)
        timed = Scenario.model_validate({**drill, "expect": [spec]})
        (verdict,) = evaluate(Evaluation(timed, records, phases, (T0, T0 + 20), []))
        return verdict

    plain = check()
    assert plain.passed and plain.observed == 2
    late = check(within="6s")
    assert not late.passed and late.observed == 1
    assert "1 of 2 workflow answers were the fallback within 6s" in late.reason
    assert "1 more came later, the slowest after 11.5s (trace brief-10.5)" in late.reason
