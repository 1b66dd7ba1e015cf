"""A small typed client for the Toxiproxy HTTP API (v2).

Used by the stack (to create a proxy in front of every upstream) and by the Toxiproxy injector
(to add and remove toxics). Every failed call raises ``ToxiproxyError`` naming the call.

Removing a toxic can hang in Toxiproxy itself (seen with 2.12.0; upstream issues #412 and #558):
when a client abandons a connection while a ``latency`` toxic holds a chunk of it, the toxic
blocks forever writing to a link nobody reads, and removing it waits on that toxic. A gateway
that times out slow calls does exactly this. So removal is bounded in time, and when it does not
finish the proxy is deleted and created again from a snapshot taken before the fault (deleting a
proxy does not wait on its toxics). That resets the proxy's open connections, and the caller is
told so (``"recreated"``) to record it as evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from drills.common.errors import ToxiproxyError

__all__ = ["TOXIC_TYPES", "Proxy", "Toxic", "ToxiproxyClient"]

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

    def _call(
        self, method: str, path: str, json: Any = None, *, timeout: float | None = None
    ) -> Any:
        """One API call; ``ToxiproxyError`` with the status code (``None``: no answer, and
        ``stuck`` in its context when a bounded call timed out)."""
        what = f"Toxiproxy {method} {self.base_url}{path}"
        url = self.base_url + path
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        try:
            response = self._http.request(method, path, json=json, **extra)
        except httpx.TimeoutException as exc:
            if timeout is None:
                raise ToxiproxyError(f"{what}: {exc}", method=method, url=url) from exc
            raise ToxiproxyError(
                f"{what}: no answer within {timeout:g}s (stuck)", method=method, url=url, stuck=True
            ) from exc
        except httpx.HTTPError as exc:
            raise ToxiproxyError(
                f"{what}: {type(exc).__name__}: {exc}", method=method, url=url
            ) from exc
        if response.status_code >= 400:
            raise ToxiproxyError(
                f"{what}: HTTP {response.status_code}: {response.text.strip()}",
                status_code=response.status_code,
                method=method,
                url=url,
            )
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
        data = self._call("GET", "/proxies") or {}
        if not isinstance(data, dict) or not all(isinstance(p, dict) for p in data.values()):
            raise ToxiproxyError(
                f"Toxiproxy GET {self.base_url}/proxies: the answer is not Toxiproxy's list of "
                f"proxies ({str(data)[:80]!r}); is {self.base_url} a Toxiproxy API?",
                method="GET",
                url=self.base_url + "/proxies",
            )
        return {name: Proxy.from_json(p) for name, p in data.items()}

    def proxy(self, name: str) -> Proxy:
        return Proxy.from_json(self._call("GET", f"/proxies/{name}"))

    def populate(self, proxies: list[tuple[str, str, str]]) -> None:
        """Create or update proxies ``(name, listen, upstream)``; existing toxics are kept."""
        body = [
            {"name": n, "listen": lsn, "upstream": up, "enabled": True} for n, lsn, up in proxies
        ]
        self._call("POST", "/populate", json=body)

    def set_enabled(self, name: str, enabled: bool) -> Proxy:
        return Proxy.from_json(self._call("POST", f"/proxies/{name}", json={"enabled": enabled}))

    def add_toxic(self, proxy: str, toxic: Toxic) -> Toxic:
        return Toxic.from_json(self._call("POST", f"/proxies/{proxy}/toxics", json=toxic.as_json()))

    def toxics(self, proxy: str) -> list[Toxic]:
        return [Toxic.from_json(t) for t in self._call("GET", f"/proxies/{proxy}/toxics") or ()]

    def create(self, proxy: Proxy) -> Proxy:
        """Create ``proxy`` with its enabled state and toxics."""
        created = Proxy.from_json(
            self._call(
                "POST",
                "/proxies",
                json={
                    "name": proxy.name,
                    "listen": proxy.listen,
                    "upstream": proxy.upstream,
                    "enabled": proxy.enabled,
                },
            )
        )
        for toxic in proxy.toxics:
            self.add_toxic(proxy.name, toxic)
        return created

    def delete(self, name: str) -> bool:
        """Delete a proxy; ``False`` if it did not exist."""
        try:
            self._call("DELETE", f"/proxies/{name}")
        except ToxiproxyError as exc:
            if exc.not_found:
                return False
            raise
        return True

    def recreate(self, snapshot: Proxy) -> None:
        """Delete the proxy and create it again exactly as ``snapshot`` describes it."""
        self.delete(snapshot.name)
        self.create(snapshot)

    def remove_toxic(
        self, proxy: str, name: str, *, snapshot: Proxy | None = None, timeout: float = 2.0
    ) -> Literal["removed", "absent", "recreated"]:
        """Remove a toxic; removing one that is already gone is harmless (``"absent"``).

        If Toxiproxy does not finish the removal within ``timeout`` and ``snapshot`` (the proxy
        as it should be afterwards) is given, the proxy is recreated from it (module docstring).
        """
        try:
            self._call_bounded("DELETE", f"/proxies/{proxy}/toxics/{name}", timeout)
        except ToxiproxyError as exc:
            if exc.not_found:
                return "absent"
            if snapshot is None or not _is_stuck(exc):
                raise
            self.recreate(snapshot)
            return "recreated"
        return "removed"

    def reset(self, snapshots: list[Proxy] | None = None, *, timeout: float = 2.0) -> list[str]:
        """Enable every proxy and remove every toxic; return the names of proxies that had to
        be recreated from ``snapshots`` because Toxiproxy's own reset hung."""
        try:
            self._call_bounded("POST", "/reset", timeout)
        except ToxiproxyError as exc:
            if not snapshots or not _is_stuck(exc):
                raise
            for snapshot in snapshots:
                self.recreate(snapshot)
            return [s.name for s in snapshots]
        return []

    def _call_bounded(self, method: str, path: str, timeout: float) -> Any:
        return self._call(method, path, timeout=timeout)


def _is_stuck(exc: ToxiproxyError) -> bool:
    # Toxiproxy answers 503 "Timeout" when its own handler gives up after 25s.
    return bool(exc.context.get("stuck")) or exc.status_code == 503
