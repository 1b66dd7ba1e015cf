"""Kubernetes faults against a real control plane (KWOK nodes and kubelets, real API server,
scheduler and controllers), with the shipped manifests deployed: deleting a GPU pod, safety
(allowed namespaces and contexts, blast radius, dry run), cordon, drain and scale."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from drills.common.errors import ConfigError, SafetyViolation
from drills.model.scenario import KubernetesFault, load_scenario
from injectors.base import InjectionContext, build
from stack.config import StackConfig
from tests.conftest import drills_cli, isolated_env
from tests.helpers import anchored
from tests.kube_env import MANIFESTS, Kube

pytestmark = pytest.mark.kubernetes

ROOT = Path(__file__).resolve().parent.parent


def injector(
    kube: Kube, max_pods: int = 10, contexts: list[str] | None = None, **spec: object
) -> object:
    fault = KubernetesFault.model_validate({"namespace": "llm", **spec})
    scope = {
        "kubeconfig": str(kube.kubeconfig),
        "context": None,
        "allowed_contexts": contexts if contexts is not None else [kube.context],
        "allowed_namespaces": ["llm"],
    }
    return build(fault, InjectionContext("run-k", "", None, None, scope, max_pods), 0)


def test_shipped_manifests_schedule_each_replica_on_a_gpu_node(kube: Kube) -> None:
    pods = kube.wait_ready("app=vllm", 2)
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert len(nodes) == 2 and all(n.startswith("gpu-node-") for n in nodes)
    assert kube.wait_ready("app=toxiproxy", 1) and kube.wait_ready("app=gateway", 2)
    # The gateway's config inside the manifest is a valid stack config.
    docs = list(yaml.safe_load_all((MANIFESTS / "30-gateway.yaml").read_text()))
    config = StackConfig.model_validate(yaml.safe_load(docs[0]["data"]["stack.yaml"]))
    assert config.gateway.upstream_host == "toxiproxy.llm.svc"


def test_delete_a_gpu_pod_and_watch_its_replacement_become_ready(kube: Kube) -> None:
    before = {p["metadata"]["uid"] for p in kube.wait_ready("app=vllm", 2)}
    fault = injector(kube, kind="kubernetes.delete_pod", target="app=vllm", gpu=True)
    planned = fault.preflight()
    (victim,) = planned["pods"]
    evidence = fault.apply()
    (gone,) = evidence["deleted"]
    assert gone["uid"] == victim["uid"] and gone["gone"] and gone["uid"] in before
    deadline = time.monotonic() + 60
    while not (observed := fault.observe())["ready_at"]:
        assert time.monotonic() < deadline, observed
        time.sleep(0.5)
    (new,) = observed["replacements"]
    assert new["uid"] not in before and new["node"].startswith("gpu-node-")
    assert observed["ready_at"] >= evidence["applied_at"] - 1
    assert fault.revert()["method"].startswith("none")
    kube.wait_ready("app=vllm", 2)


def test_modes_choose_how_many(kube: Kube) -> None:
    kube.wait_ready("app=vllm", 2)
    assert (
        len(
            injector(kube, kind="kubernetes.delete_pod", target="app=vllm", mode="all").preflight()[
                "pods"
            ]
        )
        == 2
    )
    assert (
        len(
            injector(
                kube, kind="kubernetes.delete_pod", target="app=vllm", mode="percent", percent=50
            ).preflight()["pods"]
        )
        == 1
    )
    assert (
        len(
            injector(
                kube, kind="kubernetes.delete_pod", target="app=vllm", mode="count", count=5
            ).preflight()["pods"]
        )
        == 2
    )
    # Running on a named node.
    pod = kube.ready_pods("app=vllm")[0]
    on_node = injector(
        kube, kind="kubernetes.delete_pod", target="app=vllm", node=pod["spec"]["nodeName"]
    ).preflight()["pods"]
    assert [p["uid"] for p in on_node] == [pod["metadata"]["uid"]]


def test_safety_refuses_before_any_call_changes_anything(kube: Kube) -> None:
    before = sorted(p["metadata"]["uid"] for p in kube.wait_ready("app=vllm", 2))
    with pytest.raises(SafetyViolation, match=r"context .* is not allowed; allowed_contexts: prod"):
        injector(kube, contexts=["prod"], kind="kubernetes.delete_pod", target="app=vllm").apply()
    with pytest.raises(SafetyViolation, match=r"would delete 2 pods .* max_pods is 1"):
        injector(
            kube, max_pods=1, kind="kubernetes.delete_pod", target="app=vllm", mode="all"
        ).apply()
    from drills.common.errors import InjectionFailed

    with pytest.raises(InjectionFailed, match="matches no pod"):
        injector(kube, kind="kubernetes.delete_pod", target="app=nothing").apply()
    assert sorted(p["metadata"]["uid"] for p in kube.ready_pods("app=vllm")) == before


def _scenario(tmp_path: Path, kube: Kube, namespace: str = "llm") -> Path:
    text = anchored((ROOT / "scenarios" / "gpu-pod-loss-k8s.yaml").read_text(), ROOT / "scenarios")
    data = yaml.safe_load(text)
    data["kubernetes"]["kubeconfig"] = str(kube.kubeconfig)
    data["kubernetes"]["allowed_contexts"] = [kube.context]
    data["phases"][1]["inject"][0]["namespace"] = namespace
    path = tmp_path / "gpu-pod-loss-k8s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_namespaces_outside_the_scenario_are_refused_at_load(tmp_path: Path, kube: Kube) -> None:
    with pytest.raises(
        ConfigError, match=r"phases\[1\]\.inject\[0\]\.namespace: not an allowed namespace"
    ):
        load_scenario(_scenario(tmp_path, kube, namespace="kube-system"))


def test_dry_run_lists_exactly_the_pods_it_would_hit(tmp_path: Path, kube: Kube) -> None:
    pods = {p["metadata"]["name"] for p in kube.wait_ready("app=vllm", 2)}
    result = subprocess.run(
        drills_cli("run", str(_scenario(tmp_path, kube)), "--dry-run", "--json"),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    (hit,) = plan["faults"][0]["would_hit"]["pods"]
    assert hit["name"] in pods
    assert {p["metadata"]["name"] for p in kube.ready_pods("app=vllm")} == pods  # untouched


def test_cordon_drain_and_scale_are_reverted(kube: Kube) -> None:
    pod = kube.wait_ready("app=vllm", 2)[0]
    node = pod["spec"]["nodeName"]
    drain = injector(kube, kind="kubernetes.drain", target=node)
    evidence = drain.apply()
    assert evidence["unschedulable"] and pod["metadata"]["name"] in evidence["evicted"]
    # Its replacement lands on the one GPU node left free.
    replacement = kube.wait_ready(f"replica={pod['metadata']['labels']['replica']}", 1)[0]
    assert replacement["spec"]["nodeName"] not in (node,)
    assert drain.revert()["method"] == f"uncordoned {node}"
    with kube.client() as client:
        assert not client.node(node)["spec"].get("unschedulable")

    scale = injector(kube, kind="kubernetes.scale", target="gateway", replicas=0)
    assert scale.apply()["replicas"] == 0
    assert scale.revert()["method"] == "scaled gateway back to 2"
    kube.wait_ready("app=gateway", 2)


@pytest.mark.stack
def test_a_drill_deletes_the_pod_and_measures_its_replacement(
    kube: Kube, stack: object, tmp_path: Path
) -> None:
    from drills.engine.runner import Runner, RunOptions
    from drills.model.scenario import Attach

    source = ROOT / "tests" / "scenarios" / "short-pod-loss-k8s.yaml"
    data = yaml.safe_load(anchored(source.read_text(), source.parent))
    data["kubernetes"]["kubeconfig"] = str(kube.kubeconfig)
    data["kubernetes"]["allowed_contexts"] = [kube.context]
    path = tmp_path / "drill.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    before = {p["metadata"]["uid"] for p in kube.wait_ready("app=vllm", 2)}
    scenario, doc = load_scenario(path)
    options = RunOptions(
        out_dir=tmp_path / "runs",
        ledger=tmp_path / "ledger.json",
        attach=Attach(gateway=stack.gateway_url, toxiproxy=stack.toxiproxy_url),  # type: ignore[attr-defined]
    )
    journal = Runner(scenario, doc, options).run().model_dump(mode="json")
    assert journal["verdict"] == "passed", [c for c in journal["checks"] if not c["passed"]]
    (fault,) = journal["faults"]
    (planned,) = fault["preflight"]["pods"]
    (deleted,) = fault["evidence"]["deleted"]
    assert planned["uid"] == deleted["uid"] and deleted["uid"] in before
    (new,) = fault["after"]["replacements"]
    assert new["uid"] not in before and new["ready_at"]
    kube.wait_ready("app=vllm", 2)
