"""Both HTTP clients of the load time each token when its chunk arrives: against a stub
upstream (ours, named as such: the subject is the load's clock) whose first token comes 300 ms
after the request and each next one 100 ms later, each token's arrival by the record (its
send time, first-token time and gaps) is the moment the stub wrote that chunk, within a few
milliseconds, whichever client sent them. The stub notes when it wrote each chunk: on two
shared cores its own sleeps overshoot by tens of milliseconds now and then (measured in CI: a
first token at 383 ms), which is the stub's lateness, not the client's. A client that buffered
(FastHttpUser's line iterator waits for 1 KiB) would report the whole answer's time."""

from __future__ import annotations

import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest

from drills.load import LoadProcess, RecordReader
from drills.model.scenario import FallbackRule, LoadConfig
from tests.helpers import reply, serving

FIRST, GAP, TOKENS = 0.3, 0.1, 4
# How late after the stub wrote a chunk the client may note it: the loopback, the client's
# parsing and a greenlet switch, with room for a busy machine's scheduling.
LATE = 0.03


class PacedUpstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # trace id -> the epoch times the stub wrote each content chunk (flushed)
    written: ClassVar[dict[str, list[float]]] = {}
    lock: ClassVar[threading.Lock] = threading.Lock()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        trace_id = self.headers["traceparent"].split("-")[1]
        times: list[float] = []
        with self.lock:
            self.written[trace_id] = times
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for i in range(TOKENS):
            time.sleep(FIRST if i == 0 else GAP)
            finish = "stop" if i == TOKENS - 1 else None
            chunk = {
                "choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": finish}]
            }
            times.append(time.time())  # before the write: no client can see it sooner
            self._chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def log_message(self, *args: Any) -> None:
        pass


def _load(url: str, config: LoadConfig, path: Path, seconds: float) -> None:
    """The real load process against ``url`` for ``seconds``, its records in ``path``."""
    process = LoadProcess(
        url, config, FallbackRule(), [[{"role": "user", "content": "x"}]], path, 30
    )
    process.start()
    try:
        time.sleep(seconds)
    finally:
        process.stop()


@pytest.mark.parametrize("client", ["requests", "geventhttpclient"])
def test_each_token_is_timed_when_it_arrives(tmp_path: Path, client: str) -> None:
    path = tmp_path / "records.jsonl"
    PacedUpstream.written = {}
    with serving(PacedUpstream) as url:
        config = LoadConfig(
            users=2, wait="0s", warmup="0s", max_tokens=TOKENS, timeout="10s", client=client
        )
        _load(url, config, path, 5)
    records = [r for r in RecordReader(path).read_new() if not r.error]
    assert len(records) >= 4, records
    for record in records:
        assert record.tokens == TOKENS and record.finish_reason == "stop"
        assert record.ttft is not None and record.ttft >= FIRST, record.ttft
        assert len(record.itl) == TOKENS - 1
        # When the record says each token arrived, against when the stub wrote it.
        arrived = [record.start + record.ttft]
        for gap in record.itl:
            arrived.append(arrived[-1] + gap)
        written = PacedUpstream.written[record.trace_id]
        late = [a - w for a, w in zip(arrived, written, strict=True)]
        # (the record's send time is read just before its clock starts: a millisecond's slack)
        assert all(-0.001 <= lag < LATE for lag in late), (late, record)


def _most_in_flight(records: list[Any]) -> int:
    edges = sorted(
        [(r.start, 1) for r in records] + [(r.start + (r.e2e or 0), -1) for r in records],
        key=lambda e: (e[0], e[1]),
    )
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_a_spike_shape_runs_its_base_then_its_users(tmp_path: Path) -> None:
    """``shape: {kind: spike}``: one user through the warm-up and the first 2 s of the drill,
    then six for 2 s, then one again. The shape counts from the drill's start (after the
    warm-up), its durations reaching the load process as seconds."""
    path = tmp_path / "records.jsonl"
    PacedUpstream.written = {}
    with serving(PacedUpstream) as url:
        config = LoadConfig.model_validate(
            {
                "users": 6,
                "spawn_rate": 50,
                "wait": "0s",
                "warmup": "0s",
                "max_tokens": TOKENS,
                "timeout": "10s",
                "shape": {"kind": "spike", "base": 1, "at": "2s", "for": "2s"},
            }
        )
        process = LoadProcess(
            url, config, FallbackRule(), [[{"role": "user", "content": "x"}]], path, 30
        )
        process.start()
        try:
            time.sleep(4)  # the warm-up: the spike's "at" has not begun to count
            origin = time.time()
            process.mark_origin(origin)
            time.sleep(6)
        finally:
            process.stop()
    records = [r for r in RecordReader(path).read_new() if not r.error]
    assert len(records) >= 8, records
    assert _most_in_flight([r for r in records if r.start < origin + 1.5]) == 1
    spike = [r for r in records if origin + 2.5 <= r.start < origin + 3.5]
    assert len(spike) >= 5 and _most_in_flight(records) >= 5


class WorkflowStub(BaseHTTPRequestHandler):
    """Answers ``/v1/workflow/run`` at once, naming the kind it was asked for."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        data = json.dumps({"workflow": body["workflow"], "answer": "ok", "tasks": []}).encode()
        reply(self, data, "application/json")

    def log_message(self, *args: Any) -> None:
        pass


def test_a_workflow_load_interleaves_its_kinds_by_weight(tmp_path: Path) -> None:
    """``endpoint: workflow`` with ``workflows: {brief: 1, lookup: 1}``: the load's requests
    alternate, so a drill's sample of each kind does not depend on a random draw."""
    path = tmp_path / "records.jsonl"
    with serving(WorkflowStub) as url:
        config = LoadConfig(
            users=1,
            wait="50ms",
            warmup="0s",
            timeout="10s",
            endpoint="workflow",
            workflows={"brief": 1, "lookup": 1},
        )
        _load(url, config, path, 4)
    records = sorted(RecordReader(path).read_new(), key=lambda r: r.start)
    kinds = [r.workflow for r in records if not r.error]
    assert len(kinds) >= 6, records
    assert all(a != b for a, b in itertools.pairwise(kinds)), kinds
