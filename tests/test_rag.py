"""RAG and agent tools against the real stack: Triton serving all-MiniLM-L6-v2, Chroma seeded
with the runbooks, the MCP tool server, every hop behind its own Toxiproxy proxy, and the
gateway's RAG and agent paths."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from drills.common.system import pid_alive
from drills.common.toxiproxy import Toxic, ToxiproxyClient
from drills.probes import parse_samples
from drills.probes.retrieval import RecallProbe
from injectors import InjectionContext, build
from injectors.tool import revert_entry
from stack.rag.clients import first_leaf
from stack.rag.corpus import load_corpus
from tests.conftest import LiveGateway, RunningStack, free_port

pytestmark = pytest.mark.stack


def tools_url(stack: RunningStack) -> str:
    assert stack.config.rag is not None
    return f"http://{stack.config.host}:{stack.config.rag.tools.port}"


def call_tool(
    stack: RunningStack, agent: str, tool: str, arguments: dict[str, Any], trace_id: str
) -> Any:
    """One MCP call straight to the tool server (streamable HTTP, the official client)."""

    async def go() -> Any:
        headers = {"x-agent-id": agent, "traceparent": f"00-{trace_id}-{'1' * 16}-01"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=10) as http,
            Client(streamable_http_client(f"{tools_url(stack)}/mcp", http_client=http)) as c,
        ):
            return await c.call_tool(tool, arguments)

    try:
        return asyncio.run(go())
    except* MCPError as group:  # the client's task group wraps the server's error
        raise first_leaf(group) from None


def audit(stack: RunningStack) -> list[dict[str, Any]]:
    path = stack.state_dir / "tools" / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_vector_db_is_seeded_and_the_recall_probe_reads_it(stack: RunningStack) -> None:
    result = RecallProbe(stack.config).run()
    assert result.errors == 0, result.misses  # each failed query says why
    assert result.recall >= 0.8, result.misses
    assert all(0 < t < 5 for t in result.latencies)
    # Triton served those embeddings (its own counters) and Chroma holds every section.
    rag = stack.config.rag
    assert rag is not None
    metrics = httpx.get(f"http://127.0.0.1:{rag.embedder.metrics_port}/metrics").text
    served = [
        s["value"]
        for s in parse_samples(metrics)
        if s["name"] == "nv_inference_request_success_total"
        and s["labels"].get("model") == "minilm"
    ]
    assert served and served[0] >= len(result.latencies)
    base = f"http://127.0.0.1:{rag.vector_db.port}/api/v2/tenants/default_tenant/databases"
    collections = httpx.get(f"{base}/default_database/collections").json()
    runbooks = next(c for c in collections if c["name"] == rag.vector_db.collection)
    count = httpx.get(f"{base}/default_database/collections/{runbooks['id']}/count").json()
    assert count == len(load_corpus())


def test_rag_answers_with_context_and_declares_none_when_the_vector_db_is_down(
    stack: RunningStack, toxi: ToxiproxyClient
) -> None:
    gateway = httpx.Client(base_url=stack.gateway_url, timeout=30)
    question = {"question": "What should answers say when the knowledge base is down?"}
    grounded = gateway.post("/v1/rag/answer", json=question)
    assert grounded.status_code == 200, grounded.text
    body = grounded.json()
    assert body["missing_context"] is False
    assert any(c["id"].startswith("vector-db-outage#") for c in body["context"])
    assert grounded.headers["x-drills-route"] == "rag"

    toxi.set_enabled("vectordb", False)
    answers = [gateway.post("/v1/rag/answer", json=question) for _ in range(5)]
    for answer in answers:
        assert answer.status_code == 200
        assert answer.json()["missing_context"] is True
        assert answer.json()["answer"] == stack.config.gateway.rag.no_context_text
        assert answer.headers["x-drills-route"] == "no_context"
    # After failure_threshold failures the breaker sheds the dead hop at once.
    assert "vectordb=open" in answers[-1].headers["x-drills-breakers"]
    assert answers[-1].elapsed.total_seconds() < 1.0

    toxi.set_enabled("vectordb", True)
    time.sleep(stack.config.gateway.rag.breaker.reset_timeout + 0.5)  # type: ignore[union-attr]
    again = gateway.post("/v1/rag/answer", json=question)
    assert again.json()["missing_context"] is False
    gateway.close()


def test_unsound_rag_policy_turns_a_vector_db_outage_into_errors(
    stack: RunningStack, toxi: ToxiproxyClient, gateway_factory: Callable[..., LiveGateway]
) -> None:
    gw = gateway_factory(
        rag={
            "no_context_text": None,
            "breaker": None,
            "retries": {"max_attempts": 5, "budget": None},
        }
    )
    toxi.set_enabled("vectordb", False)
    answer = gw.client.post("/v1/rag/answer", json={"question": "anything"})
    assert answer.status_code == 502
    assert "retrieval failed: vectordb:connect" in answer.json()["error"]["message"]
    # Five attempts at the dead hop for one question: what the amplification check counts.
    assert gw.metric("drills_gateway_hop_attempts_total", hop="vectordb", outcome="connect") == 5


def test_tool_server_enforces_permissions_read_only_tables_and_audits_every_call(
    stack: RunningStack,
) -> None:
    trace = "c" * 32
    found = call_tool(stack, "gateway-agent", "search_kb", {"query": "tool saturation"}, trace)
    assert not found.is_error
    assert found.structured_content["result"][0]["id"].startswith("tool-saturation#")
    rows = call_tool(stack, "gateway-agent", "read_report_table", {"table": "incidents"}, trace)
    assert rows.structured_content["result"][0]["service"] == "gateway"
    # A table outside the fixed list is refused, and the database itself is opened read-only.
    other = call_tool(
        stack, "gateway-agent", "read_report_table", {"table": "sqlite_master"}, trace
    )
    assert other.is_error
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        db = sqlite3.connect(
            f"file:{stack.state_dir / 'tools' / 'reports.sqlite'}?mode=ro", uri=True
        )
        db.execute("DELETE FROM incidents")
    # Least privilege per agent: the probe may search, not send.
    with pytest.raises(MCPError, match="permission denied"):
        call_tool(
            stack, "probe", "send_message", {"to": "x", "text": "y", "idempotency_key": "k"}, trace
        )
    # A retried send with the same key is delivered once.
    key = f"test-{time.time_ns()}"
    args = {"to": "oncall", "text": "drill note", "idempotency_key": key}
    first = call_tool(stack, "gateway-agent", "send_message", args, trace)
    second = call_tool(stack, "gateway-agent", "send_message", args, trace)
    assert first.structured_content["delivered"] is True
    assert second.structured_content["duplicate"] is True
    outbox = (stack.state_dir / "tools" / "outbox.jsonl").read_text().splitlines()
    assert sum(json.loads(line)["idempotency_key"] == key for line in outbox) == 1

    records = [r for r in audit(stack) if r["trace_id"] == trace]
    outcomes = [(r["agent"], r["tool"], r["outcome"]) for r in records]
    assert ("gateway-agent", "search_kb", "ok") in outcomes
    assert ("gateway-agent", "read_report_table", "error") in outcomes
    assert ("probe", "send_message", "denied") in outcomes
    for record in records:
        assert {
            "time",
            "agent",
            "tool",
            "params",
            "outcome",
            "result",
            "duration",
            "trace_id",
        } <= set(record)
        assert record["duration"] >= 0


def test_agent_runs_its_plan_within_the_step_limit(
    stack: RunningStack, gateway_factory: Callable[..., LiveGateway]
) -> None:
    gateway = httpx.Client(base_url=stack.gateway_url, timeout=30)
    task = "Find the runbook for tool saturation, check past incidents and notify on-call"
    done = gateway.post("/v1/agent/run", json={"task": task}).json()
    assert done["status"] == "done"
    assert [s["tool"] for s in done["steps"]] == ["search_kb", "read_report_table", "send_message"]
    assert "tool-saturation#" in done["answer"]
    gateway.close()

    limited = gateway_factory(agent={"max_steps": 1})
    body = limited.client.post("/v1/agent/run", json={"task": task}).json()
    assert body["status"] == "step_limit"
    assert [s["tool"] for s in body["steps"]] == ["search_kb"]
    assert body["answer"].startswith("Stopped at the step limit (1)")


def test_agent_answers_gracefully_when_a_tool_is_saturated(
    stack: RunningStack, toxi: ToxiproxyClient, gateway_factory: Callable[..., LiveGateway]
) -> None:
    gw = gateway_factory(agent={"timeouts": {"tool_call": "500ms", "request": "10s"}})
    toxi.add_toxic("tools", Toxic("slow", "latency", attributes={"latency": 2000}))
    answers = [
        gw.client.post("/v1/agent/run", json={"task": "Find the GPU runbook"}) for _ in range(3)
    ]
    for answer in answers:
        assert answer.status_code == 200
        assert answer.json()["status"] == "graceful"
        assert answer.json()["answer"] == stack.config.gateway.agent.graceful_text
    assert (
        gw.metric("drills_gateway_tool_calls_total", tool="search_kb", outcome="breaker_open") >= 1
    )
    assert (
        gw.metric("drills_gateway_hop_attempts_total", hop="tools:search_kb", outcome="timeout")
        >= 3
    )


@pytest.fixture
def gateway_process(
    stack: RunningStack, tmp_path: Path
) -> Iterator[Callable[[], tuple[subprocess.Popen[bytes], str]]]:
    """Start the real gateway as a process of its own (same stack, another port, its own state
    folder for agent checkpoints); killed at the end."""
    data = yaml.safe_load(stack.config_path.read_text())
    data["gateway"]["port"] = free_port()
    # Room for slow tool calls (a latency toxic makes each of its HTTP exchanges slow).
    data["gateway"]["agent"]["timeouts"] = {"tool_call": "10s", "request": "60s"}
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump(data))
    url = f"http://127.0.0.1:{data['gateway']['port']}"
    started: list[subprocess.Popen[bytes]] = []

    def start() -> tuple[subprocess.Popen[bytes], str]:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "stack.gateway",
                "--config",
                str(config),
                "--state-dir",
                str(tmp_path / "gw"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        started.append(proc)
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    return proc, url
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "gateway process did not start"
            time.sleep(0.2)

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_a_crashed_agent_task_resumes_where_it_stopped(
    stack: RunningStack,
    toxi: ToxiproxyClient,
    gateway_process: Callable[[], tuple[subprocess.Popen[bytes], str]],
    tmp_path: Path,
) -> None:
    proc, url = gateway_process()
    # Each tool call takes a few seconds (its exchanges each wait 1 s): room to crash mid-task.
    toxi.add_toxic("tools", Toxic("slow", "latency", attributes={"latency": 1000}))
    task_id = f"resume-{time.time_ns()}"
    task = "Find the runbook for a lost GPU replica, check past incidents and notify on-call"
    checkpoint = tmp_path / "gw" / "agent" / f"{task_id}.json"

    def first_try() -> None:
        with contextlib.suppress(httpx.HTTPError):  # the gateway dies under it
            httpx.post(f"{url}/v1/agent/run", json={"task": task, "task_id": task_id}, timeout=30)

    thread = threading.Thread(target=first_try)
    thread.start()
    deadline = time.monotonic() + 30
    while not (checkpoint.exists() and json.loads(checkpoint.read_text())["steps"]):
        assert time.monotonic() < deadline, "no step was checkpointed"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    thread.join()
    done_before = len(json.loads(checkpoint.read_text())["steps"])
    assert 1 <= done_before < 3

    toxi.remove_toxic("tools", "slow")
    _, url = gateway_process()
    resumed = httpx.post(
        f"{url}/v1/agent/run", json={"task": task, "task_id": task_id}, timeout=30
    ).json()
    assert resumed["status"] == "done"
    assert resumed["resumed"] is True and resumed["resumed_from"] == done_before
    assert [s["tool"] for s in resumed["steps"]] == [
        "search_kb",
        "read_report_table",
        "send_message",
    ]
    # Done steps were not called again: the tool server saw one search for this task.
    searches = [
        r for r in audit(stack) if r["tool"] == "search_kb" and r["params"].get("query") == task
    ]
    assert len(searches) == 1, searches


def test_tool_saturate_floods_within_its_bound_and_stops_on_revert(
    stack: RunningStack, tmp_path: Path
) -> None:
    from drills.model.faults import ToolSaturateFault

    fault = ToolSaturateFault.model_validate(
        {"kind": "tool.saturate", "target": "search_kb", "concurrency": 8}
    )
    context = InjectionContext("test-flood", stack.toxiproxy_url, state_dir=stack.state_dir)
    injector = build(fault, context, 0)
    evidence = injector.apply()
    try:
        # Read back from the tool server: its pool for the tool is full, the rest wait.
        assert evidence["tool_inflight"] + evidence["tool_waiting"] >= 2
        assert evidence["tool_inflight"] >= 1
        helper = evidence["helper_pid"]
        assert pid_alive(helper)
        time.sleep(2)
    finally:
        reverted = injector.revert()
    assert reverted["method"] == "flood stopped"
    assert not pid_alive(helper)
    flood = reverted["flood"]
    assert flood["calls"] > 8 and flood["outcomes"].get("ok", 0) > 0
    assert flood["latency_p95"] >= flood["latency_p50"] > 0
    # A flood left by a crashed run is stopped by the ledger's sweep (same entry, new process).
    again = build(fault, context, 1)
    again.apply()
    entry = again.ledger_entry()
    assert revert_entry(entry)["method"] == "flood stopped"
    assert revert_entry(entry)["method"] == "nothing running"
