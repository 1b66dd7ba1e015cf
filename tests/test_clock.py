"""Phases in time: ``until: replaced`` ends a phase once its kills' targets are back, and the
phases after it move up with their faults. The runner's use of it on real kills is in
tests/test_process_faults.py, tests/test_docker_stack.py and tests/test_kubernetes_faults.py."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from drills.engine.clock import PhaseClock, replaced_at
from drills.engine.faults import FaultRun
from drills.model.scenario import Phase, load_scenario
from tests.helpers import problems

ROOT = Path(__file__).resolve().parent.parent
LATENCY = (ROOT / "scenarios" / "inference-latency.yaml").read_text()


class Kill:
    """An injector of a kill whose target comes back at ``back`` (``None``: not yet)."""

    def __init__(self, kind: str = "process.kill", back: float | None = None) -> None:
        self.kind, self.target, self.back = kind, "vllm-0", back

    def ledger_entry(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.target}

    def apply(self) -> dict[str, Any]:
        return {"applied_at": 1.0}

    def revert(self) -> dict[str, Any]:
        return {"method": "nothing to revert"}

    def replaced_at(self) -> float | None:
        if isinstance(self.back, Exception):
            raise self.back
        return self.back


class Latency(Kill):
    """A fault that is no kill: a phase never waits for it."""

    def __init__(self) -> None:
        super().__init__("toxiproxy.latency", None)


def phases() -> list[Phase]:
    return [
        Phase(name="baseline", duration="10s"),
        Phase(name="fault", duration="100s", until="replaced"),
        Phase(name="recovery", duration="20s"),
    ]


def run_of(injector: Any, phase: str, offset: float, end: float) -> FaultRun:
    return FaultRun(0, phase, offset, end, injector, {})


def test_a_phase_that_ends_early_moves_the_later_phases_and_their_faults_up() -> None:
    clock = PhaseClock.of(phases())
    assert clock.total == 130 and clock.phase_at(10) == "fault"
    kill = run_of(Kill(), "fault", 10, 110)
    later = run_of(Latency(), "recovery", 115, 125)
    cut = clock.end_early("fault", 62.0, [kill, later])
    assert cut == 48.0
    assert clock.windows == {"baseline": (0, 10), "fault": (10, 62.0), "recovery": (62.0, 82.0)}
    assert clock.planned["fault"] == (10, 110) and clock.cut == {"fault": 48.0}
    assert clock.total == 82.0 and clock.phase_at(62.5) == "recovery"
    assert (kill.offset, kill.end) == (10, 62.0)  # closed now: reverted on the next step
    assert (later.offset, later.end) == (67.0, 77.0)  # same length, moved up


def test_a_condition_met_at_the_planned_end_changes_nothing() -> None:
    clock = PhaseClock.of(phases())
    assert clock.end_early("fault", 109.8, []) == 0.0
    assert clock.windows == clock.planned and clock.cut == {}


def test_the_phase_waits_for_every_kill_it_injected() -> None:
    (_, fault, _) = phases()
    first, second = run_of(Kill(back=40.0), "fault", 10, 110), run_of(Kill(), "fault", 10, 110)
    first.applied_at = second.applied_at = 11.0
    assert replaced_at(fault, [first, second]) is None  # the second is not back
    second.injector.back = 55.0
    assert replaced_at(fault, [first, second]) == 55.0
    # A latency fault beside them is not waited for; one not applied yet holds the phase.
    slow = run_of(Latency(), "fault", 10, 110)
    slow.applied_at = 11.0
    assert replaced_at(fault, [first, second, slow]) == 55.0
    first.applied_at = None
    assert replaced_at(fault, [first, second]) is None
    # An injector that cannot tell holds the phase to its full duration; it does not crash.
    first.applied_at, first.injector.back = 11.0, RuntimeError("daemon gone")
    assert replaced_at(fault, [first, second]) is None
    # A phase without until never ends early.
    assert replaced_at(Phase(name="fault", duration="100s"), [second]) is None


def test_until_replaced_without_a_kill_is_refused_at_its_line(tmp_path: Path) -> None:
    text = LATENCY.replace(
        "    duration: 30s\n    inject:", "    duration: 30s\n    until: replaced\n    inject:", 1
    )
    assert "until: replaced" in text
    path = tmp_path / "drill.yaml"
    path.write_text(text)
    for folder in ("prompts", "runbooks"):
        shutil.copytree(ROOT / "scenarios" / folder, tmp_path / folder)
    [problem] = problems(load_scenario, path)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "until: replaced" in ln)
    assert f"{path}:{line} phases[1].until:" in problem, problem
    assert (
        "no kill fault" in problem and "process.kill" in problem and "(got 'replaced')" in problem
    )


@pytest.mark.parametrize("value", ["ready", "replaced "])
def test_until_takes_one_word(tmp_path: Path, value: str) -> None:
    text = LATENCY.replace(
        "    duration: 30s\n    inject:", f"    duration: 30s\n    until: '{value}'\n    inject:", 1
    )
    path = tmp_path / "drill.yaml"
    path.write_text(text)
    for folder in ("prompts", "runbooks"):
        shutil.copytree(ROOT / "scenarios" / folder, tmp_path / folder)
    [problem] = problems(load_scenario, path)
    assert "phases[1].until" in problem and "replaced" in problem, problem
