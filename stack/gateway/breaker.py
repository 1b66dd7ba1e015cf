"""A circuit breaker per upstream.

Closed: calls pass; ``failure_threshold`` consecutive failures open it. Open: calls are refused
until ``reset_timeout`` has passed. Half-open: exactly one probe call is let through; its success
closes the breaker, its failure opens it again for another ``reset_timeout``.

Written here rather than taken from a library because a streamed model call only knows its
outcome when the stream ends, after the code that chose the upstream has returned, and because
half-open must admit one probe at a time under asyncio concurrency; pybreaker (the best-kept
option) wraps a synchronous call and admits every caller while half-open.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

__all__ = ["Breaker", "BreakerState"]

BreakerState = Literal["closed", "open", "half-open"]
StateListener = Callable[[str, BreakerState, BreakerState], None]


class Breaker:
    """Breaker state of one upstream. ``enabled=False`` makes a breaker that never opens."""

    def __init__(
        self,
        name: str,
        *,
        failure_threshold: int,
        reset_timeout: float,
        enabled: bool = True,
        on_change: StateListener | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.failure_threshold = failure_threshold
        self.reset_timeout = reset_timeout
        self.enabled = enabled
        self._on_change = on_change
        self._clock = clock
        self._state: BreakerState = "closed"
        self._failures = 0
        self._opened_at = 0.0
        self._probe_in_flight = False
        self.opened_count = 0

    @property
    def state(self) -> BreakerState:
        return self._state

    @property
    def consecutive_failures(self) -> int:
        return self._failures

    def available(self) -> bool:
        """Whether a call may be sent now, without claiming anything."""
        if self._state == "closed":
            return True
        if self._state == "open":
            return self._clock() - self._opened_at >= self.reset_timeout
        return not self._probe_in_flight

    def is_probe_due(self) -> bool:
        """Open long enough (or half-open and idle): the next call should probe this upstream."""
        return self._state != "closed" and self.available()

    def acquire(self) -> bool:
        """Claim the right to send one call; ``False`` if the breaker refuses it."""
        if not self.available():
            return False
        if self._state == "open":
            self._set("half-open")
        if self._state == "half-open":
            self._probe_in_flight = True
        return True

    def record_success(self) -> None:
        self._failures = 0
        self._probe_in_flight = False
        if self._state != "closed":
            self._set("closed")

    def record_failure(self) -> None:
        self._failures += 1
        was_probe = self._state == "half-open"
        self._probe_in_flight = False
        if not self.enabled:
            return
        if was_probe or (self._state == "closed" and self._failures >= self.failure_threshold):
            self._opened_at = self._clock()
            self.opened_count += 1
            self._set("open")

    def release(self) -> None:
        """Give back a claimed call that ended without telling anything about the upstream
        (the client went away, the request was invalid)."""
        self._probe_in_flight = False

    def _set(self, state: BreakerState) -> None:
        old, self._state = self._state, state
        if old != state and self._on_change is not None:
            self._on_change(self.name, old, state)
