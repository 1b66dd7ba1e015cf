"""The game day's journal (``gameday.json``): what the day did, step by step, as the contract
between ``drills gameday`` and its report, like a drill's ``Journal``. Typed and versioned: the
day writes it through ``DayJournal`` (a field it does not know is an error there, not a key a
renderer misses), and ``DayJournal.load`` reads every format written so far.

- format 1 (until this model): the same shape, written as a plain dict;
- format 2: written through this model (every field present, ``null`` where unset).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from drills.model.journal import Detection
from drills.model.score import Score

__all__ = [
    "DAY_FORMAT",
    "DayCheck",
    "DayEvent",
    "DayJournal",
    "DayNote",
    "DayStep",
    "RunbookCoverage",
    "RunbookStepCoverage",
    "Skipped",
]

DAY_FORMAT = 2


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class DayCheck(_Model):
    """One check of a drill the day ran, as the day's report lists it."""

    label: str
    passed: bool
    observed_text: str
    expected: str
    runbook: str | None = None


class DayStep(_Model):
    """One step of the plan as it ran: a note to the room, a checkpoint (asked, answered) or a
    drill (its verdict, checks, detection and score, its own run directory)."""

    index: int = 0
    kind: Literal["note", "checkpoint", "drill"]
    started_at: float = 0.0
    ended_at: float | None = None
    text: str | None = None
    """note: what was said to the room."""
    # A checkpoint's:
    id: str | None = None
    ask: str | None = None
    who: str | None = None
    answer: str | None = None
    """``yes``/``no``, or the text of an ``answer`` checkpoint; ``None``: no answer."""
    by: str | None = None
    source: str | None = None
    """How the answer came: ``rehearsal``, ``terminal``, ``timeout``, ``end-of-input``."""
    confirmed: bool | None = None
    answered_at: float | None = None
    runbook: str | None = None
    """A checkpoint's runbook step, or a drill's runbook."""
    # A drill's:
    drill: str | None = None
    file: str | None = None
    title: str | None = None
    verdict: str | None = None
    """The drill's verdict, ``aborted`` by the kill switch, or ``error`` (it could not run)."""
    run_dir: str | None = None
    run_id: str | None = None
    checks: list[DayCheck] = Field(default_factory=list)
    kill_switch: bool | None = None
    abort_reason: str | None = None
    error: str | None = None
    detection: list[Detection] = Field(default_factory=list)
    score: Score | None = None


class Skipped(_Model):
    """A step the day stopped before."""

    index: int
    kind: str
    what: str | None = None


class DayNote(_Model):
    """An observer's note (``drills note``)."""

    time: float
    by: str | None = None
    text: str
    source: str = "drills note"


class DayEvent(BaseModel):
    """One moment of the day's timeline: the plan's notes and checkpoints, each drill's phases
    and faults, the observers' notes. Its other fields are the event's details (a fault's
    ``kind`` and ``target``, a checkpoint's ``answer``), by event."""

    model_config = ConfigDict(extra="allow")

    time: float
    source: str
    event: str

    def detail(self, name: str) -> Any:
        return (self.model_extra or {}).get(name)


class RunbookStepCoverage(_Model):
    anchor: str
    title: str
    exercised: bool
    """A check linked to it was evaluated, or a checkpoint linked to it was answered."""
    by: list[dict[str, Any]] = Field(default_factory=list)
    """What exercised it: ``{by: "drill: check label", passed: bool}``."""


class RunbookCoverage(_Model):
    """One runbook the day's drills and checkpoints link to, step by step."""

    runbook: str
    steps: list[RunbookStepCoverage] = Field(default_factory=list)


class DayJournal(_Model):
    """The game day, as ``gameday.json`` keeps it."""

    format: Literal[2] = 2
    gameday: str
    title: str
    description: str | None = None
    facilitator: str | None = None
    id: str | None = None
    plan_path: str | None = None
    status: str
    """``completed``, ``stopped`` (a checkpoint or a drill stopped the day), ``aborted``
    (the kill switch) or ``interrupted``."""
    stop_reason: str | None = None
    verdict: str
    score: Score | None = None
    started_at: float
    ended_at: float
    steps: list[DayStep] = Field(default_factory=list)
    skipped: list[Skipped] = Field(default_factory=list)
    notes: list[DayNote] = Field(default_factory=list)
    timeline: list[DayEvent] = Field(default_factory=list)
    runbooks: list[RunbookCoverage] = Field(default_factory=list)

    def drills(self) -> list[DayStep]:
        return [s for s in self.steps if s.kind == "drill"]

    def checkpoints(self) -> list[DayStep]:
        return [s for s in self.steps if s.kind == "checkpoint"]

    @classmethod
    def of(cls, data: dict[str, Any]) -> DayJournal:
        """``data`` as a journal, whatever format it was written in."""
        if data.get("format", 1) == 1:
            data = {**data, "format": DAY_FORMAT}
        return cls.model_validate(data)

    @classmethod
    def load(cls, path: Path) -> DayJournal:
        """The journal at ``path`` (``gameday.json``, or its directory)."""
        path = path / "gameday.json" if path.is_dir() else path
        return cls.of(json.loads(path.read_text()))

    def write(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=1))
