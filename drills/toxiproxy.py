"""A small typed client for the Toxiproxy HTTP API (v2).

Used by the stack (to create a proxy in front of every upstream) and by the Toxiproxy injector
(to add and remove toxics). Every failed call raises ``ToxiproxyError`` naming the call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from drills.errors import ToxiproxyError

__all__ = ["Proxy", "Toxic", "ToxiproxyClient", "TOXIC_TYPES"]

Stream = Literal["upstream", "downstream"]
TOXIC_TYPES = (
    "latency",
    "down",  # not a Toxiproxy toxic: the proxy is disabled; kept here for a complete vocabulary
    "bandwidth",
    "slow_close",
    "timeout",
    "reset_peer",
    "slicer",
    "limit_data",
)


@dataclass(frozen=True)
class Toxic:
    name: str
    type: str
    stream: Stream = "downstream"
    toxicity: float = 1.0
    attributes: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
            "attributes": dict(self.attributes),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Toxic:
        return cls(
            name=data["name"],
            type=data["type"],
            stream=data.get("stream", "downstream"),
            toxicity=float(data.get("toxicity", 1.0)),
            attributes=dict(data.get("attributes") or {}),
        )


@dataclass(frozen=True)
class Proxy:
    name: str
    listen: str
    upstream: str
    enabled: bool
    toxics: tuple[Toxic, ...] = ()

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Proxy:
        return cls(
            name=data["name"],
            listen=data["listen"],
            upstream=data["upstream"],
            enabled=bool(data["enabled"]),
            toxics=tuple(Toxic.from_json(t) for t in data.get("toxics") or ()),
        )


class ToxiproxyClient:
    """Client for one Toxiproxy server, e.g. ``ToxiproxyClient("http://127.0.0.1:8474")``."""

    def __init__(self, base_url: str, *, timeout: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ToxiproxyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, json: Any = None) -> Any:
        what = f"Toxiproxy {method} {self.base_url}{path}"
        try:
            response = self._http.request(method, path, json=json)
        except httpx.HTTPError as exc:
            raise ToxiproxyError(f"{what}: {type(exc).__name__}: {exc}") from exc
        if response.status_code >= 400:
            raise ToxiproxyError(f"{what}: HTTP {response.status_code}: {response.text.strip()}")
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            return response.text

    def version(self) -> str:
        data = self._call("GET", "/version")
        return str(data.get("version") if isinstance(data, dict) else data).strip()

    def is_up(self) -> bool:
        try:
            self.version()
        except ToxiproxyError:
            return False
        return True

    def proxies(self) -> dict[str, Proxy]:
        data = self._call("GET", "/proxies")
        return {name: Proxy.from_json(p) for name, p in (data or {}).items()}

    def proxy(self, name: str) -> Proxy:
        return Proxy.from_json(self._call("GET", f"/proxies/{name}"))

    def populate(self, proxies: list[tuple[str, str, str]]) -> None:
        """Create or update proxies ``(name, listen, upstream)``; existing toxics are kept."""
        body = [{"name": n, "listen": lsn, "upstream": up, "enabled": True} for n, lsn, up in proxies]
        self._call("POST", "/populate", json=body)

    def set_enabled(self, name: str, enabled: bool) -> Proxy:
        return Proxy.from_json(self._call("POST", f"/proxies/{name}", json={"enabled": enabled}))

    def add_toxic(self, proxy: str, toxic: Toxic) -> Toxic:
        return Toxic.from_json(self._call("POST", f"/proxies/{proxy}/toxics", json=toxic.as_json()))

    def toxics(self, proxy: str) -> list[Toxic]:
        return [Toxic.from_json(t) for t in self._call("GET", f"/proxies/{proxy}/toxics") or ()]

    def remove_toxic(self, proxy: str, name: str) -> bool:
        """Remove a toxic; ``False`` if it was already gone (removing twice is harmless)."""
        try:
            self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")
        except ToxiproxyError as exc:
            if "HTTP 404" in str(exc):
                return False
            raise
        return True

    def reset(self) -> None:
        """Enable every proxy and remove every toxic."""
        self._call("POST", "/reset")
