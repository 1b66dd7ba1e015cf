"""Clients of the retrieval hops: the embedder on Triton and the vector DB (Chroma or Qdrant).

Both speak plain HTTP through ``httpx`` so that the gateway, the tool server, the seeding step
and the recall probe share one implementation, and every call can be pointed at a Toxiproxy
proxy. Failures surface as ``HopFailure`` with a short reason (``timeout``, ``connect``,
``http_503``, ...) that the gateway's retry and breaker logic acts on.

``VectorStore`` is the interface a vector DB adapter implements: ``ensure_collection``,
``upsert``, ``query``, ``count``. ``ChromaStore`` talks to Chroma's v2 REST API;
``QdrantStore`` to Qdrant's REST API.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

__all__ = [
    "ChromaStore",
    "Hit",
    "HopFailure",
    "QdrantStore",
    "TritonEmbedder",
    "VectorStore",
    "first_leaf",
    "make_store",
]

TRITON_MODEL = "minilm"


def first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first leaf of an exception group (the MCP client nests its task groups)."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


class HopFailure(Exception):
    """A call to a retrieval hop failed; ``reason`` is short and stable (for metrics)."""

    def __init__(self, hop: str, reason: str, detail: str = "") -> None:
        super().__init__(f"{hop}: {reason}{': ' + detail if detail else ''}")
        self.hop = hop
        self.reason = reason
        self.detail = detail


def _reason(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, httpx.ConnectError):
        return "connect"
    if isinstance(exc, httpx.HTTPStatusError):
        return f"http_{exc.response.status_code}"
    return "transport"


async def _call(
    http: httpx.AsyncClient,
    hop: str,
    method: str,
    url: str,
    *,
    timeout: float,
    json: Any = None,
    headers: dict[str, str] | None = None,
) -> Any:
    try:
        response = await http.request(method, url, json=json, headers=headers, timeout=timeout)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        raise HopFailure(hop, _reason(exc), str(exc)[:200]) from exc
    try:
        return response.json()
    except ValueError as exc:
        raise HopFailure(hop, "bad_response", response.text[:200]) from exc


@dataclass(frozen=True)
class Hit:
    id: str
    source: str
    title: str
    text: str
    distance: float


class TritonEmbedder:
    """all-MiniLM-L6-v2 on Triton, over the KServe v2 HTTP protocol."""

    hop = "triton"

    def __init__(self, base_url: str, http: httpx.AsyncClient, hop: str = "triton") -> None:
        self.base_url = base_url.rstrip("/")
        self.http = http
        self.hop = hop

    async def embed(
        self, texts: list[str], *, timeout: float, headers: dict[str, str] | None = None
    ) -> list[list[float]]:
        body = {
            "inputs": [
                {
                    "name": "text",
                    "datatype": "BYTES",
                    "shape": [len(texts), 1],
                    "data": texts,
                }
            ]
        }
        url = f"{self.base_url}/v2/models/{TRITON_MODEL}/infer"
        data = await _call(
            self.http, self.hop, "POST", url, json=body, timeout=timeout, headers=headers
        )
        try:
            output = data["outputs"][0]
            dims = int(output["shape"][1])
            flat = output["data"]
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise HopFailure(self.hop, "bad_response", str(data)[:200]) from exc
        return [flat[i * dims : (i + 1) * dims] for i in range(len(texts))]


class VectorStore(Protocol):
    hop: str

    async def ensure_collection(self, dimensions: int, *, timeout: float) -> None: ...

    async def upsert(
        self,
        ids: list[str],
        vectors: list[list[float]],
        documents: list[str],
        metadatas: list[dict[str, str]],
        *,
        timeout: float,
    ) -> None: ...

    async def query(self, vector: list[float], k: int, *, timeout: float) -> list[Hit]: ...

    async def count(self, *, timeout: float) -> int: ...


class ChromaStore:
    """Chroma's server (v2 REST API), default tenant and database, cosine distance."""

    def __init__(
        self, base_url: str, collection: str, http: httpx.AsyncClient, hop: str = "vectordb"
    ) -> None:
        self.base = (
            f"{base_url.rstrip('/')}/api/v2/tenants/default_tenant/databases/default_database"
        )
        self.collection = collection
        self.http = http
        self.hop = hop
        self._id: str | None = None

    async def _collection_id(self, timeout: float) -> str:
        if self._id is None:
            data = await _call(
                self.http,
                self.hop,
                "POST",
                f"{self.base}/collections",
                json={
                    "name": self.collection,
                    "get_or_create": True,
                    "metadata": {"hnsw:space": "cosine"},
                },
                timeout=timeout,
            )
            self._id = str(data["id"])
        return self._id

    async def ensure_collection(self, dimensions: int, *, timeout: float) -> None:
        await self._collection_id(timeout)

    async def upsert(
        self,
        ids: list[str],
        vectors: list[list[float]],
        documents: list[str],
        metadatas: list[dict[str, str]],
        *,
        timeout: float,
    ) -> None:
        cid = await self._collection_id(timeout)
        await _call(
            self.http,
            self.hop,
            "POST",
            f"{self.base}/collections/{cid}/upsert",
            json={
                "ids": ids,
                "embeddings": vectors,
                "documents": documents,
                "metadatas": metadatas,
            },
            timeout=timeout,
        )

    async def query(self, vector: list[float], k: int, *, timeout: float) -> list[Hit]:
        cid = await self._collection_id(timeout)
        try:
            data = await _call(
                self.http,
                self.hop,
                "POST",
                f"{self.base}/collections/{cid}/query",
                json={
                    "query_embeddings": [vector],
                    "n_results": k,
                    "include": ["documents", "metadatas", "distances"],
                },
                timeout=timeout,
            )
        except HopFailure as failure:
            if failure.reason == "http_404":
                self._id = None  # the collection was recreated (a wiped server): look it up again
            raise
        hits = []
        for ident, doc, meta, dist in zip(
            data["ids"][0],
            data["documents"][0],
            data["metadatas"][0],
            data["distances"][0],
            strict=True,
        ):
            meta = meta or {}
            hits.append(
                Hit(ident, meta.get("source", ""), meta.get("title", ""), doc or "", float(dist))
            )
        return hits

    async def count(self, *, timeout: float) -> int:
        cid = await self._collection_id(timeout)
        return int(
            await _call(
                self.http, self.hop, "GET", f"{self.base}/collections/{cid}/count", timeout=timeout
            )
        )


def _point_id(ident: str) -> str:
    """Qdrant point ids are unsigned integers or UUIDs: a stable UUID per document id."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"drills:{ident}"))


class QdrantStore:
    """A Qdrant server the user runs (REST API), cosine distance.

    Qdrant reports a cosine *similarity* as its score; hits carry ``1 - score`` so that both
    adapters order and threshold by the same distance."""

    def __init__(
        self,
        base_url: str,
        collection: str,
        http: httpx.AsyncClient,
        hop: str = "vectordb",
        api_key: str | None = None,
    ) -> None:
        self.base = f"{base_url.rstrip('/')}/collections/{collection}"
        self.http = http
        self.hop = hop
        self.headers = {"api-key": api_key} if api_key else None

    async def _call(self, method: str, path: str, *, timeout: float, json: Any = None) -> Any:
        data = await _call(
            self.http,
            self.hop,
            method,
            f"{self.base}{path}",
            json=json,
            timeout=timeout,
            headers=self.headers,
        )
        return data.get("result") if isinstance(data, dict) else data

    async def ensure_collection(self, dimensions: int, *, timeout: float) -> None:
        try:
            await self._call("GET", "", timeout=timeout)
            return
        except HopFailure as failure:
            if failure.reason != "http_404":
                raise
        await self._call(
            "PUT",
            "",
            json={"vectors": {"size": dimensions, "distance": "Cosine"}},
            timeout=timeout,
        )

    async def upsert(
        self,
        ids: list[str],
        vectors: list[list[float]],
        documents: list[str],
        metadatas: list[dict[str, str]],
        *,
        timeout: float,
    ) -> None:
        points: list[dict[str, Any]] = []
        for ident, vector, document, meta in zip(ids, vectors, documents, metadatas, strict=True):
            payload: dict[str, Any] = {**meta, "doc_id": ident, "document": document}
            points.append({"id": _point_id(ident), "vector": vector, "payload": payload})
        await self._call("PUT", "/points?wait=true", json={"points": points}, timeout=timeout)

    async def query(self, vector: list[float], k: int, *, timeout: float) -> list[Hit]:
        result = await self._call(
            "POST",
            "/points/query",
            json={"query": vector, "limit": k, "with_payload": True},
            timeout=timeout,
        )
        hits = []
        for point in (result or {}).get("points", []):
            payload = point.get("payload") or {}
            hits.append(
                Hit(
                    str(payload.get("doc_id", point.get("id"))),
                    str(payload.get("source", "")),
                    str(payload.get("title", "")),
                    str(payload.get("document", "")),
                    1.0 - float(point.get("score", 0.0)),
                )
            )
        return hits

    async def count(self, *, timeout: float) -> int:
        result = await self._call("POST", "/points/count", json={"exact": True}, timeout=timeout)
        return int((result or {}).get("count", 0))


def make_store(
    kind: str, base_url: str, collection: str, http: httpx.AsyncClient, **kwargs: Any
) -> VectorStore:
    if kind == "qdrant":
        return QdrantStore(base_url, collection, http, **kwargs)
    kwargs.pop("api_key", None)
    return ChromaStore(base_url, collection, http, **kwargs)
