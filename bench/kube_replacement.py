"""How long a deleted GPU pod's replacement takes to be Ready on KWOK with the model-load Stage
delay, as the injector measures it (a watch, the harness's clock) beside what the old way saw
(polling the pod list every 0.5 s) and the API server's own Ready stamp (whole seconds), against
the delay itself.

    .venv/bin/python bench/kube_replacement.py [--delay 3] [--rounds 8]

Needs the Kubernetes binaries (built once, see stack/kube.py). Each round deletes vllm-0's pod
through the injector, polls beside its watch, and waits for the replacement before the next.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from drills.common.kube import KubeClient, load_kubeconfig
from drills.model.faults import KubernetesFault
from injectors.base import InjectionContext, build
from stack.kube import KwokCluster, ensure_kube_binaries
from tests.kube_env import MANIFESTS, node

SELECTOR = "app=vllm,replica=vllm-0"


def _ready(pod: dict) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod.get("status", {}).get("conditions", [])
    )


def one_round(kube: KubeClient, kubeconfig: Path, context: str) -> dict[str, float]:
    scope = {
        "kubeconfig": str(kubeconfig),
        "context": None,
        "allowed_contexts": [context],
        "allowed_namespaces": ["llm"],
    }
    fault = KubernetesFault.model_validate(
        {"kind": "kubernetes.delete_pod", "target": SELECTOR, "namespace": "llm", "gpu": True}
    )
    injector = build(fault, InjectionContext("bench", "", None, None, scope, 10), 0)
    old = {p["metadata"]["uid"] for p in kube.pods("llm", SELECTOR)}
    evidence = injector.apply()  # type: ignore[attr-defined]
    applied = evidence["applied_at"]
    polled = None
    while polled is None:  # the old way: list every 0.5 s until a new pod is Ready
        time.sleep(0.5)
        if any(p["metadata"]["uid"] not in old and _ready(p) for p in kube.pods("llm", SELECTOR)):
            polled = time.time()
        if time.time() - applied > 60:
            raise SystemExit("no replacement within 60 s")
    observed = injector.observe()  # type: ignore[attr-defined]
    (new,) = observed["replacements"]
    return {
        "watch": new["watched_ready_at"] - applied,
        "poll_0.5s": polled - applied,
        "api_stamp": new["ready_at"] - applied,
        "created_to_ready_watch": new["watched_ready_at"] - new["seen_at"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=3.0, help="the Stage's ready delay, s")
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    binaries = ensure_kube_binaries()
    with tempfile.TemporaryDirectory(prefix="drills-bench-kube-") as work:
        cluster = KwokCluster(
            f"bench-{secrets.token_hex(2)}", Path(work), binaries, ready_delay=args.delay
        )
        cluster.create()
        try:
            nodes = [node(f"gpu-node-{i}", 1) for i in range(3)]
            items = {"apiVersion": "v1", "kind": "List", "items": nodes}
            cluster.kubectl("apply", "-f", "-", input=json.dumps(items))
            cluster.kubectl("apply", "-f", str(MANIFESTS))
            config = load_kubeconfig(cluster.kubeconfig)
            samples: dict[str, list[float]] = {}
            with KubeClient(config) as kube:
                while sum(_ready(p) for p in kube.pods("llm", "app=vllm")) < 2:
                    time.sleep(0.3)
                for _ in range(args.rounds):
                    for key, value in one_round(kube, cluster.kubeconfig, config.context).items():
                        samples.setdefault(key, []).append(value)
                    time.sleep(1)
        finally:
            cluster.delete()
    print(f"KWOK pod-ready delay {args.delay:g} s, {args.rounds} deletions of vllm-0's pod")
    print(f"{'delete -> replacement Ready':32} {'median':>8} {'min':>8} {'max':>8}")
    for key, values in samples.items():
        print(f"{key:32} {statistics.median(values):8.3f} {min(values):8.3f} {max(values):8.3f}")
    watch, poll = statistics.median(samples["watch"]), statistics.median(samples["poll_0.5s"])
    print(f"watch - delay: {watch - args.delay:.3f} s; poll - watch: {poll - watch:.3f} s")


if __name__ == "__main__":
    main()
