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
import time
from datetime import datetime
from typing import Any

from drills.common.errors import DrillsError, InjectionFailed, RevertError, SafetyViolation
from drills.common.kube import KubeClient, load_kubeconfig
from injectors.base import InjectionContext

__all__ = ["KubernetesInjector", "revert_entry"]

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


def _ready_at(pod: dict[str, Any]) -> float | None:
    for condition in pod.get("status", {}).get("conditions", []):
        if condition.get("type") == "Ready" and condition.get("status") == "True":
            return _epoch(condition.get("lastTransitionTime"))
    return None


def _brief(pod: dict[str, Any]) -> dict[str, Any]:
    meta = pod["metadata"]
    return {
        "name": meta["name"],
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

    # -- where, and what ---------------------------------------------------------------------

    def _client(self) -> KubeClient:
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
        return KubeClient(config)

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
        """What the fault would hit, read from the cluster; raises when it is not allowed."""
        with self._client() as kube:
            if self.kind == "kubernetes.delete_pod":
                return {"pods": [_brief(p) for p in self._selection(kube)]}
            if self.kind in ("kubernetes.cordon", "kubernetes.drain"):
                node = kube.node(self.target)
                pods = [_brief(p) for p in kube.pods_on_node(self.target)]
                allowed = (self.scope or {}).get("allowed_namespaces", [])
                foreign = sorted(
                    {
                        p["metadata"]["namespace"]
                        for p in kube.pods_on_node(self.target)
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
                return {"node": node["metadata"]["name"], "pods": pods}
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
                self.existing = {
                    p["metadata"]["uid"] for p in kube.pods(self.fault.namespace, self.fault.target)
                }
                chosen = self._selection(kube)
                for pod in chosen:
                    self.victims.append(_brief(pod))
                    kube.delete_pod(self.fault.namespace, pod["metadata"]["name"], self.fault.grace)
                return {"applied_at": self.applied_at, "deleted": self._gone(kube)}
            if self.kind in ("kubernetes.cordon", "kubernetes.drain"):
                node = kube.node(self.target)
                self.previous = {"unschedulable": bool(node.get("spec", {}).get("unschedulable"))}
                kube.set_unschedulable(self.target, True)
                evicted = []
                if self.kind == "kubernetes.drain":
                    for pod in kube.pods_on_node(self.target):
                        owners = pod["metadata"].get("ownerReferences") or []
                        if any(o.get("kind") == "DaemonSet" for o in owners):
                            continue
                        self.victims.append(_brief(pod))
                        kube.evict(pod["metadata"]["namespace"], pod["metadata"]["name"])
                        evicted.append(pod["metadata"]["name"])
                after = kube.node(self.target)
                return {
                    "applied_at": self.applied_at,
                    "node": self.target,
                    "unschedulable": bool(after.get("spec", {}).get("unschedulable")),
                    "evicted": evicted,
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

    def observe(self) -> dict[str, Any]:
        """Each deleted pod's replacement: a new pod of the same selection, and when it became
        Ready."""
        if self.kind != "kubernetes.delete_pod" or self.applied_at is None:
            return {}
        with self._client() as kube:
            pods = kube.pods(self.fault.namespace, self.fault.target)
        old = {v["uid"] for v in self.victims} | self.existing
        fresh = sorted(
            (
                _brief(p)
                for p in pods
                if p["metadata"]["uid"] not in old
                and (_epoch(p["metadata"].get("creationTimestamp")) or 0) >= self.applied_at - 1
            ),
            key=lambda p: p["created_at"] or 0,
        )
        replacements = fresh[: len(self.victims)]
        readies = [p["ready_at"] for p in replacements]
        return {
            "replacements": replacements,
            "ready_at": (
                max(r for r in readies if r is not None)
                if len(replacements) == len(self.victims) and None not in readies
                else None
            ),
        }


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
