"""`drills gate`: a set of drills, one JUnit file and one summary; non-zero on any failed check.
On the unsound policy the gate fails and names the checks; a bad file stops it before anything
runs."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from stack.config import load_stack_config
from tests.conftest import PROFILES, LiveGateway, RunningStack, drills_cli, isolated_env

ROOT = Path(__file__).resolve().parent.parent
GATE = ROOT / "tests" / "scenarios" / "gate-latency.yaml"
TINY = ROOT / "tests" / "scenarios" / "tiny.yaml"


def gate(
    tmp_path: Path, gateway: str, stack: RunningStack, config: Path, *paths: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        drills_cli(
            "gate",
            *map(str, paths),
            "--gateway",
            gateway,
            "--toxiproxy",
            stack.toxiproxy_url,
            "--stack-config",
            str(config),
            "--out",
            str(tmp_path / "gate"),
        ),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
        timeout=600,
    )


@pytest.mark.stack
def test_gate_passes_on_the_sound_stack(stack: RunningStack, toxi: object, tmp_path: Path) -> None:
    result = gate(tmp_path, stack.gateway_url, stack, stack.config_path, GATE, TINY)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED      gate-latency" in result.stdout and "PASSED      tiny" in result.stdout
    root = ET.parse(tmp_path / "gate" / "junit.xml").getroot()
    assert root.tag == "testsuites" and root.get("failures") == "0"
    assert [s.get("name") for s in root] == ["drill:gate-latency", "drill:tiny"]
    assert int(root.get("tests", "0")) == (3 + 1) + (2 + 1)  # a case per check + reverts
    summary = (tmp_path / "gate" / "summary.md").read_text()
    assert "Resilience gate: **PASSED** (2/2 drills passed)" in summary
    assert stack.toxics() == []


@pytest.mark.stack
def test_gate_fails_on_the_unsound_policy_naming_the_checks(
    stack: RunningStack,
    gateway_factory: Callable[..., LiveGateway],
    toxi: object,
    tmp_path: Path,
) -> None:
    unsound = load_stack_config("unsound").gateway.model_dump(mode="json")
    gw = gateway_factory(backup=False, **{k: v for k, v in unsound.items() if k != "port"})
    result = gate(tmp_path, gw.url, stack, PROFILES / "unsound.yaml", GATE)
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "FAILED      gate-latency" in out
    assert "FAIL fallback_rate during fault: observed 0.000, expected > 0.5" in out
    assert "FAIL stack_lint: observed 18 error(s), 1 warning(s)" in out
    assert "runbook: ../../scenarios/runbooks/llm-latency.md#fallback" in out
    root = ET.parse(tmp_path / "gate" / "junit.xml").getroot()
    failed = {c.get("name") for c in root.iter("testcase") if c.find("failure") is not None}
    assert failed == {"fallback_rate during fault", "stack_lint"}
    summary = (tmp_path / "gate" / "summary.md").read_text()
    assert "**FAILED** (0/1 drills passed)" in summary and "[request-covers-tiers]" in summary
    assert stack.toxics() == []


def test_a_bad_file_stops_the_gate_before_anything_runs(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(TINY.read_text().replace("duration: 4s", "duration: soon", 1))
    result = subprocess.run(
        drills_cli(
            "gate",
            str(TINY),
            str(bad),
            "--gateway",
            "http://127.0.0.1:1",
            "--toxiproxy",
            "http://127.0.0.1:1",
            "--out",
            str(tmp_path / "gate"),
        ),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
        timeout=60,
    )
    assert result.returncode == 2
    assert f"{bad}:" in result.stderr and "phases[0].duration" in result.stderr
    assert not (tmp_path / "gate").exists()


def test_gate_collects_drills_from_directories_and_dry_runs(tmp_path: Path) -> None:
    result = subprocess.run(
        drills_cli("gate", str(ROOT / "scenarios"), "--dry-run"),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path, KUBECONFIG=str(tmp_path / "no-such-kubeconfig")),
        cwd=tmp_path,
        timeout=60,
    )
    out = result.stdout
    assert "drill inference-latency:" in out and "drill gpu-pod-loss:" in out
    assert "gameday-quarterly" not in out  # a plan, not a drill
    # The Kubernetes variant reads its cluster to list what it would hit; with no kubeconfig
    # here it is refused, and the gate's dry run says so with exit code 2.
    assert "drill gpu-pod-loss-k8s:" in out and "cannot read the kubeconfig" in out
    assert result.returncode == 2, result.stderr
    assert not (tmp_path / "gate").exists()


def test_a_gates_children_are_attached_as_the_gate_was(tmp_path: Path) -> None:
    """With --concurrency, each drill runs in a child `drills run`: it gets every attach flag
    the gate was given (a URL for --prometheus), and none it was not."""
    from drills.engine.options import RunOptions
    from drills.gate import _child_args
    from drills.model.scenario import Attach, PrometheusEndpoint

    attach = Attach.model_construct(
        gateway="http://gw:4000", prometheus=PrometheusEndpoint(url="http://prom:9090")
    )
    args = _child_args(RunOptions(out_dir=tmp_path, attach=attach), None)
    assert args == ["--gateway", "http://gw:4000", "--prometheus", "http://prom:9090"]


def unsure_tiny_gate(
    stack: RunningStack, tmp_path: Path, policy: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    """The gate on the tiny drill at 99.9%, where its few requests a phase leave its checks
    unsure, with ``--inconclusive policy``."""
    return subprocess.run(
        drills_cli(
            "gate",
            str(TINY),
            *stack.attach_args(),
            "--confidence",
            "0.999",
            "--inconclusive",
            policy,
            *extra,
            "--out",
            str(tmp_path / "gate"),
        ),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
        timeout=600,
    )


@pytest.mark.stack
def test_a_gate_that_reruns_an_unsure_drill_judges_it_over_its_runs(
    stack: RunningStack, toxi: object, tmp_path: Path
) -> None:
    """The same unsure check (no error among at most 8 requests, at 99.9%): with
    --inconclusive rerun the gate runs the tiny drill again on the same stack, judges the
    error rate on the requests of its runs together (no error among 12 or more: Wilson's
    upper bound 0.47 at 99.9%, below 0.5), and passes, sure; the JUnit file and the
    repetitions' report say what it decided on."""
    result = unsure_tiny_gate(stack, tmp_path, "rerun", "--rerun-max", "4")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "PASSED" in result.stdout and "UNSURE" not in result.stdout, result.stdout
    [repeated] = (tmp_path / "gate" / "runs").glob("*/tiny-repeat-*/repeat.json")
    rep = json.loads(repeated.read_text())
    # Each run judges 4 to 8 requests a phase, by how fast the machine answers (5 on the
    # 2-core development machine: 3 runs, 0 errors in 16, 99.9% CI 0.000 to 0.404).
    runs = len(rep["runs"])
    assert 2 <= runs <= 4, rep["stopped"]
    assert rep["stopped"] == f"every check was conclusive after {runs} run(s)"
    assert rep["verdict"] == "passed" and rep["conclusive"]
    by_label = {c["label"]: c for c in rep["checks"]}
    fault = by_label["error_rate during fault"]
    assert fault["how"] == "pooled"
    assert [e["conclusive"] for e in fault["each"]] == [False] * runs  # alone, none was sure
    assert fault["result"]["conclusive"] is True
    assert fault["result"]["samples"] == sum(e["samples"] for e in fault["each"])
    for name in ("index.html", "summary.md"):
        assert (repeated.parent / name).exists()
    # The gate's JUnit case carries the check judged over both runs.
    root = ET.parse(tmp_path / "gate" / "junit.xml").getroot()
    drill = next(s for s in root if s.get("name") == "drill:tiny")
    assert drill.get("failures") == "0"
    assert not [s for s in root if s.get("name") == "gate:inconclusive"]
    assert stack.toxics() == []


@pytest.mark.stack
def test_a_gate_that_must_be_sure_fails_on_a_check_that_passed_by_luck(
    stack: RunningStack, toxi: object, tmp_path: Path
) -> None:
    """The tiny drill judges a handful of requests per phase: no error among at most 8 is
    'below 0.5' at 95% (Wilson's upper bound 0.32 at 8), not at 99.9% (0.58). With
    --inconclusive fail the gate fails on it, names the check and its interval, and says so
    in JUnit; each check still passed as observed."""
    result = unsure_tiny_gate(stack, tmp_path, "fail")
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "INCONCLUSIVE tiny" in out, out
    assert "UNSURE error_rate during fault: 99.9% CI 0.000 to 0." in out, out
    assert "not conclusive, too few requests to be sure" in out
    root = ET.parse(tmp_path / "gate" / "junit.xml").getroot()
    (unsure,) = [s for s in root if s.get("name") == "gate:inconclusive"]
    cases = {c.get("name") for c in unsure}
    assert "error_rate during fault is sure" in cases, cases
    assert all(c.find("failure") is not None for c in unsure)
    drill = next(s for s in root if s.get("name") == "drill:tiny")
    assert drill.get("failures") == "0"  # every check passed as observed
    assert stack.toxics() == []
