"""`drills stack down` cleans up after a supervisor that died without stopping its components,
by the process groups it recorded, and never touches a process that merely reuses a recorded pid.
Real processes (sleepers in their own process groups) stand in for the components here: the test
is about our sweep, not about what the components are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from drills.common.system import pid_alive
from stack import control


def _group() -> subprocess.Popen[bytes]:
    """A process-group leader (like an engine) that has a child of its own (like vLLM's core)."""
    code = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "time.sleep(60)"
    )
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def test_down_sweeps_groups_left_by_a_dead_supervisor(tmp_path: Path) -> None:
    leader = _group()
    time.sleep(0.5)
    members = control._group_members(leader.pid)
    assert len(members) == 2  # the leader and its child
    leader.kill()  # the leader dies; its child lives on in the group
    leader.wait()
    orphans = control._group_members(leader.pid)
    assert len(orphans) == 1

    unrelated = subprocess.Popen(["sleep", "60"], start_new_session=True)
    dead_supervisor = subprocess.Popen(["true"])
    dead_supervisor.wait()
    state = {
        "stack": "sound",
        "supervisor_pid": dead_supervisor.pid,
        "components": {
            "vllm-0": {"kind": "engine", "pgid": leader.pid, "argv": [sys.executable, "-m", "x"]},
            # A recorded group whose id now belongs to something else: must be left alone.
            "vllm-1": {"kind": "engine", "pgid": unrelated.pid, "argv": ["/opt/vllm/bin/python"]},
        },
    }
    (tmp_path / "state.json").write_text(json.dumps(state))
    try:
        assert control.down(tmp_path) is True
        time.sleep(0.2)
        assert not any(pid_alive(pid) for pid in orphans)
        assert pid_alive(unrelated.pid)
    finally:
        unrelated.kill()
        unrelated.wait()
        for pid in orphans:
            if pid_alive(pid):
                os.kill(pid, 9)
