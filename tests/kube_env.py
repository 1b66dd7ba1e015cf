"""A real Kubernetes control plane for the tests: etcd, kube-apiserver, kube-controller-manager
and kube-scheduler (built from their Go modules and cached, see ``stack.kube``), run by KWOK's
kwokctl, with KWOK playing three GPU nodes and one CPU node. The shipped manifests
(stack/deploy/kubernetes) are applied to it: the vLLM Deployments request GPUs and are
scheduled onto the GPU nodes; a deleted pod is really replaced by its ReplicaSet."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from drills.common.kube import KubeClient, load_kubeconfig
from stack.kube import KwokCluster, ensure_kube_binaries

MANIFESTS = Path(__file__).resolve().parent.parent / "stack" / "deploy" / "kubernetes"


def node(name: str, gpus: int) -> dict:
    capacity = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "type": "kwok",
                "gpu": str(bool(gpus)).lower(),
            },
        },
        "spec": {},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


@dataclass
class Kube:
    cluster: KwokCluster
    context: str

    @property
    def kubeconfig(self) -> Path:
        return self.cluster.kubeconfig

    def client(self) -> KubeClient:
        return KubeClient(load_kubeconfig(self.kubeconfig))

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return self.cluster.kubectl(*args, input=input)

    def ready_pods(self, selector: str, namespace: str = "llm") -> list[dict]:
        with self.client() as kube:
            pods = kube.pods(namespace, selector)
        return [
            p
            for p in pods
            if p["metadata"].get("deletionTimestamp") is None
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p.get("status", {}).get("conditions", [])
            )
        ]

    def wait_ready(self, selector: str, count: int, timeout: float = 120) -> list[dict]:
        deadline = time.monotonic() + timeout
        while True:
            pods = self.ready_pods(selector)
            if len(pods) >= count:
                return pods
            assert time.monotonic() < deadline, f"{selector}: {len(pods)}/{count} pods Ready"
            time.sleep(0.3)


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    binaries = ensure_kube_binaries()  # built once, cached in ~/.cache/drills/kube
    work = tmp_path_factory.mktemp("kwok")
    cluster = KwokCluster(f"drills-{secrets.token_hex(3)}", work, binaries)
    cluster.create()
    try:
        context = load_kubeconfig(cluster.kubeconfig).context
        nodes = [node(f"gpu-node-{i}", 1) for i in range(3)] + [node("cpu-node-0", 0)]
        cluster.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}),
        )
        cluster.kubectl("apply", "-f", str(MANIFESTS))
        env = Kube(cluster, context)
        env.wait_ready("app=vllm", 2)
        yield env
    finally:
        cluster.delete()
