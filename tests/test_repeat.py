"""A drill's repetitions judged together (``drills.engine.repeat``): made-up runs for the
pooling (the real stack: ``tests/test_gate.py``, a gate that reruns an unsure drill)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from drills.checks import Evaluation, evaluate
from drills.engine.repeat import pool, pooled_evaluation
from drills.model.journal import FaultRecord
from tests.conftest import drills_cli, isolated_env
from tests.helpers import made_up_record, made_up_scenario

T0 = 1_800_000_000.0
LATER = T0 + 3_600.0  # the second repetition, an hour on


def run_of(origin: float, fallbacks: int, answered: int, e2e: float) -> Evaluation:
    """One repetition: 10 s of baseline (5 normal answers), then 10 s with vllm-0 down, in
    which ``answered`` requests came back, the first ``fallbacks`` of them the fallback."""
    scenario = made_up_scenario(
        {"kind": "toxiproxy.down", "target": "vllm-0"},
        [
            {"check": "fallback_rate", "during": "fault", "above": 0.7},
            {"check": "e2e.p50", "during": "fault", "below": "2s"},
            {"check": "throughput", "during": "fault", "above": 0.9},
        ],
    )
    records = [made_up_record(origin + i * 2, 0.3) for i in range(5)] + [
        made_up_record(origin + 10 + i * (10 / answered), e2e, fallback=i < fallbacks)
        for i in range(answered)
    ]
    fault = FaultRecord.model_validate(
        {
            "index": 0,
            "phase": "fault",
            "kind": "toxiproxy.down",
            "target": "vllm-0",
            "scheduled_offset": 10.0,
            "scheduled_end": 20.0,
            "applied_at": origin + 10.0,
            "reverted_at": origin + 20.0,
        }
    )
    phases = {"baseline": (origin, origin + 10), "fault": (origin + 10, origin + 20)}
    return Evaluation(scenario, records, phases, (origin, origin + 20), [fault])


def test_the_requests_of_every_repetition_are_judged_together_on_the_first_ones_clock() -> None:
    first, second = run_of(T0, 8, 10, 0.5), run_of(LATER, 9, 12, 0.7)
    pooled = pooled_evaluation(first.scenario, [first, second])
    # The second run's requests land in the first run's windows, and count in its phases.
    assert len(pooled.requests_in(*pooled.window("fault"))) == 22
    assert len(pooled.requests_in(*pooled.window("baseline"))) == 10
    assert [r.phase for r in pooled.records].count("fault") == 22


def test_a_rate_is_pooled_over_the_repetitions_and_its_interval_narrows() -> None:
    runs = [run_of(T0, 8, 10, 0.5), run_of(LATER, 9, 12, 0.7), run_of(LATER * 2, 7, 9, 0.6)]
    results = [evaluate(ev) for ev in runs]
    scenario = runs[0].scenario
    rate, p50, throughput = pool(scenario, results, runs)
    # 24 fallbacks in 31 answers, each run's interval wider than the pooled one.
    assert rate.how == "pooled" and rate.result.samples == 31
    assert rate.result.observed == pytest.approx(24 / 31)
    low, high = rate.result.interval or (None, None)
    assert low is not None and high is not None
    for alone in results:
        a_low, a_high = alone[0].interval or (None, None)
        assert a_low is not None and a_high is not None
        assert high - low < a_high - a_low
    assert [c.samples for c in rate.each if c] == [10, 12, 9]
    # A percentile: every run's requests in one sorted list (the middle of 31: 0.6 s).
    assert p50.how == "pooled" and p50.result.observed == pytest.approx(0.6)
    assert p50.result.passed
    # Throughput is not a statistic of the requests alone (31 requests in 10 s would be three
    # runs' worth): judged in each run, passed only when it passed in every one.
    assert throughput.how == "every"
    assert [c.passed for c in throughput.each if c] == [True, True, False]
    assert not throughput.result.passed
    assert throughput.result.observed_text == "passed in 2 of 3"
    assert throughput.result.reason.startswith("run 3: ")


def test_a_check_not_judged_in_a_run_does_not_pass_over_the_repetitions() -> None:
    runs = [run_of(T0, 8, 10, 0.5), run_of(LATER, 9, 12, 0.7)]
    results = [evaluate(runs[0]), []]  # the second run judged nothing (it aborted early)
    *_, throughput = pool(runs[0].scenario, results, runs)
    assert throughput.each[1] is None and not throughput.result.passed
    assert throughput.result.reason == "judged in 1 of the 2 repetitions"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--repeat", "0"], "--repeat: '0': expected a whole number from 1"),
        (["--until-conclusive", "x"], "--until-conclusive: 'x': expected a whole number from 1"),
        (["--repeat", "2", "--until-conclusive", "3"], "not allowed with argument"),
        (["--repeat", "2", "--dry-run"], "--repeat 2 repeats the drill itself; it does not go "),
        (["--repeat", "2", "--twin"], "it does not go with --twin"),
    ],
)
def test_a_repeat_that_cannot_be_is_refused_before_anything_runs(
    flags: list[str], message: str, tmp_path: Path
) -> None:
    drill = Path(__file__).resolve().parent.parent / "scenarios" / "inference-latency.yaml"
    out = subprocess.run(
        drills_cli("run", str(drill), *flags, "--out", str(tmp_path / "runs")),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
        timeout=120,
        check=False,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in out.stderr, out.stderr
    assert not (tmp_path / "runs").exists()
