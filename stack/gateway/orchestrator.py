"""The gateway's small orchestrator: a bounded pool of agent workers fed by a priority task
queue with dependencies (the multi-agent-wait drill's subject).

A workflow is a lead task that may submit subtasks and wait for them. Tasks pass each other
references (``<workflow_id>/<task name>``), never the texts: a task's result stays in the
orchestrator's store and a dependent task reads it by reference.

The seed's failure: two agents waited on each other forever and froze the orchestrator. A task
that waits for another holds its worker slot while it waits (an agent waiting on a sub-agent
does). When every slot is held by a task that waits, and what they wait for cannot get a slot
or never ends, nothing else is served. The policy that prevents it:

- ``wait_limit``: no task waits for a dependency longer than this; past it the wait ends with
  ``WaitLimit`` and the task answers its fallback (``null``, unsound: waits have no end);
- ``task_timeout``: no task runs longer than this (``null``, unsound: no end);
- a dependency whose every waiter gave up is cancelled (``cancel_orphans``), so its slot is
  freed for work someone still wants;
- subtasks go before new workflows in the queue (lower ``priority`` first), so that work
  already started finishes before more is taken on.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DependencyCancelled", "Orchestrator", "QueueFull", "Task", "TaskTimeout", "WaitLimit"]

SUBTASK = 0
"""Priority of a subtask (run first)."""
WORKFLOW = 1
"""Priority of a workflow's lead task."""


class QueueFull(Exception):
    """The task queue holds ``max_queue`` tasks: the workflow is refused (429)."""


class WaitLimit(Exception):
    """A task waited for a dependency past the wait limit."""

    def __init__(self, ref: str, waited: float) -> None:
        super().__init__(f"{ref} was not done within the wait limit ({waited:.2f}s waited)")
        self.ref = ref
        self.waited = waited


class DependencyCancelled(Exception):
    """The task waited for was cancelled (by another waiter's giving up, or at shutdown)."""


class TaskTimeout(Exception):
    """A task ran past the task timeout and was stopped."""


@dataclass
class Task:
    ref: str
    name: str
    priority: int
    run: Callable[[Task], Coroutine[Any, Any, Any]] = field(repr=False)
    future: asyncio.Future[Any] = field(repr=False)
    submitted: float
    parent: str | None = None
    started: float | None = None
    ended: float | None = None
    waited: float = 0.0
    """Seconds this task spent waiting for its dependencies."""
    outcome: str = "queued"
    """``queued``, ``running``, ``done``, ``failed``, ``timeout``, ``cancelled``."""
    waiters: int = 0
    handle: asyncio.Task[Any] | None = field(default=None, repr=False)

    def summary(self) -> dict[str, Any]:
        """What the workflow's answer says of this task: the client's view of every wait."""
        queued = (self.started if self.started is not None else time.monotonic()) - self.submitted
        return {
            "name": self.name,
            "ref": self.ref,
            "queued": round(queued, 4),
            "waited": round(self.waited, 4),
            "ran": round((self.ended or time.monotonic()) - (self.started or time.monotonic()), 4),
            "outcome": self.outcome,
        }


class Orchestrator:
    def __init__(
        self,
        workers: int,
        *,
        wait_limit: float | None,
        task_timeout: float | None,
        max_queue: int,
        cancel_orphans: bool = True,
        keep_results: int = 4096,
    ) -> None:
        self.workers = workers
        self.wait_limit = wait_limit
        self.task_timeout = task_timeout
        self.max_queue = max_queue
        self.cancel_orphans = cancel_orphans
        self.keep_results = keep_results
        self._queue: asyncio.PriorityQueue[tuple[int, int, Task]] = asyncio.PriorityQueue()
        self._seq = itertools.count()
        self._tasks: OrderedDict[str, Task] = OrderedDict()
        self._workers: list[asyncio.Task[None]] = []
        self.busy = 0
        self.waiting = 0
        """Tasks that hold a slot while they wait for a dependency."""

    # -- life --------------------------------------------------------------------------------

    def start(self) -> None:
        self._workers = [asyncio.create_task(self._worker()) for _ in range(self.workers)]

    async def aclose(self) -> None:
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        for task in self._tasks.values():
            if not task.future.done():
                task.future.cancel()

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    # -- tasks -------------------------------------------------------------------------------

    def submit(
        self,
        workflow_id: str,
        name: str,
        run: Callable[[Task], Coroutine[Any, Any, Any]],
        *,
        priority: int = WORKFLOW,
        parent: str | None = None,
    ) -> Task:
        """Queue a task; raises ``QueueFull`` past ``max_queue`` queued tasks. A subtask
        (``parent`` set) is never refused: its parent already holds a slot for it."""
        if parent is None and self._queue.qsize() >= self.max_queue:
            raise QueueFull(f"{self._queue.qsize()} tasks queued (max_queue {self.max_queue})")
        ref = f"{workflow_id}/{name}"
        task = Task(
            ref=ref,
            name=name,
            priority=priority,
            run=run,
            future=asyncio.get_running_loop().create_future(),
            submitted=time.monotonic(),
            parent=parent,
        )
        self._tasks[ref] = task
        while len(self._tasks) > self.keep_results:
            old_ref, old = next(iter(self._tasks.items()))
            if not old.future.done():
                break
            del self._tasks[old_ref]
        self._queue.put_nowait((priority, next(self._seq), task))
        return task

    def task(self, ref: str) -> Task:
        return self._tasks[ref]

    def result(self, ref: str) -> Any:
        """A done task's result, by reference (``KeyError``: no such task; raises what the
        task raised)."""
        return self._tasks[ref].future.result()

    async def wait(self, waiter: Task, ref: str) -> Any:
        """Wait, holding ``waiter``'s slot, until the task ``ref`` is done; its result. Past
        the wait limit: ``WaitLimit``, and the task is cancelled when no one else waits."""
        dependency = self._tasks[ref]
        began = time.monotonic()
        dependency.waiters += 1
        self.waiting += 1
        try:
            return await asyncio.wait_for(asyncio.shield(dependency.future), self.wait_limit)
        except TimeoutError:
            raise WaitLimit(ref, time.monotonic() - began) from None
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if dependency.future.cancelled() and not (me is not None and me.cancelling()):
                raise DependencyCancelled(f"{ref} was cancelled") from None
            raise
        finally:
            self.waiting -= 1
            dependency.waiters -= 1
            waiter.waited += time.monotonic() - began
            if dependency.waiters == 0 and not dependency.future.done() and self.cancel_orphans:
                self.cancel(ref)

    def cancel(self, ref: str) -> None:
        """Cancel a task: dropped from the queue when it gets there, stopped if it runs."""
        task = self._tasks[ref]
        if task.future.done():
            return
        task.outcome = "cancelled"
        task.future.cancel()
        if task.handle is not None:
            task.handle.cancel()

    # -- the pool ----------------------------------------------------------------------------

    async def _worker(self) -> None:
        while True:
            _, _, task = await self._queue.get()
            if task.future.done():  # cancelled while queued
                continue
            self.busy += 1
            try:
                await self._run(task)
            finally:
                self.busy -= 1

    async def _run(self, task: Task) -> None:
        task.started = time.monotonic()
        task.outcome = "running"
        task.handle = asyncio.create_task(task.run(task))
        try:
            result = await asyncio.wait_for(asyncio.shield(task.handle), self.task_timeout)
        except TimeoutError:
            task.handle.cancel()
            task.outcome = "timeout"
            if not task.future.done():
                task.future.set_exception(TaskTimeout(f"{task.ref} ran past the task timeout"))
        except asyncio.CancelledError:
            if task.handle.cancelled() or task.future.cancelled():
                task.outcome = "cancelled"
                if not task.future.done():
                    task.future.cancel()
            else:  # the worker itself is stopping
                task.handle.cancel()
                raise
        except Exception as exc:
            task.outcome = "failed"
            if not task.future.done():
                task.future.set_exception(exc)
        else:
            task.outcome = "done"
            if not task.future.done():
                task.future.set_result(result)
        finally:
            task.ended = time.monotonic()
            if task.future.done() and not task.future.cancelled():
                task.future.exception()  # retrieved: no "never retrieved" warning
