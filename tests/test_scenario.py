"""Scenario files: the shipped ones validate; bad ones are refused with file, line, field path,
value and what is allowed, by `drills validate` too (exit 2), touching nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from drills.scenario import load_scenario
from tests.helpers import problems

ROOT = Path(__file__).resolve().parent.parent
# Drill scenarios (game-day plans and their answers live beside them; tested in test_gameday).
SHIPPED = sorted(
    p for p in (ROOT / "scenarios").glob("*.yaml") if not p.name.startswith("gameday-")
)
LATENCY = (ROOT / "scenarios" / "inference-latency.yaml").read_text()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "drill.yaml"
    path.write_text(text)
    (tmp_path / "prompts").mkdir(exist_ok=True)
    return path


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_scenarios_validate(path: Path) -> None:
    scenario, _ = load_scenario(path)
    assert scenario.expect and scenario.phases


def test_unknown_fault_kind_lists_the_known_ones(tmp_path: Path) -> None:
    text = LATENCY.replace(
        "{kind: toxiproxy.latency, target: vllm-1", "{kind: toxiproxy.lag, target: vllm-1"
    )
    path = write(tmp_path, text)
    found = problems(load_scenario, path)
    assert any(
        p.startswith(f"{path}:{line_of(text, 'toxiproxy.lag')} phases[1].inject[1]")
        and "toxiproxy.lag" in p
        and "toxiproxy.latency" in p
        and "toxiproxy.limit_data" in p
        for p in found
    ), found


def test_duration_without_unit(tmp_path: Path) -> None:
    text = LATENCY.replace("target: vllm-0, latency: 3s}", "target: vllm-0, latency: 3}")
    path = write(tmp_path, text)
    [problem] = problems(load_scenario, path)
    assert f":{line_of(text, 'latency: 3}')} phases[1].inject[0].latency:" in problem
    assert "a duration needs a unit" in problem and "(got 3)" in problem


def test_fault_outside_its_phase(tmp_path: Path) -> None:
    # Cross-field checks run once every field is valid on its own.
    text = LATENCY.replace("target: backup, latency: 3s}", "target: backup, latency: 3s, at: 40s}")
    path = write(tmp_path, text)
    [problem] = problems(load_scenario, path)
    assert (
        f":{line_of(text, 'at: 40s')} phases[1].inject[2].at: starts after its phase ends"
        in problem
    )


def test_fault_on_a_hop_the_stack_does_not_have(tmp_path: Path) -> None:
    text = LATENCY.replace("target: backup, latency: 3s", "target: vllm-7, latency: 3s")
    path = write(tmp_path, text)
    [problem] = problems(load_scenario, path)
    assert problem.startswith(f"{path}:{line_of(text, 'vllm-7')} phases[1].inject[2].target:")
    assert "the stack has no hop 'vllm-7'; expected one of: vllm-0, vllm-1, backup" in problem


def test_check_problems_name_the_check(tmp_path: Path) -> None:
    text = LATENCY.replace(
        "{check: e2e.p99, during: fault, below: 15s", "{check: e2e.p98, during: fault, below: 15s"
    )
    path = write(tmp_path, text)
    [problem] = problems(load_scenario, path)
    assert f":{line_of(text, 'e2e.p98')} expect[4]: unknown check 'e2e.p98'" in problem
    assert "expected one of: ttft.pNN, itl.pNN, e2e.pNN, error_rate" in problem
    text = LATENCY.replace(
        "{check: error_rate, during: recovery, below: 0.05",
        "{check: error_rate, during: later, below: 0.05",
    )
    [problem] = problems(load_scenario, write(tmp_path, text))
    assert (
        "expect[7].during: no phase of that name; expected one of: baseline, fault, recovery"
        in problem
    )
    assert "(got 'later')" in problem


def test_unknown_field_in_load(tmp_path: Path) -> None:
    text = LATENCY.replace("  max_tokens: 8", "  max_token: 8")
    path = write(tmp_path, text)
    [problem] = problems(load_scenario, path)
    assert f":{line_of(text, 'max_token: 8')} load.max_token: unknown field; allowed:" in problem


def test_validate_cli_exit_codes(tmp_path: Path) -> None:
    good = subprocess.run(
        [sys.executable, "-m", "drills.cli", "validate", *map(str, SHIPPED)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert good.returncode == 0, good.stderr
    bad = write(tmp_path, LATENCY.replace("duration: 30s", "duration: soon", 1))
    result = subprocess.run(
        [sys.executable, "-m", "drills.cli", "validate", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "phases[1].duration: invalid duration 'soon'" in result.stderr
    assert "Traceback" not in result.stderr
