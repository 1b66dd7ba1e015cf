"""The MCP tool server: the agent tools of the seed's stack, over streamable HTTP.

Tools (official MCP Python SDK, ``MCPServer``):

- ``search_kb(query, k)``: the knowledge base (the runbooks), embedded on Triton and searched in
  the vector DB;
- ``read_report_table(table, limit)``: rows of a report table, from a SQLite file opened
  read-only (``mode=ro``): least privilege is enforced by the connection, not by convention;
- ``send_message(to, text, idempotency_key)``: appends to the outbox (one JSON line per message);
  a retried send with the same key is not delivered twice.

Every call goes through one interception layer (``Interceptor``, an SDK server middleware) that:
checks the calling agent (header ``x-agent-id``) may use the tool (``rag.tools.agents``);
bounds how many calls of each tool run at once (``rag.tools.capacity``; the rest wait, as on a
backend's pool, at most ``rag.tools.max_wait``, then are refused as busy); and appends an
audit record to ``audit.jsonl``: who, parameters, outcome,
result (truncated), duration, time queued, trace id (from ``traceparent``). Counters of the
same events are served at ``/metrics``; ``/health`` answers when the server is up.

    python -m stack.rag.tools --config STACK.yaml --state-dir DIR
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from stack.config import StackConfig, load_stack_config
from stack.rag.clients import HopFailure, TritonEmbedder, make_store

__all__ = ["Interceptor", "ToolServer", "build_server", "main"]

logger = logging.getLogger("stack.rag.tools")

PERMISSION_DENIED = -32003
TOOL_BUSY = -32004
REPORT_TABLES = {
    "incidents": ("id", "opened", "service", "severity", "summary"),
    "drill_results": ("drill", "run_at", "verdict", "failed_checks"),
}
_INCIDENTS = [
    (1, "2026-10-02", "gateway", "sev2", "evening peak pushed p95 latency from 200 ms to 4 s"),
    (2, "2026-10-19", "vllm", "sev1", "GPU memory filled and the engine restarted"),
    (3, "2026-11-04", "vectordb", "sev2", "vector DB unreachable for 6 minutes"),
    (4, "2026-11-21", "tools", "sev3", "retry storm on the search tool during a load test"),
]
_DRILLS = [
    ("inference-latency", "2026-11-28", "pass", ""),
    ("gpu-pod-loss", "2026-11-28", "pass", ""),
    ("vector-db-outage", "2026-11-29", "fail", "missing_context_share"),
]


def _trace_id(headers: Mapping[str, str]) -> str | None:
    parent = headers.get("traceparent") or ""
    parts = parent.split("-")
    return parts[1] if len(parts) >= 4 and len(parts[1]) == 32 else None


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.calls = Counter(
            "drills_tools_calls",
            "Tool calls received, by tool, calling agent and outcome",
            ["tool", "agent", "outcome"],
            registry=r,
        )
        self.received = Counter(
            "drills_tools_received",
            "Tool calls received, counted on arrival (before any wait), by tool and agent",
            ["tool", "agent"],
            registry=r,
        )
        self.seconds = Histogram(
            "drills_tools_call_seconds",
            "Tool call duration at the server, queueing included",
            ["tool"],
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15),
            registry=r,
        )
        self.inflight = Gauge("drills_tools_inflight", "Calls running", ["tool"], registry=r)
        self.waiting = Gauge(
            "drills_tools_waiting", "Calls waiting for the tool's capacity", ["tool"], registry=r
        )


class Interceptor:
    """The one layer every tool call passes: permissions, capacity, audit."""

    def __init__(
        self,
        agents: dict[str, list[str]],
        capacity: dict[str, int],
        audit_path: Path,
        metrics: Metrics,
        max_wait: float = 5.0,
    ) -> None:
        self.agents = {agent: set(tools) for agent, tools in agents.items()}
        self.capacity = capacity
        self.max_wait = max_wait
        self.limits: dict[str, asyncio.Semaphore] = {}
        self.audit_path = audit_path
        self.metrics = metrics
        self._lock = threading.Lock()
        audit_path.parent.mkdir(parents=True, exist_ok=True)

    def _audit(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, default=str) + "\n"
        with self._lock, open(self.audit_path, "a", encoding="utf-8") as out:
            out.write(line)

    def _limit(self, tool: str) -> asyncio.Semaphore:
        if tool not in self.limits:
            self.limits[tool] = asyncio.Semaphore(self.capacity.get(tool, 4))
        return self.limits[tool]

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        # Long on purpose: The one interception layer: permission, capacity, audit and outcome of a
        # tool call in the order the seed asks for them.
        if ctx.method != "tools/call":
            return await call_next(ctx)
        headers: Mapping[str, str] = ctx.request.headers if ctx.request is not None else {}
        agent = headers.get("x-agent-id") or "anonymous"
        params = dict(ctx.params or {})
        tool = str(params.get("name", ""))
        arguments = params.get("arguments") or {}
        record: dict[str, Any] = {
            "time": time.time(),
            "agent": agent,
            "tool": tool,
            "params": arguments,
            "trace_id": _trace_id(headers),
            "request_id": ctx.request_id,
        }
        started = time.monotonic()
        self.metrics.received.labels(tool, agent).inc()
        if tool not in self.agents.get(agent, set()):
            record.update(outcome="denied", duration=0.0, queued=0.0, result=None)
            record["reason"] = f"agent {agent!r} may not call {tool!r}"
            self.metrics.calls.labels(tool, agent, "denied").inc()
            self._audit(record)
            raise MCPError(PERMISSION_DENIED, f"permission denied: {record['reason']}")
        limit = self._limit(tool)
        self.metrics.waiting.labels(tool).inc()
        outcome, result, queued = "error", None, 0.0
        try:
            try:
                await asyncio.wait_for(limit.acquire(), self.max_wait)
            except TimeoutError:
                outcome = "busy"
                result = f"{tool} is saturated: no capacity within {self.max_wait:g}s"
                raise MCPError(TOOL_BUSY, f"tool busy: {result}") from None
            finally:
                queued = time.monotonic() - started
                self.metrics.waiting.labels(tool).dec()
            self.metrics.inflight.labels(tool).inc()
            try:
                answer = await call_next(ctx)
            finally:
                self.metrics.inflight.labels(tool).dec()
                limit.release()
            data = answer.model_dump(mode="json") if isinstance(answer, BaseModel) else answer
            outcome = "error" if isinstance(data, dict) and data.get("isError") else "ok"
            result = json.dumps(data, default=str)[:300]
            return answer
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except Exception as exc:
            if outcome != "busy":
                result = f"{type(exc).__name__}: {exc}"[:300]
            raise
        finally:
            duration = time.monotonic() - started
            record.update(outcome=outcome, duration=duration, queued=queued, result=result)
            self.metrics.calls.labels(tool, agent, outcome).inc()
            self.metrics.seconds.labels(tool).observe(duration)
            self._audit(record)


class ToolServer:
    """The tools' backends: the knowledge base, the report database, the outbox."""

    def __init__(self, stack: StackConfig, state_dir: Path) -> None:
        assert stack.rag is not None
        self.stack = stack
        self.rag = stack.rag
        self.dir = state_dir / "tools"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.reports = self.dir / "reports.sqlite"
        self.outbox = self.dir / "outbox.jsonl"
        self._outbox_lock = threading.Lock()
        self._make_reports()
        self.http = httpx.AsyncClient()
        host = stack.host
        # The tool's own backends, reached directly: the drill's hops are the gateway's.
        self.embedder = TritonEmbedder(f"http://{host}:{self.rag.embedder.port}", self.http)
        self.store = make_store(
            self.rag.vector_db.kind,
            f"http://{host}:{self.rag.vector_db.port}",
            self.rag.vector_db.collection,
            self.http,
            api_key=self.rag.vector_db.api_key,
        )

    def _make_reports(self) -> None:
        if self.reports.exists():
            return
        tmp = self.reports.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        with sqlite3.connect(tmp) as db:
            db.execute(
                "CREATE TABLE incidents (id INTEGER PRIMARY KEY, opened TEXT, service TEXT, "
                "severity TEXT, summary TEXT)"
            )
            db.executemany("INSERT INTO incidents VALUES (?, ?, ?, ?, ?)", _INCIDENTS)
            db.execute(
                "CREATE TABLE drill_results (drill TEXT, run_at TEXT, verdict TEXT, "
                "failed_checks TEXT)"
            )
            db.executemany("INSERT INTO drill_results VALUES (?, ?, ?, ?)", _DRILLS)
        tmp.rename(self.reports)

    def read_only(self) -> sqlite3.Connection:
        """The report database, opened read-only: a write raises, whatever the SQL says."""
        return sqlite3.connect(f"file:{self.reports}?mode=ro", uri=True)

    async def search_kb(self, query: str, k: int = 3) -> list[dict[str, Any]]:
        k = max(1, min(int(k), 10))
        try:
            vector = (await self.embedder.embed([query], timeout=5.0))[0]
            hits = await self.store.query(vector, k, timeout=5.0)
        except HopFailure as failure:
            raise RuntimeError(f"knowledge base unavailable: {failure}") from failure
        return [
            {"id": h.id, "title": h.title, "distance": round(h.distance, 4), "text": h.text[:400]}
            for h in hits
        ]

    def read_report_table(self, table: str, limit: int = 5) -> list[dict[str, Any]]:
        if table not in REPORT_TABLES:
            raise ValueError(f"unknown table {table!r}; tables: {', '.join(REPORT_TABLES)}")
        columns = REPORT_TABLES[table]
        limit = max(1, min(int(limit), 100))
        with self.read_only() as db:
            rows = db.execute(
                f"SELECT {', '.join(columns)} FROM {table} LIMIT ?",
                (limit,),
            ).fetchall()
        return [dict(zip(columns, row, strict=True)) for row in rows]

    def send_message(self, to: str, text: str, idempotency_key: str) -> dict[str, Any]:
        if not idempotency_key:
            raise ValueError("idempotency_key is required: a retried send must not be sent twice")
        with self._outbox_lock:
            if self.outbox.exists():
                for line in self.outbox.read_text(encoding="utf-8").splitlines():
                    if json.loads(line).get("idempotency_key") == idempotency_key:
                        return {"delivered": False, "duplicate": True, "key": idempotency_key}
            message = {"time": time.time(), "to": to, "text": text[:2000]}
            message["idempotency_key"] = idempotency_key
            with open(self.outbox, "a", encoding="utf-8") as out:
                out.write(json.dumps(message) + "\n")
        return {"delivered": True, "duplicate": False, "key": idempotency_key}


def build_server(stack: StackConfig, state_dir: Path) -> tuple[MCPServer, ToolServer, Metrics]:
    assert stack.rag is not None
    tools = ToolServer(stack, state_dir)
    metrics = Metrics()
    interceptor = Interceptor(
        stack.rag.tools.agents,
        stack.rag.tools.capacity,
        tools.dir / "audit.jsonl",
        metrics,
        stack.rag.tools.max_wait,
    )
    server = MCPServer("drills-tools", version="1", middleware=[interceptor])

    @server.tool(description="Search the knowledge base (the runbooks); the k closest sections.")
    async def search_kb(query: str, k: int = 3) -> list[dict[str, Any]]:
        return await tools.search_kb(query, k)

    @server.tool(description="Read rows of a report table (read-only): incidents, drill_results.")
    def read_report_table(table: str, limit: int = 5) -> list[dict[str, Any]]:
        return tools.read_report_table(table, limit)

    @server.tool(description="Send a message to a person or channel (written to the outbox).")
    def send_message(to: str, text: str, idempotency_key: str) -> dict[str, Any]:
        return tools.send_message(to, text, idempotency_key)

    @server.custom_route("/health", methods=["GET"])
    async def health(request: Request) -> Response:
        return JSONResponse(
            {"status": "ok", "tools": ["search_kb", "read_report_table", "send_message"]}
        )

    @server.custom_route("/metrics", methods=["GET"])
    async def metrics_endpoint(request: Request) -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return server, tools, metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True)
    parser.add_argument("--state-dir", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    stack = load_stack_config(args.config)
    if stack.rag is None:
        raise SystemExit(f"{args.config}: the stack has no 'rag' section, so no tool server")
    server, _, _ = build_server(stack, Path(args.state_dir))
    app = server.streamable_http_app(stateless_http=True, json_response=True, host=stack.host)
    # Imported here: the server only when the tool server is run, not when its parts are read.
    import uvicorn

    uvicorn.run(
        app, host=stack.host, port=stack.rag.tools.port, log_level="warning", access_log=False
    )


if __name__ == "__main__":
    main()
