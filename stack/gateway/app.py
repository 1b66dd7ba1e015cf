"""The gateway: an OpenAI-compatible front door that owns the stack's reliability policy.

Endpoints: ``POST /v1/chat/completions`` (streaming and not), ``GET /v1/models``, ``GET /health``,
``GET /metrics``; with a ``rag`` section, ``POST /v1/rag/answer``, ``POST /v1/agent/run``
(see ``stack.gateway.rag``) and ``POST /v1/workflow/run`` (``stack.gateway.workflows``). Every
answer carries these headers, so a drill can tell how it was served:

- ``traceparent`` / ``x-trace-id``: the W3C trace (the caller's, continued, or a new one);
- ``x-drills-route``: ``primary``, ``canary``, ``backup``, ``fallback``, ``error`` or
  ``rejected`` (the RAG path: ``rag``, ``no_context``; the agent path: ``agent``,
  ``graceful``; the workflow path: ``workflow``, ``fallback``);
- ``x-drills-upstream``: the upstream that answered (a Toxiproxy proxy name), if any;
- ``x-drills-attempts``: model calls sent for this request;
- ``x-drills-breakers``: every upstream's breaker state, e.g. ``vllm-0=closed, vllm-1=open``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from stack.config import StackConfig
from stack.gateway.admission import Admission, QueueFull, QueueTimeout
from stack.gateway.metrics import GatewayMetrics
from stack.gateway.rag import AgentPath, RagPath
from stack.gateway.router import Routed, Router
from stack.gateway.trace import TraceContext
from stack.gateway.upstream import AttemptStream, DeadlineReached, RetryableFailure
from stack.gateway.workflows import WorkflowPath

__all__ = ["Gateway", "create_app"]

logger = logging.getLogger("stack.gateway")


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _route_of(
    served: str,
    degraded: str,
    is_degraded: Callable[[dict[str, Any]], bool],
    rejected: tuple[int, ...] = (400,),
) -> Callable[[int, dict[str, Any]], str]:
    """The route a JSON path's answer is counted under: ``rejected`` for the statuses that turn
    a request away, ``error`` for any other failure, else ``served`` or, when the body says it
    was answered in a degraded way, ``degraded``."""

    def route(status: int, body: dict[str, Any]) -> str:
        if status in rejected:
            return "rejected"
        if status != 200:
            return "error"
        return degraded if is_degraded(body) else served

    return route


class Gateway:
    """State of one gateway instance: its router, admission queue and metrics."""

    def __init__(self, stack: StackConfig, state_dir: Path | None = None) -> None:
        self.stack = stack
        self.config = stack.gateway
        self.metrics = GatewayMetrics()
        self.router = Router(
            self.config, stack.upstreams, self.config.upstream_host or stack.host, self.metrics
        )
        self.admission = Admission(
            max_concurrency=self.config.admission.max_concurrency,
            max_queue=self.config.admission.max_queue,
        )
        self.rag: RagPath | None = None
        self.agent: AgentPath | None = None
        self.workflows: WorkflowPath | None = None
        if stack.rag is not None:
            self.rag = RagPath(stack, self.metrics, self.generate_text)
            self.agent = AgentPath(
                stack, self.metrics, state_dir or Path(tempfile.mkdtemp(prefix="drills-gw-"))
            )
            self.workflows = WorkflowPath(stack, self.metrics, self.rag, self.agent)

    # -- helpers ---------------------------------------------------------------------------

    def _headers(
        self, trace: TraceContext, route: str, attempts: int, upstream: str | None
    ) -> dict[str, str]:
        breakers = self.router.breaker_header()
        for path in (self.rag, self.agent):
            if path is not None:
                breakers += "".join(f", {n}={b.state}" for n, b in path.hops.breakers.items())
        headers = {
            "traceparent": trace.traceparent,
            "x-trace-id": trace.trace_id,
            "x-drills-route": route,
            "x-drills-attempts": str(attempts),
            "x-drills-breakers": breakers,
        }
        if upstream:
            headers["x-drills-upstream"] = upstream
        return headers

    def _error(
        self,
        trace: TraceContext,
        status: int,
        message: str,
        kind: str,
        route: str,
        attempts: int = 0,
        extra: dict[str, str] | None = None,
    ) -> JSONResponse:
        headers = self._headers(trace, route, attempts, None)
        headers.update(extra or {})
        body = {
            "error": {"message": message, "type": kind, "code": status, "trace_id": trace.trace_id}
        }
        return JSONResponse(body, status_code=status, headers=headers)

    def _served(self, routed: Routed, trace: TraceContext, started: float) -> None:
        """Account for a request an upstream answered in full."""
        assert routed.stream is not None
        self._observe(routed.route, 200, started)
        logger.info(
            "trace=%s served by %s (%s) in %.3fs after %d attempts",
            trace.trace_id,
            routed.stream.upstream.name,
            routed.route,
            time.monotonic() - started,
            routed.attempts,
        )

    def _observe(self, route: str, code: int, started: float) -> None:
        self.metrics.requests.labels(route, str(code)).inc()
        self.metrics.request_seconds.labels(route).observe(time.monotonic() - started)

    def _fallback_completion(self, model: str, stream: bool) -> tuple[dict[str, Any], list[bytes]]:
        text = self.config.fallback.text or ""
        ident = f"chatcmpl-fallback-{uuid.uuid4().hex[:16]}"
        created = int(time.time())
        whole = {
            "id": ident,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }
        chunk = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
        }
        return whole, [_sse(chunk), b"data: [DONE]\n\n"]

    async def generate_text(
        self, messages: list[dict[str, str]], max_tokens: int, traceparent: str, deadline: float
    ) -> tuple[str, str]:
        """One non-streamed completion through admission and the model routing; the text and
        the route (``primary``, ``backup``, ``fallback``, ``rejected``, ``error``)."""
        work_deadline = deadline - self.config.fallback_reserve
        fallback = self.config.fallback.text or ""
        try:
            await self.admission.acquire(
                min(self.config.timeouts.queue, work_deadline - time.monotonic())
            )
        except (QueueFull, QueueTimeout):
            return fallback, "rejected"
        try:
            payload = {"messages": messages, "max_tokens": max_tokens}
            routed = await self.router.route(payload, traceparent, work_deadline)
            stream = routed.stream
            if stream is None:
                return fallback, "fallback" if fallback else "error"
            chunks, failure = await self._drain(stream)
            if failure is not None:
                self.metrics.midstream_failures.labels(stream.upstream.name, failure).inc()
                return fallback, "fallback" if fallback else "error"
            text = "".join(
                (choice.get("delta") or {}).get("content") or ""
                for chunk in chunks
                for choice in chunk.get("choices") or ()
            )
            return text, routed.route
        finally:
            self.admission.release()

    async def _json_path(
        self, request: Request, handler: Any, route_of: Callable[[int, dict[str, Any]], str]
    ) -> Response:
        started = time.monotonic()
        trace = TraceContext.from_header(request.headers.get("traceparent"))
        try:
            payload = json.loads(await request.body())
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            self._observe("rejected", 400, started)
            return self._error(
                trace, 400, "the body must be a JSON object", "invalid_request_error", "rejected"
            )
        status, body = await handler(payload, trace.traceparent)
        route = route_of(status, body)
        self._observe(route, status, started)
        body["trace_id"] = trace.trace_id
        headers = self._headers(trace, route, 0, None)
        return JSONResponse(body, status_code=status, headers=headers)

    async def rag_answer(self, request: Request) -> Response:
        assert self.rag is not None
        return await self._json_path(
            request,
            self.rag.answer,
            _route_of("rag", "no_context", lambda body: bool(body.get("missing_context"))),
        )

    async def agent_run(self, request: Request) -> Response:
        assert self.agent is not None
        return await self._json_path(
            request,
            self.agent.run,
            _route_of("agent", "graceful", lambda body: body.get("status") == "graceful"),
        )

    async def workflow_run(self, request: Request) -> Response:
        assert self.workflows is not None
        return await self._json_path(
            request,
            self.workflows.run,
            _route_of(
                "workflow",
                "fallback",
                lambda body: body.get("status") == "fallback",
                rejected=(400, 429),
            ),
        )

    # -- endpoints -------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        breakers = {n: b.state for n, b in self.router.breakers.items()}
        for path in (self.rag, self.agent):
            if path is not None:
                breakers.update({n: b.state for n, b in path.hops.breakers.items()})
        return JSONResponse(
            {
                "status": "ok",
                "stack": self.stack.name,
                "breakers": breakers,
                "inflight": self.admission.inflight,
                "queued": self.admission.waiting,
            }
        )

    async def metrics_endpoint(self, request: Request) -> Response:
        self.metrics.queue_depth.set(self.admission.waiting)
        self.metrics.inflight.set(self.admission.inflight)
        if self.workflows is not None:
            self.workflows.observe()
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def models(self, request: Request) -> Response:
        data = [{"id": self.stack.engine.served_name, "object": "model", "owned_by": "drills"}]
        if self.stack.backup is not None:
            data.append(
                {"id": self.stack.backup.served_name, "object": "model", "owned_by": "drills"}
            )
        return JSONResponse({"object": "list", "data": data})

    async def chat_completions(self, request: Request) -> Response:
        # Long on purpose: One chat completion through the gateway: admission, routing, the stream
        # relayed and the fallback, in the order a request meets them.
        started = time.monotonic()
        trace = TraceContext.from_header(request.headers.get("traceparent"))
        timeouts = self.config.timeouts
        deadline = started + timeouts.request
        work_deadline = deadline - self.config.fallback_reserve
        try:
            payload = json.loads(await request.body())
        except ValueError:
            payload = None
        if not isinstance(payload, dict) or not isinstance(payload.get("messages"), list):
            self._observe("rejected", 400, started)
            self.metrics.rejected.labels("invalid_request").inc()
            return self._error(
                trace,
                400,
                "the body must be a JSON object with a 'messages' list",
                "invalid_request_error",
                "rejected",
            )
        want_stream = bool(payload.get("stream"))
        model = str(payload.get("model") or self.stack.engine.served_name)

        try:
            await self.admission.acquire(min(timeouts.queue, work_deadline - time.monotonic()))
        except QueueFull:
            return self._refuse(
                trace,
                started,
                429,
                "queue_full",
                f"the gateway queue is full ({self.admission.max_queue} waiting)",
            )
        except QueueTimeout:
            return self._refuse(
                trace,
                started,
                503,
                "queue_timeout",
                f"not admitted within the queue timeout ({timeouts.queue:g}s)",
            )
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.admission.release()

        try:
            routed = await self.router.route(payload, trace.traceparent, work_deadline, canary=True)
            if routed.stream is None:
                release()
                return self._degraded(routed, trace, started, model, want_stream)
            if want_stream:
                response = self._stream_response(routed, trace, started, release)
                return response
            result = await self._collect(routed, trace, started, model)
            release()
            return result
        except BaseException:
            release()
            raise

    def _refuse(
        self, trace: TraceContext, started: float, status: int, reason: str, message: str
    ) -> Response:
        self.metrics.rejected.labels(reason).inc()
        self._observe("rejected", status, started)
        retry_after = str(max(1, math.ceil(self.config.admission.retry_after)))
        logger.info("trace=%s rejected %s", trace.trace_id, reason)
        return self._error(
            trace, status, message, reason, "rejected", extra={"retry-after": retry_after}
        )

    def _degraded(
        self, routed: Routed, trace: TraceContext, started: float, model: str, want_stream: bool
    ) -> Response:
        if routed.rejection is not None:
            rejection = routed.rejection
            self._observe("error", rejection.status, started)
            logger.info(
                "trace=%s upstream rejected the request: %s", trace.trace_id, rejection.status
            )
            return Response(
                rejection.body,
                status_code=rejection.status,
                media_type=rejection.content_type,
                headers=self._headers(trace, "error", routed.attempts, None),
            )
        reason = routed.last_failure or "unknown"
        if self.config.fallback.text is None:
            status = (
                504 if reason in {"deadline", "timeout_first_token", "timeout_model_call"} else 502
            )
            self._observe("error", status, started)
            logger.warning(
                "trace=%s all upstreams failed (%s) and there is no fallback text",
                trace.trace_id,
                ",".join(routed.failures) or reason,
            )
            return self._error(
                trace,
                status,
                f"no upstream could answer: {reason}",
                "upstream_error",
                "error",
                routed.attempts,
            )
        self.metrics.fallbacks.labels("text").inc()
        self._observe("fallback", 200, started)
        self.metrics.ttft_seconds.labels("fallback").observe(time.monotonic() - started)
        logger.warning(
            "trace=%s serving the fallback text after %d attempts (%s)",
            trace.trace_id,
            routed.attempts,
            ",".join(routed.failures) or reason,
        )
        whole, events = self._fallback_completion(model, want_stream)
        headers = self._headers(trace, "fallback", routed.attempts, None)
        headers["x-drills-fallback-reason"] = reason
        if want_stream:

            async def body() -> AsyncIterator[bytes]:
                for event in events:
                    yield event

            return StreamingResponse(body(), media_type="text/event-stream", headers=headers)
        return JSONResponse(whole, headers=headers)

    def _relabel(self, chunk: dict[str, Any], stream: AttemptStream) -> dict[str, Any]:
        chunk["model"] = stream.upstream.served_name
        return chunk

    def _stream_response(
        self, routed: Routed, trace: TraceContext, started: float, release: Any
    ) -> Response:
        stream = routed.stream
        assert stream is not None
        route = routed.route
        if route == "backup":
            self.metrics.fallbacks.labels("backup").inc()
        headers = self._headers(trace, route, routed.attempts, stream.upstream.name)

        async def body() -> AsyncIterator[bytes]:
            failure: str | None = "client_gone"
            try:
                for chunk in stream.chunks:
                    yield _sse(self._relabel(chunk, stream))
                self.metrics.ttft_seconds.labels(route).observe(time.monotonic() - started)
                try:
                    async for chunk in stream.rest():
                        yield _sse(self._relabel(chunk, stream))
                except (RetryableFailure, DeadlineReached) as exc:
                    failure = exc.reason if isinstance(exc, RetryableFailure) else "deadline"
                    self.metrics.midstream_failures.labels(stream.upstream.name, failure).inc()
                    logger.warning(
                        "trace=%s stream from %s broke after the first token: %s",
                        trace.trace_id,
                        stream.upstream.name,
                        failure,
                    )
                    yield _sse(
                        {
                            "error": {
                                "message": f"the model stream broke: {failure}",
                                "type": "upstream_error",
                                "trace_id": trace.trace_id,
                            }
                        }
                    )
                    yield b"data: [DONE]\n\n"
                    self._observe(route, 200, started)
                    return
                yield b"data: [DONE]\n\n"
                failure = None
                self._served(routed, trace, started)
            finally:
                await stream.close()
                self.router.finish(stream, failure)
                release()

        return StreamingResponse(body(), media_type="text/event-stream", headers=headers)

    async def _drain(self, stream: AttemptStream) -> tuple[list[dict[str, Any]], str | None]:
        """Every chunk of a non-streamed call, and why it broke (``None`` if it did not);
        the upstream is released and its breaker told either way."""
        chunks = list(stream.chunks)
        failure: str | None = "client_gone"
        try:
            async for chunk in stream.rest():
                chunks.append(chunk)
            failure = None
        except (RetryableFailure, DeadlineReached) as exc:
            failure = exc.reason if isinstance(exc, RetryableFailure) else "deadline"
        finally:
            await stream.close()
            self.router.finish(stream, failure)
        return chunks, failure

    async def _collect(
        self, routed: Routed, trace: TraceContext, started: float, model: str
    ) -> Response:
        stream = routed.stream
        assert stream is not None
        route = routed.route
        chunks, failure = await self._drain(stream)
        if failure is not None:
            # The call broke after its first token; its tokens are lost, so degrade.
            self.metrics.midstream_failures.labels(stream.upstream.name, failure).inc()
            degraded = Routed(
                "fallback",
                routed.attempts,
                last_failure=failure,
                failures=[*routed.failures, f"{stream.upstream.name}:{failure}"],
            )
            return self._degraded(degraded, trace, started, model, False)
        if route == "backup":
            self.metrics.fallbacks.labels("backup").inc()
        text: list[str] = []
        finish_reason = None
        usage = None
        for chunk in chunks:
            for choice in chunk.get("choices") or ():
                text.append((choice.get("delta") or {}).get("content") or "")
                finish_reason = choice.get("finish_reason") or finish_reason
            usage = chunk.get("usage") or usage
        first = chunks[0] if chunks else {}
        body = {
            "id": first.get("id", f"chatcmpl-{uuid.uuid4().hex[:16]}"),
            "object": "chat.completion",
            "created": first.get("created", int(time.time())),
            "model": stream.upstream.served_name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "".join(text)},
                    "finish_reason": finish_reason,
                }
            ],
            "usage": usage,
        }
        self.metrics.ttft_seconds.labels(route).observe(stream.first_token_at - started)
        self._served(routed, trace, started)
        return JSONResponse(
            body, headers=self._headers(trace, route, routed.attempts, stream.upstream.name)
        )


def create_app(stack: StackConfig, state_dir: Path | None = None) -> Starlette:
    gateway = Gateway(stack, state_dir)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        prober = asyncio.create_task(gateway.router.probe_open_breakers())
        yield
        prober.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await prober
        await gateway.router.aclose()
        if gateway.workflows is not None:
            await gateway.workflows.aclose()
        if gateway.rag is not None:
            await gateway.rag.aclose()

    routes = []
    if gateway.rag is not None:
        routes.append(Route("/v1/rag/answer", gateway.rag_answer, methods=["POST"]))
    if gateway.agent is not None:
        routes.append(Route("/v1/agent/run", gateway.agent_run, methods=["POST"]))
    if gateway.workflows is not None:
        routes.append(Route("/v1/workflow/run", gateway.workflow_run, methods=["POST"]))
    app = Starlette(
        routes=[
            *routes,
            Route("/v1/chat/completions", gateway.chat_completions, methods=["POST"]),
            Route("/v1/models", gateway.models, methods=["GET"]),
            Route("/health", gateway.health, methods=["GET"]),
            Route("/metrics", gateway.metrics_endpoint, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.gateway = gateway
    return app
