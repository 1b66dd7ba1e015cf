"""Where a running stack keeps its state, and how drills read it.

``STATE_DIR`` (``$DRILLS_STATE_DIR`` or ``~/.local/state/drills/stack``) holds:

- ``state.json``: the supervisor's pid and, per component, its pid, process group, status,
  endpoint, fronting proxy and restart count; rewritten atomically on every change;
- ``events.jsonl``: one line per lifecycle event (started, healthy, exited, restart_scheduled,
  stopped), with time, reason and pid: the record of every restart a drill can read;
- ``stack.yaml``: the config the stack runs with (a copy, so edits to the source do not apply
  to a running stack); ``toxiproxy.json``: the proxies Toxiproxy creates when it (re)starts;
- ``logs/NAME.log``: each component's output.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drills.common.system import state_home

__all__ = ["Event", "StackState", "default_state_dir", "read_events", "read_state", "write_json"]


def default_state_dir() -> Path:
    env = os.environ.get("DRILLS_STATE_DIR")
    return Path(env) if env else state_home() / "stack"


def write_json(path: Path, data: Any) -> None:
    """Write atomically: readers never see a half-written file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


@dataclass(frozen=True)
class Event:
    time: float
    component: str
    event: str
    pid: int | None
    reason: str
    restart_count: int
    delay: float | None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Event:
        return cls(
            time=float(data["time"]),
            component=str(data["component"]),
            event=str(data["event"]),
            pid=data.get("pid"),
            reason=str(data.get("reason", "")),
            restart_count=int(data.get("restart_count", 0)),
            delay=data.get("delay"),
        )


@dataclass(frozen=True)
class StackState:
    data: dict[str, Any]

    @property
    def supervisor_pid(self) -> int:
        return int(self.data["supervisor_pid"])

    @property
    def stack_name(self) -> str:
        return str(self.data["stack"])

    @property
    def components(self) -> dict[str, dict[str, Any]]:
        return dict(self.data.get("components", {}))


def read_state(state_dir: Path) -> StackState | None:
    path = state_dir / "state.json"
    try:
        return StackState(json.loads(path.read_text()))
    except FileNotFoundError:
        return None


def read_events(state_dir: Path, *, component: str | None = None) -> list[Event]:
    """Lifecycle events of the stack in ``state_dir``, oldest first."""
    path = state_dir / "events.jsonl"
    events: list[Event] = []
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return events
    for line in lines:
        if not line.strip():
            continue
        event = Event.from_json(json.loads(line))
        if component is None or event.component == component:
            events.append(event)
    return events
