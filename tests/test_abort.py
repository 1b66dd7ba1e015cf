"""Abort conditions judged on records (``drills.engine.abort``): the share over the last
``for``, the answer rate's floor, and nothing judged before the phases have run ``for``. The
runner's use of them on the real stack is in tests/test_drill_run.py."""

from __future__ import annotations

from drills.engine.abort import abort_reason
from drills.model.expect import AbortCondition
from drills.model.records import Record

T0 = 1_000.0


def record(start: float, *, status: int = 200, e2e: float = 0.1, fallback: bool = False) -> Record:
    error = None if status == 200 else f"HTTP {status}"
    return Record(start=start, status=status, e2e=e2e, error=error, fallback=fallback, trace_id="t")


def condition(**fields: object) -> AbortCondition:
    return AbortCondition.model_validate(fields)


def test_an_error_share_above_the_bound_over_the_last_window_aborts() -> None:
    errors = condition(check="error_rate", above=0.5, **{"for": "10s"})
    calm = [record(T0 + i) for i in range(10)]
    failing = [record(T0 + 10 + i / 2, status=502) for i in range(10)]
    assert abort_reason([errors], calm, T0 + 10, T0) is None
    # 10 failures and 1 success in the last 10 s (the successes before it are out of the window).
    aborted = abort_reason([errors], calm + failing, T0 + 15, T0)
    assert aborted == {
        "cause": "abort_condition",
        "check": "error_rate",
        "observed": round(10 / 15, 3),
        "above": 0.5,
        "for": 10.0,
    }


def test_nothing_is_judged_before_the_phases_have_run_for_the_window() -> None:
    errors = condition(check="error_rate", above=0.1, **{"for": "10s"})
    failing = [record(T0 + i / 4, status=502) for i in range(20)]
    assert abort_reason([errors], failing, T0 + 5, T0) is None
    assert abort_reason([errors], failing, T0 + 10, T0) is not None


def test_too_few_requests_in_the_window_are_not_judged() -> None:
    fallbacks = condition(check="fallback_rate", above=0.5, min_requests=3, **{"for": "5s"})
    two = [record(T0 + 20, fallback=True), record(T0 + 21, fallback=True)]
    assert abort_reason([fallbacks], two, T0 + 22, T0) is None
    three = [*two, record(T0 + 21.5, fallback=True)]
    assert abort_reason([fallbacks], three, T0 + 22, T0)["check"] == "fallback_rate"  # type: ignore[index]


def test_a_stack_that_stopped_answering_aborts_on_the_answer_rate() -> None:
    stall = condition(check="answer_rate", below=0.5, **{"for": "10s"})
    answered = [record(T0 + i) for i in range(10)]
    # Sent, never answered: status 0 and no end.
    hanging = [Record(start=T0 + 10 + i, trace_id="t") for i in range(10)]
    assert abort_reason([stall], answered, T0 + 10, T0) is None
    stopped = abort_reason([stall], answered + hanging, T0 + 20.5, T0)
    assert stopped is not None and stopped["check"] == "answer_rate"
    assert stopped["observed"] == 0.0 and "stopped answering" in stopped["reason"]


def test_the_first_condition_that_holds_is_the_reason() -> None:
    errors = condition(check="error_rate", above=0.5, **{"for": "5s"})
    fallbacks = condition(check="fallback_rate", above=0.5, **{"for": "5s"})
    both = [record(T0 + 10 + i / 2, status=502, fallback=True) for i in range(10)]
    assert abort_reason([fallbacks, errors], both, T0 + 15, T0)["check"] == "fallback_rate"  # type: ignore[index]
