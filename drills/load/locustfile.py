"""The Locust side of drills' load: an LLM user that streams chat completions, asks RAG
questions (``/v1/rag/answer``) or runs agent tasks (``/v1/agent/run``), as ``endpoint`` says.

Run by ``drills.load.LoadProcess`` only (configuration comes from the file named by
``DRILLS_LOAD_CONFIG``). Every request becomes one JSON line in the records file: start time,
time to first token, inter-token gaps, end-to-end time, status, tokens, whether the answer was
the fallback, the route and upstream the gateway reported, and the trace id.

Timing is ours, not Locust's: FastHttpUser's line iterator buffers 1 KiB, which makes its first
token arrive with the whole answer. ``requests`` with ``stream=True`` and
``iter_lines(chunk_size=None)`` hands over each chunk as it arrives.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import signal
import time
from typing import Any

import gevent  # type: ignore[import-untyped]
import gevent.event  # type: ignore[import-untyped]
import requests
from locust import LoadTestShape, User, constant, events, task
from locust.env import Environment

from drills.model.records import Record

with open(os.environ["DRILLS_LOAD_CONFIG"]) as _config:
    CONFIG: dict[str, Any] = json.load(_config)
HEADERS: dict[str, str] = json.loads(os.environ.get("DRILLS_LOAD_HEADERS") or "{}")
# Open for the life of the process: one line per request, flushed at each newline.
RECORDS = open(CONFIG["records"], "a", buffering=1)  # noqa: SIM115
FALLBACK = CONFIG["fallback"]


STOPPING = gevent.event.Event()
"""Set by SIGTERM: the shape's next tick ends the test."""


def _stop_gently_on_sigterm(environment: Environment, **_: Any) -> None:
    """SIGTERM (how ``LoadProcess.stop`` ends the load) ends the shape test at its next tick,
    so that Locust stops the users itself, giving requests in flight ``--stop-timeout`` to
    finish (one still waiting is then recorded as unfinished). Locust installs its own SIGTERM
    handler only after a headless shape test has run, so without this one SIGTERM killed the
    process with its requests in flight, and their records."""
    gevent.signal_handler(signal.SIGTERM, STOPPING.set)


events.init.add_listener(_stop_gently_on_sigterm)  # type: ignore[no-untyped-call]


def _is_fallback(headers: Any, text: str) -> bool:
    if FALLBACK.get("header") and headers.get(FALLBACK["header"]) in FALLBACK["header_values"]:
        return True
    return bool(FALLBACK.get("contains")) and FALLBACK["contains"] in text


def _served_by(record: dict[str, Any], headers: Any) -> None:
    """The route and upstream the gateway says it took, by its adapter's headers (upstream
    values mapped to the stack's hop names)."""
    if CONFIG.get("route_header"):
        record["route"] = headers.get(CONFIG["route_header"])
    if CONFIG.get("upstream_header"):
        value = headers.get(CONFIG["upstream_header"])
        record["upstream"] = CONFIG["upstream_map"].get(value, value) if value else None


def _new_record(trace_id: str, endpoint: str) -> dict[str, Any]:
    """One request's line, before it is sent (the schema is ``drills.model.records.Record``)."""
    return Record.begin(trace_id, endpoint).model_dump()


def _write(record: dict[str, Any]) -> None:
    """One line per request. Validated against the schema as it is written; a record that
    does not validate (a bug of ours, an answer no field can hold) is still written, as an
    error that says so, so that the request is not lost."""
    try:
        line = Record.model_validate(record).model_dump_json(exclude_none=False)
    except ValueError as exc:
        fallback = Record(
            start=float(record.get("start") or time.time()),
            trace_id=str(record.get("trace_id") or ""),
            endpoint=str(record.get("endpoint") or "chat"),
            status=record["status"] if isinstance(record.get("status"), int) else 0,
            e2e=record.get("e2e") if isinstance(record.get("e2e"), float) else None,
            error=f"record not valid: {exc}"[:300],
        )
        line = fallback.model_dump_json(exclude_none=False)
    RECORDS.write(line + "\n")


def _unfinished(record: dict[str, Any], started: float) -> None:
    """Write the record of a request the load stopped under (its stop timeout ran out)."""
    record["e2e"] = time.perf_counter() - started
    record["error"] = record["error"] or (
        f"unfinished: no answer after {record['e2e']:.1f}s, when the load stopped"
    )
    _write(record)


class LLMUser(User):
    wait_time = constant(CONFIG["wait"])

    def on_start(self) -> None:
        self.session = requests.Session()

    @task
    def request(self) -> None:
        if STOPPING.is_set():
            return  # the load is stopping: send nothing it would not wait for
        if CONFIG.get("endpoint", "chat") == "chat":
            self.chat()
        else:
            self.json_path(CONFIG["endpoint"])

    def json_path(self, endpoint: str) -> None:
        """A RAG question or an agent task: one JSON answer, timed whole."""
        messages = random.choice(CONFIG["prompts"])
        prompt = next(
            (m["content"] for m in reversed(messages) if m.get("role") == "user"),
            messages[-1]["content"],
        )
        path, key = (
            ("/v1/rag/answer", "question") if endpoint == "rag" else ("/v1/agent/run", "task")
        )
        body = {key: prompt}
        trace_id = secrets.token_hex(16)
        headers = {**HEADERS, "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}
        record = _new_record(trace_id, endpoint)
        started = time.perf_counter()
        try:
            response = self.session.post(
                f"{self.host}{path}", json=body, headers=headers, timeout=CONFIG["timeout"]
            )
            record["status"] = response.status_code
            _served_by(record, response.headers)
            record["trace_id"] = response.headers.get("x-trace-id", trace_id)
            if response.status_code != 200:
                record["error"] = _error_of(response)
                payload: Any = None
            else:
                try:
                    payload = response.json()
                except ValueError:
                    record["error"] = f"malformed answer: not JSON ({response.content[:80]!r})"
                    payload = None
            if isinstance(payload, dict):
                record["ttft"] = time.perf_counter() - started
                text = str(payload.get("answer") or "")
                record["text"] = text[:300]
                record["missing_context"] = bool(payload.get("missing_context"))
                record["agent_status"] = payload.get("status")
                record["context_ids"] = [c.get("id") for c in payload.get("context") or ()]
                record["fallback"] = _is_fallback(response.headers, text)
            elif record["error"] is None:
                record["error"] = f"malformed answer: not an object ({response.content[:80]!r})"
        except Exception as exc:  # any failure is this request's record, never a lost line
            record["error"] = f"{type(exc).__name__}: {exc}"[:300]
        except BaseException:  # the load stopping under it (GreenletExit): still one record
            _unfinished(record, started)
            raise
        record["e2e"] = time.perf_counter() - started
        _write(record)
        self.environment.events.request.fire(
            request_type="POST",
            name=endpoint,
            response_time=record["e2e"] * 1000,
            response_length=len(record["text"]),
            exception=RuntimeError(record["error"]) if record["error"] else None,
            context={},
        )

    def chat(self) -> None:
        messages = random.choice(CONFIG["prompts"])
        body: dict[str, Any] = {
            "messages": messages,
            "max_tokens": CONFIG["max_tokens"],
            "stream": CONFIG["stream"],
        }
        if CONFIG.get("min_tokens"):
            # vLLM's own sampling parameter: the answer must be this long, so a shorter one
            # is a cut, whatever clean end a gateway dresses it in.
            body["min_tokens"] = CONFIG["min_tokens"]
            if CONFIG["stream"]:
                # The answer's own token count: a content chunk can carry no text (a token that
                # ends mid-character) and a gateway may drop such chunks.
                body["stream_options"] = {"include_usage": True}
        if CONFIG.get("model"):
            body["model"] = CONFIG["model"]
        trace_id = secrets.token_hex(16)
        headers = {**HEADERS, "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}
        record = _new_record(trace_id, "chat")
        started = time.perf_counter()
        try:
            with self.session.post(
                f"{self.host}/v1/chat/completions",
                json=body,
                headers=headers,
                stream=CONFIG["stream"],
                timeout=CONFIG["timeout"],
            ) as response:
                record["status"] = response.status_code
                _served_by(record, response.headers)
                record["trace_id"] = response.headers.get("x-trace-id", trace_id)
                if CONFIG["stream"] and response.status_code == 200:
                    full, done = _read_stream(response, record, started)
                else:
                    full, done = _read_whole(response, record, started)
                record["fallback"] = _is_fallback(response.headers, full)
                record["text"] = full[:300]
                if response.status_code != 200 and record["error"] is None:
                    record["error"] = f"HTTP {response.status_code}"
                _judge_complete(record, done)
        except Exception as exc:  # any failure is this request's record, never a lost line
            record["error"] = f"{type(exc).__name__}: {exc}"[:300]
        except BaseException:  # the load stopping under it (GreenletExit): still one record
            _unfinished(record, started)
            raise
        record["e2e"] = time.perf_counter() - started
        _write(record)
        self.environment.events.request.fire(
            request_type="POST",
            name="chat",
            response_time=record["e2e"] * 1000,
            response_length=len(record["text"]),
            exception=RuntimeError(record["error"]) if record["error"] else None,
            context={},
        )


def _read_stream(response: Any, record: dict[str, Any], started: float) -> tuple[str, bool]:
    """Read an SSE answer chunk by chunk, timing each content token; the text, and whether
    the stream ended with ``[DONE]``."""
    text: list[str] = []
    last = None
    # chunk_size=None: hand over each chunk as it arrives (see module docstring).
    for line in response.iter_lines(chunk_size=None):
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return "".join(text), True
        try:
            chunk = json.loads(data)
        except ValueError:
            record["error"] = record["error"] or f"malformed chunk: {data[:80]!r}"
            continue
        if not isinstance(chunk, dict):
            record["error"] = record["error"] or f"malformed chunk: {data[:80]!r}"
            continue
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else error
            record["error"] = str(message or "stream error")
            continue
        usage = chunk.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            record["usage_tokens"] = usage["completion_tokens"]
        choices = chunk.get("choices") or []
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            record["error"] = record["error"] or f"malformed chunk: {data[:80]!r}"
            continue
        for choice in choices:
            record["finish_reason"] = choice.get("finish_reason") or record["finish_reason"]
            delta = choice.get("delta")
            piece = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(piece, str) and piece:
                now = time.perf_counter()
                if last is None:
                    record["ttft"] = now - started
                else:
                    record["itl"].append(now - last)
                last = now
                record["tokens"] += 1
                text.append(piece)
    return "".join(text), False


def _error_of(response: Any) -> str:
    """What an error answer says went wrong: its ``error.message`` (a JSON body, or the first
    SSE event of a stream that failed before it began), else the start of its text."""
    raw: bytes = response.content or b""
    body = raw.strip()
    if body.startswith(b"data:"):
        body = body[5:].split(b"\n", 1)[0].strip()
    try:
        payload = json.loads(body) if body else {}
    except ValueError:
        payload = None
    error = payload.get("error") if isinstance(payload, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    if message:
        return f"HTTP {response.status_code}: {message}"[:300]
    text = raw[:120].decode("utf-8", "replace").strip()
    return f"HTTP {response.status_code}" + (f": {text}" if text else "")


def _read_whole(response: Any, record: dict[str, Any], started: float) -> tuple[str, bool]:
    """A non-streamed answer (or an error body); the text, and ``True`` (nothing to end)."""
    if response.status_code != 200:
        record["error"] = _error_of(response)
        return "", True
    try:
        payload = response.json()
    except ValueError:
        payload = None
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        record["error"] = f"malformed answer: no choices in {response.content[:80]!r}"
        return "", True
    record["ttft"] = time.perf_counter() - started
    choice = choices[0]
    record["finish_reason"] = choice.get("finish_reason")
    usage = payload.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    record["tokens"] = tokens if isinstance(tokens, int) else 0
    message = choice.get("message")
    return str((message.get("content") if isinstance(message, dict) else None) or ""), True


def _judge_complete(record: dict[str, Any], done: bool) -> None:
    """An answer that did not end as a complete one is an error, and says why: no
    ``[DONE]``, no ``finish_reason``, or (with the length pinned) fewer tokens than asked for.
    A fallback answer is judged by what it is (a short canned text), not by its length."""
    counted = record.pop("usage_tokens", None)  # the answer's own count, when it gave one
    if record["status"] != 200 or record["error"]:
        return
    if not done:
        record["error"] = "incomplete: the stream ended without [DONE]"
    elif record["finish_reason"] is None:
        record["error"] = "incomplete: the answer has no finish_reason"
    elif pinned := CONFIG.get("min_tokens"):
        tokens = record["tokens"] if counted is None else counted
        short = tokens < pinned and not record["fallback"]
        if short:
            record["truncated"] = True
            record["error"] = (
                f"truncated: {tokens} of {pinned} tokens "
                f"(finish_reason {record['finish_reason']!r})"
            )


class DrillShape(LoadTestShape):
    """steady, step or spike, as the scenario's ``load.shape`` says."""

    def tick(self) -> tuple[int, float] | None:
        shape = CONFIG["shape"]
        users, rate = CONFIG["users"], CONFIG["spawn_rate"]
        elapsed: float = self.get_run_time()  # type: ignore[no-untyped-call]
        if STOPPING.is_set() or elapsed > CONFIG["run_time"]:
            return None  # SIGTERM, or the backstop: the runner stops the load long before
        if shape["kind"] == "step":
            steps = int(elapsed // shape["every"])
            return min(users, shape["start"] + steps * shape["step"]), rate
        if shape["kind"] == "spike":
            if shape["at"] <= elapsed < shape["at"] + shape["for_"]:
                return users, rate
            return shape["base"], rate
        return users, rate
