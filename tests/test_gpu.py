"""GPU telemetry and memory pressure. On a machine with NVML they read and hold real device
memory; without it (this project's CI machines) both must say so and never count as passed."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from drills.checks import Evaluation, evaluate
from drills.model.expect import Check
from drills.model.faults import GpuMemoryPressureFault
from drills.model.journal import Journal
from drills.model.scenario import load_scenario
from injectors.base import InjectionContext, build
from injectors.gpu import GpuUnavailable, gpu_samples, nvml_status
from tests.conftest import drills_cli, isolated_env

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


def test_a_gpu_drill_without_a_gpu_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """The shipped gpu-memory-pressure drill on this machine: refused at once (exit 2), naming
    the file, line and fault, before the stack is started or reached; its run directory still
    holds a journal and reports saying why, every check "not run". It never passes here."""
    if STATUS["available"]:
        pytest.skip("this machine has a GPU: the refusal does not apply")
    drill = ROOT / "scenarios" / "gpu-memory-pressure.yaml"
    # Attached to a listener of ours: the refusal must come before any call to the stack.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    result = subprocess.run(
        drills_cli(
            "run", str(drill), "--out", str(tmp_path / "runs"), "--gateway", url,
            "--toxiproxy", url,
        ),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
        timeout=60,
    )  # fmt: skip
    with pytest.raises(BlockingIOError):
        listener.accept()  # nobody called the stack
    listener.close()
    assert result.returncode == 2, result.stderr
    (line,) = [x for x in result.stderr.splitlines() if "needs an NVIDIA GPU" in x]
    assert f"{drill}:49 phases[1].inject[0]: gpu.memory_pressure on GPU 0" in line
    assert "(NVML found none: NVML unavailable" in line and "nothing was started" in line
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert line.endswith(f"report: {run_dir / 'index.html'}")
    journal = Journal.read(run_dir)
    assert journal.verdict == "aborted" and journal.aborted
    assert journal.aborted["cause"] == "needs_hardware" and journal.t0 is None
    assert journal.records == [] and journal.faults == []
    assert journal.checks and all(
        not c.passed and c.reason.startswith("not run: gpu.memory_pressure on GPU 0 needs")
        for c in journal.checks
    )
    assert "needs an NVIDIA GPU" in (run_dir / "index.html").read_text()
    assert "ABORTED" in (run_dir / "summary.md").read_text()


def test_the_gpu_drill_validates_and_dry_runs_here(tmp_path: Path) -> None:
    drill = ROOT / "scenarios" / "gpu-memory-pressure.yaml"
    env = isolated_env(tmp_path)
    valid = subprocess.run(
        drills_cli("validate", str(drill)), capture_output=True, text=True, env=env, timeout=60
    )
    assert valid.returncode == 0 and "valid drill" in valid.stdout, valid.stderr
    plan = subprocess.run(
        drills_cli("run", str(drill), "--dry-run"),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert plan.returncode == 0, plan.stderr
    if STATUS["available"]:
        assert "would hold " in plan.stdout and " GiB of GPU 0 (" in plan.stdout
    else:
        assert "CANNOT RUN HERE (a run is refused, exit 2): gpu.memory_pressure on GPU 0" in (
            plan.stdout
        )
