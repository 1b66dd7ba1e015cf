"""Embedding and retrieval latency on the real stack: Triton (all-MiniLM-L6-v2 on the CPU) and
Chroma, each direct and through its Toxiproxy proxy, and the whole retrieval (embed + query)
as the gateway and the recall probe run it. Medians and p99 from one run, the variants
interleaved call by call so that the machine's noise falls on all of them alike.

    .venv/bin/python bench/rag_latency.py                 # starts the sound profile, then stops it
    .venv/bin/python bench/rag_latency.py --state-dir DIR # a stack already up
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from drills.checks import percentile
from drills.probes.retrieval import load_queries
from stack import control
from stack.config import StackConfig, load_stack_config
from stack.rag.clients import TritonEmbedder, make_store


async def measure(config: StackConfig, rounds: int) -> dict[str, list[float]]:
    rag = config.rag
    assert rag is not None
    host = config.host
    questions = [q.query for q in load_queries().queries]
    async with httpx.AsyncClient() as http:
        embedders = {
            "direct": TritonEmbedder(f"http://{host}:{rag.embedder.port}", http),
            "proxied": TritonEmbedder(f"http://{host}:{rag.embedder.proxy_port}", http),
        }
        stores = {
            kind: make_store(
                rag.vector_db.kind,
                f"http://{host}:{port}",
                rag.vector_db.collection,
                http,
                api_key=rag.vector_db.api_key,
            )
            for kind, port in (
                ("direct", rag.vector_db.port),
                ("proxied", rag.vector_db.proxy_port),
            )
        }
        vector = (await embedders["direct"].embed([questions[0]], timeout=10))[0]
        for store in stores.values():
            await store.query(vector, 3, timeout=10)  # look the collection up once

        async def retrieve(question: str) -> None:
            v = (await embedders["proxied"].embed([question], timeout=10))[0]
            await stores["proxied"].query(v, 3, timeout=10)

        variants: dict[str, Callable[[str], Awaitable[object]]] = {
            "embed direct": lambda q: embedders["direct"].embed([q], timeout=10),
            "embed via proxy": lambda q: embedders["proxied"].embed([q], timeout=10),
            "query direct": lambda q: stores["direct"].query(vector, 3, timeout=10),
            "query via proxy": lambda q: stores["proxied"].query(vector, 3, timeout=10),
            "retrieve (embed + query) via proxies": retrieve,
        }
        times: dict[str, list[float]] = {name: [] for name in variants}
        for i in range(rounds):
            question = questions[i % len(questions)]
            for name, call in variants.items():
                began = time.perf_counter()
                await call(question)
                times[name].append(time.perf_counter() - began)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state-dir", type=Path, default=None)
    parser.add_argument("--profile", default="sound")
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state_dir = args.state_dir or Path(tmp) / "state"
        if args.state_dir is None:
            control.up(args.profile, state_dir)
        try:
            times = asyncio.run(measure(load_stack_config(state_dir / "stack.yaml"), args.rounds))
        finally:
            if args.state_dir is None:
                control.down(state_dir)
    print(f"{args.rounds} calls each, interleaved; milliseconds")
    print(f"{'variant':40s} {'median':>8s} {'p99':>8s}")
    for name, values in times.items():
        print(
            f"{name:40s} {percentile(values, 50) * 1000:8.2f} {percentile(values, 99) * 1000:8.2f}"
        )


if __name__ == "__main__":
    main()
