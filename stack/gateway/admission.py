"""Bounded admission: at most ``max_concurrency`` requests reach the engines at once, at most
``max_queue`` wait at the gateway, in arrival order; the rest are refused at once.

The seed's advice, "prefer queueing at the gateway to scheduling jitter inside the engine": the
gateway's queue is visible, bounded and answers 429 with Retry-After when full.
"""

from __future__ import annotations

import asyncio

__all__ = ["Admission", "QueueFull", "QueueTimeout"]


class QueueFull(Exception):
    """The queue is full; the request was not admitted."""


class QueueTimeout(Exception):
    """The request waited its whole queue timeout without being admitted."""


class Admission:
    def __init__(self, *, max_concurrency: int, max_queue: int) -> None:
        self.max_concurrency = max_concurrency
        self.max_queue = max_queue
        self._slots = asyncio.Semaphore(max_concurrency)
        self.waiting = 0
        self.inflight = 0

    async def acquire(self, timeout: float) -> None:
        if self._slots.locked() or self.waiting:
            if self.waiting >= self.max_queue:
                raise QueueFull
            self.waiting += 1
            try:
                await asyncio.wait_for(self._slots.acquire(), timeout=max(timeout, 0.0))
            except TimeoutError:
                raise QueueTimeout from None
            finally:
                self.waiting -= 1
        else:
            await self._slots.acquire()
        self.inflight += 1

    def release(self) -> None:
        self.inflight -= 1
        self._slots.release()
