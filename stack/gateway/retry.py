"""Retry pacing: exponential backoff with full jitter, and a retry budget over a sliding window.

The budget is the defence against retry storms: under a sustained fault every request would
otherwise multiply its load on the upstreams by ``max_attempts``. Here retries in the last
``window`` seconds may not exceed ``max(min_retries, ratio * requests in the window)``.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable

__all__ = ["RetryBudget", "full_jitter_backoff"]


def full_jitter_backoff(
    retry: int, base: float, cap: float, rng: Callable[[float, float], float] = random.uniform
) -> float:
    """Delay before retry number ``retry`` (1 for the first retry): uniform in
    ``[0, min(cap, base * 2 ** (retry - 1))]`` ("full jitter")."""
    ceiling = min(cap, base * (2 ** max(retry - 1, 0)))
    return rng(0.0, ceiling) if ceiling > 0 else 0.0


class RetryBudget:
    def __init__(
        self,
        *,
        ratio: float,
        min_retries: int,
        window: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ratio = ratio
        self.min_retries = min_retries
        self.window = window
        self._clock = clock
        self._requests: deque[float] = deque()
        self._retries: deque[float] = deque()

    def _trim(self, now: float) -> None:
        horizon = now - self.window
        for events in (self._requests, self._retries):
            while events and events[0] < horizon:
                events.popleft()

    def record_request(self) -> None:
        now = self._clock()
        self._trim(now)
        self._requests.append(now)

    def allowance(self) -> int:
        now = self._clock()
        self._trim(now)
        return max(self.min_retries, int(self.ratio * len(self._requests)))

    def try_acquire(self) -> bool:
        """Spend one retry if the budget allows it."""
        now = self._clock()
        self._trim(now)
        if len(self._retries) >= max(self.min_retries, int(self.ratio * len(self._requests))):
            return False
        self._retries.append(now)
        return True
