"""The agent-resume drill on the real stack: `drills gate --twins scenarios/agent-resume.yaml`
on the session's stack. The gateway (where agent tasks run) is killed three times under agent load
and its supervisor brings it back; the load resends each unfinished task with its task_id. On
the sound profile the tasks resume from their checkpoints and the tool server's audit log shows
no message delivered twice; on the twin, unsound-agent (no checkpoints, a fresh idempotency key
per call; its gateway run beside the same tool server under a supervisor of its own, which the
drill's kills hit), resumed tasks start over and deliver their message again."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import RunningStack, gate_drill_and_twin
from tests.helpers import shortened

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
DRILL = ROOT / "scenarios" / "agent-resume.yaml"


def test_tasks_resume_without_repeating_their_message_and_the_twin_repeats_it(
    stack: RunningStack, tmp_path: Path
) -> None:
    sized = shortened(DRILL, tmp_path, baseline="8s", recovery="10s")
    drill, twin = gate_drill_and_twin(sized, stack, tmp_path, profile=True)
    checks = {c["label"]: c for c in drill["checks"]}
    # The three kills landed and the supervisor replaced the gateway each time.
    kills = [f for f in drill["faults"] if f["kind"] == "process.kill"]
    assert len(kills) == 3 and all(k["after"]["ready_at"] for k in kills), kills
    # Tasks were caught mid-way and resumed from a checkpoint, by the gateway's own account too.
    resumed = checks["tasks_resumed during fault"]
    assert resumed["observed"] >= 1, resumed
    assert any((r["resumed_from"] or 0) > 0 for r in drill["records"] if r["attempt"] != 1)
    effects = checks["tasks_duplicate_effects during fault"]
    assert effects["observed"] == 0 and effects["samples"] > 0, effects
    # The twin: the same kills, on its own gateway (restarted by its own supervisor), and
    # resumed tasks whose message went out again.
    assert sorted(twin["twin"]["failed"]) == [
        "stack_lint",
        "tasks_duplicate_effects during fault",
    ], twin["twin"]
    assert "beside" in twin["twin"]["stack"], twin["twin"]["stack"]
    twin_kills = [f for f in twin["faults"] if f["kind"] == "process.kill"]
    assert all(k["after"]["ready_at"] for k in twin_kills), twin_kills
    assert {k["evidence"]["pid"] for k in twin_kills}.isdisjoint(
        {k["evidence"]["pid"] for k in kills}
    )
    repeated = Counter(r["task_id"] for r in twin["records"] if r["task_id"])
    assert max(repeated.values()) > 1
    assert not any(r["resumed_from"] for r in twin["records"])  # nothing to resume from
