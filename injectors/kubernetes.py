"""Kubernetes faults: delete pods (by label selector, GPU request or node; one, all, a count or
a percentage), cordon or drain a node, scale a deployment.

Safety comes first: the context and namespace must be allowed by the scenario's ``kubernetes``
section and the safety policy, and the number of pods a fault would hit must be within
``max_pods``; ``preflight`` checks all of it (reading only) before the run applies anything, and
is what a dry run shows. Evidence is the pods' UIDs and nodes as the API server reported them;
``observe`` finds each deleted pod's replacement (a new UID matching the same selection) and
when it became Ready.
"""

from __future__ import annotations

import math
import random
import threading
import time
from datetime import datetime
from typing import Any

import urllib3

from drills.common.errors import (
    DrillsError,
    InjectionFailed,
    InputError,
    KubeError,
    RevertError,
    SafetyViolation,
)
from drills.common.kube import KubeClient, KubeConfig, load_kubeconfig
from injectors.base import InjectionContext

__all__ = ["KubernetesInjector", "ReplacementWatch", "revert_entry"]

GPU = "nvidia.com/gpu"


def _epoch(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _requests_gpu(pod: dict[str, Any]) -> bool:
    for container in pod.get("spec", {}).get("containers", []):
        resources = container.get("resources", {})
        for section in ("limits", "requests"):
            if str((resources.get(section) or {}).get(GPU, "0")) not in ("0", ""):
                return True
    return False


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in pod.get("status", {}).get("conditions", [])
    )


def _ready_at(pod: dict[str, Any]) -> float | None:
    for condition in pod.get("status", {}).get("conditions", []):
        if condition.get("type") == "Ready" and condition.get("status") == "True":
            return _epoch(condition.get("lastTransitionTime"))
    return None


def _brief(pod: dict[str, Any]) -> dict[str, Any]:
    meta = pod["metadata"]
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    return {
        "name": meta["name"],
        "owner": f"{owners[0]['kind']}/{owners[0]['name']}" if owners else None,
        "uid": meta["uid"],
        "node": pod.get("spec", {}).get("nodeName"),
        "phase": pod.get("status", {}).get("phase"),
        "created_at": _epoch(meta.get("creationTimestamp")),
        "ready_at": _ready_at(pod),
    }


class KubernetesInjector:
    def __init__(self, fault: Any, context: InjectionContext, index: int) -> None:
        self.fault = fault
        self.kind: str = fault.kind
        self.target: str = fault.target
        self.scope = context.kubernetes
        self.max_pods = context.max_pods
        self.seed = f"{context.run_id}-{index}"
        self.applied_at: float | None = None
        self.victims: list[dict[str, Any]] = []
        self.existing: set[str] = set()
        """Pods of the selection when the fault was applied (none of them is a replacement)."""
        self.previous: dict[str, Any] = {}
        self.watch: ReplacementWatch | None = None

    # -- where, and what ---------------------------------------------------------------------

    def _config(self) -> KubeConfig:
        if self.scope is None:
            raise InjectionFailed("kubernetes faults need the scenario's 'kubernetes' section")
        kubeconfig = self.scope.get("kubeconfig")
        config = load_kubeconfig(kubeconfig, self.scope.get("context"))
        if config.context not in self.scope["allowed_contexts"]:
            raise SafetyViolation(
                [
                    f"{self.kind}: context {config.context!r} ({config.server}) is not allowed; "
                    f"allowed_contexts: {', '.join(self.scope['allowed_contexts'])}"
                ]
            )
        return config

    def _client(self) -> KubeClient:
        return KubeClient(self._config())

    def _calls(self, kube: KubeClient) -> list[tuple[str, str, str, str | None]]:
        """(verb, resource, API group, namespace or ``None`` for cluster-wide) of every call
        the fault will make."""
        ns = self.fault.namespace
        if self.kind == "kubernetes.delete_pod":
            return [(verb, "pods", "", ns) for verb in ("list", "watch", "delete")]
        if self.kind == "kubernetes.scale":
            return [(verb, "deployments/scale", "apps", ns) for verb in ("get", "patch")]
        node: list[tuple[str, str, str, str | None]] = [
            ("get", "nodes", "", None),
            ("patch", "nodes", "", None),
        ]
        if self.kind == "kubernetes.cordon":
            return node
        victims = sorted({p["metadata"]["namespace"] for p in kube.pods_on_node(self.target)})
        return [
            *node,
            ("list", "pods", "", None),
            *[("create", "pods/eviction", "", n) for n in victims],
        ]

    def _permitted(self, kube: KubeClient) -> None:
        """Every call the fault will make is allowed for this user, as the API server's
        authorizer (RBAC) says (``SelfSubjectAccessReview``); else an ``InputError`` naming
        each verb, resource and namespace refused."""
        refused = []
        for verb, resource, group, ns in self._calls(kube):
            allowed, reason = kube.may(verb, resource, ns, group)
            if not allowed:
                where = f" in namespace {ns!r}" if ns else " (cluster-wide)"
                refused.append(f"{verb} {resource}{where}" + (f" ({reason})" if reason else ""))
        if refused:
            config = kube.config
            raise InputError(
                f"{self.kind} {self.target}: {kube.whoami()!r} (kubeconfig user {config.user!r}, "
                f"context {config.context!r}) may not {'; '.join(refused)}: the cluster's RBAC "
                "forbids it, so nothing was applied"
            )

    def _selection(self, kube: KubeClient) -> list[dict[str, Any]]:
        fault = self.fault
        pods = kube.pods(fault.namespace, fault.target, fault.node)
        pods = [p for p in pods if p["metadata"].get("deletionTimestamp") is None]
        if fault.gpu:
            pods = [p for p in pods if _requests_gpu(p)]
        if not pods:
            where = f" on node {fault.node}" if fault.node else ""
            gpu = " requesting a GPU" if fault.gpu else ""
            raise InjectionFailed(
                f"{self.kind}: the selector {fault.target!r} in namespace {fault.namespace!r} "
                f"matches no pod{gpu}{where}"
            )
        n = len(pods)
        want = {
            "one": 1,
            "all": n,
            "count": min(fault.count or 1, n),
            "percent": max(1, math.ceil(n * (fault.percent or 0) / 100)),
        }[fault.mode]
        chosen = random.Random(self.seed).sample(pods, want)
        if len(chosen) > self.max_pods:
            raise SafetyViolation(
                [
                    f"{self.kind}: would delete {len(chosen)} pods of {fault.target!r}; the "
                    f"safety policy's max_pods is {self.max_pods}"
                ]
            )
        return sorted(chosen, key=lambda p: p["metadata"]["name"])

    def preflight(self) -> dict[str, Any]:
        """What the fault would hit, read from the cluster; raises when it is not allowed (the
        context, the namespaces, ``max_pods``, or RBAC for any call it will make)."""
        try:
            with self._client() as kube:
                self._permitted(kube)
                return self._would_hit(kube)
        except KubeError as exc:
            raise InputError(f"{self.kind} {self.target}: {exc}") from None

    def _would_hit(self, kube: KubeClient) -> dict[str, Any]:
        if self.kind == "kubernetes.delete_pod":
            return {"pods": [_brief(p) for p in self._selection(kube)]}
        if self.kind in ("kubernetes.cordon", "kubernetes.drain"):
            node = kube.node(self.target)
            on_node = kube.pods_on_node(self.target)
            allowed = (self.scope or {}).get("allowed_namespaces", [])
            foreign = sorted(
                {
                    p["metadata"]["namespace"]
                    for p in on_node
                    if p["metadata"]["namespace"] not in allowed
                }
            )
            if self.kind == "kubernetes.drain" and foreign:
                raise SafetyViolation(
                    [
                        f"kubernetes.drain {self.target}: the node runs pods of namespaces "
                        f"that are not allowed ({', '.join(foreign)})"
                    ]
                )
            return {"node": node["metadata"]["name"], "pods": [_brief(p) for p in on_node]}
        return {
            "deployment": self.target,
            "replicas": kube.scale(self.fault.namespace, self.target),
            "to": self.fault.replicas,
        }

    def ledger_entry(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "scope": self.scope,
            "namespace": self.fault.namespace,
            "previous": self.previous,
            "victims": self.victims,
        }

    # -- the fault -------------------------------------------------------------------------------

    def apply(self) -> dict[str, Any]:
        with self._client() as kube:
            self.applied_at = time.time()
            if self.kind == "kubernetes.delete_pod":
                # Every pod of the selection that exists now is not a replacement, however
                # close its creation time (Kubernetes stamps whole seconds).
                version, pods = kube.pods_with_version(self.fault.namespace, self.fault.target)
                self.existing = {p["metadata"]["uid"] for p in pods}
                chosen = self._selection(kube)
                # Watch from before the delete, so that no replacement's event is missed.
                self.watch = ReplacementWatch(
                    kube.config, self.fault.namespace, self.fault.target, self.existing, version
                )
                self.watch.start()
                try:
                    for pod in chosen:
                        self.victims.append(_brief(pod))
                        kube.delete_pod(
                            self.fault.namespace, pod["metadata"]["name"], self.fault.grace
                        )
                    return {"applied_at": self.applied_at, "deleted": self._gone(kube)}
                except BaseException:
                    self.watch.stop()  # a fault that did not land is never observed
                    raise
            if self.kind in ("kubernetes.cordon", "kubernetes.drain"):
                node = kube.node(self.target)
                self.previous = {"unschedulable": bool(node.get("spec", {}).get("unschedulable"))}
                kube.set_unschedulable(self.target, True)
                evicted: list[str] = []
                refusals: dict[str, list[dict[str, Any]]] = {}
                if self.kind == "kubernetes.drain":
                    for pod in kube.pods_on_node(self.target):
                        owners = pod["metadata"].get("ownerReferences") or []
                        if any(o.get("kind") == "DaemonSet" for o in owners):
                            continue
                        self.victims.append(_brief(pod))
                        name = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
                        refusals[name] = []
                        self._evict(kube, pod, refusals[name])
                        evicted.append(pod["metadata"]["name"])
                after = kube.node(self.target)
                return {
                    "applied_at": self.applied_at,
                    "node": self.target,
                    "unschedulable": bool(after.get("spec", {}).get("unschedulable")),
                    "evicted": evicted,
                    "eviction_refusals": {k: v for k, v in refusals.items() if v},
                }
            before = kube.scale(self.fault.namespace, self.target)
            self.previous = {"replicas": before}
            kube.set_scale(self.fault.namespace, self.target, int(self.fault.replicas))
            return {
                "applied_at": self.applied_at,
                "deployment": self.target,
                "replicas_before": before,
                "replicas": kube.scale(self.fault.namespace, self.target),
            }

    def _evict(self, kube: KubeClient, pod: dict[str, Any], refused: list[dict[str, Any]]) -> None:
        """Evict ``pod``, retrying while a PodDisruptionBudget refuses (HTTP 429) for at most
        the fault's ``eviction_timeout``, as ``kubectl drain`` does; each refusal is appended
        to ``refused`` (it goes in the evidence)."""
        meta = pod["metadata"]
        deadline = time.monotonic() + float(self.fault.eviction_timeout)
        wait = 0.5
        while True:
            try:
                kube.evict(meta["namespace"], meta["name"])
                return
            except KubeError as exc:
                if exc.status_code != 429:
                    raise
                refused.append({"at": time.time(), "status": 429, "message": str(exc)})
                if time.monotonic() + wait > deadline:
                    raise InjectionFailed(
                        f"kubernetes.drain {self.target}: pod {meta['namespace']}/{meta['name']} "
                        f"still not evicted after {len(refused)} tries in "
                        f"{self.fault.eviction_timeout:g}s: {exc}"
                    ) from None
            time.sleep(wait)
            wait = min(wait * 2, 5.0)

    def _gone(self, kube: KubeClient) -> list[dict[str, Any]]:
        """Evidence: each deleted pod is gone (or terminating) by its UID."""
        deadline = time.monotonic() + 30
        uids = {v["uid"] for v in self.victims}
        while True:
            alive = {
                p["metadata"]["uid"]: p
                for p in kube.pods(self.fault.namespace, self.fault.target)
                if p["metadata"]["uid"] in uids and p["metadata"].get("deletionTimestamp") is None
            }
            if not alive:
                return [{**v, "gone": True} for v in self.victims]
            if time.monotonic() > deadline:
                raise InjectionFailed(f"pods still running after delete: {sorted(alive)}")
            time.sleep(0.1)

    def revert(self) -> dict[str, Any]:
        return {**revert_entry(self.ledger_entry()), "finished_at": time.time()}

    def replaced_at(self) -> float | None:
        """During the run, from the live watch alone: when as many new pods of the selection
        as were deleted had been seen Ready (the last of them). ``None`` until then, for other
        kinds, and when the watch could not be opened (the phase then runs its full duration)."""
        if self.kind != "kubernetes.delete_pod" or self.applied_at is None or self.watch is None:
            return None
        since = self.applied_at - 1
        readies = sorted(
            e["watched_ready_at"]
            for e in list(self.watch.seen.values())
            if e.get("watched_ready_at") and (e.get("created_at") or 0) >= since
        )
        if not self.victims or len(readies) < len(self.victims):
            return None
        return float(readies[len(self.victims) - 1])

    def observe(self) -> dict[str, Any]:
        """Each deleted pod's replacement: a new pod of the same selection, and when it became
        Ready: the moment the watch saw it (sub-second), with the API server's own
        ``lastTransitionTime`` (whole seconds) beside it."""
        if self.kind != "kubernetes.delete_pod" or self.applied_at is None:
            return {}
        watched: dict[str, dict[str, Any]] = {}
        error = None
        if self.watch is not None:
            self.watch.stop()
            watched, error = self.watch.seen, self.watch.error
        with self._client() as kube:
            pods = kube.pods(self.fault.namespace, self.fault.target)
        old = {v["uid"] for v in self.victims} | self.existing
        fresh: dict[str, dict[str, Any]] = {
            uid: dict(entry) for uid, entry in watched.items() if uid not in old
        }
        for pod in pods:  # what the watch may have missed (it failed, or it was never started)
            uid = pod["metadata"]["uid"]
            if uid in old:
                continue
            entry = fresh.setdefault(uid, {})
            entry.update({k: v for k, v in _brief(pod).items() if entry.get(k) is None})
        since = self.applied_at - 1
        candidates = sorted(
            (e for e in fresh.values() if (e.get("created_at") or 0) >= since),
            key=lambda e: (e.get("created_at") or 0, e.get("seen_at") or 0),
        )
        replacements = candidates[: len(self.victims)]
        readies = [r.get("watched_ready_at") or r.get("ready_at") for r in replacements]
        ready_at = (
            max(r for r in readies if r is not None)
            if len(replacements) == len(self.victims) and None not in readies
            else None
        )
        unowned = [v["name"] for v in self.victims if not v.get("owner")]
        return {
            "replacements": replacements,
            "ready_at": ready_at,
            "ready_seen_by": "watch" if self.watch is not None and not error else "list",
            **({"watch_error": error} if error else {}),
            **(
                {
                    "error": f"{', '.join(unowned)}: no controller owned it (no "
                    "ownerReferences), so nothing replaces it"
                }
                if unowned and ready_at is None
                else {}
            ),
        }


class ReplacementWatch:
    """A watch on the pods of a selection, from a list's resourceVersion: for each pod not in
    ``old``, when the harness first saw it and when it saw it Ready (its own clock, to the
    millisecond), beside the API server's timestamps. Runs in a thread of its own with a client
    of its own; a watch the API server ends (its timeout, or 410 Gone) is resumed."""

    READ_TIMEOUT = 2.0
    """A watch idle this long is re-opened (so that ``stop`` returns within it)."""
    LIFETIME = 3600.0
    """A watch nobody stopped (a run that died before observing) ends by itself after this."""

    def __init__(
        self, config: KubeConfig, namespace: str, selector: str, old: set[str], since: str | None
    ) -> None:
        self.namespace = namespace
        self.selector = selector
        self.old = set(old)
        self.version = since
        self.seen: dict[str, dict[str, Any]] = {}
        self.error: str | None = None
        self._kube = KubeClient(config)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kube-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.READ_TIMEOUT + 5)
        self._kube.close()

    def _run(self) -> None:
        ends = time.monotonic() + self.LIFETIME
        while not self._stop.is_set() and time.monotonic() < ends:
            try:
                for kind, pod in self._kube.watch_pods(
                    self.namespace, self.selector, self.version, 300, self.READ_TIMEOUT
                ):
                    self.version = pod["metadata"].get("resourceVersion") or self.version
                    self._saw(kind, pod)
                    if self._stop.is_set():
                        return
            except (urllib3.exceptions.HTTPError, OSError):
                continue  # idle past the read timeout, or the connection dropped: resume
            except KubeError as exc:
                if exc.status_code == 410:  # too old a version: list again, then watch on
                    self.version, pods = self._kube.pods_with_version(self.namespace, self.selector)
                    for pod in pods:
                        self._saw("ADDED", pod)
                    continue
                self.error = str(exc)
                return

    def _saw(self, kind: str, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        if uid in self.old or kind == "BOOKMARK":
            return
        now = time.time()
        entry = self.seen.setdefault(uid, {"seen_at": now})
        entry.update(_brief(pod))
        if _ready(pod) and "watched_ready_at" not in entry:
            entry["watched_ready_at"] = now
        if kind == "DELETED":
            entry["deleted"] = True


def revert_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """Undo what can be undone: uncordon a node, restore a deployment's replicas. Deleted pods
    are the controllers' to replace."""
    kind = entry["kind"]
    previous = entry.get("previous") or {}
    if kind == "kubernetes.delete_pod" or not previous:
        return {"method": "none (replacing pods is the controllers' job)"}
    scope = entry.get("scope") or {}
    try:
        config = load_kubeconfig(scope.get("kubeconfig"), scope.get("context"))
        with KubeClient(config) as kube:
            if kind in ("kubernetes.cordon", "kubernetes.drain"):
                if not previous.get("unschedulable"):
                    kube.set_unschedulable(entry["target"], False)
                return {"method": f"uncordoned {entry['target']}"}
            kube.set_scale(entry["namespace"], entry["target"], int(previous["replicas"]))
            return {"method": f"scaled {entry['target']} back to {previous['replicas']}"}
    except DrillsError as exc:
        raise RevertError(f"{kind} on {entry['target']}: {exc}") from None
