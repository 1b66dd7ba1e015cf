"""A small typed client of the Docker Engine API (over its unix socket, with httpx).

Only what the docker injector needs: list and inspect containers, kill / stop / start /
restart / pause / unpause them, disconnect and reconnect networks, read events. Errors carry the
daemon's own message.
"""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import urlsplit

import httpx

from drills.common.errors import DockerError
from drills.common.http import checked_call

__all__ = ["DockerClient", "DockerError", "docker_host"]


def docker_host(explicit: str | None = None) -> str:
    """``explicit``, else ``$DOCKER_HOST``, else the default socket."""
    return explicit or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


class DockerClient:
    def __init__(self, host: str | None = None, timeout: float = 30.0) -> None:
        self.host = docker_host(host)
        parts = urlsplit(self.host)
        if parts.scheme == "unix":
            transport = httpx.HTTPTransport(uds=parts.path)
            base = "http://docker"
        elif parts.scheme in ("tcp", "http"):
            transport = httpx.HTTPTransport()
            base = f"http://{parts.netloc}"
        else:
            raise DockerError(f"unsupported DOCKER_HOST {self.host!r}; expected unix:// or tcp://")
        self._http = httpx.Client(base_url=base, transport=transport, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> DockerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return checked_call(
            self._http, DockerError, method, path, where=f"Docker at {self.host}", **kwargs
        )

    def containers(
        self, *, name: str | None = None, labels: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """Containers (running or not) whose name is exactly ``name`` / that carry ``labels``."""
        filters: dict[str, list[str]] = {}
        if labels:
            filters["label"] = [f"{k}={v}" for k, v in labels.items()]
        if name:
            filters["name"] = [f"^/{name}$"]
        found = self._call(
            "GET", "/containers/json", params={"all": "1", "filters": json.dumps(filters)}
        ).json()
        return sorted(found, key=lambda c: c["Names"][0] if c.get("Names") else c["Id"])

    def inspect(self, container: str) -> dict[str, Any]:
        data: dict[str, Any] = self._call("GET", f"/containers/{container}/json").json()
        return data

    def kill(self, container: str, signal: str = "SIGKILL") -> None:
        self._call("POST", f"/containers/{container}/kill", params={"signal": signal})

    def stop(self, container: str, grace: float) -> None:
        self._call("POST", f"/containers/{container}/stop", params={"t": str(int(grace))})

    def start(self, container: str) -> None:
        self._call("POST", f"/containers/{container}/start")

    def restart(self, container: str, grace: float) -> None:
        self._call("POST", f"/containers/{container}/restart", params={"t": str(int(grace))})

    def pause(self, container: str) -> None:
        self._call("POST", f"/containers/{container}/pause")

    def unpause(self, container: str) -> None:
        self._call("POST", f"/containers/{container}/unpause")

    def disconnect(self, network: str, container: str) -> None:
        self._call(
            "POST", f"/networks/{network}/disconnect", json={"Container": container, "Force": True}
        )

    def connect(self, network: str, container: str, endpoint: dict[str, Any] | None) -> None:
        body: dict[str, Any] = {"Container": container}
        if endpoint:
            body["EndpointConfig"] = {
                k: endpoint[k] for k in ("Aliases", "IPAMConfig", "Links") if endpoint.get(k)
            }
        self._call("POST", f"/networks/{network}/connect", json=body)

    def events(self, since: float, until: float, container: str) -> list[dict[str, Any]]:
        """Events of one container between two wall-clock times."""
        response = self._call(
            "GET",
            "/events",
            params={
                "since": f"{since:.3f}",
                "until": f"{until:.3f}",
                "filters": json.dumps({"container": [container], "type": ["container"]}),
            },
        )
        return [json.loads(line) for line in response.text.splitlines() if line.strip()]
