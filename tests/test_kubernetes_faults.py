"""Kubernetes faults against a real control plane (KWOK nodes and kubelets, real API server,
scheduler and controllers), with the shipped manifests deployed: deleting a GPU pod, safety
(allowed namespaces and contexts, blast radius, RBAC, dry run), cordon, drain (and a
PodDisruptionBudget that refuses it for a while) and scale; credentials from an exec plugin, as
on EKS."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from drills.common.errors import (
    ConfigError,
    InjectionFailed,
    InputError,
    KubeError,
    SafetyViolation,
)
from drills.model.faults import KubernetesFault
from drills.model.scenario import load_scenario
from injectors.base import InjectionContext, build
from stack.config import StackConfig
from tests.conftest import drills_cli, isolated_env, run_drill
from tests.helpers import anchored, assert_ended_at_replacement, drill_account, twin_account
from tests.kube_env import MANIFESTS, READER_TOKEN, READY_DELAY, TWIN_MANIFEST, Kube

pytestmark = pytest.mark.kubernetes

ROOT = Path(__file__).resolve().parent.parent


def injector(
    kube: Kube,
    max_pods: int = 10,
    contexts: list[str] | None = None,
    kubeconfig: Path | str | None = "",
    context: str | None = None,
    **spec: object,
) -> object:
    """``kubeconfig``: the cluster's admin one unless given (``None``: ``$KUBECONFIG``)."""
    fault = KubernetesFault.model_validate({"namespace": "llm", **spec})
    scope = {
        "kubeconfig": str(kube.kubeconfig) if kubeconfig == "" else kubeconfig,
        "context": context,
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


def test_the_attach_chain_runs_in_front_of_the_vllm_services_and_survives_a_pod_loss(
    kube: Kube,
) -> None:
    """stack/deploy/kubernetes/attach, applied with kustomize (kubectl apply -k) as a team
    would: Toxiproxy and the L7 hop come up in their own namespace; a pod loss of the hop (the
    kill drill's fault, kubernetes.delete_pod) is replaced by its Deployment."""
    try:
        kube.kubectl("apply", "-k", str(MANIFESTS / "attach"))
        ns = "drills-chain"
        assert kube.wait_ready("app=toxiproxy", 1, namespace=ns)
        (hop,) = kube.wait_ready("app=drills-hop", 1, namespace=ns)
        services = json.loads(kube.kubectl("get", "services", "-n", ns, "-o", "json"))
        assert {s["metadata"]["name"] for s in services["items"]} == {"toxiproxy", "drills-hop"}
        fault = KubernetesFault.model_validate(
            {"kind": "kubernetes.delete_pod", "target": "app=drills-hop", "namespace": ns}
        )
        scope = {
            "kubeconfig": str(kube.kubeconfig),
            "context": None,
            "allowed_contexts": [kube.context],
            "allowed_namespaces": [ns],
        }
        killer: Any = build(fault, InjectionContext("run-k", "", None, None, scope, 10), 0)
        (gone,) = killer.apply()["deleted"]
        assert gone["uid"] == hop["metadata"]["uid"]
        deadline = time.monotonic() + 60
        while not (observed := killer.observe())["ready_at"]:
            assert time.monotonic() < deadline, observed
            time.sleep(0.5)
        (new,) = observed["replacements"]
        assert new["uid"] != hop["metadata"]["uid"]
    finally:
        kube.kubectl("delete", "-k", str(MANIFESTS / "attach"), "--wait=false")


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


def test_an_exec_plugin_signs_in_and_the_watch_times_the_replacement(
    kube: Kube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The EKS path: a merged ``KUBECONFIG`` whose context ``eks`` authenticates with a token
    that an exec credential plugin prints. The replacement's readiness is what the watch saw:
    it starts running at once and is Ready only after the Stage's model-load delay."""
    exec_config, runs = kube.exec_kubeconfig(tmp_path)
    monkeypatch.setenv("KUBECONFIG", f"{kube.kubeconfig}:{exec_config}")
    before = {p["metadata"]["uid"] for p in kube.wait_ready("app=vllm", 2)}
    fault = injector(
        kube,
        contexts=["eks"],
        kubeconfig=None,
        context="eks",
        kind="kubernetes.delete_pod",
        target="app=vllm",
        gpu=True,
    )
    (victim,) = fault.preflight()["pods"]
    evidence = fault.apply()
    assert evidence["deleted"][0]["uid"] == victim["uid"]
    assert runs.read_text().count("run") >= 1  # the plugin gave the credential
    time.sleep(READY_DELAY + 2)
    observed = fault.observe()
    assert observed["ready_seen_by"] == "watch", observed
    (new,) = observed["replacements"]
    assert new["uid"] not in before and new["watched_ready_at"] == observed["ready_at"]
    # Seen as soon as it was created, Ready only after the model-load delay (the API's own
    # lastTransitionTime agrees, to its whole second).
    assert new["watched_ready_at"] - new["seen_at"] >= READY_DELAY * 0.9, new
    assert new["seen_at"] - evidence["applied_at"] < READY_DELAY, new
    assert abs(new["ready_at"] - new["watched_ready_at"]) < 1.5, new
    kube.wait_ready("app=vllm", 2)


def test_rbac_that_forbids_a_call_refuses_the_fault_before_anything_is_touched(
    kube: Kube, tmp_path: Path
) -> None:
    """A user who may only read the pods of ``llm`` (a Role, a token file): the pod-loss fault
    is refused at preflight, naming the verb, resource and namespace; so is a scale."""
    (tmp_path / "token").write_text(READER_TOKEN)
    reader = kube.kubeconfig_for(tmp_path, "reader", {"tokenFile": str(tmp_path / "token")})
    before = sorted(p["metadata"]["uid"] for p in kube.wait_ready("app=vllm", 2))
    delete = injector(
        kube,
        kubeconfig=reader,
        contexts=["reader"],
        kind="kubernetes.delete_pod",
        target="app=vllm",
    )
    with pytest.raises(InputError) as caught:
        delete.preflight()
    message = str(caught.value)
    assert message.startswith(
        "kubernetes.delete_pod app=vllm: 'reader' (kubeconfig user 'reader-user', context "
        "'reader') may not delete pods in namespace 'llm'"
    ), message
    assert "RBAC forbids it, so nothing was applied" in message
    assert "list pods" not in message and "watch pods" not in message  # those it may
    scale = injector(
        kube,
        kubeconfig=reader,
        contexts=["reader"],
        kind="kubernetes.scale",
        target="gateway",
        replicas=0,
    )
    with pytest.raises(
        InputError,
        match=r"may not get deployments/scale in namespace 'llm'.*; patch deployments/scale",
    ):
        scale.preflight()
    assert sorted(p["metadata"]["uid"] for p in kube.ready_pods("app=vllm")) == before
    with kube.client() as admin:
        assert admin.scale("llm", "gateway") == 2
    # Applied without its preflight, the delete itself is forbidden: the fault fails, and the
    # replacement watch it had started is stopped with it.
    with pytest.raises(KubeError, match=r"HTTP 403: .*cannot delete resource \"pods\""):
        delete.apply()
    assert delete.watch is not None and not delete.watch._thread.is_alive()
    assert sorted(p["metadata"]["uid"] for p in kube.ready_pods("app=vllm")) == before


def test_inside_a_pod_the_service_account_is_used(
    kube: Kube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No kubeconfig, ``KUBERNETES_SERVICE_HOST`` set: drills signs in with the service
    account Kubernetes mounts in its pod (a real token from the TokenRequest API, the cluster's
    CA), as when a game day runs drills as a Job in the cluster."""
    import drills.common.kube as kube_module
    from drills.common.kube import IN_CLUSTER, KubeClient, load_kubeconfig

    kube.kubectl("create", "serviceaccount", "drills", "-n", "llm")
    kube.kubectl(
        "create", "rolebinding", "drills-reads", "-n", "llm", "--role=pod-reader",
        "--serviceaccount=llm:drills",
    )  # fmt: skip
    mounted = tmp_path / "serviceaccount"
    mounted.mkdir()
    (mounted / "token").write_text(kube.kubectl("create", "token", "drills", "-n", "llm").strip())
    admin = yaml.safe_load(kube.kubeconfig.read_text())["clusters"][0]["cluster"]
    (mounted / "ca.crt").write_text(Path(admin["certificate-authority"]).read_text())
    (mounted / "namespace").write_text("llm")
    host, port = admin["server"].removeprefix("https://").rsplit(":", 1)
    monkeypatch.setattr(kube_module, "SERVICE_ACCOUNT", mounted)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    config = load_kubeconfig()
    assert (config.context, config.server) == (IN_CLUSTER, admin["server"])
    with KubeClient(config) as client:
        assert client.whoami() == "system:serviceaccount:llm:drills"
        assert len(client.pods("llm", "app=vllm")) == 2
    # It may read pods but not delete them: refused before anything is touched.
    fault = injector(
        kube,
        kubeconfig=None,
        contexts=[IN_CLUSTER],
        kind="kubernetes.delete_pod",
        target="app=vllm",
    )
    with pytest.raises(
        InputError, match=r"'system:serviceaccount:llm:drills' .* may not delete pods in names"
    ):
        fault.preflight()


def test_lists_are_read_page_by_page(kube: Kube, monkeypatch: pytest.MonkeyPatch) -> None:
    """One item per page: every pod still comes back, through the API's ``continue`` tokens."""
    import drills.common.kube as kube_module

    with kube.client() as client:
        whole = [p["metadata"]["uid"] for p in client.pods("llm")]
        monkeypatch.setattr(kube_module, "PAGE", 1)
        paged = [p["metadata"]["uid"] for p in client.pods("llm")]
    assert len(whole) >= 5 and paged == whole


def _budget(kube: Kube, min_available: int) -> None:
    """A PodDisruptionBudget on the vLLM pods; waits until its controller has counted them."""
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "vllm-budget", "namespace": "llm"},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "vllm"}}},
    }
    kube.kubectl("apply", "-f", "-", input=json.dumps(pdb))
    deadline = time.monotonic() + 30
    while True:
        status = json.loads(kube.kubectl("get", "pdb", "vllm-budget", "-n", "llm", "-o", "json"))
        if status.get("status", {}).get("observedGeneration") == status["metadata"]["generation"]:
            return
        assert time.monotonic() < deadline, status
        time.sleep(0.2)


def test_a_drain_waits_while_a_disruption_budget_refuses_then_goes_on(kube: Kube) -> None:
    pod = kube.wait_ready("app=vllm", 2)[0]
    node, name = pod["spec"]["nodeName"], pod["metadata"]["name"]
    drain = injector(kube, kind="kubernetes.drain", target=node, eviction_timeout="30s")
    _budget(kube, 2)  # two pods, two must stay: no eviction allowed
    relax = threading.Timer(3.0, _budget, (kube, 1))
    relax.start()
    try:
        started = time.monotonic()
        evidence = drain.apply()
        took = time.monotonic() - started
    finally:
        relax.join()
        kube.kubectl("delete", "pdb", "vllm-budget", "-n", "llm")
        reverted = drain.revert()
    assert reverted["method"] == f"uncordoned {node}"
    assert name in evidence["evicted"]
    refusals = evidence["eviction_refusals"][f"llm/{name}"]
    assert len(refusals) >= 2 and {r["status"] for r in refusals} == {429}
    assert "disruption budget" in refusals[0]["message"]
    # Refused while the budget held (3 s), evicted at the next try after it relented (tries
    # back off 0.5 s, 1 s, 2 s, ... up to 5 s).
    assert refusals[-1]["at"] - refusals[0]["at"] < 3.5 and 3.0 <= took < 3.0 + 5.0 + 2.0
    kube.wait_ready("app=vllm", 2)


def test_a_budget_that_never_relents_fails_the_drain_within_its_bound(kube: Kube) -> None:
    pod = kube.wait_ready("app=vllm", 2)[0]
    node = pod["spec"]["nodeName"]
    drain = injector(kube, kind="kubernetes.drain", target=node, eviction_timeout="2s")
    _budget(kube, 2)
    started = time.monotonic()
    try:
        with pytest.raises(InjectionFailed, match=r"still not evicted after \d+ tries in 2s"):
            drain.apply()
        assert time.monotonic() - started < 10
    finally:
        kube.kubectl("delete", "pdb", "vllm-budget", "-n", "llm")
        assert drain.revert()["method"] == f"uncordoned {node}"
    with kube.client() as client:
        assert not client.node(node)["spec"].get("unschedulable")
    assert pod["metadata"]["uid"] in {p["metadata"]["uid"] for p in kube.ready_pods("app=vllm")}


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
    kube: Kube, stack: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole drill, signed in as on EKS (an exec credential plugin, in a merged
    ``KUBECONFIG``); then the same drill as a user whose RBAC only lets it read pods is refused
    before its first phase, with nothing deleted."""
    from drills.engine.options import RunOptions
    from drills.engine.runner import Runner
    from drills.model.scenario import Attach

    exec_config, runs = kube.exec_kubeconfig(tmp_path)
    monkeypatch.setenv("KUBECONFIG", f"{kube.kubeconfig}:{exec_config}")
    source = ROOT / "tests" / "scenarios" / "short-pod-loss-k8s.yaml"
    data = yaml.safe_load(anchored(source.read_text(), source.parent))
    data["kubernetes"]["context"] = "eks"
    data["kubernetes"]["allowed_contexts"] = ["eks", "reader"]
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
    assert journal["verdict"] == "passed", drill_account(journal)
    assert runs.exists()  # signed in through the plugin
    (fault,) = journal["faults"]
    (planned,) = fault["preflight"]["pods"]
    (deleted,) = fault["evidence"]["deleted"]
    assert planned["uid"] == deleted["uid"] and deleted["uid"] in before
    (new,) = fault["after"]["replacements"]
    assert new["uid"] not in before and new["watched_ready_at"]
    assert fault["after"]["ready_seen_by"] == "watch"
    (ready,) = [c for c in journal["checks"] if c["check"] == "replacement_ready_within"]
    assert ready["observed"] >= READY_DELAY  # the model-load delay is measured, not skipped
    # until: replaced: the fault phase ended once the watch saw the replacement Ready.
    assert_ended_at_replacement(journal, fault["after"]["ready_at"])
    kube.wait_ready("app=vllm", 2)

    (tmp_path / "token").write_text(READER_TOKEN)
    kube.kubeconfig_for(tmp_path, "reader", {"tokenFile": str(tmp_path / "token")})
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "reader.kubeconfig"))
    data["kubernetes"]["context"] = "reader"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    scenario, doc = load_scenario(path)
    uids = {p["metadata"]["uid"] for p in kube.ready_pods("app=vllm")}
    with pytest.raises(InputError) as caught:
        Runner(scenario, doc, options).run()
    assert f"{path}:" in str(caught.value) and "phases[1].inject[0]" in str(caught.value)
    assert "'reader' (kubeconfig user 'reader-user', context 'reader') may not delete pods" in str(
        caught.value
    )
    assert {p["metadata"]["uid"] for p in kube.ready_pods("app=vllm")} == uids


@pytest.mark.stack
def test_the_drill_fails_on_its_twin_where_nothing_replaces_the_pod(
    kube: Kube, stack: object, tmp_path: Path
) -> None:
    """`drills run --twin` on the shipped twin manifest: the same stack in namespace llm-twin
    with vllm-0 a bare Pod. The drill deletes it there (and nothing in llm), no replacement
    comes, and exactly the replacement check fails, saying why."""
    kube.kubectl("apply", "-f", str(TWIN_MANIFEST))
    try:
        (victim, _) = sorted(
            kube.wait_ready("app=vllm", 2, namespace="llm-twin"),
            key=lambda p: p["metadata"]["name"],
        )
        assert not victim["metadata"].get("ownerReferences")  # a bare Pod, as shipped
        sound = {p["metadata"]["uid"] for p in kube.wait_ready("app=vllm", 2)}
        source = ROOT / "tests" / "scenarios" / "short-pod-loss-k8s.yaml"
        data = yaml.safe_load(anchored(source.read_text(), source.parent))
        data["kubernetes"].update(
            kubeconfig=str(kube.kubeconfig), context=kube.context, allowed_contexts=[kube.context]
        )
        path = tmp_path / "drill.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        attach = ("--gateway", stack.gateway_url, "--toxiproxy", stack.toxiproxy_url)  # type: ignore[attr-defined]
        result, (journal,) = run_drill(path, tmp_path, "--twin", "llm-twin", *attach, timeout=300)
        twin = journal["twin"]
        assert result.returncode == 0 and twin["held"], (
            f"rc={result.returncode}\n{twin_account(journal)}\n{result.stdout[-2000:]}"
        )
        assert twin["failed"] == ["replacement_ready_within app=vllm,replica=vllm-0"]
        assert "namespace 'llm-twin'" in twin["stack"], twin["stack"]
        (fault,) = journal["faults"]
        (deleted,) = fault["evidence"]["deleted"]
        assert deleted["uid"] == victim["metadata"]["uid"] and deleted["owner"] is None
        assert fault["after"]["replacements"] == [] and fault["after"]["ready_at"] is None
        # Nothing came back: the phase that waits for a replacement ran its full 10 s.
        phase = next(p for p in journal["phases"] if p["name"] == "fault")
        assert phase["planned_end"] is None and phase["end"] - phase["start"] >= 9.99
        (check,) = [c for c in journal["checks"] if not c["passed"]]
        assert "no controller owned it" in check["reason"], check
        # The sound stack's pods were not touched.
        assert {p["metadata"]["uid"] for p in kube.ready_pods("app=vllm")} == sound
    finally:
        kube.kubectl("delete", "namespace", "llm-twin", "--wait=false")
