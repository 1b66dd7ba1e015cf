"""The Kubernetes API for the kubernetes injector, on the official ``kubernetes`` client: list
(paginated), delete and evict pods, cordon nodes, scale deployments, watch pods, and ask the API
server what the caller may do (``SelfSubjectAccessReview``).

Credentials are the client's own kubeconfig loader, so whatever ``kubectl`` accepts works:
merged ``KUBECONFIG=a:b``, client certificates, static tokens and ``tokenFile``, exec credential
plugins (``aws eks get-token``, ``gke-gcloud-auth-plugin``, ``kubelogin``), auth providers, and
the pod's service account when drills runs inside a cluster. The client writes ``*-data``
material to temp files once per content and removes them at exit.

Responses are the API server's JSON as it sent it (``_preload_content=False``), not the
client's models: the injector reads the same fields ``kubectl get -o json`` shows. Errors carry
the API server's own message, and say which verb on which resource failed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.config import incluster_config, kube_config
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.exec_provider import ExecProvider

from drills.common.errors import InputError, KubeError

__all__ = [
    "IN_CLUSTER",
    "SERVICE_ACCOUNT",
    "KubeClient",
    "KubeConfig",
    "KubeError",
    "load_kubeconfig",
]

logger = logging.getLogger(__name__)

IN_CLUSTER = "in-cluster"
"""The context name drills gives the pod's own service account."""

PAGE = 500
"""Items per page of a list (the API server's ``limit``); ``continue`` fetches the rest."""


@dataclass(frozen=True)
class KubeConfig:
    path: str
    """The kubeconfig file(s) read, ``:``-separated as in ``KUBECONFIG``, or ``in-cluster``."""
    context: str
    server: str
    user: str
    configuration: client.Configuration = field(repr=False, compare=False)


def _files(path: str | Path | None) -> tuple[str, list[str]]:
    """The kubeconfig paths asked for (explicit, else ``$KUBECONFIG``, else ~/.kube/config) and
    those of them that exist."""
    wanted = str(path) if path else os.environ.get("KUBECONFIG") or "~/.kube/config"
    parts = [p for p in wanted.split(os.pathsep) if p]
    return wanted, [p for p in parts if Path(p).expanduser().exists()]


SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where Kubernetes mounts a pod's service account (``token``, ``ca.crt``)."""


def _in_cluster() -> KubeConfig:
    """The pod's own service account (as ``kubectl`` falls back to it): the API server from
    ``KUBERNETES_SERVICE_HOST``/``_PORT``, the token re-read as the kubelet rotates it."""
    configuration = client.Configuration()
    try:
        incluster_config.InClusterConfigLoader(
            token_filename=str(SERVICE_ACCOUNT / "token"),
            cert_filename=str(SERVICE_ACCOUNT / "ca.crt"),
        ).load_and_set(configuration)
    except ConfigException as exc:
        raise InputError(f"in-cluster Kubernetes config ({SERVICE_ACCOUNT}): {exc}") from None
    namespace = SERVICE_ACCOUNT / "namespace"
    user = f"serviceaccount ({namespace.read_text().strip()})" if namespace.exists() else ""
    return KubeConfig(IN_CLUSTER, IN_CLUSTER, configuration.host, user, configuration)


@contextlib.contextmanager
def _client_logs_held() -> Iterator[None]:
    """The client reports a failed credential plugin with ``logging.error`` on the root logger,
    which configures logging for the whole process when nothing has; drills raises its own error
    instead, so the client's line goes nowhere unless the process has set up logging itself."""
    root = logging.getLogger()
    held = logging.NullHandler() if not root.handlers else None
    if held is not None:
        root.addHandler(held)
    try:
        yield
    finally:
        if held is not None:
            root.removeHandler(held)


def _exec_problem(user: dict[str, Any], base: str, cluster: dict[str, Any]) -> str | None:
    """Why the user's exec credential plugin gave no credential (the client only logs it)."""
    spec = user.get("exec") or {}
    try:
        status = ExecProvider(kube_config.ConfigNode("exec", spec), base, cluster).run()
    except (ConfigException, OSError) as exc:
        return f"the exec credential plugin {spec.get('command')!r} failed: {exc}"
    if "token" not in status and "clientCertificateData" not in status:
        return f"the exec credential plugin {spec.get('command')!r} printed no token or certificate"
    return None


def load_kubeconfig(path: str | Path | None = None, context: str | None = None) -> KubeConfig:
    """The credentials for ``context`` (else the current one) of the kubeconfig at ``path``
    (else ``$KUBECONFIG``, merged when it names several files, else ``~/.kube/config``, else the
    in-cluster service account). A missing file, an unknown context or a credential plugin that
    fails is an ``InputError`` naming the file."""
    wanted, existing = _files(path)
    if not existing:
        if path is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            return _in_cluster()
        raise InputError(f"{wanted}: cannot read the kubeconfig: no such file")
    label = os.pathsep.join(existing)
    try:
        merged = kube_config.KubeConfigMerger(label).config
    except (OSError, yaml.YAMLError, ConfigException) as exc:
        raise InputError(f"{label}: cannot read the kubeconfig: {exc}") from None
    data = merged.value if merged is not None else {}
    contexts = _by_name(data.get("contexts"))
    name = context or data.get("current-context")
    if not name:
        raise InputError(f"{label}: no current-context; name one (contexts: {', '.join(contexts)})")
    if name not in contexts:
        raise InputError(
            f"{label}: no context {name!r}; the kubeconfig has: {', '.join(contexts) or 'none'}"
        )
    configuration = client.Configuration()
    try:
        with _client_logs_held():
            loader = kube_config.KubeConfigLoader(config_dict=merged, active_context=name)
            loader.load_and_set(configuration)
    except (ConfigException, KeyError, ValueError, OSError) as exc:
        raise InputError(f"{label}: context {name!r}: {exc}") from None
    ctx = dict(contexts[name][1].get("context") or {})
    user_name = str(ctx.get("user") or "")
    user_path, user_entry = _by_name(data.get("users")).get(user_name, (label, {}))
    user = dict(user_entry.get("user") or {})
    has_credential = bool(configuration.api_key.get("BearerToken") or configuration.cert_file)
    if "exec" in user and not has_credential:
        cluster = dict(
            _by_name(data.get("clusters")).get(str(ctx.get("cluster")), ("", {}))[1].get("cluster")
            or {}
        )
        base = os.path.dirname(os.path.abspath(os.path.expanduser(user_path)))
        problem = _exec_problem(user, base, cluster)
        raise InputError(f"{label}: user {user_name!r}: {problem or 'no credential'}")
    return KubeConfig(label, name, configuration.host, user_name, configuration)


def _by_name(items: Any) -> dict[str, tuple[str, dict[str, Any]]]:
    """The merged kubeconfig's entries by name, each with the file it came from (the client's
    merger wraps them in ``ConfigNode``s)."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for item in items or []:
        path = getattr(item, "path", None) or ""
        value = item.value if isinstance(item, kube_config.ConfigNode) else item
        if isinstance(value, dict) and "name" in value:
            found.setdefault(str(value["name"]), (str(path), value))
    return found


class KubeClient:
    """One connection to one cluster, as ``config`` says."""

    def __init__(self, config: KubeConfig, timeout: float = 30.0) -> None:
        self.config = config
        self.timeout = timeout
        self._api = client.ApiClient(config.configuration)
        self.core = client.CoreV1Api(self._api)
        self.apps = client.AppsV1Api(self._api)
        self.policy = client.PolicyV1Api(self._api)
        self.authz = client.AuthorizationV1Api(self._api)
        self.authn = client.AuthenticationV1Api(self._api)
        self._watches: list[watch.Watch] = []
        self._lock = threading.Lock()

    def close(self) -> None:
        for w in list(self._watches):
            w.stop()
        self._api.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- calls -------------------------------------------------------------------------------

    def _call(self, what: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``method`` with the raw JSON answer; a refusal is a ``KubeError`` naming ``what``."""
        where = f"the Kubernetes API at {self.config.server}"
        try:
            response = method(
                *args, _preload_content=False, _request_timeout=self.timeout, **kwargs
            )
        except ApiException as exc:
            raise KubeError(
                f"{where}: {what}: HTTP {exc.status}: {_message(exc)}",
                status_code=exc.status,
            ) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeError(f"{where}: {what}: cannot reach it: {exc}") from None
        body = response.data
        return json.loads(body) if body else {}

    def _list(self, what: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Every item of a list, page by page (``limit`` and ``continue``)."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = self._call(
                what, method, *args, limit=PAGE, **({"_continue": token} if token else {}), **kwargs
            )
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return page.get("metadata", {}).get("resourceVersion"), items

    def pods(
        self, namespace: str, selector: str = "", node: str | None = None
    ) -> list[dict[str, Any]]:
        return sorted(
            self.pods_with_version(namespace, selector, node)[1],
            key=lambda p: p["metadata"]["name"],
        )

    def pods_with_version(
        self, namespace: str, selector: str = "", node: str | None = None
    ) -> tuple[str | None, list[dict[str, Any]]]:
        """The pods and the list's resourceVersion (where a watch of them starts)."""
        kwargs: dict[str, str] = {}
        if selector:
            kwargs["label_selector"] = selector
        if node:
            kwargs["field_selector"] = f"spec.nodeName={node}"
        version, items = self._list(
            f"list pods in namespace {namespace!r}",
            self.core.list_namespaced_pod,
            namespace,
            **kwargs,
        )
        return version, items

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        _, items = self._list(
            f"list pods on node {node!r}",
            self.core.list_pod_for_all_namespaces,
            field_selector=f"spec.nodeName={node}",
        )
        return list(items)

    def delete_pod(self, namespace: str, name: str, grace: float) -> None:
        self._call(
            f"delete pod {namespace}/{name}",
            self.core.delete_namespaced_pod,
            name,
            namespace,
            grace_period_seconds=int(grace),
        )

    def evict(self, namespace: str, name: str) -> None:
        """Evict a pod; a PodDisruptionBudget's refusal is a ``KubeError`` with status 429."""
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        self._call(
            f"evict pod {namespace}/{name}",
            self.core.create_namespaced_pod_eviction,
            name,
            namespace,
            body,
        )

    def node(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call(f"get node {name!r}", self.core.read_node, name)
        return result

    def set_unschedulable(self, name: str, value: bool) -> None:
        self._call(
            f"patch node {name!r}",
            self.core.patch_node,
            name,
            {"spec": {"unschedulable": value or None}},
        )

    def scale(self, namespace: str, deployment: str) -> int:
        data = self._call(
            f"get the scale of deployment {namespace}/{deployment}",
            self.apps.read_namespaced_deployment_scale,
            deployment,
            namespace,
        )
        return int(data.get("spec", {}).get("replicas", 0))

    def set_scale(self, namespace: str, deployment: str, replicas: int) -> None:
        self._call(
            f"scale deployment {namespace}/{deployment}",
            self.apps.patch_namespaced_deployment_scale,
            deployment,
            namespace,
            {"spec": {"replicas": replicas}},
        )

    # -- permissions -------------------------------------------------------------------------

    def whoami(self) -> str:
        """The user name the API server sees for these credentials (``SelfSubjectReview``),
        or the kubeconfig's user name when the server cannot say."""
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        try:
            answer = self._call(
                "review who the caller is", self.authn.create_self_subject_review, review
            )
        except KubeError:
            return self.config.user
        return str(answer.get("status", {}).get("userInfo", {}).get("username") or self.config.user)

    def may(
        self, verb: str, resource: str, namespace: str | None = None, group: str = ""
    ) -> tuple[bool, str]:
        """Whether the caller may ``verb`` the ``resource`` (``pods/eviction``: a
        subresource), as the API server's authorizer says, and its reason."""
        name, _, sub = resource.partition("/")
        attributes: dict[str, Any] = {"verb": verb, "resource": name, "group": group}
        if sub:
            attributes["subresource"] = sub
        if namespace:
            attributes["namespace"] = namespace
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        status = self._call(
            f"review access to {verb} {resource}",
            self.authz.create_self_subject_access_review,
            review,
        ).get("status", {})
        return bool(status.get("allowed")), str(status.get("reason") or "")

    # -- watching ----------------------------------------------------------------------------

    def watch_pods(
        self,
        namespace: str,
        selector: str,
        since: str | None,
        seconds: int,
        read_timeout: float | None = None,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, pod as JSON) for each change to the pods of ``selector`` after
        resourceVersion ``since``, for at most ``seconds`` (the API server ends it); a read
        idle for ``read_timeout`` raises urllib3's ``ReadTimeoutError``."""
        w = watch.Watch()
        with self._lock:
            self._watches.append(w)
        kwargs: dict[str, Any] = {
            "label_selector": selector,
            "timeout_seconds": seconds,
            "allow_watch_bookmarks": True,
        }
        if read_timeout:
            kwargs["_request_timeout"] = (self.timeout, read_timeout)
        if since:
            kwargs["resource_version"] = since
        try:
            for event in w.stream(self.core.list_namespaced_pod, namespace, **kwargs):
                yield str(event["type"]), dict(event["raw_object"])
        except ApiException as exc:
            raise KubeError(
                f"the Kubernetes API at {self.config.server}: watch pods in namespace "
                f"{namespace!r}: HTTP {exc.status}: {_message(exc)}",
                status_code=exc.status,
            ) from None
        finally:
            with self._lock:
                if w in self._watches:
                    self._watches.remove(w)


def _message(exc: ApiException) -> str:
    """The API server's own message (its Status object), else the reason phrase."""
    try:
        body = json.loads(exc.body or b"{}")
    except (TypeError, ValueError):
        return str(exc.reason)
    return str(body.get("message") or exc.reason) if isinstance(body, dict) else str(exc.reason)
