"""One model call to one upstream, streamed, with its tiered timeouts.

The gateway always streams from the engine, whether or not its client asked for a stream, so
that the first-token timeout means the same thing for every request and a failure before the
first token can be retried elsewhere. Failures are classified here, once:

- ``RetryableFailure``: connect errors and timeouts, resets, 408/429/5xx, a broken stream. They
  count against the upstream's breaker and may be retried on another upstream.
- ``RejectedByUpstream``: other 4xx (the request itself is invalid). Never retried; the client
  gets the upstream's answer as it was.
- ``DeadlineReached``: the request's own deadline ran out; no retry, the degraded path follows.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from stack.config import Timeouts, Upstream

__all__ = [
    "AttemptStream",
    "DeadlineReached",
    "RejectedByUpstream",
    "RetryableFailure",
    "UpstreamClient",
]

RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


class RetryableFailure(Exception):
    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


class RejectedByUpstream(Exception):
    def __init__(self, status: int, body: bytes, content_type: str) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        super().__init__(f"upstream answered {status}")


class DeadlineReached(Exception):
    """The request deadline passed during the attempt."""


@dataclass
class AttemptStream:
    """An attempt that produced its first token; the rest of the stream is still to be read.

    ``chunks`` holds the parsed SSE chunks read so far (up to and including the first token);
    ``rest()`` yields the remaining chunks, enforcing the model-call timeout.
    """

    upstream: Upstream
    response: httpx.Response
    lines: AsyncIterator[str]
    call_deadline: float
    request_deadline: float
    started: float
    first_token_at: float
    chunks: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False

    async def rest(self) -> AsyncIterator[dict[str, Any]]:
        try:
            while not self.done:
                chunk = await _next_chunk(self, self.call_deadline, self.request_deadline)
                if chunk is None:
                    self.done = True
                    return
                yield chunk
        finally:
            await self.close()

    async def close(self) -> None:
        """Release the connection: back to the pool after a complete stream (the bytes after
        ``[DONE]`` are read first, or the connection could not be reused), closed otherwise."""
        if self.done and not self.response.is_closed:
            try:
                async with asyncio.timeout(0.5):
                    async for _ in self.lines:
                        pass
            except (TimeoutError, httpx.HTTPError):
                pass
        await self.response.aclose()


def _token_bearing(chunk: dict[str, Any]) -> bool:
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("tool_calls") or choice.get("finish_reason"):
            return True
    return False


async def _read_event(stream: AttemptStream) -> dict[str, Any] | None:
    """The next SSE data payload as a dict, ``None`` at ``[DONE]`` or end of stream."""
    async for line in stream.lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return None
        try:
            chunk = json.loads(data)
        except ValueError:
            raise RetryableFailure(
                "protocol_error", f"unparseable stream chunk {data[:80]!r}"
            ) from None
        if not isinstance(chunk, dict):
            raise RetryableFailure("protocol_error", "stream chunk is not an object")
        if "error" in chunk:
            raise RetryableFailure("stream_error", json.dumps(chunk["error"])[:200])
        return chunk
    return None


async def _next_chunk(
    stream: AttemptStream, tier_deadline: float, request_deadline: float
) -> dict[str, Any] | None:
    loop_now = time.monotonic()
    budget = min(tier_deadline, request_deadline) - loop_now
    try:
        async with asyncio.timeout(max(budget, 0.0)):
            return await _read_event(stream)
    except TimeoutError:
        if request_deadline <= tier_deadline:
            raise DeadlineReached from None
        raise RetryableFailure("timeout_model_call") from None
    except httpx.HTTPError as exc:
        raise RetryableFailure("stream_broken", f"{type(exc).__name__}: {exc}") from None


class UpstreamClient:
    """HTTP client for one upstream hop (the L7 hop in front of it, else its Toxiproxy proxy)."""

    def __init__(self, upstream: Upstream, host: str, timeouts: Timeouts) -> None:
        self.upstream = upstream
        self.timeouts = timeouts
        self.inflight = 0
        self.last_picked = 0
        self._http = httpx.AsyncClient(
            base_url=f"http://{host}:{upstream.call_port}",
            # connect is the only tier httpx enforces; first-token and model-call are ours.
            timeout=httpx.Timeout(connect=timeouts.connect, read=None, write=5.0, pool=None),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def healthy(self, timeout: float) -> bool:
        """The engine's ``/health`` through this hop, within ``timeout``."""
        try:
            async with asyncio.timeout(timeout):
                response = await self._http.get("/health")
        except (TimeoutError, httpx.HTTPError):
            return False
        return response.status_code == 200

    async def start(
        self, payload: dict[str, Any], traceparent: str, request_deadline: float
    ) -> AttemptStream:
        """Send the call and wait for its first token (first-token timeout)."""
        # Long on purpose: One attempt at an upstream up to its first token: connect, first-token
        # and request deadlines and the ways each fails, in the order they can fire.
        started = time.monotonic()
        first_deadline = started + self.timeouts.first_token
        body = {
            **payload,
            "model": self.upstream.served_name,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        request = self._http.build_request(
            "POST", "/v1/chat/completions", json=body, headers={"traceparent": traceparent}
        )
        budget = min(first_deadline, request_deadline) - started
        response: httpx.Response | None = None
        try:
            async with asyncio.timeout(max(budget, 0.0)):
                response = await self._http.send(request, stream=True)
                if response.status_code != 200:
                    content = await response.aread()
                    await response.aclose()
                    if response.status_code in RETRYABLE_STATUS:
                        raise RetryableFailure(
                            f"http_{response.status_code}", content[:200].decode(errors="replace")
                        )
                    raise RejectedByUpstream(
                        response.status_code,
                        content,
                        response.headers.get("content-type", "application/json"),
                    )
                stream = AttemptStream(
                    upstream=self.upstream,
                    response=response,
                    lines=response.aiter_lines(),
                    call_deadline=started + self.timeouts.model_call,
                    request_deadline=request_deadline,
                    started=started,
                    first_token_at=0.0,
                )
                while True:
                    chunk = await _read_event(stream)
                    if chunk is None:
                        # Ended without a token: count it as a broken call, not a success.
                        raise RetryableFailure("empty_stream")
                    stream.chunks.append(chunk)
                    if _token_bearing(chunk):
                        stream.first_token_at = time.monotonic()
                        return stream
        except TimeoutError:
            if response is not None:
                await response.aclose()
            if request_deadline <= first_deadline:
                raise DeadlineReached from None
            raise RetryableFailure("timeout_first_token") from None
        except httpx.ConnectTimeout:
            raise RetryableFailure("timeout_connect") from None
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as exc:
            if response is not None:
                await response.aclose()
            raise RetryableFailure("connect_error", f"{type(exc).__name__}: {exc}") from None
        except (RetryableFailure, RejectedByUpstream):
            if response is not None:
                await response.aclose()
            raise
        except httpx.HTTPError as exc:
            if response is not None:
                await response.aclose()
            raise RetryableFailure("transport_error", f"{type(exc).__name__}: {exc}") from None
