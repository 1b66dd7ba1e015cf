"""The L7 hop: an HTTP and SSE proxy of the harness's own, one listener per model upstream.

Built on aiohttp (its server and its client, both streaming) on asyncio; see
``drills.common.hop`` for the rules it injects, the records it keeps and its control API. Why
not an existing proxy: mitmproxy's streaming hook is a synchronous function per chunk (a stall
of one stream would block every other one) and Envoy's fault filter delays or aborts a whole
request, never one stream after N chunks; neither is installable from the registries here.

What the hop does to a model call, in order: draw the faults of its hop (each by its
``toxicity``; the first one drawn applies), answer it itself (``hop.status``, ``hop.wedge``) or
forward it, then pass the answer back one SSE event at a time so that ``after_chunks`` is exact,
recording what went back: status, first byte, events, ``finish_reason``, ``[DONE]``, bytes, how it
ended. Nothing is buffered beyond one event; the hop adds no timeout of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import math
import random
import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from aiohttp import (
    ClientConnectorError,
    ClientError,
    ClientSession,
    ClientTimeout,
    TCPConnector,
    web,
)
from pydantic import ValidationError

from drills.common.hop import (
    CutRule,
    FirstTokenDelayRule,
    MalformedRule,
    StallRule,
    StatusRule,
    WedgeRule,
    parse_rule,
)

__all__ = ["HopServer", "HopSpec"]

logger = logging.getLogger(__name__)

REFUSAL_PROBE_S = 0.05
"""While a hop's upstream refuses, how often the hop tries it (a TCP connect, nothing sent)."""
ANNOUNCED_GRACE_S = 2.0
"""An announced refusal that has not come by then is called off: the hop listens again."""
MAX_RECORDS = 200_000
"""Records kept in memory (the oldest are dropped first; a run reads its own as it goes)."""
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_FINISH = re.compile(rb'"finish_reason"\s*:\s*"([A-Za-z_]+)"')
_DONE = b"data: [DONE]"
_MALFORMED = b'data: {"id": "drills-malformed", "choices": [{"delta": {"content": \n\n'


@dataclass(frozen=True)
class HopSpec:
    name: str
    host: str
    port: int
    upstream: str
    """The upstream's base URL, e.g. ``http://127.0.0.1:18200`` (a Toxiproxy listener)."""


@dataclass
class Fault:
    name: str
    rule: Any
    added_at: float
    hits: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            **self.rule.model_dump(mode="json"),
            "added_at": self.added_at,
            "hits": self.hits,
        }


@dataclass
class Hop:
    spec: HopSpec
    faults: dict[str, Fault] = field(default_factory=dict)
    requests: int = 0
    session: ClientSession | None = None
    runner: web.AppRunner | None = None
    site: web.TCPSite | None = None
    refusing: asyncio.Task[None] | None = None
    """While the upstream refuses connections, the watch that reopens the listener."""

    def draw(self) -> Fault | None:
        for fault in list(self.faults.values()):
            if fault.rule.toxicity >= 1.0 or random.random() < fault.rule.toxicity:
                return fault
        return None


def _is_model_call(request: web.Request) -> bool:
    return request.method == "POST" and request.path.startswith("/v1/")


class _Answer:
    """What goes back to the client for one request, and its record."""

    def __init__(self, request: web.Request, record: dict[str, Any]) -> None:
        self.request = request
        self.record = record
        self.response: web.StreamResponse | None = None
        self.tail = b""

    async def start(self, status: int, headers: dict[str, str]) -> None:
        self.response = web.StreamResponse(status=status, headers=headers)
        self.record["status"] = status
        await self.response.prepare(self.request)

    async def send(self, data: bytes) -> None:
        assert self.response is not None
        if not data:
            return
        if self.record["first_byte_s"] is None:
            self.record["first_byte_s"] = time.time() - self.record["arrived_at"]
        await self.response.write(data)
        self.record["bytes"] += len(data)
        self._notice(data)

    def _notice(self, data: bytes) -> None:
        seen = self.tail + data
        self.record["chunks"] += data.count(b"\n\n") + (
            1 if self.tail.endswith(b"\n") and data.startswith(b"\n") else 0
        )
        for match in _FINISH.finditer(seen):
            self.record["finish_reason"] = match.group(1).decode()
        if _DONE in seen:
            self.record["done"] = True
        self.tail = seen[-32:]

    async def end(self) -> None:
        if self.response is not None:
            await self.response.write_eof()


class HopServer:
    """Every hop's listener and the control API, in one event loop."""

    def __init__(self, hops: list[HopSpec], control: tuple[str, int]) -> None:
        self.hops = {h.name: Hop(h) for h in hops}
        self.control = control
        self.records: deque[dict[str, Any]] = deque(maxlen=MAX_RECORDS)
        self.seq = 0
        self.runners: list[web.AppRunner] = []

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        for hop in self.hops.values():
            hop.session = ClientSession(
                connector=TCPConnector(limit=0, force_close=False),
                timeout=ClientTimeout(total=None, sock_connect=30),
                auto_decompress=False,
            )
            app = web.Application()
            app["hop"] = hop
            app.router.add_route("*", "/{tail:.*}", self._proxy)
            hop.runner, hop.site = await self._serve(app, hop.spec.host, hop.spec.port)
        control = web.Application()
        control.router.add_get("/health", self._health)
        control.router.add_get("/hops", self._list_hops)
        control.router.add_get("/hops/{hop}/faults", self._list_faults)
        control.router.add_post("/hops/{hop}/faults", self._add_fault)
        control.router.add_delete("/hops/{hop}/faults/{name}", self._remove_fault)
        control.router.add_post("/hops/{hop}/refuse", self._refuse)
        control.router.add_get("/records", self._records)
        await self._serve(control, *self.control)

    async def _serve(
        self, app: web.Application, host: str, port: int
    ) -> tuple[web.AppRunner, web.TCPSite]:
        # handler_cancellation: a client that leaves cancels its handler (recorded as such).
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port, reuse_address=True)
        await site.start()
        self.runners.append(runner)
        return runner, site

    # -- a faithful chain: a refused upstream is refused here too ----------------------------

    async def refuse(self, hop: Hop, announced: bool) -> None:
        """Mirror an upstream that refuses connections: close the hop's listener (a gateway's
        connect is refused, as it would be without the hop, so a gateway that retries only
        requests it has not sent retries this one) and its open connections (as the upstream's
        are gone), until the upstream accepts again; then listen again. ``announced``: the
        upstream is about to refuse (a cut about to be applied); if it never does within
        ``ANNOUNCED_GRACE_S``, the hop listens again."""
        if hop.refusing is not None or hop.site is None or hop.runner is None:
            return
        await hop.site.stop()
        server = hop.runner.server
        for handler in list(server.connections if server is not None else ()):
            handler.force_close()
        logger.info("hop %s: its upstream refuses; so does the hop", hop.spec.name)
        hop.refusing = asyncio.create_task(self._listen_when_accepted(hop, announced))

    async def _listen_when_accepted(self, hop: Hop, announced: bool) -> None:
        host, port = _address_of(hop.spec.upstream)
        began = time.monotonic()
        refused_seen = not announced
        while True:
            await asyncio.sleep(REFUSAL_PROBE_S)
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 1.0)
            except (OSError, TimeoutError):
                refused_seen = True
                continue
            writer.close()
            if refused_seen or time.monotonic() - began > ANNOUNCED_GRACE_S:
                break
        assert hop.runner is not None
        hop.site = web.TCPSite(hop.runner, hop.spec.host, hop.spec.port, reuse_address=True)
        await hop.site.start()
        hop.refusing = None
        logger.info("hop %s: its upstream accepts again; so does the hop", hop.spec.name)

    async def stop(self) -> None:
        for hop in self.hops.values():
            if hop.refusing is not None:
                hop.refusing.cancel()
        for runner in self.runners:
            await runner.cleanup()
        for hop in self.hops.values():
            if hop.session is not None:
                await hop.session.close()

    # -- control API -------------------------------------------------------------------------

    def _hop(self, request: web.Request) -> Hop:
        name = request.match_info["hop"]
        hop = self.hops.get(name)
        if hop is None:
            raise web.HTTPNotFound(
                text=json.dumps({"message": f"no hop {name!r}; hops: {', '.join(self.hops)}"}),
                content_type="application/json",
            )
        return hop

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"hops": sorted(self.hops), "next_seq": self.seq})

    async def _list_hops(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                name: {
                    "listen": f"{hop.spec.host}:{hop.spec.port}",
                    "upstream": hop.spec.upstream,
                    "faults": [f.as_json() for f in hop.faults.values()],
                    "requests": hop.requests,
                    "refusing": hop.refusing is not None,
                }
                for name, hop in self.hops.items()
            }
        )

    async def _list_faults(self, request: web.Request) -> web.Response:
        return web.json_response([f.as_json() for f in self._hop(request).faults.values()])

    async def _add_fault(self, request: web.Request) -> web.Response:
        hop = self._hop(request)
        try:
            data = await request.json()
            name = str(data.pop("name"))
            rule = parse_rule(data)
        except (ValueError, KeyError, ValidationError) as exc:
            return web.json_response({"message": f"not a hop fault: {exc}"}, status=400)
        if name in hop.faults:
            return web.json_response({"message": f"{hop.spec.name} has {name!r}"}, status=409)
        hop.faults[name] = Fault(name, rule, time.time())
        logger.info("hop %s: fault %s added (%s)", hop.spec.name, name, rule.kind)
        return web.json_response(hop.faults[name].as_json(), status=201)

    async def _remove_fault(self, request: web.Request) -> web.Response:
        hop = self._hop(request)
        fault = hop.faults.pop(request.match_info["name"], None)
        if fault is None:
            return web.json_response({"message": "no such fault"}, status=404)
        logger.info("hop %s: fault %s removed after %d hits", hop.spec.name, fault.name, fault.hits)
        return web.json_response(fault.as_json())

    async def _refuse(self, request: web.Request) -> web.Response:
        """The upstream is about to refuse connections (a cut): refuse them here first."""
        hop = self._hop(request)
        await self.refuse(hop, announced=True)
        return web.json_response({"hop": hop.spec.name, "refusing": hop.refusing is not None})

    async def _records(self, request: web.Request) -> web.Response:
        since = int(request.query.get("since", 0))
        limit = int(request.query.get("limit", 10_000))
        first = self.records[0]["seq"] if self.records else self.seq
        start = max(0, since - first)
        out = list(itertools.islice(self.records, start, start + max(0, limit)))
        return web.json_response(
            {"next": out[-1]["seq"] + 1 if out else max(since, 0), "records": out}
        )

    # -- the proxy ---------------------------------------------------------------------------

    async def _proxy(self, request: web.Request) -> web.StreamResponse:
        hop: Hop = request.app["hop"]
        hop.requests += 1
        record: dict[str, Any] = {
            "seq": self.seq,
            "hop": hop.spec.name,
            "method": request.method,
            "path": request.path,
            "arrived_at": time.time(),
            "status": None,
            "first_byte_s": None,
            "chunks": 0,
            "finish_reason": None,
            "done": False,
            "bytes": 0,
            "ended_at": None,
            "outcome": "complete",
            "error": None,
            "traceparent": request.headers.get("traceparent"),
            "fault": None,
            "fault_kind": None,
        }
        self.seq += 1
        self.records.append(record)
        fault = hop.draw() if _is_model_call(request) else None
        if fault is not None:
            fault.hits += 1
            record["fault"], record["fault_kind"] = fault.name, fault.rule.kind
        answer = _Answer(request, record)
        try:
            await self._answer(hop, request, answer, fault.rule if fault else None)
        except asyncio.CancelledError:
            record["outcome"] = "client_disconnected"
            raise
        except (ConnectionResetError, ClientError) as exc:
            gone = _client_gone(request)
            record["outcome"] = "client_disconnected" if gone else "upstream_error"
            record["error"] = str(exc) or type(exc).__name__
            if _refused(exc):  # unannounced (an upstream gone): refused from the next one on
                await self.refuse(hop, announced=False)
            # Transparent to the gateway: an upstream that refused, reset or broke off is a
            # dropped connection here too, never an answer the hop made up (a 502, or a clean
            # end of a stream that was cut).
            _abort(request)
        finally:
            record["ended_at"] = time.time()
        return answer.response or web.Response(status=502)

    async def _answer(
        self, hop: Hop, request: web.Request, answer: _Answer, rule: Any | None
    ) -> None:
        if isinstance(rule, (StatusRule, WedgeRule)):
            answer.record["outcome"] = "injected"  # the hop answers (or hangs) itself
        if isinstance(rule, StatusRule):
            await _status(answer, rule)
            return
        if isinstance(rule, WedgeRule):
            await asyncio.Event().wait()  # until the client leaves (the handler is cancelled)
        assert hop.session is not None
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        async with hop.session.request(
            request.method,
            hop.spec.upstream + request.path_qs,
            headers=headers,
            data=body or None,
            allow_redirects=False,
        ) as upstream:
            out = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP}
            if isinstance(rule, FirstTokenDelayRule):
                await asyncio.sleep(rule.delay)
            await answer.start(upstream.status, out)
            await _stream(upstream.content, answer, rule)


def _refused(exc: BaseException) -> bool:
    return isinstance(exc, ClientConnectorError) and isinstance(
        exc.os_error, ConnectionRefusedError
    )


def _address_of(url: str) -> tuple[str, int]:
    parsed = urlsplit(url)
    return parsed.hostname or "127.0.0.1", parsed.port or (443 if parsed.scheme == "https" else 80)


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _status(answer: _Answer, rule: StatusRule) -> None:
    headers = {"content-type": "application/json"}
    if rule.retry_after is not None:
        headers["retry-after"] = str(math.ceil(rule.retry_after))
    body = rule.body
    if body is None:
        kind = "rate_limit_exceeded" if rule.status == 429 else "server_error"
        body = json.dumps(
            {"error": {"message": f"drills hop: injected HTTP {rule.status}", "type": kind}}
        )
    await answer.start(rule.status, headers)
    await answer.send(body.encode())
    await answer.end()


async def _stream(content: Any, answer: _Answer, rule: Any | None) -> None:
    """Pass the upstream's body back one SSE event at a time, applying a chunk rule."""
    after = getattr(rule, "after_chunks", None)
    pending = b""
    sent = 0
    async for data in content.iter_any():
        if after is None:
            await answer.send(data)  # no chunk rule: bytes as they come
            continue
        pending += data
        while b"\n\n" in pending:
            event, _, pending = pending.partition(b"\n\n")
            if sent == after:
                answer.record["outcome"] = "injected"  # the stream reached the rule's chunk
                if isinstance(rule, StallRule):
                    await asyncio.sleep(rule.duration)
                    after = None  # once per stream
                elif isinstance(rule, CutRule):
                    await _cut(answer, rule)
                    return
                elif isinstance(rule, MalformedRule):
                    await answer.send(_MALFORMED)
                    sent += 1
                    after = None
                    continue
            await answer.send(event + b"\n\n")
            sent += 1
        if after is None and pending:
            await answer.send(pending)
            pending = b""
    await answer.send(pending)
    await answer.end()


async def _cut(answer: _Answer, rule: CutRule) -> None:
    if rule.clean:
        await answer.end()
    else:
        _abort(answer.request)  # mid-body: the chunked encoding never ends


def _abort(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        with contextlib.suppress(Exception):
            transport.abort()
