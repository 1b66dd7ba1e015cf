"""What a run on a drill's twin carries and how it is judged, apart from how it is run
(``drills.engine.twins``), so that the options and the runner need nothing that runs drills.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from drills.model.journal import CheckResult, RunStatus, TwinOutcome
from drills.model.twins import Twin

__all__ = ["TwinPlan", "twin_outcome"]


@dataclass(frozen=True)
class TwinPlan:
    """What a run on a twin needs to judge itself (``RunOptions.twin``)."""

    twin: Twin
    stack: str
    skipped_faults: tuple[str, ...] = ()


def twin_outcome(
    plan: TwinPlan,
    checks: list[CheckResult],
    status: RunStatus,
    aborted: dict[str, Any] | None = None,
) -> TwinOutcome:
    twin = plan.twin
    by = aborted.get("check") if aborted and aborted.get("cause") == "abort_condition" else None
    return TwinOutcome(
        name=twin.key,
        why=twin.why,
        stack=plan.stack,
        must_fail=twin.must_fail,
        may_fail=twin.may_fail,
        failed=[c.label for c in checks if not c.passed],
        skipped_faults=list(plan.skipped_faults),
        status=status,
        aborts=twin.aborts,
        aborted_by=by,
    )
