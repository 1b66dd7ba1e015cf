"""The resilience score: one number from 0 to 100 for a run of a drill, and for a game day.

A run's score is the share of its checks' weight that passed::

    score = 100 * sum(weight * credit) / sum(weight)

- ``weight``: the check's ``severity``, ``critical`` 3 (the default) or ``warning`` 1;
- ``credit``: 1 for a pass, 0.5 for a pass that is not conclusive (another run could turn it),
  0 for a failure.

A run aborted by its abort conditions scores 0: the stack degraded past what the drill allows.
A run that says nothing about the stack (interrupted, stopped by the kill switch, or failed
for the harness's own reasons: a fault that could not be applied or reverted, a load that fell
short) has no score. A game day's score is its drills' scores weighted by their checks' weight.

A score fades while a drill is not run again: ``drills history`` shows it halved for every
``HALF_LIFE_DAYS`` since the run, so that a drill last passed a quarter ago does not look as
sure as one passed this morning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

__all__ = [
    "HALF_LIFE_DAYS",
    "UNSURE_CREDIT",
    "WEIGHTS",
    "Judged",
    "Score",
    "Severity",
    "combined",
    "faded",
    "score_of",
]

Severity = Literal["critical", "warning"]
WEIGHTS: dict[str, float] = {"critical": 3.0, "warning": 1.0}
UNSURE_CREDIT = 0.5
HALF_LIFE_DAYS = 30.0


class Score(BaseModel):
    """A run's (or a game day's) resilience score and what it is made of."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float
    """0 to 100."""
    weight: float
    """The checks' weight it was computed over."""
    checks: int = 0
    unsure: int = 0
    """Checks that passed without being conclusive (half credit)."""
    failed: int = 0
    why: str = ""
    """How it came about, in words (``aborted by its abort conditions``)."""


class Judged(Protocol):
    """What the score reads of a check's result (``drills.model.journal.CheckResult``)."""

    @property
    def passed(self) -> bool: ...
    @property
    def conclusive(self) -> bool | None: ...
    @property
    def severity(self) -> str: ...


def score_of(checks: Sequence[Judged], outcome: str) -> Score | None:
    """The score of a run with these checks whose outcome is ``outcome``: ``judged`` (it ran
    to its end), ``aborted`` (by its abort conditions), or anything else (no score)."""
    weight = sum(WEIGHTS[c.severity] for c in checks)
    if outcome == "aborted":
        return Score(
            value=0.0, weight=weight, checks=len(checks), why="aborted by its abort conditions"
        )
    if outcome != "judged" or not checks:
        return None
    earned, unsure, failed = 0.0, 0, 0
    for check in checks:
        w = WEIGHTS[check.severity]
        if not check.passed:
            failed += 1
        elif check.conclusive is False:
            earned += w * UNSURE_CREDIT
            unsure += 1
        else:
            earned += w
    parts = [f"{len(checks) - failed - unsure} passed"]
    if unsure:
        parts.append(f"{unsure} passed, not conclusive (half credit)")
    if failed:
        parts.append(f"{failed} failed")
    return Score(
        value=round(100 * earned / weight, 1),
        weight=weight,
        checks=len(checks),
        unsure=unsure,
        failed=failed,
        why=", ".join(parts),
    )


def combined(scores: Sequence[Score | None]) -> Score | None:
    """Several runs' scores as one (a game day's), weighted by their checks' weight."""
    kept = [s for s in scores if s is not None and s.weight > 0]
    if not kept:
        return None
    weight = sum(s.weight for s in kept)
    return Score(
        value=round(sum(s.value * s.weight for s in kept) / weight, 1),
        weight=weight,
        checks=sum(s.checks for s in kept),
        unsure=sum(s.unsure for s in kept),
        failed=sum(s.failed for s in kept),
        why=f"{len(kept)} drill(s) scored, weighted by their checks",
    )


def faded(value: float, age_seconds: float) -> float:
    """``value`` halved for every ``HALF_LIFE_DAYS`` of ``age_seconds``."""
    days = max(age_seconds, 0.0) / 86400
    return round(value * float(0.5 ** (days / HALF_LIFE_DAYS)), 1)
