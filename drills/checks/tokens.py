"""Answer lengths: ``tokens.pNN`` (the token count of the answers in a window) and
``tokens_ratio.pNN`` (that percentile over the same one in a reference phase: a canary that
answers longer, a gateway that cuts answers short). Errors count in neither: a failed request
has no answer length."""

from __future__ import annotations

from drills.checks.base import Evaluation, is_error, result
from drills.common.stats import percentile
from drills.model.expect import Check
from drills.model.journal import CheckResult

__all__ = ["check_tokens", "check_tokens_ratio"]


def _lengths(ev: Evaluation, start: float, end: float) -> list[float]:
    return [float(r.tokens) for r in ev.requests_in(start, end) if not is_error(r)]


def _q(check: Check) -> float:
    q = check.check.rsplit(".p", 1)[1]
    return float(q) / (10 if len(q) == 3 else 1)


def check_tokens(check: Check, ev: Evaluation) -> CheckResult:
    lengths = _lengths(ev, *ev.window(check.during))
    if not lengths:
        return result(check, "tokens", None, 0, "no answered request in the window")
    return result(check, "tokens", percentile(lengths, _q(check)), len(lengths))


def check_tokens_ratio(check: Check, ev: Evaluation) -> CheckResult:
    name = "tokens_ratio"
    reference = check.baseline or (
        "baseline" if "baseline" in ev.phases else ev.scenario.phases[0].name
    )
    here = _lengths(ev, *ev.window(check.during))
    base = _lengths(ev, *ev.phases[reference])
    if not here or not base:
        where = "the window" if not here else f"phase {reference!r}"
        return result(check, name, None, 0, f"no answered request in {where}")
    q = _q(check)
    ratio = percentile(here, q) / max(percentile(base, q), 1e-9)
    outcome = result(check, name, ratio, len(here))
    outcome.reason = (
        f"p{q:g} {percentile(here, q):g} tokens against {percentile(base, q):g} in "
        f"{reference!r}: {ratio:.2f}x"
        + ("" if outcome.passed else f", expected {outcome.expected}")
    )
    return outcome
