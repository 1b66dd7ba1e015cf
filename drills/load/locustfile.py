"""The Locust side of drills' load: an LLM user that streams chat completions, asks RAG
questions (``/v1/rag/answer``) or runs agent tasks (``/v1/agent/run``), as ``endpoint`` says.

Run by ``drills.load.LoadProcess`` (a single process, or a master with workers) and by
``drills load-worker`` (a worker on another host). The single process and the master read
their configuration from the file named by ``DRILLS_LOAD_CONFIG``; a worker gets it from the
master (``drills.load.fleet``). Every request becomes one JSON line in the records file: start
time, time to first token, inter-token gaps, end-to-end time, status, tokens, whether the answer
was the fallback, the route and upstream the gateway reported, and the trace id.

Closed loop (``users``): ``LLMUser``s, each sending its next request once its last answer came.
Open loop (``rate``): one ``ArrivalUser`` per load process that sends requests on a schedule of
gaps drawn from the arrival model (constant, poisson, gamma), each in a greenlet of its own, at
most ``max_in_flight`` at once; an arrival that finds them all busy is counted as not sent. What
the schedule did is written to ``<records>.sent.json`` while it runs.

Timing is ours, not Locust's: FastHttpUser's line iterator buffers 1 KiB, which makes its first
token arrive with the whole answer. geventhttpclient's ``readline`` (the default client) and
``requests`` with ``stream=True`` and ``iter_lines(chunk_size=None)`` hand over each line as
its chunk arrives.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import signal
import socket
import sys
import time
from collections.abc import Iterator
from typing import Any

import gevent  # type: ignore[import-untyped]
import gevent.event  # type: ignore[import-untyped]
import gevent.pool  # type: ignore[import-untyped]
import gevent.socket  # type: ignore[import-untyped]
import requests
from geventhttpclient import HTTPClient
from geventhttpclient.url import URL
from locust import LoadTestShape, User, constant, events, task
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import MasterRunner, WorkerRunner

from drills.common.tracecontext import new_traceparent
from drills.load.arrivals import gaps, weighted_cycle
from drills.load.fleet import Fleet, Sink, serve_worker, write_json
from drills.model.gateways import served_by
from drills.model.records import Record

IS_WORKER = "--worker" in sys.argv
"""A Locust worker (on this machine or another): its configuration comes from the master."""


def _own_config() -> dict[str, Any]:
    if IS_WORKER:
        return {}
    with open(os.environ["DRILLS_LOAD_CONFIG"]) as config:
        return dict(json.load(config))


CONFIG: dict[str, Any] = _own_config()
HEADERS: dict[str, str] = json.loads(os.environ.get("DRILLS_LOAD_HEADERS") or "{}")
OPEN_LOOP = CONFIG.get("rate") is not None
CONFIGURED = gevent.event.Event()
"""Set once ``CONFIG`` is known: at once, or on a worker when the master's configuration came."""
if CONFIG:
    CONFIGURED.set()
SINK = Sink()


STOPPING = gevent.event.Event()
"""Set by SIGTERM: the shape's next tick ends the test."""


def _on_init(environment: Environment, **_: Any) -> None:
    """SIGTERM (how ``LoadProcess.stop`` ends the load) ends the shape test at its next tick,
    so that Locust stops the users itself, giving requests in flight ``--stop-timeout`` to
    finish (one still waiting is then recorded as unfinished). Locust installs its own SIGTERM
    handler only after a headless shape test has run, so without this one SIGTERM killed the
    process with its requests in flight, and their records.

    Then the process's part in the fleet: a worker sends its records to the master and takes
    its configuration from it; the master (or the single process) writes the records file and
    keeps the fleet's account."""
    gevent.signal_handler(signal.SIGTERM, STOPPING.set)
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        SINK.to_master(runner)
        serve_worker(runner, _configure)
        # The master's stop reaches a worker as test_stopping: the arrival user ends its
        # schedule, and a closed-loop user sends nothing more.
        environment.events.test_stopping.add_listener(lambda **_: STOPPING.set())  # type: ignore[no-untyped-call]
        # Before the worker tells the master it stopped: the last records reach it first.
        environment.events.test_stop.add_listener(lambda **_: SINK.flush())  # type: ignore[no-untyped-call]
        return
    SINK.open_file(CONFIG["records"])
    fleet = Fleet(environment, CONFIG, SINK, HEADERS)
    if isinstance(runner, MasterRunner):
        fleet.serve(runner)
    else:
        fleet.watch_local(runner)
    environment.events.quitting.add_listener(lambda **_: fleet.write_health())  # type: ignore[no-untyped-call]


def _configure(config: dict[str, Any]) -> None:
    """A worker's configuration, from the master."""
    HEADERS.update(config.pop("headers", None) or {})
    CONFIG.update(config)
    CONFIGURED.set()


events.init.add_listener(_on_init)  # type: ignore[no-untyped-call]


_MIX: list[Iterator[str]] = []


def _workflow_mix() -> Iterator[str]:
    """The load's workflow kinds by their weights, one sequence shared by this process's
    users (``weighted_cycle``)."""
    if not _MIX:
        _MIX.append(weighted_cycle(CONFIG["workflows"]))
    return _MIX[0]


def _is_fallback(headers: Any, text: str) -> bool:
    rule = CONFIG["fallback"]
    if rule.get("header") and headers.get(rule["header"]) in rule["header_values"]:
        return True
    return bool(rule.get("contains")) and rule["contains"] in text


def _served_by(record: dict[str, Any], headers: Any) -> None:
    """The route and upstream the gateway says it took, by its adapter's headers (upstream
    values mapped to the stack's hop names)."""
    if CONFIG.get("route_header"):
        record["route"] = headers.get(CONFIG["route_header"])
    if CONFIG.get("upstream_header"):
        value = headers.get(CONFIG["upstream_header"])
        record["upstream"] = served_by(value, CONFIG["upstream_map"])


def _new_record(trace_id: str, endpoint: str, lag: float | None = None) -> dict[str, Any]:
    """One request's line, before it is sent (the schema is ``drills.model.records.Record``)."""
    record = Record.begin(trace_id, endpoint).model_dump()
    record["lag"] = lag
    return record


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
    SINK.write(line)


def _unfinished(record: dict[str, Any], started: float) -> None:
    """Write the record of a request the load stopped under (its stop timeout ran out)."""
    record["e2e"] = time.perf_counter() - started
    record["error"] = record["error"] or (
        f"unfinished: no answer after {record['e2e']:.1f}s, when the load stopped"
    )
    _write(record)


def _from_answer(record: dict[str, Any], payload: dict[str, Any], headers: Any) -> None:
    """What a RAG, agent or workflow answer says, onto its record."""
    text = str(payload.get("answer") or "")
    record["text"] = text[:300]
    record["missing_context"] = bool(payload.get("missing_context"))
    record["agent_status"] = payload.get("status")
    record["context_ids"] = [c.get("id") for c in payload.get("context") or ()]
    record["fallback"] = _is_fallback(headers, text)
    if isinstance(payload.get("resumed_from"), int):
        record["resumed_from"] = payload["resumed_from"]
    waits = [
        float(t["waited"])
        for t in payload.get("tasks") or ()
        if isinstance(t, dict) and isinstance(t.get("waited"), (int, float))
    ]
    if waits:
        record["waited"] = max(waits)


_STARTED: list[float] = []


def _mark_started() -> None:
    """Say once, in a file the runner waits for, that this process sent its first request:
    the drill's windows open only after that (``LoadProcess.wait_started``). A worker says
    nothing: its first record, which reaches the master, says it."""
    if _STARTED or IS_WORKER:
        return
    _STARTED.append(time.time())
    path = CONFIG.get("started_file")
    if path:
        with open(path + ".tmp", "w", encoding="utf-8") as out:
            out.write(repr(_STARTED[0]))
        os.replace(path + ".tmp", path)


_RESOLVED: set[str] = set()


def _resolve_once(url: str) -> None:
    """Look the gateway's host up once, before any request of this process is timed. gevent's
    resolver imports its modules and starts its thread pool at its first lookup: measured, the
    first request of a load process reached a stub upstream 25-28 ms after it was timed as
    sent (both clients), every later one within 4 ms; its TTFT carried that cost."""
    if url in _RESOLVED:
        return
    _RESOLVED.add(url)
    parsed = URL(url)
    with contextlib.suppress(OSError):  # the first request will fail and say why
        gevent.socket.getaddrinfo(parsed.host, parsed.port, 0, socket.SOCK_STREAM)


class Sender:
    """Sends one request at a time on its own HTTP session (keep-alive) and writes its
    record: a closed-loop user has one, the open-loop arrival user one per request in flight."""

    def __init__(self, user: User) -> None:
        self.host = user.host or ""
        _resolve_once(self.host)
        self.environment = user.environment
        self.session: requests.Session | None = None
        self.fast: HTTPClient | None = None
        self.prefix = ""
        if CONFIG.get("client") == "geventhttpclient":
            url = URL(self.host)
            self.prefix = url.path.rstrip("/")  # a gateway behind a path (http://host/api)
            self.fast = HTTPClient.from_url(
                url,
                concurrency=1,
                connection_timeout=float(CONFIG["timeout"]),
                network_timeout=float(CONFIG["timeout"]),
            )
        else:
            self.session = requests.Session()

    def post(self, path: str, body: dict[str, Any], headers: dict[str, str], stream: bool) -> Any:
        """POST ``body`` as JSON; a response read the way ``requests`` reads one (``status_code``,
        ``headers``, ``iter_lines``, ``content``, ``json``), usable as a context manager."""
        if self.fast is not None:
            payload = json.dumps(body).encode()
            sent = {**headers, "content-type": "application/json"}
            return _FastResponse(self.fast.post(self.prefix + path, body=payload, headers=sent))
        assert self.session is not None
        return self.session.post(
            f"{self.host}{path}",
            json=body,
            headers=headers,
            stream=stream,
            timeout=CONFIG["timeout"],
        )

    def send(self, lag: float | None = None) -> None:
        """One request of the scenario's endpoint; ``lag``: how late it leaves against its
        scheduled arrival (open loop)."""
        _mark_started()
        if CONFIG.get("endpoint", "chat") == "chat":
            self.chat(lag)
        else:
            self.json_path(CONFIG["endpoint"], lag)

    def json_path(self, endpoint: str, lag: float | None) -> None:
        """A RAG question or an agent task. An agent task that did not finish is sent again
        with its ``task_id`` when the load resumes tasks (``load.resume``)."""
        index = random.randrange(len(CONFIG["prompts"]))
        messages = CONFIG["prompts"][index]
        prompt = next(
            (m["content"] for m in reversed(messages) if m.get("role") == "user"),
            messages[-1]["content"],
        )
        if endpoint == "rag":
            self.json_send("/v1/rag/answer", endpoint, {"question": prompt}, index, lag)
            return
        if endpoint == "workflow":
            kind = next(_workflow_mix())
            body = {"workflow": kind, "question": prompt}
            self.json_send("/v1/workflow/run", endpoint, body, index, lag)
            return
        resume = CONFIG.get("resume")
        if not resume:
            self.json_send("/v1/agent/run", endpoint, {"task": prompt}, index, lag)
            return
        task = {"task": prompt, "task_id": secrets.token_hex(8)}
        for attempt in range(1, int(resume["attempts"]) + 2):
            record = self.json_send(
                "/v1/agent/run", endpoint, task, index, lag if attempt == 1 else None, attempt
            )
            finished = not record["error"] and record["agent_status"] in ("done", "step_limit")
            if finished or attempt > int(resume["attempts"]) or STOPPING.is_set():
                return
            gevent.sleep(float(resume["after"]))

    def json_send(
        self,
        path: str,
        endpoint: str,
        body: dict[str, Any],
        prompt: int,
        lag: float | None,
        attempt: int | None = None,
    ) -> dict[str, Any]:
        """One JSON request, timed whole; its record (written)."""
        trace_id, traceparent = new_traceparent()
        headers = {**HEADERS, "traceparent": traceparent}
        record = _new_record(trace_id, endpoint, lag)
        record.update(prompt=prompt, task_id=body.get("task_id"), attempt=attempt)
        record["workflow"] = body.get("workflow")
        started = time.perf_counter()
        try:
            response = self.post(path, body, headers, stream=False)
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
                _from_answer(record, payload, response.headers)
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
        return record

    def chat(self, lag: float | None) -> None:
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
        trace_id, traceparent = new_traceparent()
        headers = {**HEADERS, "traceparent": traceparent}
        record = _new_record(trace_id, "chat", lag)
        started = time.perf_counter()
        try:
            with self.post("/v1/chat/completions", body, headers, CONFIG["stream"]) as response:
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


class _FastResponse:
    """geventhttpclient's response, read the way the record code reads a ``requests`` one.
    Its ``readline`` hands a line over as soon as the line is complete (it parses whatever one
    ``recv`` returned), so a token is timed when it arrives: unlike FastHttpUser's line
    iterator, which buffers 1 KiB."""

    def __init__(self, response: Any) -> None:
        self._response = response
        self.status_code = int(response.status_code)
        self.headers = response
        self._content: bytes | None = None

    def iter_lines(self, chunk_size: int | None = None) -> Any:
        while line := self._response.readline(b"\n"):
            yield line.rstrip(b"\r\n")

    @property
    def content(self) -> bytes:
        if self._content is None:
            self._content = bytes(self._response.read())
        return self._content

    def json(self) -> Any:
        return json.loads(self.content)

    def __enter__(self) -> _FastResponse:
        return self

    def __exit__(self, *_: object) -> None:
        self._response.release()


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


class LLMUser(User):
    """Closed loop: one user, sending its next request once its last answer came and
    ``wait`` passed."""

    # Locust runs the concrete user classes only; a worker has both, and runs the ones the
    # master sends it.
    abstract = OPEN_LOOP and not IS_WORKER

    def wait_time(self) -> float:
        return float(CONFIG["wait"]) + random.uniform(0, float(CONFIG.get("wait_jitter") or 0))

    def on_start(self) -> None:
        CONFIGURED.wait(30)
        self.sender = Sender(self)

    @task
    def request(self) -> None:
        if STOPPING.is_set():
            return  # the load is stopping: send nothing it would not wait for
        self.sender.send()


class SentLog:
    """What this process's open-loop schedule did: written to ``<records>.sent.json`` about
    once a second and at the end (a worker sends it to the master, which adds the workers'
    accounts up); the runner reads it into the journal's ``load``."""

    MAX_TIMES = 100_000

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.scheduled = 0
        self.sent = 0
        self.not_sent_at: list[float] = []
        self.not_sent = 0
        self.peak_in_flight = 0
        self._written = 0.0

    def write(self, *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._written < 1.0:
            return
        self._written = now
        data = {
            "scheduled": self.scheduled,
            "sent": self.sent,
            "not_sent": self.not_sent,
            "not_sent_at": self.not_sent_at,
            "peak_in_flight": self.peak_in_flight,
            "final": final,
        }
        if isinstance(self.runner, WorkerRunner):
            self.runner.send_message("drills_sent", data)
        else:
            write_json(CONFIG["sent_log"], {**data, "workers": 0})


class ArrivalUser(User):
    """Open loop: sends the scenario's requests on schedule, each in a greenlet of its own,
    whether or not earlier answers came. The schedule is absolute (arrival k is due at the sum
    of the first k gaps), so a late wake-up does not stretch the ones after it; how late each
    request left is its record's ``lag``."""

    abstract = not OPEN_LOOP and not IS_WORKER
    wait_time = constant(0)

    @task
    def arrivals(self) -> None:
        """The whole schedule, once: Locust would call a task that returned again, and a
        second schedule's log would overwrite the first's."""
        CONFIGURED.wait(30)
        if STOPPING.is_set():
            raise StopUser()
        _resolve_once(self.host or "")  # before the schedule's origin: see _resolve_once
        _mark_started()  # the schedule's first arrival is due at once
        log = SentLog(self.environment.runner)
        pool = gevent.pool.Pool(CONFIG["max_in_flight"])
        idle: list[Sender] = []
        schedule = gaps(CONFIG["rate"], CONFIG["arrival"], CONFIG.get("burstiness"))
        origin, due = time.perf_counter(), 0.0
        try:
            while not STOPPING.is_set():
                due += next(schedule)
                delay = origin + due - time.perf_counter()
                if delay > 0 and STOPPING.wait(delay):
                    break
                log.scheduled += 1
                if pool.full():  # every slot holds an unanswered request
                    log.not_sent += 1
                    if len(log.not_sent_at) < SentLog.MAX_TIMES:
                        log.not_sent_at.append(time.time())
                else:
                    lag = max(0.0, time.perf_counter() - (origin + due))
                    sender = idle.pop() if idle else Sender(self)
                    pool.spawn(self._send, sender, idle, lag)
                    log.sent += 1
                    log.peak_in_flight = max(log.peak_in_flight, len(pool))
                log.write()
            # Requests in flight get the stop timeout to finish, a little less than Locust's
            # own, so that this user ends them itself (as unfinished) before Locust kills it.
            pool.join(timeout=max(0.0, CONFIG["stop_timeout"] - 0.5))
        finally:
            pool.kill()  # requests still waiting: each writes its record as unfinished
            log.write(final=True)
        raise StopUser()

    @staticmethod
    def _send(sender: Sender, idle: list[Sender], lag: float) -> None:
        try:
            sender.send(lag)
        finally:
            idle.append(sender)


class DrillShape(LoadTestShape):
    """steady, step or spike, as the scenario's ``load.shape`` says."""

    def tick(self) -> tuple[int, float] | None:
        shape = CONFIG["shape"]
        users, rate = CONFIG["users"], CONFIG["spawn_rate"]
        elapsed: float = self.get_run_time()  # type: ignore[no-untyped-call]
        if STOPPING.is_set() or elapsed > CONFIG["run_time"]:
            STOPPING.set()
            return None  # SIGTERM, or the backstop: the runner stops the load long before
        if OPEN_LOOP:
            # One arrival user per load process sends its share of the schedule.
            return max(1, int(CONFIG.get("workers_expected") or 1)), rate
        drill = _drill_time()  # None in the warm-up: the shape's first level holds
        if shape["kind"] == "step":
            steps = 0 if drill is None else int(drill // shape["every"])
            return min(users, shape["start"] + steps * shape["step"]), rate
        if shape["kind"] == "spike":
            if drill is not None and shape["at"] <= drill < shape["at"] + shape["for_"]:
                return users, rate
            return shape["base"], rate
        return users, rate


def _drill_time() -> float | None:
    """Seconds since the drill's timeline began (the runner writes its start once the warm-up
    is over); ``None`` before that."""
    try:
        with open(CONFIG["origin_file"], encoding="utf-8") as origin_file:
            origin = float(origin_file.read())
    except (OSError, ValueError, KeyError):
        return None
    return time.time() - origin
