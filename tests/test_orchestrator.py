"""The gateway's orchestrator (stack.gateway.orchestrator), in-process: the pool, the priority
queue, waits by reference, and the seed's freeze (every slot held by a task that waits for work
that cannot get a slot) with and without the wait limit."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from stack.gateway.orchestrator import (
    SUBTASK,
    Orchestrator,
    QueueFull,
    Task,
    TaskTimeout,
    WaitLimit,
)


def pool(workers: int = 2, **policy: Any) -> Orchestrator:
    settings: dict[str, Any] = {"wait_limit": None, "task_timeout": None, "max_queue": 16}
    settings.update(policy)
    orchestrator = Orchestrator(workers, **settings)
    orchestrator.start()
    return orchestrator


def lead(orchestrator: Orchestrator, workflow: str, sub_seconds: float = 0.0) -> Any:
    """A workflow's lead: submits its research subtask and waits for it, holding its slot;
    answers from the research's result (read by reference) or, past the wait limit, its
    fallback."""

    async def research(task: Task) -> str:
        await asyncio.sleep(sub_seconds)
        return f"facts for {workflow}"

    async def write(task: Task) -> str:
        sub = orchestrator.submit(workflow, "research", research, priority=SUBTASK, parent=task.ref)
        try:
            await orchestrator.wait(task, sub.ref)
        except WaitLimit:
            return "fallback"
        return "brief from " + str(orchestrator.result(sub.ref))

    return write


async def quick(task: Task) -> str:
    return "looked up"


def test_leads_waiting_in_every_slot_freeze_the_pool_without_a_wait_limit() -> None:
    async def main() -> None:
        orchestrator = pool(2)
        first = orchestrator.submit("wf1", "write", lead(orchestrator, "wf1"))
        second = orchestrator.submit("wf2", "write", lead(orchestrator, "wf2"))
        await asyncio.sleep(0.05)  # both leads took a slot before their research was queued
        other = orchestrator.submit("wf3", "lookup", quick)
        await asyncio.sleep(0.5)
        # Frozen: both slots wait, the research tasks and the other workflow never run.
        assert orchestrator.busy == 2 and orchestrator.waiting == 2
        assert not first.future.done() and not second.future.done() and not other.future.done()
        assert orchestrator.task("wf1/research").outcome == "queued"
        await orchestrator.aclose()

    asyncio.run(main())


def test_the_wait_limit_ends_the_freeze_and_the_orphaned_research_is_cancelled() -> None:
    async def main() -> None:
        orchestrator = pool(2, wait_limit=0.2)
        first = orchestrator.submit("wf1", "write", lead(orchestrator, "wf1"))
        second = orchestrator.submit("wf2", "write", lead(orchestrator, "wf2"))
        await asyncio.sleep(0.05)
        other = orchestrator.submit("wf3", "lookup", quick)
        assert await asyncio.wait_for(other.future, 2) == "looked up"
        assert await first.future == "fallback" and await second.future == "fallback"
        assert 0.2 <= first.waited < 0.4, first.waited
        # Nobody waits for the research any more: cancelled in the queue, never run.
        research = orchestrator.task("wf1/research")
        assert research.outcome == "cancelled" and research.started is None
        assert orchestrator.busy == 0 and orchestrator.waiting == 0
        await orchestrator.aclose()

    asyncio.run(main())


def test_subtasks_go_before_queued_workflows_and_results_pass_by_reference() -> None:
    async def main() -> None:
        orchestrator = pool(1)
        order: list[str] = []

        async def research(task: Task) -> list[str]:
            order.append(task.ref)
            return ["kb-1", "kb-2"]

        async def write(task: Task) -> str:
            order.append(task.ref)
            sub = orchestrator.submit(
                "wf1", "research", research, priority=SUBTASK, parent=task.ref
            )
            # One slot, held by this lead: the research cannot run until the lead lets go, so
            # this lead only records the reference and returns it; the caller reads it later.
            return sub.ref

        async def later(task: Task) -> str:
            order.append(task.ref)
            return "done"

        ref = await orchestrator.submit("wf1", "write", write).future
        queued = orchestrator.submit("wf2", "lookup", later)
        await queued.future
        assert order == ["wf1/write", "wf1/research", "wf2/lookup"]
        assert orchestrator.result(ref) == ["kb-1", "kb-2"]
        await orchestrator.aclose()

    asyncio.run(main())


def test_a_task_past_the_task_timeout_is_stopped_and_its_slot_freed() -> None:
    async def main() -> None:
        orchestrator = pool(1, task_timeout=0.1)

        async def hangs(task: Task) -> None:
            await asyncio.sleep(30)

        stuck = orchestrator.submit("wf1", "hang", hangs)
        after = orchestrator.submit("wf2", "lookup", quick)
        with pytest.raises(TaskTimeout):
            await asyncio.wait_for(stuck.future, 2)
        assert await asyncio.wait_for(after.future, 2) == "looked up"
        assert stuck.outcome == "timeout"
        await orchestrator.aclose()

    asyncio.run(main())


def test_workflows_past_max_queue_are_refused_but_subtasks_never() -> None:
    async def main() -> None:
        orchestrator = Orchestrator(1, wait_limit=None, task_timeout=None, max_queue=2)
        # Not started: nothing leaves the queue.
        orchestrator.submit("wf1", "lookup", quick)
        orchestrator.submit("wf2", "lookup", quick)
        with pytest.raises(QueueFull, match=r"2 tasks queued \(max_queue 2\)"):
            orchestrator.submit("wf3", "lookup", quick)
        orchestrator.submit("wf1", "research", quick, priority=SUBTASK, parent="wf1/lookup")
        assert orchestrator.queued == 3
        await orchestrator.aclose()

    asyncio.run(main())
