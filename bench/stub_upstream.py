"""A deliberately fast stub of an OpenAI-compatible streaming upstream, for benchmarks of the
harness's and the gateway's own costs (never a stand-in for vLLM in tests of vLLM).

    python bench/stub_upstream.py PORT [TOKENS] [FIRST_TOKEN_DELAY_SECONDS]
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

TOKENS = int(sys.argv[2]) if len(sys.argv) > 2 else 4
FIRST_TOKEN_DELAY = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0


async def chat(request: Request) -> Response:
    body = await request.json()
    model = body.get("model", "stub")

    async def events() -> AsyncIterator[bytes]:
        base = {
            "id": "chatcmpl-stub",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
        }
        if FIRST_TOKEN_DELAY:
            await asyncio.sleep(FIRST_TOKEN_DELAY)
        for i in range(TOKENS):
            last = i == TOKENS - 1
            # The role rides on the first content chunk, as vLLM sends it: a client that times
            # its first token from the first chunk (vLLM's bench does) then times a token.
            delta = (
                {"role": "assistant", "content": f" tok{i}"} if i == 0 else {"content": f" tok{i}"}
            )
            chunk = {
                **base,
                "choices": [
                    {"index": 0, "delta": delta, "finish_reason": "length" if last else None}
                ],
            }
            yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
        usage = {"prompt_tokens": 5, "completion_tokens": TOKENS, "total_tokens": 5 + TOKENS}
        yield b"data: " + json.dumps({**base, "choices": [], "usage": usage}).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


async def health(request: Request) -> Response:
    return Response("ok")


app = Starlette(
    routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/health", health)]
)

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
