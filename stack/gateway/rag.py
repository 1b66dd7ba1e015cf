"""The gateway's RAG path and agent path, each with its own timeouts, retries and breakers.

RAG (``POST /v1/rag/answer``, body ``{"question": ...}``): embed the question on Triton,
retrieve the closest sections from the vector DB, generate an answer with them through the
model routing (primary, backup, fallback text). When retrieval fails, the answer is the
configured no-context text, marked ``missing_context: true``: the user is told there is no
context rather than given an error or an invented answer.

Agent (``POST /v1/agent/run``, body ``{"task": ..., "task_id": optional}``): a small
plan/tool/observe loop over the MCP tool server, at most ``max_steps`` tool calls. Each step is
checkpointed (``<state dir>/agent/<task_id>.json``) once it is done, so a task that stopped (a
crashed gateway, a saturated tool) resumes where it stopped when sent again with its
``task_id``: done steps are not called again. When a tool is saturated (its calls time out) or
its breaker is open, the task stops with the configured graceful text.

Every hop (``triton``, ``vectordb``, each tool as ``tools:<name>``) has a breaker; every retry
is paced with full-jitter backoff and paid from the path's retry budget.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from stack.config import BreakerPolicy, HopRetryPolicy, StackConfig
from stack.gateway.breaker import Breaker, BreakerState
from stack.gateway.metrics import GatewayMetrics
from stack.gateway.retry import RetryBudget, full_jitter_backoff
from stack.rag.clients import Hit, HopFailure, TritonEmbedder, first_leaf, make_store
from stack.state import write_json

__all__ = ["AgentPath", "HopPolicy", "RagPath", "plan_steps"]

logger = logging.getLogger("stack.gateway.rag")

T = TypeVar("T")
RETRYABLE = {
    "timeout",
    "connect",
    "transport",
    "busy",
    "http_429",
    "http_502",
    "http_503",
    "http_504",
}
TASK_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class HopPolicy:
    """Timeouts, bounded retries with backoff and a budget, and a breaker per hop."""

    def __init__(
        self,
        path: str,
        retries: HopRetryPolicy,
        breaker: BreakerPolicy | None,
        metrics: GatewayMetrics,
    ) -> None:
        self.path = path
        self.retries = retries
        self.breaker_policy = breaker
        self.metrics = metrics
        self.breakers: dict[str, Breaker] = {}
        budget = retries.budget
        self.budget = (
            RetryBudget(ratio=budget.ratio, min_retries=budget.min_retries, window=budget.window)
            if budget is not None
            else None
        )

    def breaker(self, hop: str) -> Breaker:
        if hop not in self.breakers:
            policy = self.breaker_policy
            self.breakers[hop] = Breaker(
                hop,
                failure_threshold=policy.failure_threshold if policy else 1,
                reset_timeout=policy.reset_timeout if policy else 0.0,
                enabled=policy is not None,
                on_change=self._changed,
            )
            self.metrics.breaker_state.labels(hop).set(0)
            # Counters born at zero, as Prometheus's instrumentation guide asks: a series
            # that first appears at its first failure has no rate, and an alert on that
            # rate never fires for a hop's first failures.
            for outcome in ("ok", "timeout", "breaker_open"):
                self.metrics.hop_attempts.labels(hop, outcome)
        return self.breakers[hop]

    def _changed(self, name: str, old: BreakerState, new: BreakerState) -> None:
        self.metrics.breaker_changed(name, old, new)

    async def call(
        self,
        hop: str,
        fn: Callable[[float], Awaitable[T]],
        *,
        timeout: float,
        deadline: float,
    ) -> T:
        """``fn(timeout)`` with retries of retryable failures; raises ``HopFailure``."""
        breaker = self.breaker(hop)
        if self.budget is not None:
            self.budget.record_request()
        attempt = 0
        while True:
            attempt += 1
            left = deadline - time.monotonic()
            if left <= 0:
                raise HopFailure(hop, "deadline")
            if not breaker.acquire():
                self.metrics.hop_attempts.labels(hop, "breaker_open").inc()
                raise HopFailure(hop, "breaker_open")
            budget = min(timeout, left)
            try:
                result = await asyncio.wait_for(fn(budget), budget)
            except (TimeoutError, HopFailure) as exc:
                reason = exc.reason if isinstance(exc, HopFailure) else "timeout"
                failure = exc if isinstance(exc, HopFailure) else HopFailure(hop, "timeout")
                self.metrics.hop_attempts.labels(hop, reason).inc()
                if reason not in RETRYABLE:
                    breaker.release()
                    raise failure from None
                breaker.record_failure()
                limit = self.retries.max_attempts
                if limit is not None and attempt >= limit:
                    raise failure from None
                if self.budget is not None and not self.budget.try_acquire():
                    self.metrics.budget_exhausted.inc()
                    raise failure from None
                self.metrics.retries.labels(hop).inc()
                delay = full_jitter_backoff(
                    attempt, self.retries.backoff_base, self.retries.backoff_max
                )
                if time.monotonic() + delay >= deadline:
                    raise failure from None
                await asyncio.sleep(delay)
                continue
            except BaseException:
                breaker.release()
                raise
            breaker.record_success()
            self.metrics.hop_attempts.labels(hop, "ok").inc()
            return result


def _trace_headers(traceparent: str) -> dict[str, str]:
    return {"traceparent": traceparent}


class RagPath:
    def __init__(
        self,
        stack: StackConfig,
        metrics: GatewayMetrics,
        generate: Callable[[list[dict[str, str]], int, str, float], Awaitable[tuple[str, str]]],
    ) -> None:
        assert stack.rag is not None
        self.stack = stack
        self.policy = stack.gateway.rag
        self.metrics = metrics
        self.generate = generate
        host = stack.gateway.upstream_host or stack.host
        rag = stack.rag
        self.http = httpx.AsyncClient(limits=httpx.Limits(max_connections=64))
        self.embedder = TritonEmbedder(
            f"http://{host}:{rag.embedder.proxy_port}", self.http, hop=rag.embedder.name
        )
        self.store = make_store(
            rag.vector_db.kind,
            f"http://{host}:{rag.vector_db.proxy_port}",
            rag.vector_db.collection,
            self.http,
            hop=rag.vector_db.name,
            api_key=rag.vector_db.api_key,
        )
        self.hops = HopPolicy("rag", self.policy.retries, self.policy.breaker, metrics)
        self.breaker_names = (rag.embedder.name, rag.vector_db.name)
        for name in self.breaker_names:
            self.hops.breaker(name)
        for outcome in ("context", "no_context", "error"):
            self.metrics.rag_answers.labels(outcome)  # born at zero (HopPolicy.breaker: why)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def retrieve(self, question: str, traceparent: str, deadline: float) -> list[Hit]:
        timeouts = self.policy.timeouts
        headers = _trace_headers(traceparent)
        vectors = await self.hops.call(
            self.embedder.hop,
            lambda t: self.embedder.embed([question], timeout=t, headers=headers),
            timeout=timeouts.embed,
            deadline=deadline,
        )
        return await self.hops.call(
            self.store.hop,
            lambda t: self.store.query(vectors[0], self.policy.top_k, timeout=t),
            timeout=timeouts.retrieve,
            deadline=deadline,
        )

    async def answer(self, payload: dict[str, Any], traceparent: str) -> tuple[int, dict[str, Any]]:
        """Status and body of one RAG answer."""
        started = time.monotonic()
        timeouts = self.policy.timeouts
        deadline = started + timeouts.request
        question = payload.get("question")
        if not isinstance(question, str) or not question.strip():
            return 400, {"error": {"message": "the body needs a non-empty 'question' string"}}
        max_tokens = int(payload.get("max_tokens") or self.policy.max_tokens)
        try:
            hits = await self.retrieve(question, traceparent, deadline)
        except HopFailure as failure:
            reason = f"{failure.hop}:{failure.reason}"
            logger.warning("retrieval failed (%s); answering without context", reason)
            if self.policy.no_context_text is None:
                self.metrics.rag_answers.labels("error").inc()
                status = 504 if failure.reason in {"timeout", "deadline"} else 502
                return status, {
                    "error": {"message": f"retrieval failed: {reason}", "type": "retrieval_error"}
                }
            self.metrics.rag_answers.labels("no_context").inc()
            return 200, {
                "answer": self.policy.no_context_text,
                "missing_context": True,
                "reason": reason,
                "context": [],
                "route": "no_context",
            }
        context = "\n\n".join(f"[{h.id}] {h.text[:600]}" for h in hits)
        messages = [
            {
                "role": "system",
                "content": "Answer in one sentence using only the context below.\n" + context,
            },
            {"role": "user", "content": question},
        ]
        text, route = await self.generate(messages, max_tokens, traceparent, deadline)
        self.metrics.rag_answers.labels("context").inc()
        return 200, {
            "answer": text,
            "missing_context": False,
            "context": [{"id": h.id, "title": h.title, "distance": h.distance} for h in hits],
            "route": route,
        }


@dataclass
class Step:
    tool: str
    arguments: dict[str, Any]


def plan_steps(task: str) -> list[str]:
    """The tools a task needs, in order: the knowledge base first; then the report tables
    (when the task asks about incidents or past drills) and a message (when it asks to tell
    someone), in the order the task names them."""
    lowered = task.lower()
    cues = {
        "read_report_table": re.search(r"incident|report|history|past drill|table", lowered),
        "send_message": re.search(r"notify|send|message|tell|page ", lowered),
    }
    named = sorted((m.start(), tool) for tool, m in cues.items() if m is not None)
    return ["search_kb", *(tool for _, tool in named)]


@dataclass
class Checkpoint:
    task_id: str
    task: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    status: str = "running"

    def as_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "task": self.task,
            "steps": self.steps,
            "status": self.status,
            "updated": time.time(),
        }


class AgentPath:
    def __init__(self, stack: StackConfig, metrics: GatewayMetrics, state_dir: Path) -> None:
        assert stack.rag is not None
        self.stack = stack
        self.policy = stack.gateway.agent
        self.metrics = metrics
        host = stack.gateway.upstream_host or stack.host
        self.hop = stack.rag.tools.name
        self.url = f"http://{host}:{stack.rag.tools.proxy_port}/mcp"
        self.hops = HopPolicy("agent", self.policy.retries, self.policy.breaker, metrics)
        for tool in ("search_kb", "read_report_table", "send_message"):
            self.hops.breaker(f"{self.hop}:{tool}")
            for outcome in ("ok", "timeout", "breaker_open", "deadline"):
                self.metrics.tool_calls.labels(tool, outcome)  # born at zero, as above
        self.dir = state_dir / "agent"
        self.dir.mkdir(parents=True, exist_ok=True)

    def _load(self, task_id: str, task: str) -> tuple[Checkpoint, bool]:
        path = self.dir / f"{task_id}.json"
        if self.policy.checkpoints and path.exists():
            data = json.loads(path.read_text())
            return Checkpoint(task_id, data["task"], data["steps"], data["status"]), True
        return Checkpoint(task_id, task), False

    def _save(self, checkpoint: Checkpoint) -> None:
        if not self.policy.checkpoints:
            return
        write_json(self.dir / f"{checkpoint.task_id}.json", checkpoint.as_json())

    async def _call_tool(
        self, tool: str, arguments: dict[str, Any], traceparent: str, timeout: float
    ) -> Any:
        headers = {"x-agent-id": self.policy.agent_id, "traceparent": traceparent}
        try:
            async with (
                httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
                Client(streamable_http_client(self.url, http_client=http)) as client,
            ):
                result = await client.call_tool(tool, arguments, read_timeout_seconds=timeout)
        except* MCPError as group:
            error = first_leaf(group)
            assert isinstance(error, MCPError)
            reason = {-32003: "denied", -32004: "busy"}.get(error.code, "mcp_error")
            raise HopFailure(f"{self.hop}:{tool}", reason, error.message) from None
        except* (httpx2.TimeoutException, TimeoutError):
            raise HopFailure(f"{self.hop}:{tool}", "timeout") from None
        except* httpx2.ConnectError:
            raise HopFailure(f"{self.hop}:{tool}", "connect") from None
        except* (httpx2.HTTPError, OSError) as group:
            raise HopFailure(f"{self.hop}:{tool}", "transport", str(first_leaf(group))) from None
        if result.is_error:
            text = " ".join(getattr(c, "text", "") for c in result.content)
            raise HopFailure(f"{self.hop}:{tool}", "http_503", text[:200])
        return result.structured_content

    async def call_tool(
        self, tool: str, arguments: dict[str, Any], traceparent: str, timeout: float
    ) -> Any:
        """One tool call on the tool server, as this agent, without retries (the workflow
        path's own tasks are bounded by its orchestrator's policy); raises ``HopFailure``."""
        return await self._call_tool(tool, arguments, traceparent, timeout)

    def _arguments(self, tool: str, checkpoint: Checkpoint, index: int) -> dict[str, Any]:
        if tool == "search_kb":
            return {"query": checkpoint.task[:500], "k": 3}
        if tool == "read_report_table":
            table = "drill_results" if "drill" in checkpoint.task.lower() else "incidents"
            return {"table": table, "limit": 5}
        return {
            "to": "oncall",
            "text": f"Agent task {checkpoint.task_id}: {self._summary(checkpoint)}"[:1000],
            "idempotency_key": (
                f"{checkpoint.task_id}:{index}" if self.policy.stable_keys else uuid.uuid4().hex
            ),
        }

    @staticmethod
    def _summary(checkpoint: Checkpoint) -> str:
        parts = []
        for step in checkpoint.steps:
            result = step.get("result") or {}
            rows = result.get("result") if isinstance(result, dict) else None
            if step["tool"] == "search_kb" and rows:
                parts.append("see " + ", ".join(r["id"] for r in rows))
            elif step["tool"] == "read_report_table" and rows:
                parts.append(f"{len(rows)} rows of {step['arguments']['table']}")
            elif step["tool"] == "send_message":
                parts.append(f"message to {step['arguments']['to']} sent")
        return "; ".join(parts) or "nothing found"

    async def run(self, payload: dict[str, Any], traceparent: str) -> tuple[int, dict[str, Any]]:
        # Long on purpose: One agent task's loop (plan, tool call, observe, checkpoint) with its
        # deadline, step limit and graceful stop: the order of those guards is the behaviour, read
        # top to bottom.
        started = time.monotonic()
        deadline = started + self.policy.timeouts.request
        task = payload.get("task")
        if not isinstance(task, str) or not task.strip():
            return 400, {"error": {"message": "the body needs a non-empty 'task' string"}}
        task_id = str(payload.get("task_id") or uuid.uuid4().hex)
        if not TASK_ID.match(task_id):
            return 400, {"error": {"message": f"task_id {task_id!r} must match {TASK_ID.pattern}"}}
        checkpoint, resumed = self._load(task_id, task)
        done_before = len(checkpoint.steps)
        if resumed:
            self.metrics.agent_resumed.inc()
        if checkpoint.status in ("done", "step_limit"):
            return 200, self._body(checkpoint, done_before, resumed)
        checkpoint.status = "running"
        planned = plan_steps(checkpoint.task)
        for index, tool in enumerate(planned):
            if index < len(checkpoint.steps):
                continue  # done before the task stopped: not called again
            if index >= self.policy.max_steps:
                checkpoint.status = "step_limit"
                break
            arguments = self._arguments(tool, checkpoint, index)
            hop = f"{self.hop}:{tool}"
            began = time.monotonic()
            try:
                result = await self.hops.call(
                    hop,
                    functools.partial(self._call_tool, tool, arguments, traceparent),
                    timeout=self.policy.timeouts.tool_call,
                    deadline=deadline,
                )
            except HopFailure as failure:
                self.metrics.tool_calls.labels(tool, failure.reason).inc()
                checkpoint.status = "interrupted"
                self._save(checkpoint)
                logger.warning("agent task %s stopped at step %d: %s", task_id, index, failure)
                if self.policy.graceful_text is None:
                    self.metrics.agent_tasks.labels("error").inc()
                    status = 504 if failure.reason in {"timeout", "deadline"} else 502
                    return status, {
                        "error": {
                            "message": f"tool {tool} failed: {failure.reason}",
                            "type": "tool_error",
                        },
                        "task_id": task_id,
                    }
                self.metrics.agent_tasks.labels("graceful").inc()
                body = self._body(checkpoint, done_before, resumed)
                body.update(
                    answer=self.policy.graceful_text,
                    status="graceful",
                    reason=f"{hop}:{failure.reason}",
                )
                return 200, body
            self.metrics.tool_calls.labels(tool, "ok").inc()
            checkpoint.steps.append(
                {
                    "tool": tool,
                    "arguments": arguments,
                    "result": result,
                    "duration": round(time.monotonic() - began, 4),
                }
            )
            self._save(checkpoint)
        if checkpoint.status != "step_limit":
            checkpoint.status = "done"
        self._save(checkpoint)
        self.metrics.agent_tasks.labels(checkpoint.status).inc()
        return 200, self._body(checkpoint, done_before, resumed)

    def _body(self, checkpoint: Checkpoint, done_before: int, resumed: bool) -> dict[str, Any]:
        answer = self._summary(checkpoint)
        if checkpoint.status == "step_limit":
            answer = f"Stopped at the step limit ({self.policy.max_steps}): {answer}"
        return {
            "task_id": checkpoint.task_id,
            "status": checkpoint.status,
            "answer": answer,
            "resumed": resumed,
            "resumed_from": done_before if resumed else 0,
            "steps": [
                {"tool": s["tool"], "arguments": s["arguments"], "duration": s["duration"]}
                for s in checkpoint.steps
            ],
        }
