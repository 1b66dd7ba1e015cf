"""Small facts about this machine that several parts need: is a process alive, where state goes."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["group_members", "pid_alive", "state_home"]


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
