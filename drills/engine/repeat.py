"""Repetitions: one drill run several times on the same stack, its checks judged on all of them.

One run's verdict is one sample on a noisy machine: ``fallback_rate`` of 24 in 25 passes a
bound of 0.8, but its interval reaches below it, and the next run may fail. ``drills run DRILL
--repeat N`` runs the drill N times, one after another, on the same stack (kept up between
them; each repetition is a whole run: it reverts its faults and writes its own journal and
reports). ``--until-conclusive MAX`` repeats until every check is conclusive (one run is
enough when it already is), at most MAX times; ``drills gate --inconclusive rerun`` runs its
drills so.

How a check is judged over the repetitions:

- **pooled**, where its family's value is a statistic of the client's requests alone
  (``CheckFamily.pools``: rates, latency percentiles, spreads, tokens): judged once on the
  requests of every repetition together, each repetition laid on the first's clock (its
  origin moved onto the first's, so a request sent 3 s into the fault phase counts 3 s into
  the fault phase). A rate's counts and a percentile's requests add up, and the interval
  narrows as the repetitions grow;
- **every**, for any other check (a time such as ``breaker_opened_within``, an alert, a count
  the stack reports, a bound relative to the run history): judged in each repetition, it
  passes when it passed in every one.

The repetitions pass when every run completed, left no fault in force, and every check passed
over the repetitions. ``repeat.json`` (``drills.model.repeat``), ``summary.md`` and
``index.html`` show each repetition and the result over all of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from drills.checks import Evaluation, evaluate
from drills.common.yamlsrc import YamlDocument
from drills.engine.options import RunOptions
from drills.engine.runner import Runner
from drills.model.check_families import family_of
from drills.model.expect import Check
from drills.model.journal import CheckResult, Journal, RunStatus
from drills.model.repeat import PooledCheck, Repetition, Repetitions
from drills.model.scenario import Scenario

__all__ = ["pool", "repeat", "run_dir_of"]


def run_dir_of(scenario: Scenario, options: RunOptions) -> Path:
    """Where the repetitions' own report goes, beside the runs' folders."""
    return options.out_dir / f"{scenario.drill}-repeat-{time.strftime('%Y%m%d-%H%M%S')}"


def pooled_evaluation(scenario: Scenario, evaluations: list[Evaluation]) -> Evaluation:
    """The requests of every repetition as one run on the first one's clock: each later
    run's requests and faults moved by the difference of its origin from the first's (the
    phases, planned from the origin, then line up)."""
    first = evaluations[0]
    origin, end = first.run_window
    records, faults = [], []
    for ev in evaluations:
        shift = origin - ev.run_window[0]
        records += [r.model_copy(update={"start": r.start + shift}) for r in ev.records]
        faults += [
            f.model_copy(
                update={
                    "applied_at": None if f.applied_at is None else f.applied_at + shift,
                    "reverted_at": None if f.reverted_at is None else f.reverted_at + shift,
                }
            )
            for f in ev.faults
        ]
        end = max(end, ev.run_window[1] + shift)
    return Evaluation(
        scenario, records, dict(first.phases), (origin, end), faults, confidence=first.confidence
    )


def _pools(check: Check) -> bool:
    family = family_of(check.check)
    return family is not None and family.pools and check.not_worse_than is None


def _every(check: Check, each: list[CheckResult | None]) -> CheckResult:
    """A check judged per repetition: it passes when it passed in every one."""
    seen = [c for c in each if c is not None]
    failed = [(k, c) for k, c in enumerate(each, 1) if c is not None and not c.passed]
    passed = bool(seen) and len(seen) == len(each) and not failed
    shown = failed[0][1] if failed else seen[-1] if seen else None
    if passed:
        reason = f"passed in every one of the {len(each)} repetitions"
    elif not seen:
        reason = "judged in no repetition"
    else:
        reason = "; ".join(f"run {k}: {c.observed_text}: {c.reason}" for k, c in failed) or (
            f"judged in {len(seen)} of the {len(each)} repetitions"
        )
    return CheckResult(
        label=check.label,
        check=check.check,
        during=check.during,
        expected=shown.expected if shown else "",
        observed=shown.observed if shown else None,
        observed_text=f"passed in {sum(c.passed for c in seen)} of {len(each)}",
        passed=passed,
        reason=reason,
        samples=sum(c.samples for c in seen),
        runbook=shown.runbook if shown else check.runbook,
        severity=check.severity,
    )


def _result_of(results: list[CheckResult], index: int, check: Check) -> CheckResult | None:
    """A run's result of the scenario's ``index``-th check (by its place, else its label)."""
    if index < len(results) and results[index].label == check.label:
        return results[index]
    return next((c for c in results if c.label == check.label), None)


def pool(
    scenario: Scenario, results: list[list[CheckResult]], evaluations: list[Evaluation]
) -> list[PooledCheck]:
    """Each check of ``scenario`` over the repetitions (the module's docstring says how):
    ``results`` are each run's check results, ``evaluations`` what each run judged."""
    pooled = pooled_evaluation(scenario, evaluations) if evaluations else None
    out = []
    for index, check in enumerate(scenario.expect):
        each = [_result_of(r, index, check) for r in results]
        if pooled is not None and _pools(check):
            [result] = evaluate(pooled, [check])
            out.append(PooledCheck(label=check.label, how="pooled", result=result, each=each))
        else:
            out.append(
                PooledCheck(label=check.label, how="every", result=_every(check, each), each=each)
            )
    return out


def repeat(
    scenario: Scenario,
    doc: YamlDocument | None,
    options: RunOptions,
    times: int,
    until_conclusive: bool,
    after_each: Callable[[int, Journal], None] = lambda _i, _j: None,
) -> Repetitions:
    """Run the drill up to ``times`` times (``until_conclusive``: stop once every check is
    conclusive, after the first run if it already is); stop early when a run did not complete
    or left a fault in force. ``after_each(i, journal)`` is told of each run as it ends."""
    journals: list[Journal] = []
    evaluations: list[Evaluation] = []
    checks: list[PooledCheck] = []
    stopped = f"all {times} repetitions ran"
    for i in range(1, times + 1):
        runner = Runner(scenario, doc, options)
        journal = runner.run()
        journals.append(journal)
        if runner.evaluation is not None:
            evaluations.append(runner.evaluation)
        after_each(i, journal)
        checks = pool(scenario, [j.checks for j in journals], evaluations)
        if journal.rollbacks.left:
            stopped = f"run {i} left a fault in force: no further repetition"
            break
        if journal.status != RunStatus.COMPLETED:
            stopped = f"run {i} did not complete ({journal.status}): no further repetition"
            break
        if until_conclusive and _conclusive(checks):
            stopped = f"every check was conclusive after {i} run(s)"
            break
    else:
        if until_conclusive:
            stopped = f"still inconclusive after {times} repetitions, the most asked for"
    asked = f"--until-conclusive {times}" if until_conclusive else f"--repeat {times}"
    return _summary(scenario, journals, checks, asked, stopped, options.confidence)


def _summary(
    scenario: Scenario,
    journals: list[Journal],
    checks: list[PooledCheck],
    asked: str,
    stopped: str,
    confidence: float,
) -> Repetitions:
    """The repetitions' record: each run, each check over them, and the verdict."""
    runs = [
        Repetition(
            run_id=j.run_id,
            run_dir=j.run_dir,
            status=str(j.status),
            verdict=j.verdict,
            started_at=j.started_at,
            faults_left=list(j.rollbacks.left),
        )
        for j in journals
    ]
    passed = (
        all(r.status == RunStatus.COMPLETED and not r.faults_left for r in runs)
        and bool(checks)
        and all(c.result.passed for c in checks)
    )
    return Repetitions(
        drill=scenario.drill,
        title=scenario.title,
        asked=asked,
        runs=runs,
        checks=checks,
        verdict="passed" if passed else "failed",
        conclusive=_conclusive(checks),
        confidence=confidence,
        stopped=stopped,
    )


def _conclusive(checks: list[PooledCheck]) -> bool:
    return all(c.result.conclusive is not False for c in checks)
