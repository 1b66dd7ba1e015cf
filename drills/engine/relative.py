"""Bounds relative to the run history: ``{check: e2e.p99, during: fault, not_worse_than:
last_passed, by: 10%}``.

A check with ``not_worse_than`` is judged as usual against its own ``below``/``above`` (if it
has any), and then against the same check (the same label) of a reference run, an earlier run of
the same drill (and the same twin) from the run history (``drills.engine.history``):

- ``last_passed``: the last earlier run whose verdict was ``passed``;
- ``last``: the last earlier run, whatever its verdict.

The limit is the reference's observed value made worse by ``by``: ``10%`` of it, or a duration
(``200ms``) for checks of durations; which way is worse comes from the check
(``Check.worse_direction``). The observed value may reach the limit (inclusive) but not pass it.
With no reference (no history, no such run, or a reference that observed nothing for this
check) the check keeps its own verdict and is not conclusive, and its reason says why, so that
``drills gate --inconclusive fail`` can refuse to call it a pass.
"""

from __future__ import annotations

from collections.abc import Sequence

from drills.model.expect import Check, relative_margin
from drills.model.journal import CheckResult, PastRun, RelativeReference

__all__ = ["judge_relative", "reference_run"]


def reference_run(previous: Sequence[PastRun], which: str) -> PastRun | None:
    """The run ``which`` (``last_passed`` or ``last``) names among ``previous`` (oldest first)."""
    for run in reversed(previous):
        if which == "last" or run.verdict == "passed":
            return run
    return None


def judge_relative(
    checks: Sequence[Check],
    results: Sequence[CheckResult],
    previous: Sequence[PastRun] | None,
    unavailable: str | None = None,
) -> list[CheckResult]:
    """``results`` (one per check, in order) with each relative bound judged against
    ``previous`` (the earlier runs of the drill, oldest first; ``None``: no history could be
    read, for the reason ``unavailable``)."""
    return [
        _judged(check, result, previous, unavailable) if check.not_worse_than else result
        for check, result in zip(checks, results, strict=True)
    ]


def _judged(
    check: Check,
    result: CheckResult,
    previous: Sequence[PastRun] | None,
    unavailable: str | None,
) -> CheckResult:
    which = str(check.not_worse_than)
    asked = f"no worse than the {which.replace('_', ' ')} run by {check.by}"
    expected = f"{result.expected} and {asked}" if result.expected else asked
    if previous is None:
        return _without_reference(result, expected, unavailable or "no run history is kept")
    run = reference_run(previous, which)
    if run is None:
        missing = (
            "no earlier run of this drill in the history passed"
            if which == "last_passed" and previous
            else "the history has no earlier run of this drill"
        )
        return _without_reference(result, expected, missing)
    past = next((c for c in run.checks if c.label == result.label), None)
    if past is None or past.observed is None:
        what = "has no such check" if past is None else "observed nothing for it"
        return _without_reference(result, expected, f"the reference run {run.run_id} {what}")
    amount, share = relative_margin(check.by or "0%")
    margin = abs(past.observed) * amount if share else amount
    higher_is_worse = check.worse_direction() != "lower"
    limit = past.observed + margin if higher_is_worse else past.observed - margin
    reference = RelativeReference(
        run_id=run.run_id,
        label=run.label,
        started_at=run.started_at,
        which=which,
        observed=past.observed,
        observed_text=past.observed_text,
        limit=limit,
    )
    if result.observed is None:
        return result.model_copy(
            update={"expected": expected, "reference": reference, "passed": False}
        )
    return _compared(check, result, reference, expected, higher_is_worse)


def _compared(
    check: Check,
    result: CheckResult,
    reference: RelativeReference,
    expected: str,
    higher_is_worse: bool,
) -> CheckResult:
    """``result`` (which observed a value) judged against ``reference``'s limit too."""
    assert result.observed is not None
    limit = reference.limit
    named = f"run {reference.run_id}" + (f" ({reference.label})" if reference.label else "")
    worse = result.observed > limit if higher_is_worse else result.observed < limit
    if worse:
        side = "above" if higher_is_worse else "below"
        reason = (
            f"observed {result.observed_text}, worse than {named}'s {reference.observed_text} "
            f"by more than {check.by} ({side} {limit:.4g})"
        )
        reason = reason if result.passed else f"{result.reason}; and {reason}"
        passed = False
    else:
        reason = (
            f"{result.reason}; no worse than {named}'s {reference.observed_text} by more than "
            f"{check.by}"
        )
        passed = result.passed
    return result.model_copy(
        update={
            "expected": expected,
            "reference": reference,
            "passed": passed,
            "reason": reason,
            "conclusive": _conclusive(result, limit, higher_is_worse, worse),
        }
    )


def _conclusive(
    result: CheckResult, limit: float, higher_is_worse: bool, worse: bool
) -> bool | None:
    """Whether the result's interval lies wholly on its verdict's side of the relative limit
    too (``None``: the result has no interval). The reference's own noise is not counted: it
    is one run's value, the one the team accepted."""
    if result.interval is None:
        return result.conclusive
    low, high = result.interval
    if higher_is_worse:
        sure = (low is not None and low > limit) if worse else (high is not None and high <= limit)
    else:
        sure = (high is not None and high < limit) if worse else (low is not None and low >= limit)
    if not result.passed:  # failed on its own bound: as sure as that, or as the relative one
        return bool(result.conclusive) or (worse and sure)
    if worse:
        return sure
    return sure and result.conclusive is not False


def _without_reference(result: CheckResult, expected: str, why: str) -> CheckResult:
    return result.model_copy(
        update={
            "expected": expected,
            "conclusive": False,
            "reason": f"{result.reason}; not compared with an earlier run: {why}",
        }
    )
