"""A real Kubernetes control plane for the tests: etcd, kube-apiserver, kube-controller-manager
and kube-scheduler (built from their Go modules and cached, see ``stack.kube``), run by KWOK's
kwokctl, with KWOK playing three GPU nodes and one CPU node. The shipped manifests
(stack/deploy/kubernetes) are applied to it: the vLLM Deployments request GPUs and are
scheduled onto the GPU nodes; a deleted pod is really replaced by its ReplicaSet, and a pod
becomes Ready ``READY_DELAY`` seconds after it starts running (a model loading).

Besides the admin's client certificate, the API server accepts bearer tokens
(``--token-auth-file``), as EKS's authenticator does: ``EXEC_TOKEN`` belongs to a cluster admin
(what an exec credential plugin prints), ``READER_TOKEN`` to a user whose RBAC Role lets it
only read the pods of namespace ``llm``."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from drills.common.kube import KubeClient, load_kubeconfig
from stack.kube import KwokCluster, ensure_kube_binaries, kube_binaries_built
from stack.provision import cache_root

MANIFESTS = Path(__file__).resolve().parent.parent / "stack" / "deploy" / "kubernetes"
TWIN_MANIFEST = MANIFESTS / "twins" / "unmanaged-vllm-0.yaml"
READY_DELAY = 3.0
"""Seconds from a pod running to its being Ready (the KWOK pod-ready Stage's delay)."""
EXEC_TOKEN = "drills-exec-" + secrets.token_hex(8)
READER_TOKEN = "drills-reader-" + secrets.token_hex(8)
READER_RBAC = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "pod-reader", "namespace": "llm"},
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "pod-reader", "namespace": "llm"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pod-reader",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "reader"}
            ],
        },
    ],
}


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

    def kubeconfig_for(self, folder: Path, name: str, user: dict) -> Path:
        """A kubeconfig of its own for this cluster (its server and CA), whose one context
        ``name`` authenticates as ``user`` (a kubeconfig ``user`` entry)."""
        admin = yaml.safe_load(self.kubeconfig.read_text())
        (cluster,) = admin["clusters"]
        ca = cluster["cluster"].get("certificate-authority")
        if ca and not Path(ca).is_absolute():
            cluster["cluster"]["certificate-authority"] = str(self.kubeconfig.parent / ca)
        path = folder / f"{name}.kubeconfig"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [cluster],
                    "users": [{"name": f"{name}-user", "user": user}],
                    "contexts": [
                        {
                            "name": name,
                            "context": {"cluster": cluster["name"], "user": f"{name}-user"},
                        }
                    ],
                    "current-context": name,
                }
            )
        )
        return path

    def exec_kubeconfig(self, folder: Path) -> tuple[Path, Path]:
        """A kubeconfig whose user is an exec credential plugin (as ``aws eks get-token``):
        a script that prints an ``ExecCredential`` with ``EXEC_TOKEN`` and counts its runs in
        the second path returned."""
        runs = folder / "plugin-runs"
        plugin = folder / "get-token"
        plugin.write_text(
            "#!/bin/sh\n"
            f"echo run >> '{runs}'\n"
            'printf \'{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", '
            f'"status": {{"token": "{EXEC_TOKEN}"}}}}\'\n'
        )
        plugin.chmod(0o755)
        user = {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": str(plugin),
                "interactiveMode": "Never",
            }
        }
        return self.kubeconfig_for(folder, "eks", user), runs

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

    def wait_ready(
        self, selector: str, count: int, timeout: float = 120, namespace: str = "llm"
    ) -> list[dict]:
        deadline = time.monotonic() + timeout
        while True:
            pods = self.ready_pods(selector, namespace)
            if len(pods) >= count:
                return pods
            assert time.monotonic() < deadline, f"{selector}: {len(pods)}/{count} pods Ready"
            time.sleep(0.3)


def pytest_collection_finish(session: pytest.Session) -> None:
    """On a machine that has not built the control plane yet, build it now, before the first
    test, when a collected test needs it. It was built in the background at idle priority
    beside the tests; the compile still took memory, disk and cache from them, and timing tests
    failed beside it on a new machine (a replacement engine ready after 118 s where 45 s is
    usual, a first token timed 33 ms late). CI builds it before pytest (``python -m
    stack.install``), beside the other installs, so this finds it built there."""
    wanted = any("kube" in getattr(item, "fixturenames", ()) for item in session.items)
    if not wanted or kube_binaries_built():
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(
            "building the Kubernetes control plane before the tests (once per version; "
            f"5-25 minutes; log in {cache_root() / 'logs'})"
        )
    ensure_kube_binaries()


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    """The cluster, for one test module (only test_kubernetes_faults uses it). For the session,
    its five processes (etcd, the API server, the controller manager, the scheduler, KWOK) ran
    beside the 70% of the suite that comes after it, on the same 2 cores as its timing tests.
    In one CI run with the cluster up, the open-loop generator's constant gaps spread to a CV of
    0.29 (0.15 allowed); that the cluster caused it is not shown, but it had no reason to run."""
    binaries = ensure_kube_binaries()  # built once, cached in ~/.cache/drills/kube
    work = tmp_path_factory.mktemp("kwok")
    cluster = KwokCluster(
        f"drills-{secrets.token_hex(3)}",
        work,
        binaries,
        ready_delay=READY_DELAY,
        tokens={EXEC_TOKEN: ("eks-admin", ["system:masters"]), READER_TOKEN: ("reader", [])},
    )
    cluster.create()
    try:
        context = load_kubeconfig(cluster.kubeconfig).context
        # Three GPU nodes for the sound stack (two replicas and a spare for a replacement),
        # two for the twin's replicas (stack/deploy/kubernetes/twins, applied by its test).
        nodes = [node(f"gpu-node-{i}", 1) for i in range(5)] + [node("cpu-node-0", 0)]
        cluster.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}),
        )
        cluster.kubectl("apply", "-f", str(MANIFESTS))
        cluster.kubectl("apply", "-f", "-", input=json.dumps(READER_RBAC))
        env = Kube(cluster, context)
        env.wait_ready("app=vllm", 2)
        yield env
    finally:
        cluster.delete()
