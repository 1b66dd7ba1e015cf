"""A small typed client of the Kubernetes API (httpx, a kubeconfig), for the kubernetes
injector: list, delete and evict pods, cordon nodes, scale deployments.

Only the kubeconfig's server, certificate authority, client certificate or bearer token are
read; the context is the kubeconfig's current one unless named. Errors carry the API server's
own message.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from drills.common.errors import InputError, KubeError
from drills.common.http import checked_call

__all__ = ["KubeClient", "KubeConfig", "KubeError", "load_kubeconfig"]


@dataclass(frozen=True)
class KubeConfig:
    path: Path
    context: str
    cluster: str
    server: str
    user: dict[str, Any]
    cluster_info: dict[str, Any]


def _named(items: list[dict[str, Any]], name: str, what: str, path: Path) -> dict[str, Any]:
    for item in items or []:
        if item.get("name") == name:
            return dict(item.get(what) or {})
    known = ", ".join(str(i.get("name")) for i in items or []) or "none"
    raise InputError(f"{path}: no {what} {name!r}; the kubeconfig has: {known}")


def load_kubeconfig(path: str | Path | None = None, context: str | None = None) -> KubeConfig:
    """The kubeconfig at ``path`` (else ``$KUBECONFIG``, else ``~/.kube/config``)."""
    file = Path(path or os.environ.get("KUBECONFIG") or Path.home() / ".kube" / "config")
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except OSError as exc:
        raise InputError(f"{file}: cannot read the kubeconfig: {exc.strerror}") from None
    name = context or data.get("current-context")
    if not name:
        raise InputError(f"{file}: no current-context; name one")
    ctx = _named(data.get("contexts", []), name, "context", file)
    cluster = _named(data.get("clusters", []), ctx.get("cluster", ""), "cluster", file)
    user = (
        _named(data.get("users", []), ctx.get("user", ""), "user", file) if ctx.get("user") else {}
    )
    return KubeConfig(file, name, ctx.get("cluster", ""), cluster["server"], user, cluster)


def _material(value: dict[str, Any], key: str, base: Path) -> str | None:
    """A file path for ``key`` (``-data`` variants are written to a private temp file)."""
    if value.get(f"{key}-data"):
        handle = tempfile.NamedTemporaryFile("wb", delete=False, prefix="drills-kube-")  # noqa: SIM115
        handle.write(base64.b64decode(value[f"{key}-data"]))
        handle.close()
        os.chmod(handle.name, 0o600)
        return handle.name
    if value.get(key):
        candidate = Path(value[key])
        return str(candidate if candidate.is_absolute() else base / candidate)
    return None


class KubeClient:
    def __init__(self, config: KubeConfig, timeout: float = 30.0) -> None:
        self.config = config
        base = config.path.parent
        verify: ssl.SSLContext | bool = True
        info = config.cluster_info
        ca = _material(info, "certificate-authority", base)
        if info.get("insecure-skip-tls-verify"):
            verify = False
        else:
            verify = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
        cert = _material(config.user, "client-certificate", base)
        key = _material(config.user, "client-key", base)
        if cert and isinstance(verify, ssl.SSLContext):
            verify.load_cert_chain(cert, key)
        headers = {}
        if config.user.get("token"):
            headers["Authorization"] = f"Bearer {config.user['token']}"
        self._http = httpx.Client(
            base_url=config.server, verify=verify, headers=headers, timeout=timeout
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        where = f"the Kubernetes API at {self.config.server}"
        response = checked_call(self._http, KubeError, method, path, where=where, **kwargs)
        data: dict[str, Any] = response.json() if response.content else {}
        return data

    def pods(
        self, namespace: str, selector: str = "", node: str | None = None
    ) -> list[dict[str, Any]]:
        params = {"labelSelector": selector} if selector else {}
        if node:
            params["fieldSelector"] = f"spec.nodeName={node}"
        items = self._call("GET", f"/api/v1/namespaces/{namespace}/pods", params=params)["items"]
        return sorted(items, key=lambda p: p["metadata"]["name"])

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        return list(
            self._call("GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={node}"})[
                "items"
            ]
        )

    def delete_pod(self, namespace: str, name: str, grace: float) -> None:
        self._call(
            "DELETE",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            params={"gracePeriodSeconds": str(int(grace))},
        )

    def evict(self, namespace: str, name: str) -> None:
        self._call(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods/{name}/eviction",
            json={
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace},
            },
        )

    def node(self, name: str) -> dict[str, Any]:
        return self._call("GET", f"/api/v1/nodes/{name}")

    def set_unschedulable(self, name: str, value: bool) -> None:
        self._call(
            "PATCH",
            f"/api/v1/nodes/{name}",
            json={"spec": {"unschedulable": value or None}},
            headers={"Content-Type": "application/merge-patch+json"},
        )

    def scale(self, namespace: str, deployment: str) -> int:
        path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}/scale"
        return int(self._call("GET", path).get("spec", {}).get("replicas", 0))

    def set_scale(self, namespace: str, deployment: str, replicas: int) -> None:
        self._call(
            "PATCH",
            f"/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}/scale",
            json={"spec": {"replicas": replicas}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
