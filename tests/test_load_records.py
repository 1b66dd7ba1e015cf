"""The load's records judge every answer for completeness, whatever the gateway claims, and
every request makes exactly one record. The real Locust process (``drills.load``) runs
against a small misbehaving upstream of our own (a stub, named as such: the subject is the
harness's reading of an answer, not any component), which answers each prompt in one of the
ways a broken gateway does: no ``[DONE]``, no ``finish_reason``, a malformed chunk, a body
that is not UTF-8, choices that are not a list, a 4 MiB chunk, an error status with a body
that is not JSON, an error event before the stream began, a connection reset mid-stream, an
answer that hangs past the load's stop, an answer cut short but dressed as complete, and a
sound one. Every request the stub saw (by trace id) has exactly one record."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from drills.load import LoadProcess, RecordReader
from drills.model.records import Record
from drills.model.scenario import FallbackRule, LoadConfig
from tests.helpers import serving

MODES = ("sound", "no-done", "no-finish", "malformed", "not-utf8", "short", "fallback")
HOSTILE = ("bad-choices", "huge", "text-503", "sse-error", "reset")
SEEN: dict[str, list[str]] = {}
"""Trace ids the stub was sent, by mode."""
SEEN_LOCK = threading.Lock()


def _chunk(content: str | None, finish: str | None = None) -> bytes:
    delta = {"content": content} if content is not None else {}
    body = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class MisbehavingUpstream(BaseHTTPRequestHandler):
    """A stub OpenAI-compatible upstream: the prompt names how it answers."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        mode = body["messages"][-1]["content"]
        with SEEN_LOCK:
            SEEN.setdefault(mode, []).append(self.headers["traceparent"].split("-")[1])
        wanted = int(body.get("min_tokens") or body["max_tokens"])
        if mode in HOSTILE or mode == "hang":
            self.hostile(mode)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        if mode == "fallback":
            self.send_header("x-drills-route", "fallback")
        self.send_header("connection", "close")
        self.end_headers()
        tokens = {"short": 1, "fallback": 1}.get(mode, wanted)
        for i in range(tokens):
            last = i == tokens - 1
            finish = None if mode == "no-finish" or not last else "stop"
            self.wfile.write(_chunk(f"t{i} ", finish))
            if mode == "malformed" and i == 0:
                self.wfile.write(b'data: {"choices": [\n\n')
            if mode == "not-utf8" and i == 0:
                self.wfile.write(b"data: \xff\xfe\xfa\n\n")
        if mode != "no-done":
            self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def hostile(self, mode: str) -> None:
        if mode in ("text-503", "sse-error"):
            body = (
                b"upstream overloaded, try later"
                if mode == "text-503"
                else b'data: {"error": {"message": "mid-stream fallback failed"}}\n\n'
            )
            self.send_response(503)
            self.send_header("content-type", "text/plain")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        if mode == "bad-choices":
            self.wfile.write(b'data: {"choices": "not a list"}\n\n')
            self.wfile.write(_chunk("t ", "stop") + b"data: [DONE]\n\n")
        elif mode == "huge":
            self.wfile.write(_chunk("x" * (4 << 20), "stop") + b"data: [DONE]\n\n")
        elif mode == "reset":
            self.wfile.write(_chunk("t0 "))
            self.wfile.flush()
            # RST, not FIN: SO_LINGER with a zero timeout.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        elif mode == "hang":
            self.wfile.write(_chunk("t0 "))
            self.wfile.flush()
            time.sleep(15)  # past the load stop timeout (10 s), well before its own (20 s)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[str]:
    with serving(MisbehavingUpstream) as url:
        yield url


def records_for(
    upstream: str, tmp_path: Path, *, pin: bool, client: str = "requests"
) -> dict[str, list[Record]]:
    path = tmp_path / "records.jsonl"
    load = LoadConfig(
        users=len(MODES),
        spawn_rate=100,
        wait="200ms",
        warmup="0s",
        max_tokens=4,
        pin_length=pin,
        client=client,
    )
    process = LoadProcess(
        upstream,
        load,
        FallbackRule(),
        [[{"role": "user", "content": mode}] for mode in MODES],
        path,
        60,
    )
    SEEN.clear()
    process.start()
    deadline = time.monotonic() + 60
    found: dict[str, list[Record]] = {}
    reader = RecordReader(path)
    # A not-UTF-8 answer's record reads as another mode's (its chunk is malformed), so none is
    # ever told apart as "not-utf8": the stub having been sent one is what to wait for.
    told = [m for m in MODES if m != "not-utf8"]
    try:
        while time.monotonic() < deadline and not (
            all(found.get(m) for m in told) and all(SEEN.get(m) for m in MODES)
        ):
            for record in reader.read_new():
                found.setdefault(_mode_of(record), []).append(record)
            time.sleep(0.2)
    finally:
        process.stop()
    for record in reader.read_new():
        found.setdefault(_mode_of(record), []).append(record)
    return found


def _mode_of(record: Record) -> str:
    # The stub's answers do not name their mode; the trace of one is its shape.
    if record.fallback:
        return "fallback"
    error = record.error or ""
    for mode, sign in (
        ("no-done", "without [DONE]"),
        ("no-finish", "no finish_reason"),
        ("malformed", "malformed chunk"),
        ("short", "truncated"),
    ):
        if sign in error:
            return mode
    if record.tokens == 1 and not error:
        return "short"
    return "sound" if not error else f"other: {error}"


@pytest.mark.parametrize("client", ["requests", "geventhttpclient"])
def test_every_incomplete_answer_is_an_error_that_says_why(
    upstream: str, tmp_path: Path, client: str
) -> None:
    found = records_for(upstream, tmp_path, pin=False, client=client)
    assert not [m for m in found if m.startswith("other")], found.keys()
    for mode in ("no-done", "no-finish", "malformed"):
        assert found.get(mode), f"no record of a {mode} answer: {found.keys()}"
        assert all(r.is_error for r in found[mode])
    sound = found["sound"]
    assert all(r.finish_reason == "stop" and r.tokens == 4 and not r.is_error for r in sound)
    # Without a pinned length a short answer that ends cleanly cannot be told from a short one.
    assert all(not r.is_error for r in found["short"])
    assert all(not r.is_error for r in found["fallback"])


def test_a_pinned_length_turns_a_dressed_up_cut_into_a_truncated_answer(
    upstream: str, tmp_path: Path
) -> None:
    found = records_for(upstream, tmp_path, pin=True)
    short = found["short"]
    assert short and all(r.truncated and r.is_error for r in short)
    assert short[0].error == "truncated: 1 of 4 tokens (finish_reason 'stop')"
    # The sound answers are exactly as long as asked; the fallback is judged as a fallback.
    assert all(r.tokens == 4 and not r.truncated for r in found["sound"])
    assert all(not r.truncated and not r.is_error for r in found["fallback"])


@pytest.mark.parametrize("client", ["requests", "geventhttpclient"])
def test_every_request_makes_exactly_one_record_whatever_goes_wrong(
    upstream: str, tmp_path: Path, client: str
) -> None:
    """Hostile answers and a request the load stops under: each request the stub was sent has
    one record, and the record says what went wrong."""
    modes = (*HOSTILE, "hang", "sound")
    path = tmp_path / "records.jsonl"
    SEEN.clear()
    load = LoadConfig(
        users=len(modes),
        spawn_rate=100,
        wait="300ms",
        warmup="0s",
        max_tokens=4,
        timeout="20s",
        client=client,
    )
    process = LoadProcess(
        upstream, load, FallbackRule(), [[{"role": "user", "content": m}] for m in modes], path, 60
    )
    process.start()
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and not all(SEEN.get(m) for m in modes):
            time.sleep(0.2)
        time.sleep(1.0)  # a few more of each, and the hang well under way
    finally:
        process.stop()
    records = RecordReader(path).read_new()
    with SEEN_LOCK:
        sent = {trace: mode for mode, traces in SEEN.items() for trace in traces}
    by_trace: dict[str, list[Record]] = {}
    for record in records:
        by_trace.setdefault(record.trace_id, []).append(record)
    assert set(by_trace) == set(sent), "a request without a record, or a record without one"
    assert all(len(rs) == 1 for rs in by_trace.values()), "a request with two records"
    errors = {sent[t]: rs[0].error or "" for t, rs in by_trace.items()}
    assert errors["bad-choices"].startswith("malformed chunk: "), errors
    assert errors["huge"] == "" and any(
        rs[0].tokens == 1 and len(rs[0].text) == 300
        for t, rs in by_trace.items()
        if sent[t] == "huge"
    )
    assert errors["text-503"] == "HTTP 503: upstream overloaded, try later", errors
    assert errors["sse-error"] == "HTTP 503: mid-stream fallback failed", errors
    assert errors["reset"] and "without [DONE]" not in errors["reset"], errors  # a client error
    assert errors["hang"].startswith("unfinished: no answer after "), errors
    assert errors["sound"] == ""
