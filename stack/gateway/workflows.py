"""The gateway's workflow path (``POST /v1/workflow/run``, body ``{"workflow": KIND,
"question": ...}``), run by its orchestrator (``stack.gateway.orchestrator``).

Two kinds of workflow share the orchestrator's worker slots:

- ``brief``: a lead task (``write``) submits a ``research`` subtask, which searches the
  knowledge base on the tool server (``search_kb``, through the tools hop), and waits for it,
  holding its slot. The lead reads the research by reference and answers with the sections it
  found. Past the wait limit it answers the orchestrator's fallback text instead, and the
  research nobody waits for any more is cancelled.
- ``lookup``: one task, no dependency: the closest sections of the knowledge base, from the
  embedder and the vector DB (no tool server). These are the "other workflows" a stalled
  dependency must not starve.

The answer lists every task with its time queued, its time waiting for dependencies and its
outcome: the client's view of each wait, which the drill's checks read.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from stack.config import StackConfig
from stack.gateway.metrics import GatewayMetrics
from stack.gateway.orchestrator import (
    SUBTASK,
    DependencyCancelled,
    Orchestrator,
    QueueFull,
    Task,
    TaskTimeout,
    WaitLimit,
)
from stack.gateway.rag import TASK_ID, AgentPath, RagPath
from stack.rag.clients import HopFailure

__all__ = ["WORKFLOWS", "WorkflowPath"]

WORKFLOWS = ("brief", "lookup")
NO_LIMIT = 86400.0
"""A tool call's timeout when the policy sets none (``task_timeout: null``): a day."""


class WorkflowPath:
    def __init__(
        self, stack: StackConfig, metrics: GatewayMetrics, rag: RagPath, agent: AgentPath
    ) -> None:
        self.policy = stack.gateway.orchestrator
        self.metrics = metrics
        self.rag = rag
        self.agent = agent
        self.orchestrator = Orchestrator(
            self.policy.workers,
            wait_limit=self.policy.wait_limit,
            task_timeout=self.policy.task_timeout,
            max_queue=self.policy.max_queue,
            cancel_orphans=self.policy.cancel_orphans,
        )
        self._started = False

    def _start(self) -> None:
        if not self._started:  # in the server's event loop, at the first workflow
            self.orchestrator.start()
            self._started = True

    async def aclose(self) -> None:
        if self._started:
            await self.orchestrator.aclose()

    def observe(self) -> None:
        """The orchestrator's slots and queue, as gauges (read at each scrape)."""
        orchestrator = self.orchestrator
        self.metrics.orchestrator_slots.labels("busy").set(orchestrator.busy)
        self.metrics.orchestrator_slots.labels("waiting").set(orchestrator.waiting)
        self.metrics.orchestrator_queued.set(orchestrator.queued)

    async def run(self, payload: dict[str, Any], traceparent: str) -> tuple[int, dict[str, Any]]:
        """Status and body of one workflow."""
        self._start()
        kind = payload.get("workflow", "brief")
        question = payload.get("question")
        if kind not in WORKFLOWS:
            allowed = ", ".join(WORKFLOWS)
            return 400, {"error": {"message": f"workflow must be one of {allowed} (got {kind!r})"}}
        if not isinstance(question, str) or not question.strip():
            return 400, {"error": {"message": "the body needs a non-empty 'question' string"}}
        workflow_id = str(payload.get("workflow_id") or uuid.uuid4().hex[:16])
        if not TASK_ID.match(workflow_id):
            return 400, {"error": {"message": f"workflow_id must match {TASK_ID.pattern}"}}
        if kind == "brief":
            lead = self._brief(workflow_id, question, traceparent)
        else:
            lead = self._lookup(workflow_id, question, traceparent)
        try:
            task = self.orchestrator.submit(workflow_id, lead[0], lead[1])
        except QueueFull as full:
            self.metrics.workflows.labels(kind, "rejected").inc()
            return 429, {"error": {"message": f"orchestrator busy: {full}", "type": "busy"}}
        try:
            status, answer = await asyncio.shield(task.future)
        except (TaskTimeout, HopFailure, DependencyCancelled) as failure:
            status, answer = "error", f"{type(failure).__name__}: {failure}"
        outcome = status if status in ("done", "fallback") else "error"
        self.metrics.workflows.labels(kind, outcome).inc()
        tasks = [
            self.orchestrator.task(ref).summary()
            for ref in (f"{workflow_id}/{name}" for name in ("write", "research", "lookup"))
            if self._known(ref)
        ]
        body = {
            "workflow_id": workflow_id,
            "workflow": kind,
            "status": outcome,
            "answer": answer,
            "tasks": tasks,
        }
        if outcome == "error":
            return 502, {**body, "error": {"message": answer, "type": "workflow_error"}}
        return 200, body

    def _known(self, ref: str) -> bool:
        try:
            self.orchestrator.task(ref)
        except KeyError:
            return False
        return True

    def _brief(self, workflow_id: str, question: str, traceparent: str) -> tuple[str, Any]:
        orchestrator = self.orchestrator

        async def research(task: Task) -> list[str]:
            found = await self.agent.call_tool(
                "search_kb",
                {"query": question[:500], "k": 3},
                traceparent,
                self.policy.task_timeout or NO_LIMIT,
            )
            rows = found.get("result") if isinstance(found, dict) else None
            return [str(row["id"]) for row in rows or ()]

        async def write(task: Task) -> tuple[str, str]:
            sub = orchestrator.submit(
                workflow_id, "research", research, priority=SUBTASK, parent=task.ref
            )
            try:
                await orchestrator.wait(task, sub.ref)
            except (WaitLimit, TaskTimeout, DependencyCancelled, HopFailure):
                # Waited out, or the research failed: the degraded answer, not an error.
                return "fallback", self.policy.fallback_text
            ids = orchestrator.result(sub.ref)  # by reference: the research's own result
            return "done", "Brief: see " + (", ".join(ids) or "nothing found")

        return "write", write

    def _lookup(self, workflow_id: str, question: str, traceparent: str) -> tuple[str, Any]:
        async def lookup(task: Task) -> tuple[str, str]:
            deadline = time.monotonic() + (self.policy.task_timeout or NO_LIMIT)
            hits = await self.rag.retrieve(question, traceparent, deadline)
            return "done", "Closest sections: " + (", ".join(h.id for h in hits) or "none")

        return "lookup", lookup
