"""``stack_lint``: the timeout-budget lint of the stack's config, as a check."""

from __future__ import annotations

from drills.checks.base import (
    Evaluation,
    result,
)
from drills.model.expect import Check, bound_value
from drills.model.journal import CheckResult

__all__ = ["check_stack_lint"]


def check_stack_lint(check: Check, ev: Evaluation) -> CheckResult:
    if ev.lint is None:
        return result(
            check,
            "stack_lint",
            None,
            0,
            "no stack config known to lint (attach with 'config:' or run on a profile)",
        )
    errors = [f for f in ev.lint if f["severity"] == "error"]
    tolerated = int(bound_value(check.below) or 1)
    observed = float(len(errors))
    passed = len(errors) < tolerated
    reason = (
        f"{len(errors)} error finding(s) (< {tolerated} tolerated)"
        if passed
        else "; ".join(f"{f['field']}: [{f['rule']}] {f['message']}" for f in errors)
    )
    return CheckResult(
        label=check.label,
        check=check.check,
        during=None,
        expected=f"< {tolerated} error finding(s)",
        observed=observed,
        observed_text=f"{len(errors)} error(s), {len(ev.lint) - len(errors)} warning(s)",
        passed=passed,
        reason=reason,
        samples=len(ev.lint),
        runbook=check.runbook,
    )
