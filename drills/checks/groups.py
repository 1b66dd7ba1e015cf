"""Two groups of requests compared (``Scenario.groups``: a canary against the stable replicas).

- ``group_ratio.tokens.pNN``, ``group_ratio.ttft.pNN``, ``group_ratio.e2e.pNN``,
  ``group_ratio.itl.pNN``: that percentile in ``group`` over the same in ``against``, among
  answered requests (a failed request has no answer length, and its latency is the failure's);
- ``group_ratio.error_rate``: the share of failed requests (rejections included) in ``group``
  over the same in ``against``. With no failure in ``against``, its share is taken as one
  request's (the least it can tell), so that the ratio stays finite and says how far apart
  they are;
- ``group_ks.tokens``, ``group_ks.ttft``, ``group_ks.e2e``: the p-value of the two-sample
  Kolmogorov-Smirnov test (``scipy.stats.ks_2samp``) between the two groups' distributions.
  ``above: 0.01`` fails when the distributions differ beyond what chance explains at 1%.

Groups are assigned by the runner from what the harness saw (``Record.group``); every result
says how many requests each group had, and each group's median and p90 beside the ratio.
"""

from __future__ import annotations

from drills.checks.base import Evaluation, is_error, result
from drills.common.stats import percentile
from drills.model.expect import Check
from drills.model.journal import CheckResult
from drills.model.records import Record

__all__ = ["check_group_ks", "check_group_ratio", "group_values"]


def group_values(records: list[Record], metric: str) -> list[float]:
    """The values of ``metric`` (``tokens``, ``ttft``, ``e2e``, ``itl``) among the answered
    requests of ``records``."""
    answered = [r for r in records if not is_error(r)]
    if metric == "tokens":
        return [float(r.tokens) for r in answered]
    if metric == "itl":
        return [gap for r in answered for gap in r.itl]
    return [v for r in answered if (v := getattr(r, metric)) is not None]


def _groups(check: Check, ev: Evaluation) -> tuple[list[Record], list[Record]]:
    records = ev.requests_in(*ev.window(check.during))
    return (
        [r for r in records if r.group == check.group],
        [r for r in records if r.group == check.against],
    )


def _shape(values: list[float], unit: str) -> str:
    def show(v: float) -> str:
        return f"{v * 1000:.0f}ms" if unit == "s" else f"{v:g}"

    return f"median {show(percentile(values, 50))}, p90 {show(percentile(values, 90))}"


def _empty(check: Check, family: str, group: list[float], against: list[float]) -> CheckResult:
    which = check.group if not group else check.against
    return result(
        check,
        family,
        None,
        min(len(group), len(against)),
        f"no answered request of group {which!r} in the window: nothing to compare",
    )


def check_group_ratio(check: Check, ev: Evaluation) -> CheckResult:
    family = "group_ratio"
    mine, theirs = _groups(check, ev)
    metric = check.check.split(".")[1]
    if metric == "error_rate":
        return _error_ratio(check, mine, theirs)
    group, against = group_values(mine, metric), group_values(theirs, metric)
    if not group or not against:
        return _empty(check, family, group, against)
    q = float(check.check.rsplit(".p", 1)[1])
    q = q / 10 if q > 100 else q
    ratio = percentile(group, q) / max(percentile(against, q), 1e-9)
    outcome = result(check, family, ratio, min(len(group), len(against)))
    unit = "" if metric == "tokens" else "s"
    outcome.observed_text = f"{ratio:.2f}x"
    outcome.reason = (
        f"{metric} p{q:g}: {check.group} {ratio:.2f}x {check.against} "
        f"({check.group}: {len(group)} answers, {_shape(group, unit)}; "
        f"{check.against}: {len(against)} answers, {_shape(against, unit)})"
        + ("" if outcome.passed else f"; expected {outcome.expected}")
    )
    return outcome


def _error_ratio(check: Check, mine: list[Record], theirs: list[Record]) -> CheckResult:
    family = "group_ratio"
    if not mine or not theirs:
        which = check.group if not mine else check.against
        return result(check, family, None, 0, f"no request of group {which!r} in the window")
    rate = sum(is_error(r) for r in mine) / len(mine)
    base = sum(is_error(r) for r in theirs) / len(theirs)
    floored = max(base, 1 / len(theirs))
    ratio = rate / floored
    outcome = result(check, family, ratio, min(len(mine), len(theirs)))
    outcome.observed_text = f"{ratio:.2f}x"
    outcome.reason = (
        f"failed: {check.group} {rate:.1%} of {len(mine)}, {check.against} {base:.1%} of "
        f"{len(theirs)}"
        + (f" (taken as one request's share, {floored:.1%})" if base == 0 else "")
        + f": {ratio:.2f}x"
        + ("" if outcome.passed else f"; expected {outcome.expected}")
    )
    return outcome


def check_group_ks(check: Check, ev: Evaluation) -> CheckResult:
    # Imported here: scipy.stats takes about 2 s to import, and only group_ks needs it.
    from scipy.stats import ks_2samp

    family = "group_ks"
    mine, theirs = _groups(check, ev)
    metric = check.check.split(".")[1]
    group, against = group_values(mine, metric), group_values(theirs, metric)
    if not group or not against:
        return _empty(check, family, group, against)
    test = ks_2samp(group, against)
    p_value, statistic = float(test.pvalue), float(test.statistic)
    outcome = result(check, family, p_value, min(len(group), len(against)))
    outcome.observed_text = f"p={p_value:.3g}"
    unit = "" if metric == "tokens" else "s"
    outcome.reason = (
        f"{metric}: Kolmogorov-Smirnov D={statistic:.2f}, p={p_value:.3g} "
        f"({check.group}: {len(group)}, {_shape(group, unit)}; {check.against}: "
        f"{len(against)}, {_shape(against, unit)})"
        + (
            ""
            if outcome.passed
            else f"; expected p {outcome.expected}: the two distributions differ"
        )
    )
    return outcome
