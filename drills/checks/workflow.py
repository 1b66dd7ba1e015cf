"""Workflows run by an orchestrator (``load.endpoint: workflow``): whether a stalled dependency
held its waiters past their limit, and whether the other workflows were still served.

- ``workflow_wait``: the longest wait of the window's workflow requests. For an answered one,
  the longest any of its tasks waited for a dependency, as its answer says (the
  orchestrator's account). For one that got no answer at all (the client gave up, or the run
  ended with it in flight), the whole time the client waited: the harness's own view, which
  is what a frozen orchestrator leaves;
- ``workflows_served``: the share of the window's workflow requests (of ``workflow``'s kind,
  or all) that got an answer that is not an error (a fallback is an answer: it is what the
  policy serves past the wait limit), within ``within`` when the check gives it (a request
  answered only once a frozen orchestrator thawed was starved, not served);
- ``workflow_fallbacks``: how many answers were the fallback (recognised by the drill's
  ``fallback`` rule, from the answer the client got), within ``within`` of their request when
  the check gives it. ``above: 0`` says the fault did stall a dependency past its waiters'
  limit, so the other checks had something to judge; ``within`` keeps out a fallback that
  came only once the fault was over (a call the stall broke, answered after the thaw: no
  wait limit made it).
"""

from __future__ import annotations

from drills.checks.base import Evaluation, result
from drills.model.expect import Check
from drills.model.journal import CheckResult
from drills.model.records import Record

__all__ = ["check_workflow_fallbacks", "check_workflow_wait", "check_workflows_served"]


def workflows_in(ev: Evaluation, check: Check) -> list[Record]:
    start, end = ev.window(check.during)
    return [
        r
        for r in ev.requests_in(start, end)
        if r.endpoint == "workflow" and (check.workflow is None or r.workflow == check.workflow)
    ]


def _what(check: Check) -> str:
    return f"{check.workflow} workflow" if check.workflow else "workflow"


def _none(check: Check, name: str) -> CheckResult:
    return result(
        check,
        name,
        None,
        0,
        f"no {_what(check)} request counts in the window (the load sends them with "
        "endpoint: workflow)",
    )


def _wait_of(record: Record) -> tuple[float, str] | None:
    """How long this request waited, and by whose account."""
    if record.status == 0 and record.e2e is not None:
        return record.e2e, "no answer: the client's own wait"
    if record.waited is not None:
        return record.waited, "its answer's account of its tasks' waits"
    return None


def check_workflow_wait(check: Check, ev: Evaluation) -> CheckResult:
    records = workflows_in(ev, check)
    if not records:
        return _none(check, "workflow_wait")
    waits = [(w, r) for r in records if (w := _wait_of(r)) is not None]
    if not waits:
        return result(check, "workflow_wait", 0.0, len(records), "no task waited")
    (longest, whose), record = max(waits, key=lambda pair: pair[0][0])
    unanswered = sum(r.status == 0 for r in records)
    reason = (
        f"the longest wait was {longest:.2f}s ({whose}; trace {record.trace_id}); "
        f"{unanswered} of {len(records)} {_what(check)} requests got no answer"
    )
    return result(check, "workflow_wait", longest, len(records), reason, unit="s")


def check_workflows_served(check: Check, ev: Evaluation) -> CheckResult:
    records = workflows_in(ev, check)
    if not records:
        return _none(check, "workflows_served")
    within = check.within
    served = [
        r
        for r in records
        if not r.is_error and (within is None or (r.e2e is not None and r.e2e <= within))
    ]
    share = len(served) / len(records)
    failed = [r for r in records if r.is_error]
    late = [r for r in records if not r.is_error and r not in served]
    reason = f"{len(served)} of {len(records)} {_what(check)} requests answered"
    reason += f" within {within:g}s" if within is not None else ""
    if failed:
        reason += f"; e.g. trace {failed[0].trace_id}: {failed[0].error}"
    if late:
        slowest = max(late, key=lambda r: r.e2e or 0)
        reason += (
            f"; {len(late)} answered later, the slowest after {slowest.e2e or 0:.1f}s "
            f"(trace {slowest.trace_id})"
        )
    return result(check, "workflows_served", share, len(records), reason)


def check_workflow_fallbacks(check: Check, ev: Evaluation) -> CheckResult:
    records = workflows_in(ev, check)
    if not records:
        return _none(check, "workflow_fallbacks")
    within = check.within
    fallbacks = [r for r in records if r.fallback]
    timely = [r for r in fallbacks if within is None or (r.e2e is not None and r.e2e <= within)]
    reason = f"{len(timely)} of {len(records)} {_what(check)} answers were the fallback"
    if within is not None:
        reason += f" within {within:g}s"
        late = [r for r in fallbacks if r not in timely]
        if late:
            slowest = max(late, key=lambda r: r.e2e or 0)
            reason += (
                f"; {len(late)} more came later, the slowest after {slowest.e2e or 0:.1f}s "
                f"(trace {slowest.trace_id})"
            )
    return result(check, "workflow_fallbacks", len(timely), len(records), reason)
