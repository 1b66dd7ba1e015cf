"""Checks: each scenario expectation evaluated over its window of the drill, one module per
family (``latency``, ``rate``, ``throughput``, ``prometheus``, ``breaker``, ``recovery``,
``replacement``, ``lint``, ``rag``, ``tools``, ``agent``) on what they share (``base``). Which
family a check name belongs to, and what its bounds mean, is ``drills.model.check_families``.
"""

from __future__ import annotations

from collections.abc import Iterable

from drills.checks.base import CheckResult, Evaluation, is_error, percentile, result
from drills.common.errors import InputError
from drills.model.check_families import family_of
from drills.model.expect import Check

__all__ = ["CheckResult", "Evaluation", "evaluate", "is_error", "percentile", "result"]


def evaluate(ev: Evaluation, checks: Iterable[Check] | None = None) -> list[CheckResult]:
    """Each check's result, by its family's evaluator (``drills.model.check_families``)."""
    results = []
    for check in checks if checks is not None else ev.scenario.expect:
        family = family_of(check.check)
        if family is None:  # the scenario model refuses unknown checks; a plugin went away
            raise InputError(f"no check family evaluates {check.check!r}")
        judged = family.evaluate(check, ev)
        results.append(judged.model_copy(update={"severity": check.severity}))
    return results
