"""What a run tells whoever drives it, as it happens.

``RunOptions.on_event`` receives a ``RunEvent`` for each thing the runner does: its timeline
events (``phase_start``, ``phase_end``, ``fault_applied``, ``fault_failed``, ``fault_reverted``,
``revert_failed``, ``aborted``, ``interrupted``; they also go in the journal's timeline), the
live status line (``progress``, about once a second) and each fault of an earlier run removed
before this one started (``swept``). The CLI prints the lines meant for a person; a game day
records the timeline events in its own timeline when they happen.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FOR_PEOPLE", "TIMELINE", "EventHandler", "RunEvent"]

TIMELINE = frozenset(
    {
        "phase_start",
        "phase_end",
        "fault_applied",
        "fault_failed",
        "fault_reverted",
        "revert_failed",
        "aborted",
        "interrupted",
    }
)
FOR_PEOPLE = frozenset({"progress", "swept"})
"""Events whose message is a line for a terminal (the timeline events are logged as well)."""


@dataclass(frozen=True)
class RunEvent:
    kind: str
    """One of ``TIMELINE``, ``progress`` or ``swept``."""
    message: str
    """One line for a person."""
    time: float
    detail: Mapping[str, Any] = field(default_factory=dict)
    """The timeline event's detail (phase, fault index, kind, target, error, ...)."""


EventHandler = Callable[[RunEvent], None]
