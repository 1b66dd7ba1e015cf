"""The load's records judge every answer for completeness, whatever the gateway claims, and
every request makes exactly one record. The real Locust process (``drills.load``) runs
against a small misbehaving upstream of our own (a stub, named as such: the subject is the
harness's reading of an answer, not any component), which answers each prompt in one of the
ways a broken gateway does: no ``[DONE]``, no ``finish_reason``, a malformed chunk, a body
that is not UTF-8, an answer cut short but dressed as complete, and a sound one."""

from __future__ import annotations

import json
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
        wanted = int(body.get("min_tokens") or body["max_tokens"])
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

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[str]:
    with serving(MisbehavingUpstream) as url:
        yield url


def records_for(upstream: str, tmp_path: Path, *, pin: bool) -> dict[str, list[Record]]:
    path = tmp_path / "records.jsonl"
    load = LoadConfig(
        users=len(MODES), spawn_rate=100, wait="200ms", warmup="0s", max_tokens=4, pin_length=pin
    )
    process = LoadProcess(
        upstream,
        load,
        FallbackRule(),
        [[{"role": "user", "content": mode}] for mode in MODES],
        path,
        60,
    )
    process.start()
    deadline = time.monotonic() + 60
    found: dict[str, list[Record]] = {}
    reader = RecordReader(path)
    try:
        while time.monotonic() < deadline and not all(found.get(m) for m in MODES):
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


def test_every_incomplete_answer_is_an_error_that_says_why(upstream: str, tmp_path: Path) -> None:
    found = records_for(upstream, tmp_path, pin=False)
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
