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


def test_an_error_share_above_the_bound_at_every_second_of_the_window_aborts() -> None:
    errors = condition(check="error_rate", above=0.5, **{"for": "10s"})
    calm = [record(T0 + i) for i in range(10)]
    failing = [record(T0 + 10 + i / 2, status=502) for i in range(30)]
    assert abort_reason([errors], calm, T0 + 10, T0) is None
    # At T0+15 the seconds T0+5..T0+10 still see the calm answers alone: not yet.
    assert abort_reason([errors], calm + failing, T0 + 15, T0) is None
    # At T0+24 every second from T0+14 on saw failures outnumber the calm answers.
    aborted = abort_reason([errors], calm + failing, T0 + 24, T0)
    assert aborted is not None
    assert {k: aborted[k] for k in ("cause", "check", "above", "for")} == {
        "cause": "abort_condition",
        "check": "error_rate",
        "above": 0.5,
        "for": 10.0,
    }
    # The lowest share of the window's seconds: at T0+14, 6 answers and 8 failures ended in the
    # 10 s before it (T0+4.1..T0+14: calm T0+4.1..T0+9.1 and failures T0+10.1..T0+13.6).
    assert aborted["observed"] == round(8 / 14, 3)
    assert "every second of the last 10s" in aborted["reason"]


def test_one_second_at_or_below_the_bound_holds_the_abort_off() -> None:
    errors = condition(check="error_rate", above=0.5, **{"for": "20s"})
    failing = [record(T0 + i / 2, status=502) for i in range(120)]
    assert abort_reason([errors], failing, T0 + 40, T0) is not None
    # Twenty answers, sent from T0+25 and 5 s each, end at T0+30 to T0+32: the seconds that
    # see them see as many answers as failures, a share of 0.5 (not above it).
    answers = [record(T0 + 25 + i / 10, e2e=5.0) for i in range(20)]
    assert abort_reason([errors], failing + answers, T0 + 40, T0) is None
    # Once those seconds are more than 'for' ago, the failures hold again.
    later = [record(T0 + 60 + i / 2, status=502) for i in range(60)]
    assert abort_reason([errors], failing + answers + later, T0 + 85, T0) is not None


def test_fast_failures_of_a_short_outage_do_not_pass_for_a_long_one() -> None:
    """The vector-DB outage's twin (stop 38's CI): 30 s of failures in 60 ms each, then the
    recovered stack answering in 5-6 s. Judged on requests sent over 45 s, 54 failures and 2
    answers read as 0.964 > 0.95 twelve seconds into the recovery and aborted the drill."""
    errors = condition(check="error_rate", above=0.95, **{"for": "45s"})
    baseline = [record(T0 + 6 * i, e2e=5.5) for i in range(9)]  # T0..T0+59.5, two users
    baseline += [record(T0 + 3 + 6 * i, e2e=5.5) for i in range(9)]
    outage = [record(T0 + 60 + i * 30 / 54, status=502, e2e=0.06) for i in range(54)]
    recovery = [record(T0 + 90 + 6 * i, e2e=6.5) for i in range(5)]
    recovery += [record(T0 + 90.5 + 6 * i, e2e=6.5) for i in range(5)]
    everything = baseline + outage + recovery
    for second in range(100, 125):
        ended = [r for r in everything if r.start + (r.e2e or 0) <= T0 + second]
        assert abort_reason([errors], ended, T0 + second, T0) is None, second


def test_the_same_failures_going_on_abort() -> None:
    errors = condition(check="error_rate", above=0.95, **{"for": "45s"})
    baseline = [record(T0 + 6 * i, e2e=5.5) for i in range(10)]
    outage = [record(T0 + 60 + i * 30 / 54, status=502, e2e=0.06) for i in range(54 * 3)]
    everything = baseline + outage
    assert abort_reason([errors], everything, T0 + 100, T0) is None  # baseline answers in reach
    aborted = abort_reason([errors], everything, T0 + 116, T0)
    assert aborted is not None and aborted["observed"] == 1.0


def test_a_dead_stack_whose_requests_end_only_at_a_timeout_aborts() -> None:
    """Two users, every request ending in a 30 s client timeout: most seconds see no request
    end in the 10 s before them (not judged); those that do see only failures."""
    errors = condition(check="error_rate", above=0.5, **{"for": "60s"})
    timeouts = [
        Record(start=T0 + 30 * i + u, status=0, e2e=30.0, error="timeout", trace_id="t")
        for i in range(6)
        for u in (0, 7)
    ]
    ended = [r for r in timeouts if r.start + 30 <= T0 + 150]
    aborted = abort_reason([errors], ended, T0 + 150, T0)
    assert aborted is not None and aborted["observed"] == 1.0


def test_one_answer_in_the_window_holds_it_off_until_it_is_out_of_reach() -> None:
    errors = condition(check="error_rate", above=0.9, **{"for": "30s"})
    failing = [record(T0 + i, status=502) for i in range(120)]
    answer = [record(T0 + 70, e2e=0.5)]  # ended at T0+70.5
    runs = failing + answer
    # The seconds T0+71 to T0+80 see it beside 10 failures: 10/11 = 0.909, at or below 0.95.
    strict = condition(check="error_rate", above=0.95, **{"for": "30s"})
    assert abort_reason([strict], runs, T0 + 100, T0) is None
    assert abort_reason([strict], runs, T0 + 110, T0) is None  # T0+80 is 30 s ago
    assert abort_reason([strict], runs, T0 + 111, T0) is not None
    assert abort_reason([errors], runs, T0 + 100, T0) is not None


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
