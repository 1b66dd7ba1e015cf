"""Tool faults: ``tool.saturate`` floods one MCP tool with a bounded number of concurrent calls.

The flood runs in a helper process (``python -m injectors.tool``), so that it neither shares
the runner's interpreter nor outlives a crashed run: the ledger records the helper's pid and
start time and the sweep of a later run stops it. ``concurrency`` workers each hold one MCP
session (streamable HTTP) to the tool server and call the tool back to back, as another tenant's
agents would. The calls go straight to the tool server, not through the gateway's proxy.

Evidence read back from the target: the tool server's own gauges (``drills_tools_inflight`` and
``drills_tools_waiting`` for the tool) once the flood runs; on revert, what the flood did: calls
made, how they ended, their latency (p50, p95, max).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from drills.common.errors import InputError
from drills.common.prometheus import parse_samples
from drills.common.stats import percentile
from drills.common.system import revert_helper_entry, start_time
from injectors.base import InjectionContext
from stack.state import read_state

__all__ = ["ToolSaturate", "revert_entry"]

READY_TIMEOUT = 20.0
PREPARE_TIMEOUT = 90.0
"""How long ``prepare`` waits for every session of the flood to be open (256 sessions took
14 s against a tool server already busy; idle, it answers their handshakes faster)."""
PROBE_CALLS = 16
"""The sizing burst of a flood with ``queue_wait``: this many calls at once, timed."""
HOLD_LIMIT = 900.0
"""A prepared flood that is never told to go exits by itself after this long."""


def tools_endpoint(context: InjectionContext, url: str | None) -> str:
    """The tool server's base URL: the fault's ``url``, else the embedded stack's ``tools``."""
    if url:
        return url.rstrip("/")
    if context.state_dir is not None:
        state = read_state(context.state_dir)
        if state is not None:
            for comp in state.data.get("components", {}).values():
                if comp.get("kind") == "tools":
                    return str(comp["endpoint"]).rstrip("/")
    raise InputError(
        "tool.saturate needs the tool server: run on an embedded stack with a 'rag' section, "
        "or give the fault a 'url'"
    )


def _gauges(base: str, tool: str) -> dict[str, float]:

    response = httpx.get(f"{base}/metrics", timeout=2.0)
    response.raise_for_status()
    found = {"inflight": 0.0, "waiting": 0.0}
    for sample in parse_samples(response.text):
        if sample["labels"].get("tool") != tool:
            continue
        if sample["name"] == "drills_tools_inflight":
            found["inflight"] = sample["value"]
        elif sample["name"] == "drills_tools_waiting":
            found["waiting"] = sample["value"]
    return found


class ToolSaturate:
    def __init__(self, fault: Any, context: InjectionContext, index: int) -> None:
        self.fault = fault
        self.kind: str = fault.kind
        self.target: str = fault.target
        self.base = tools_endpoint(context, fault.url)
        workdir = context.state_dir or Path.cwd()
        self.stats_path = workdir / "floods" / f"{context.run_id}-{index}.json"
        self.helper: Any = None
        self.entry: dict[str, Any] = {}

    def ledger_entry(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.target, **self.entry}

    def _start(self, hold: bool) -> None:

        self.stats_path.parent.mkdir(parents=True, exist_ok=True)
        self.stats_path.unlink(missing_ok=True)
        spec = {
            "url": f"{self.base}/mcp",
            "tool": self.target,
            "arguments": self.fault.arguments,
            "agent": self.fault.agent,
            "concurrency": self.fault.concurrency,
            "call_timeout": self.fault.call_timeout,
            "stats": str(self.stats_path),
            "hold": HOLD_LIMIT if hold else None,
            "queue_wait": self.fault.queue_wait,
        }
        # Its stderr goes to a file: a pipe nobody reads fills up and blocks the helper.
        with open(self._log_path, "wb") as log:
            self.helper = subprocess.Popen(
                [sys.executable, "-m", "injectors.tool", json.dumps(spec)],
                stdin=subprocess.PIPE,  # "go" (a held flood); closed, a held flood exits
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
            )
        self.entry = {"pid": self.helper.pid, "starttime": start_time(self.helper.pid)}

    @property
    def _log_path(self) -> Path:
        return self.stats_path.with_suffix(".log")

    def _expect(self, word: str) -> dict[str, Any]:
        """The helper's next line, which must start with ``word``; the figures after it."""
        assert self.helper is not None and self.helper.stdout is not None
        line = self.helper.stdout.readline().decode().strip()
        said, _, figures = line.partition(" ")
        if said == word:
            return dict(json.loads(figures)) if figures else {}
        self.helper.kill()
        self.helper.wait()
        err = self._log_path.read_text(errors="replace")[-500:]
        raise InputError(f"tool.saturate on {self.target}: the flood did not start: {err}")

    def prepare(self) -> dict[str, Any]:
        """Open every session of the flood now, before the timeline, and hold them idle: the
        tool server sees sessions and no call. ``apply`` then lets them all call at once."""
        began = time.monotonic()
        self._start(hold=True)
        sized = self._expect("ready")  # every session open (and the flood sized, if asked)
        return {
            "sessions": self.fault.concurrency,
            **sized,
            "helper_pid": self.entry["pid"],
            "opened_in_s": round(time.monotonic() - began, 2),
        }

    def release(self) -> None:
        """A prepared flood that was never applied: closing its stdin ends it."""
        if self.helper is not None and self.helper.poll() is None:
            with contextlib.suppress(OSError):
                assert self.helper.stdin is not None
                self.helper.stdin.close()
            try:
                self.helper.wait(timeout=10)
            except Exception:
                self.helper.kill()
                self.helper.wait()

    def apply(self) -> dict[str, Any]:
        if self.helper is None or self.helper.poll() is not None:
            self._start(hold=False)  # not prepared: the sessions open as the flood starts
        else:
            assert self.helper.stdin is not None
            self.helper.stdin.write(b"go\n")
            self.helper.stdin.flush()
        flooding = self._expect("flooding")
        # Read back from the tool server that the flood's calls run and its pool is in use. The
        # server counts a call as waiting before it takes a slot: a reading taken as the calls
        # arrive can show them all waiting and none running yet, so wait for one to run.
        gauges: dict[str, float] = {}
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            gauges = _gauges(self.base, self.target)
            arrived = gauges["inflight"] + gauges["waiting"]
            if gauges["inflight"] >= 1 and arrived >= min(flooding.get("active", 2), 2):
                break
            time.sleep(0.1)
        else:
            self.revert()
            raise InputError(
                f"tool.saturate on {self.target}: the tool server shows no call running "
                f"({gauges}) {READY_TIMEOUT:g}s after the flood started"
            )
        return {
            "applied_at": time.time(),
            "tool_server": self.base,
            "tool": self.target,
            "concurrency": self.fault.concurrency,
            **flooding,
            "agent": self.fault.agent,
            "helper_pid": self.helper.pid,
            "tool_inflight": gauges["inflight"],
            "tool_waiting": gauges["waiting"],
        }

    def revert(self) -> dict[str, Any]:
        outcome = revert_entry(self.ledger_entry())
        if self.helper is not None:
            self.helper.wait(timeout=30)
        stats: dict[str, Any] = {}
        if self.stats_path.exists():
            stats = json.loads(self.stats_path.read_text())
        return {**outcome, "finished_at": time.time(), "flood": stats}


def revert_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """Stop the flood's helper (it writes its figures and exits); harmless when gone."""
    return revert_helper_entry(entry, "the flood helper", "flood stopped", "nothing running")


# -- the helper process ---------------------------------------------------------------------


async def _flood(spec: dict[str, Any]) -> None:
    # Long on purpose: The flood helper's whole life (sessions, the call loop, its figures, the stop
    # on SIGTERM) runs in its own process; its steps share one event loop and one tally.
    # Imported here: the MCP client (about 1 s to import) runs only in the flood's helper.
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    latencies: list[float] = []
    outcomes: dict[str, int] = {}
    started_at = time.time()
    ready = asyncio.Event()
    go = asyncio.Event()  # the sessions wait for it before their first call
    probe = asyncio.Event()  # the sizing burst: the first PROBE_CALLS sessions call once
    probed: list[float] = []
    active = spec["concurrency"]  # sessions that call once the flood goes
    connected = 0

    async def worker(index: int) -> None:
        nonlocal connected
        headers = {"x-agent-id": spec["agent"]}
        first = True
        while not stop.is_set():
            try:
                async with (
                    httpx2.AsyncClient(headers=headers, timeout=spec["call_timeout"]) as http,
                    Client(streamable_http_client(spec["url"], http_client=http)) as client,
                ):
                    if first:
                        first = False
                        connected += 1
                        if connected >= spec["concurrency"]:
                            ready.set()
                    if spec.get("queue_wait") and index < PROBE_CALLS and not probed:
                        await probe.wait()
                        await client.call_tool(
                            spec["tool"], spec["arguments"], read_timeout_seconds=30
                        )
                        probed.append(time.monotonic())
                    await go.wait()
                    if index >= active:
                        await stop.wait()  # an idle session: the flood was sized smaller
                    while not stop.is_set():
                        began = time.monotonic()
                        try:
                            result = await client.call_tool(
                                spec["tool"],
                                spec["arguments"],
                                read_timeout_seconds=spec["call_timeout"],
                            )
                            outcome = "error" if result.is_error else "ok"
                        except Exception as exc:
                            outcome = type(exc).__name__
                            raise
                        finally:
                            latencies.append(time.monotonic() - began)
                            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            except Exception:
                if first:
                    first = False
                    connected += 1
                    if connected >= spec["concurrency"]:
                        ready.set()
                await asyncio.sleep(0.05)

    workers = [asyncio.create_task(worker(i)) for i in range(spec["concurrency"])]
    sized: dict[str, Any] = {}
    await asyncio.wait_for(ready.wait(), PREPARE_TIMEOUT if spec.get("hold") else READY_TIMEOUT)
    if spec.get("queue_wait"):
        # The tool server's speed, timed now (before the drill's timeline): a burst of calls
        # at once drains at its service rate; that many calls per second times the wait asked
        # is the depth the flood keeps in flight.
        burst = min(PROBE_CALLS, spec["concurrency"])
        began = time.time()
        probe.set()
        while len(probed) < burst and time.time() - began < 60:
            await asyncio.sleep(0.01)
        took = max(time.time() - began, 1e-3)
        rate = len(probed) / took
        active = max(1, min(spec["concurrency"], math.ceil(spec["queue_wait"] * rate)))
        sized = {"active": active, "service_rate": round(rate, 2), "burst_s": round(took, 2)}
    if spec.get("hold"):
        print("ready " + json.dumps(sized), flush=True)
        # Held until the runner says go; its closed pipe (the runner gone, or the fault
        # released), a stop or the hold limit end it without a call.
        try:
            line = await asyncio.wait_for(
                loop.run_in_executor(None, sys.stdin.readline), spec["hold"]
            )
        except TimeoutError:
            line = ""
        if line.strip() != "go" or stop.is_set():
            os._exit(0)
        started_at = time.time()
        go.set()
    else:
        go.set()
    print("flooding " + json.dumps({"active": active}), flush=True)
    await stop.wait()
    ended = time.time()
    stats = {
        "started_at": started_at,
        "ended_at": ended,
        "calls": len(latencies),
        "outcomes": outcomes,
        "calls_per_second": round(len(latencies) / max(ended - started_at, 1e-9), 2),
        "latency_p50": percentile(latencies, 50) if latencies else None,
        "latency_p95": percentile(latencies, 95) if latencies else None,
        "latency_max": max(latencies) if latencies else None,
        "in_flight_abandoned": active,
        "sessions": len(workers),
        "active": active,
        **sized,
    }
    tmp = Path(spec["stats"] + ".tmp")
    tmp.write_text(json.dumps(stats))
    tmp.rename(spec["stats"])
    # The flood ends now: closing 'concurrency' sessions politely would take as long as the
    # queue the flood built. The calls in flight are abandoned; the server sees them hang up.
    os._exit(0)


if __name__ == "__main__":
    asyncio.run(_flood(json.loads(sys.argv[1])))
