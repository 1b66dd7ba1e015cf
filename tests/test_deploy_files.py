"""The deploy files hold together: the gateway configs inside them are valid stack configs whose
hops match the Toxiproxy config beside them, and every engine asks for a GPU. (The Kubernetes
manifests are also applied to a real API server in test_kubernetes_faults.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from drills.lint import lint_config
from stack.config import StackConfig

DEPLOY = Path(__file__).resolve().parent.parent / "stack" / "deploy"


def _check(gateway_yaml: str, toxiproxy_json: str) -> StackConfig:
    config = StackConfig.model_validate(yaml.safe_load(gateway_yaml))
    proxies = {p["name"]: p for p in json.loads(toxiproxy_json)}
    assert set(proxies) == {u.name for u in config.upstreams}
    for hop in config.upstreams:
        assert proxies[hop.name]["listen"].endswith(f":{hop.listen_port}")
    assert config.gateway.bind == "0.0.0.0" and config.gateway.upstream_host
    assert [f for f in lint_config(config) if f.severity == "error"] == []
    return config


def test_compose_file() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"vllm-0", "vllm-1", "toxiproxy", "gateway"}
    for name in ("vllm-0", "vllm-1"):
        devices = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["capabilities"] == ["gpu"]
        assert services[name]["labels"]["drills.replica"] == name
        assert services[name]["restart"] == "always"
    config = _check(
        compose["configs"]["gateway"]["content"], compose["configs"]["toxiproxy"]["content"]
    )
    assert config.gateway.upstream_host == "toxiproxy"


def test_kubernetes_manifests() -> None:
    docs = [
        d
        for f in sorted((DEPLOY / "kubernetes").glob("*.yaml"))
        for d in yaml.safe_load_all(f.read_text())
    ]
    by_kind_name = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    for replica in ("vllm-0", "vllm-1"):
        container = by_kind_name[("Deployment", replica)]["spec"]["template"]["spec"]["containers"][
            0
        ]
        assert container["resources"]["requests"]["nvidia.com/gpu"] == 1
        assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    _check(
        by_kind_name[("ConfigMap", "gateway")]["data"]["stack.yaml"],
        by_kind_name[("ConfigMap", "toxiproxy")]["data"]["toxiproxy.json"],
    )


def test_the_load_workers_job_runs_drills_load_worker() -> None:
    from drills.cli_parser import build_parser as _parser

    job = yaml.safe_load((DEPLOY / "load-workers.yaml").read_text())
    assert job["kind"] == "Job"
    spec = job["spec"]
    assert spec["parallelism"] == spec["completions"]
    [container] = spec["template"]["spec"]["containers"]
    args = _parser().parse_args(container["args"])
    assert args.command == "load-worker" and args.master == "$(DRILLS_MASTER)"
    assert {e["name"] for e in container["env"]} == {"DRILLS_MASTER"}
    assert container["resources"]["requests"]["cpu"] == "1"
    dockerfile = (DEPLOY / "Dockerfile.drills").read_text()
    assert 'ENTRYPOINT ["drills"]' in dockerfile


def attach_chain() -> dict[tuple[str, str], dict]:
    docs = yaml.safe_load_all((DEPLOY / "kubernetes" / "attach" / "chain.yaml").read_text())
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def _ports(workload: dict) -> dict[str, int]:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return {p["name"]: p["containerPort"] for p in container["ports"]}


def test_the_attach_chain_holds_together() -> None:
    """The chain for a team's own cluster (stack/deploy/kubernetes/attach): every hop of the L7
    hop calls the Toxiproxy proxy of the same name, every listener is a port of its Deployment
    and of its Service, and the hop runs from its config."""
    chain = attach_chain()
    data = chain[("ConfigMap", "drills-chain")]["data"]
    proxies = {p["name"]: p for p in json.loads(data["toxiproxy.json"])}
    hop = json.loads(data["hop.json"])
    hops = {h["name"]: h for h in hop["hops"]}
    assert set(hops) == set(proxies)
    toxiproxy_ports = _ports(chain[("Deployment", "toxiproxy")])
    hop_ports = _ports(chain[("Deployment", "drills-hop")])
    for name, proxy in proxies.items():
        port = int(proxy["listen"].rsplit(":", 1)[1])
        assert hops[name]["upstream"] == f"http://toxiproxy:{port}", name
        assert toxiproxy_ports[name] == port
        assert hop_ports[name] == int(hops[name]["listen"].rsplit(":", 1)[1])
        host, _, upstream_port = proxy["upstream"].rpartition(":")
        assert host and upstream_port.isdigit(), proxy
    assert hop_ports["control"] == int(hop["control"].rsplit(":", 1)[1])
    for service, ports in (("toxiproxy", toxiproxy_ports), ("drills-hop", hop_ports)):
        spec = chain[("Service", service)]["spec"]
        assert {p["targetPort"] for p in spec["ports"]} == set(ports), service
    (container,) = chain[("Deployment", "drills-hop")]["spec"]["template"]["spec"]["containers"]
    assert container["command"][:3] == ["python", "-m", "drills.hop"]
