"""Small facts about this machine that several parts need: is a process alive, where state goes."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from drills.common.errors import RevertError

__all__ = [
    "group_members",
    "pid_alive",
    "revert_helper_entry",
    "start_time",
    "state_home",
    "stop_helper",
]


def pid_alive(pid: int | None) -> bool:
    """Whether ``pid`` names a running process (a zombie counts as dead)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(") ", 1)[1][0] != "Z"


def state_home() -> Path:
    """``$XDG_STATE_HOME/drills`` or ``~/.local/state/drills``."""
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return base / "drills"


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``, sorted."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return sorted(members)


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), to tell it from a later process that
    reuses the number; ``None`` when it is gone or a zombie (exited, not yet reaped)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        return None
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def stop_helper(pid: int | None, started: int | None, *, timeout: float = 20.0) -> bool:
    """SIGTERM a helper process we started (checked by its start time) and wait until it is
    gone; ``False`` when there was nothing to stop. Raises ``TimeoutError`` if it stays."""
    if not pid or start_time(int(pid)) != started:
        return False
    try:
        os.kill(int(pid), signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while start_time(int(pid)) == started:
        if time.monotonic() > deadline:
            raise TimeoutError(f"pid {pid} did not exit {timeout:g}s after SIGTERM")
        time.sleep(0.05)
    return True


def revert_helper_entry(
    entry: dict[str, Any], what: str, stopped: str, gone: str
) -> dict[str, Any]:
    """Revert a fault held by a helper process from its ledger entry (``pid``, ``starttime``):
    stop it; ``RevertError`` naming ``what`` if it will not go."""

    try:
        done = stop_helper(entry.get("pid"), entry.get("starttime"))
    except TimeoutError:
        raise RevertError(f"{what} (pid {entry.get('pid')}) did not exit") from None
    return {"method": stopped if done else gone}
