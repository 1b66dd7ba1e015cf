"""Process faults on the embedded stack: kill a replica under load (the GPU pod loss drill, in
its process variant) and freeze a process (the hung worker). Real processes, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from drills.common.errors import InjectionFailed
from drills.engine.ledger import Ledger
from drills.model.faults import ProcessFreezeFault
from injectors.base import InjectionContext, build
from injectors.process import _stat
from stack import control
from tests.conftest import RunningStack, processes_naming, run_embedded, run_twin
from tests.helpers import assert_ended_at_replacement, drill_account, twin_account

ROOT = Path(__file__).resolve().parent.parent
POD_LOSS = ROOT / "tests" / "scenarios" / "short-pod-loss.yaml"


def wait_healthy(stack: RunningStack, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not control.status(stack.state_dir).healthy:
        assert time.monotonic() < deadline, "the stack did not become healthy again"
        time.sleep(1)


@pytest.fixture
def healthy_after(stack: RunningStack) -> Iterator[None]:
    wait_healthy(stack)
    yield
    wait_healthy(stack)  # the next test needs both replicas back


# -- a real process of our own, for the freeze mechanics ---------------------------------------


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """A process group of two sleeping processes registered as component ``worker`` in a
    stack state directory of its own."""
    proc = subprocess.Popen(["sh", "-c", "sleep 300 & exec sleep 300"], start_new_session=True)
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.json").write_text(
        json.dumps(
            {
                "stack": "t",
                "supervisor_pid": os.getpid(),
                "components": {"worker": {"pid": proc.pid, "pgid": proc.pid, "status": "healthy"}},
            }
        )
    )
    time.sleep(0.2)
    yield state, proc
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_freeze_stops_the_whole_group_and_revert_thaws_it(
    sleeper: tuple[Path, subprocess.Popen[bytes]],
) -> None:
    state, _ = sleeper
    fault = ProcessFreezeFault(kind="process.freeze", target="worker")
    injector = build(fault, InjectionContext("r1", "", None, state), 0)
    evidence = injector.apply()
    assert len(evidence["members"]) == 2
    assert set(evidence["states"].values()) == {"T"}
    assert all((_stat(m) or ("?", 0))[0] == "T" for m in evidence["members"])
    outcome = injector.revert()
    assert outcome["method"] == "thawed (SIGCONT)"
    # Thawed: no member is stopped any more (each is running or back asleep).
    assert all((_stat(m) or ("?", 0))[0] not in ("T", "t") for m in evidence["members"])
    assert injector.revert()["method"] == "thawed (SIGCONT)"  # twice is harmless


def test_a_frozen_process_left_by_a_crashed_run_is_thawed_by_the_sweep(
    sleeper: tuple[Path, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    state, proc = sleeper
    injector = build(
        ProcessFreezeFault(kind="process.freeze", target="worker"),
        InjectionContext("r2", "", None, state),
        0,
    )
    injector.apply()
    # The run that froze it dies (its ledger entry names a pid that no longer runs).
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    ledger = Ledger(tmp_path / "ledger.json")
    ledger.record("r2-0", injector.ledger_entry())
    data = json.loads(ledger.path.read_text())
    data["r2-0"]["pid"] = dead.pid
    ledger.path.write_text(json.dumps(data))
    assert _stat(proc.pid)[0] == "T"
    removed = ledger.sweep()
    assert [r["method"] for r in removed] == ["thawed (SIGCONT)"]
    # Thawed: no longer stopped (running for a moment after SIGCONT, or back asleep).
    assert _stat(proc.pid)[0] not in ("T", "t") and ledger.entries() == {}


def test_a_selector_that_matches_nothing_fails_the_fault(
    sleeper: tuple[Path, subprocess.Popen[bytes]],
) -> None:
    state, _ = sleeper
    injector = build(
        ProcessFreezeFault(kind="process.freeze", target="vllm-9"),
        InjectionContext("r3", "", None, state),
        0,
    )
    with pytest.raises(
        InjectionFailed, match="'vllm-9' matches no component; the stack has worker"
    ):
        injector.apply()


# -- the drill, against the real stack ---------------------------------------------------------


@pytest.mark.stack
def test_pod_loss_drill_passes_on_the_sound_stack(
    stack: RunningStack, toxi: object, healthy_after: None, tmp_path: Path
) -> None:
    before = control.status(stack.state_dir)
    old_pid = next(c for c in before.components if c.name == "vllm-0").pid
    journal = run_embedded(POD_LOSS, stack, tmp_path)
    assert journal["verdict"] == "passed", drill_account(journal)
    (kill,) = journal["faults"]
    assert kill["evidence"]["pid"] == old_pid and kill["evidence"]["signal"] == "SIGKILL"
    after = kill["after"]
    assert after["replacement_pid"] and after["replacement_pid"] != old_pid
    assert kill["applied_at"] < after["replacement_started_at"] < after["ready_at"]
    assert "killed by signal SIGKILL" in after["exits"][0]
    checks = {c["label"]: c for c in journal["checks"]}
    assert checks["requests_lost vllm-0"]["observed"] == 0
    assert checks["requests_lost vllm-0"]["samples"] > 5
    ready = checks["replacement_ready_within vllm-0"]["observed"]
    assert 5 < ready < 100
    # until: replaced: the fault phase ended once the supervisor reported the replacement
    # healthy, not at its 100 s.
    assert_ended_at_replacement(journal, after["ready_at"])
    # The stack's monitoring, started for the drill, saw it: the engine-down alert fired
    # (5 s of 'for' + a 1 s scrape and evaluation) and paged, before the replacement was ready.
    (row,) = journal["detection"]
    fired = checks["alert_fired LLMEngineDown during fault"]["observed"]
    paged = checks["alert_paged LLMEngineDown during fault"]["observed"]
    assert 5 <= fired <= paged < ready, (fired, paged, ready)
    firing = [s for s in row["signs"] if s["what"].startswith("LLMEngineDown{")]
    assert firing and all(s["runbook"].endswith("gpu-pod-loss.md#replacement") for s in firing)
    assert "(as paged)" in checks["alert_runbook LLM.* during fault"]["reason"]
    # The engine's own metrics showed it first: its endpoint stopped answering the harness's
    # scrapes (every second) before the alert's 5 s of 'for' were up.
    engine = [s for s in row["signs"] if s["layer"] == "engine, its metrics"]
    (killed,) = [s for s in engine if s["what"].startswith("vllm-0: ")]
    assert "stopped answering" in killed["what"] and killed["after"] < fired, row
    # That monitoring was the run's: started for it in the run's folder, and stopped with it.
    home = Path(journal["run_dir"]) / "monitoring"
    assert (home / "prometheus.yml").exists() and (home / "alertmanager.yml").exists()
    assert processes_naming(home) == []


@pytest.mark.stack
def test_pod_loss_drill_on_its_single_replica_twin_fails_exactly_the_checks_it_names(
    stack: RunningStack, toxi: object, healthy_after: None, tmp_path: Path
) -> None:
    # The twin's gateway (one replica, no fallback) runs beside the session's stack; the kill
    # is of the session's engine vllm-0, the only one the twin routes to.
    result, journals = run_twin(POD_LOSS, stack, tmp_path, "unsound-single")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    (journal,) = journals
    assert journal["twin"]["held"], twin_account(journal)
    checks = {c["label"]: c for c in journal["checks"]}
    failed = {label for label, c in checks.items() if not c["passed"]}
    assert failed == {"error_rate during fault", "requests_lost vllm-0"}, failed
    assert checks["requests_lost vllm-0"]["observed"] >= 5
    # The replacement itself came up: what failed is the stack carrying on without it.
    assert checks["replacement_ready_within vllm-0"]["passed"]
    assert_ended_at_replacement(journal, journal["faults"][0]["after"]["ready_at"])
    # The stack's monitoring, started for the twin too, scraped the twin's gateway (beside the
    # stack), not the stack's own: its error-rate alert saw the twin's errors and paged.
    (row,) = journal["detection"]
    pages = [s["what"] for s in row["signs"] if s["layer"] == "page" and s["after"] is not None]
    assert "LLMErrorRateHigh reached the pager (receiver pager)" in pages, row
    # No --prometheus, no --pager: `drills run` on the embedded stack started the stack's own
    # Prometheus and Alertmanager for the run, said so, and stopped them.
    assert "starting the stack's monitoring" in result.stdout + result.stderr
    home = Path(journal["run_dir"]) / "monitoring"
    assert (home / "prometheus.yml").exists() and (home / "alertmanager.yml").exists()
    assert processes_naming(home) == []
