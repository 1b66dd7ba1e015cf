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

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
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


_background_build: subprocess.Popen[bytes] | None = None


def _idle_priority() -> None:
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def pytest_collection_finish(session: pytest.Session) -> None:
    """On a machine that has not built the control plane yet, build it in the background at
    idle priority (SCHED_IDLE: only on CPU the tests leave unused) from the start of the run,
    so the Kubernetes tests, which come after most of the suite, seldom wait the 7 to 25 minutes
    of a first build. The fixture below takes the same lock and waits for it to finish."""
    global _background_build
    wanted = any("kube" in getattr(item, "fixturenames", ()) for item in session.items)
    if not wanted or kube_binaries_built():
        return
    log = cache_root() / "logs" / "kube-background-build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        _background_build = subprocess.Popen(
            [sys.executable, "-c", "from stack.kube import ensure_kube_binaries as e; e()"],
            cwd=Path(__file__).resolve().parent.parent,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_idle_priority,
            start_new_session=True,
        )


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A build still running when the tests end (none of them needed it) is stopped; the next
    run starts it again (the cache holds only finished builds)."""
    if _background_build is not None and _background_build.poll() is None:
        os.killpg(_background_build.pid, signal.SIGTERM)
        _background_build.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):  # the go tools it started, if any are left
            os.killpg(_background_build.pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
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
