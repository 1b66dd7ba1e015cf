"""The record of a drill's repetitions (``drills run DRILL --repeat N``): each run, and each
check judged on all of them (``repeat.json``, format 1)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from drills.model.journal import CheckResult

__all__ = ["PooledCheck", "Repetition", "Repetitions"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class Repetition(_Model):
    """One run of the drill among its repetitions."""

    run_id: str
    run_dir: str
    status: str
    """The run's status (``completed``, ``aborted``, ``interrupted``...)."""
    verdict: str
    started_at: float
    faults_left: list[str] = []
    """Faults that run could not revert (``Journal.rollbacks.left``)."""


class PooledCheck(_Model):
    """One check of the drill, judged on every repetition."""

    label: str
    how: Literal["pooled", "every"]
    """``pooled``: its family's value is a statistic of the requests (``CheckFamily.pools``),
    judged once on the requests of every repetition together; ``every``: judged per
    repetition, and it passes when it passed in each one."""
    result: CheckResult
    """The verdict over the repetitions (pooled: with the pooled interval)."""
    each: list[CheckResult | None]
    """Its result in each repetition, in order (``None``: that run judged no such check)."""


class Repetitions(_Model):
    """A drill run several times on the same stack, and its checks over all the runs."""

    format: Literal[1] = 1
    drill: str
    title: str
    asked: str
    """What was asked: ``--repeat 3``, ``--until-conclusive 5``."""
    runs: list[Repetition]
    checks: list[PooledCheck]
    verdict: Literal["passed", "failed"]
    conclusive: bool
    """Every pooled check with an interval lies wholly on its verdict's side of its bound."""
    confidence: float
    stopped: str
    """Why the repetitions stopped (all asked for ran, the checks became conclusive, a run did
    not complete, a fault was left in force)."""
