"""The retrieval recall probe: standard queries with expected documents -> recall@k and latency.

Runs the retrieval path the gateway runs (embed on Triton, query the vector DB), through the
same Toxiproxy proxies, so a drill's faults show in it. A query that fails counts as recall 0
(nothing was retrieved) and is counted as an error. The probe's samples (source ``retrieval``):

- ``drills_retrieval_recall``: mean recall@k over the queries (0..1);
- ``drills_retrieval_latency_seconds{quantile="0.5"|"0.99"}``: per query, embed + query;
- ``drills_retrieval_queries``, ``drills_retrieval_errors``: how many ran, how many failed.

A slow index shows latency up with recall intact; a wrong or empty one shows recall down.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from drills.checks import percentile
from drills.common.yamlsrc import load_model
from stack.config import StackConfig
from stack.rag.clients import HopFailure, TritonEmbedder, VectorStore, make_store

__all__ = [
    "STANDARD_QUERIES",
    "QuerySet",
    "RecallProbe",
    "RecallResult",
    "load_queries",
]

STANDARD_QUERIES = (
    Path(__file__).resolve().parents[2] / "scenarios" / "retrieval" / ("standard-queries.yaml")
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StandardQuery(_Model):
    query: str = Field(min_length=1)
    expect: list[str] = Field(min_length=1)
    """Document ids (``<runbook>#<section>``) that must be among the top k."""


class QuerySet(_Model):
    k: int = Field(default=3, ge=1, le=50)
    queries: list[StandardQuery] = Field(min_length=1)


def load_queries(path: Path | str | None = None) -> QuerySet:
    return load_model(QuerySet, Path(path) if path else STANDARD_QUERIES)


@dataclass
class RecallResult:
    recall: float
    queries: int
    errors: int
    latencies: list[float]
    misses: list[dict[str, Any]]

    def samples(self) -> list[dict[str, Any]]:

        samples = [
            {"name": "drills_retrieval_recall", "labels": {}, "value": self.recall},
            {"name": "drills_retrieval_queries", "labels": {}, "value": float(self.queries)},
            {"name": "drills_retrieval_errors", "labels": {}, "value": float(self.errors)},
        ]
        if self.latencies:
            for q in (50, 99):
                samples.append(
                    {
                        "name": "drills_retrieval_latency_seconds",
                        "labels": {"quantile": f"0.{q}"},
                        "value": percentile(self.latencies, q),
                    }
                )
        return samples

    def as_json(self) -> dict[str, Any]:
        return {
            "recall": self.recall,
            "queries": self.queries,
            "errors": self.errors,
            "latencies": self.latencies,
            "misses": self.misses,
        }


class RecallProbe:
    """Runs ``queries`` against the stack's retrieval hops (through their proxies)."""

    def __init__(
        self,
        stack: StackConfig,
        queries: QuerySet | None = None,
        *,
        timeout: float = 2.0,
        direct: bool = False,
    ) -> None:
        if stack.rag is None:
            raise ValueError(f"stack {stack.name!r} has no 'rag' section: nothing to probe")
        self.stack = stack
        self.queries = queries or load_queries()
        self.timeout = timeout
        rag = stack.rag
        host = stack.host
        self.embed_url = f"http://{host}:{rag.embedder.port if direct else rag.embedder.proxy_port}"
        self.store_url = (
            f"http://{host}:{rag.vector_db.port if direct else rag.vector_db.proxy_port}"
        )

    async def _run(self) -> RecallResult:
        rag = self.stack.rag
        assert rag is not None
        async with httpx.AsyncClient() as http:
            embedder = TritonEmbedder(self.embed_url, http, hop=rag.embedder.name)
            store: VectorStore = make_store(
                rag.vector_db.kind,
                self.store_url,
                rag.vector_db.collection,
                http,
                hop=rag.vector_db.name,
                api_key=rag.vector_db.api_key,
            )
            recalls: list[float] = []
            latencies: list[float] = []
            misses: list[dict[str, Any]] = []
            errors = 0
            for item in self.queries.queries:
                began = time.monotonic()
                try:
                    vector = (await embedder.embed([item.query], timeout=self.timeout))[0]
                    hits = await store.query(vector, self.queries.k, timeout=self.timeout)
                except HopFailure as failure:
                    errors += 1
                    recalls.append(0.0)
                    misses.append({"query": item.query, "error": str(failure)})
                    continue
                latencies.append(time.monotonic() - began)
                found = {h.id for h in hits}
                share = len(found & set(item.expect)) / len(item.expect)
                recalls.append(share)
                if share < 1:
                    misses.append(
                        {"query": item.query, "expected": item.expect, "got": [h.id for h in hits]}
                    )
        return RecallResult(
            recall=sum(recalls) / len(recalls),
            queries=len(recalls),
            errors=errors,
            latencies=latencies,
            misses=misses,
        )

    def run(self) -> RecallResult:
        return asyncio.run(self._run())

    def samples(self) -> list[dict[str, Any]]:
        """One run as probe samples (for ``drills.probes.Prober``)."""
        return self.run().samples()
