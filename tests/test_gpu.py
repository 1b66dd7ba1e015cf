"""GPU telemetry and memory pressure. On a machine with NVML they read and hold real device
memory; without it (this project's CI machines) both must say so and never count as passed."""

from __future__ import annotations

from pathlib import Path

import pytest

from drills.checks import Evaluation, evaluate
from drills.engine.runner import Runner, RunOptions
from drills.model.scenario import Attach, Check, GpuMemoryPressureFault, load_scenario
from injectors.base import InjectionContext, build
from injectors.gpu import GpuUnavailable, gpu_samples, nvml_status
from tests.conftest import RunningStack
from tests.helpers import anchored

ROOT = Path(__file__).resolve().parent.parent
STATUS = nvml_status()


def test_nvml_status_is_a_clear_state() -> None:
    if STATUS["available"]:
        assert STATUS["devices"] and STATUS["driver"]
        samples = gpu_samples()
        totals = [s["value"] for s in samples if s["name"] == "gpu_memory_total_bytes"]
        assert totals and all(t > 0 for t in totals)
    else:
        assert "NVML" in STATUS["reason"] or "nvidia-ml-py" in STATUS["reason"]
        with pytest.raises(GpuUnavailable):
            gpu_samples()


def test_a_gpu_check_without_telemetry_is_unavailable_not_passed() -> None:
    scenario, _ = load_scenario(ROOT / "tests" / "scenarios" / "tiny.yaml")
    check = Check(
        check="prometheus",
        source="gpu",
        metric="gpu_memory_used_bytes",
        labels={"gpu": "0"},
        agg="max",
        below=1e15,
    )
    ev = Evaluation(
        scenario,
        [],
        {},
        (0.0, 1.0),
        [],
        [],
        None,
        {"available": False, "reason": "NVML unavailable: x"},
    )
    (result,) = evaluate(ev, [check])
    assert not result.passed and result.observed is None
    assert result.reason.startswith(
        "unavailable: GPU telemetry could not be read (NVML unavailable: x)"
    )


def test_memory_pressure_holds_and_releases_or_says_why_not() -> None:
    fault = GpuMemoryPressureFault(kind="gpu.memory_pressure", target="0", share=0.3)
    injector = build(fault, InjectionContext("g1", ""), 0)
    if not STATUS["available"]:
        with pytest.raises(GpuUnavailable, match=r"NVML|CUDA"):
            injector.apply()
        assert injector.revert()["method"] == "nothing held"
        return
    evidence = injector.apply()
    grown = evidence["memory_used_after"] - evidence["memory_used_before"]
    assert grown >= 0.9 * evidence["requested_bytes"], evidence
    assert injector.revert()["method"] == "released (holder stopped)"


@pytest.mark.stack
def test_a_drill_with_gpu_faults_on_a_machine_without_gpus_stops_and_says_why(
    stack: RunningStack, toxi: object, tmp_path: Path
) -> None:
    if STATUS["available"]:
        pytest.skip("this machine has a GPU: the unavailable path does not apply")
    path = tmp_path / "gpu.yaml"
    path.write_text(
        anchored(
            (ROOT / "tests" / "scenarios" / "tiny.yaml").read_text(), ROOT / "tests" / "scenarios"
        ).replace(
            "{kind: toxiproxy.latency, target: vllm-0, latency: 200ms}",
            "{kind: gpu.memory_pressure, target: '0', share: 0.5}",
        )
        + "gpu_telemetry: true\n"
    )
    scenario, doc = load_scenario(path)
    options = RunOptions(
        out_dir=tmp_path / "runs",
        ledger=tmp_path / "ledger.json",
        attach=Attach(gateway=stack.gateway_url, toxiproxy=stack.toxiproxy_url),
    )
    journal = Runner(scenario, doc, options).run().model_dump(mode="json")
    assert journal["status"] == "aborted" and journal["verdict"] == "aborted"
    assert journal["aborted"]["reason"] == "a fault did not land"
    assert "NVML unavailable" in journal["aborted"]["error"]
    assert journal["gpu"] == STATUS
