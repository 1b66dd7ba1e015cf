"""The gateway's policy parts on their own: breaker, retry budget, backoff, admission, trace."""

from __future__ import annotations

import asyncio

import pytest

from stack.gateway.admission import Admission, QueueFull, QueueTimeout
from stack.gateway.breaker import Breaker
from stack.gateway.retry import RetryBudget, full_jitter_backoff
from stack.gateway.trace import TraceContext


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_breaker_opens_after_consecutive_failures_and_probes_once() -> None:
    clock = Clock()
    changes: list[tuple[str, str]] = []
    breaker = Breaker(
        "u",
        failure_threshold=3,
        reset_timeout=5,
        clock=clock,
        on_change=lambda name, old, new: changes.append((old, new)),
    )
    for _ in range(2):
        assert breaker.acquire()
        breaker.record_failure()
    assert breaker.acquire()
    breaker.record_success()  # a success resets the count: failures must be consecutive
    for _ in range(3):
        assert breaker.acquire()
        breaker.record_failure()
    assert breaker.state == "open"
    assert not breaker.available() and not breaker.acquire()

    clock.now += 5
    assert breaker.is_probe_due()
    assert breaker.acquire()  # the probe
    assert breaker.state == "half-open"
    assert not breaker.acquire()  # one probe at a time
    breaker.record_failure()
    assert breaker.state == "open"  # a failed probe opens it again, for a full reset timeout
    clock.now += 4.9
    assert not breaker.available()
    clock.now += 0.1
    assert breaker.acquire()
    breaker.record_success()
    assert breaker.state == "closed"
    assert changes == [
        ("closed", "open"),
        ("open", "half-open"),
        ("half-open", "open"),
        ("open", "half-open"),
        ("half-open", "closed"),
    ]


def test_released_probe_lets_the_next_call_probe() -> None:
    clock = Clock()
    breaker = Breaker("u", failure_threshold=1, reset_timeout=1, clock=clock)
    breaker.acquire()
    breaker.record_failure()
    clock.now += 1
    assert breaker.acquire()
    breaker.release()  # e.g. the client went away
    assert breaker.acquire()


def test_disabled_breaker_never_opens() -> None:
    breaker = Breaker("u", failure_threshold=1, reset_timeout=1, enabled=False)
    for _ in range(50):
        assert breaker.acquire()
        breaker.record_failure()
    assert breaker.state == "closed"
    assert breaker.consecutive_failures == 50


def test_retry_budget_is_a_share_of_recent_requests() -> None:
    clock = Clock()
    budget = RetryBudget(ratio=0.25, min_retries=1, window=10, clock=clock)
    for _ in range(8):
        budget.record_request()
    assert budget.allowance() == 2
    assert budget.try_acquire() and budget.try_acquire()
    assert not budget.try_acquire()
    clock.now += 10.1  # the window slides: old requests and retries no longer count
    assert budget.allowance() == 1
    assert budget.try_acquire()
    assert not budget.try_acquire()


def test_full_jitter_backoff_stays_within_its_exponential_ceiling() -> None:
    assert full_jitter_backoff(1, 0.1, 1.0, rng=lambda lo, hi: hi) == pytest.approx(0.1)
    assert full_jitter_backoff(3, 0.1, 1.0, rng=lambda lo, hi: hi) == pytest.approx(0.4)
    assert full_jitter_backoff(10, 0.1, 1.0, rng=lambda lo, hi: hi) == pytest.approx(1.0)
    assert full_jitter_backoff(2, 0.0, 0.0) == 0.0
    samples = [full_jitter_backoff(2, 0.1, 1.0) for _ in range(200)]
    assert all(0 <= s <= 0.2 for s in samples)
    assert len(set(samples)) > 100  # jittered, not a fixed delay


def test_admission_queues_then_refuses() -> None:
    async def scenario() -> list[str]:
        admission = Admission(max_concurrency=1, max_queue=1)
        await admission.acquire(1.0)
        outcomes: list[str] = []

        async def waiter() -> None:
            await admission.acquire(1.0)
            outcomes.append("admitted")
            admission.release()

        task = asyncio.create_task(waiter())
        await asyncio.sleep(0)
        assert admission.waiting == 1
        with pytest.raises(QueueFull):
            await admission.acquire(1.0)
        admission.release()
        await task
        await admission.acquire(1.0)
        second = Admission(max_concurrency=1, max_queue=3)
        await second.acquire(1.0)
        with pytest.raises(QueueTimeout):
            await second.acquire(0.05)
        assert second.waiting == 0
        return outcomes

    assert asyncio.run(scenario()) == ["admitted"]


def test_traceparent_is_continued_or_started() -> None:
    incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    ctx = TraceContext.from_header(incoming)
    assert ctx.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert ctx.parent_id == "00f067aa0ba902b7"
    assert ctx.traceparent.startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-")
    assert ctx.span_id != "00f067aa0ba902b7"
    for bad in (
        None,
        "",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "nonsense",
    ):
        fresh = TraceContext.from_header(bad)
        assert len(fresh.trace_id) == 32 and fresh.parent_id is None
