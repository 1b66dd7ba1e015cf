"""Bounds relative to the run history (``not_worse_than: last_passed, by: 10%``): written and
refused where they are written, judged against the reference run (``drills.engine.relative``)
read from a real SQLite history, and end to end: two `drills run` of one drill against a stub
gateway, the second slower, fail on the second naming the first."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from drills.engine.history import HistoryStore, reference_runs
from drills.engine.relative import judge_relative
from drills.model.journal import CheckResult, PastCheck, PastRun
from drills.model.scenario import load_scenario
from tests.conftest import run_drill
from tests.helpers import problems, reply, serving
from tests.test_history import journal as past_journal

DRILL = """\
drill: relative-demo
title: e2e no worse than the last run that passed
load: {users: 2, prompts: [hi], warmup: 0s, timeout: 10s, max_tokens: 2, wait: 50ms}
phases:
  - {name: steady, duration: 3s}
expect:
  - {check: error_rate, during: steady, below: 0.5}
  - {check: e2e.p50, during: steady, not_worse_than: last_passed, by: 50%}
"""


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize(
    ("check", "said"),
    [
        ("{check: e2e.p99, not_worse_than: last_passed, by: 10}", "by 10 needs a unit"),
        ("{check: e2e.p99, not_worse_than: last_passed}", "not_worse_than needs 'by'"),
        ("{check: e2e.p99, below: 2s, by: 10%}", "add not_worse_than: last_passed"),
        ("{check: e2e.p99, not_worse_than: best, by: 10%}", "'last_passed' or 'last'"),
        ("{check: error_rate, not_worse_than: last, by: 200ms}", "not durations"),
        ("{check: fallback_rate, not_worse_than: last, by: 10%}", "worse_when: higher"),
        ("{check: stack_lint, not_worse_than: last, by: 10%}", "has no value to compare"),
        ("{check: e2e.p99, not_worse_than: last, by: -5%}", "a share is a number of 0 or more"),
    ],
)
def test_a_relative_bound_written_wrong_is_refused_where_it_is_written(
    tmp_path: Path, check: str, said: str
) -> None:
    text = DRILL.replace(
        "{check: e2e.p50, during: steady, not_worse_than: last_passed, by: 50%}", check
    )
    path = tmp_path / "drill.yaml"
    path.write_text(text)
    [problem] = problems(load_scenario, path)
    assert problem.startswith(f"{path}:{_line(text, check)} expect[1]"), problem
    assert said in problem, problem


def test_relative_bounds_that_say_what_they_mean_are_taken(tmp_path: Path) -> None:
    text = DRILL.replace(
        "  - {check: error_rate, during: steady, below: 0.5}\n",
        "  - {check: error_rate, during: steady, below: 0.5, not_worse_than: last, by: 0%}\n"
        "  - {check: fallback_rate, not_worse_than: last, by: 5%, worse_when: lower}\n"
        "  - {check: e2e.p99, not_worse_than: last, by: 200ms}\n",
    )
    path = tmp_path / "drill.yaml"
    path.write_text(text)
    checks = load_scenario(path)[0].expect
    assert [c.worse_direction() for c in checks] == ["higher", "lower", "higher", "higher"]


def _result(observed: float | None, *, interval: tuple[float, float] | None = None) -> CheckResult:
    return CheckResult(
        label="e2e.p50 during steady",
        check="e2e.p50",
        during="steady",
        expected="",
        observed=observed,
        observed_text="no data" if observed is None else f"{observed:.2f}s",
        passed=observed is not None,
        reason="within bounds",
        samples=40,
        runbook=None,
        interval=interval,
        conclusive=None if interval is None else True,
    )


def _past(run_id: str, observed: float | None, verdict: str = "passed", at: float = 0) -> PastRun:
    check = PastCheck(
        label="e2e.p50 during steady",
        observed=observed,
        observed_text="-" if observed is None else f"{observed:.2f}s",
        passed=True,
    )
    return PastRun(run_id=run_id, label="v1", started_at=at, verdict=verdict, checks=[check])


def _checks(tmp_path: Path, bound: str) -> list[Any]:
    path = tmp_path / "drill.yaml"
    path.write_text(DRILL.replace("not_worse_than: last_passed, by: 50%", bound))
    return list(load_scenario(path)[0].expect)[1:]


def test_the_limit_is_the_reference_made_worse_by_by_and_reaching_it_passes(
    tmp_path: Path,
) -> None:
    [check] = _checks(tmp_path, "not_worse_than: last_passed, by: 10%")
    past = [_past("run-a", 1.0, at=1), _past("run-b", 5.0, verdict="failed", at=2)]
    [at_limit] = judge_relative([check], [_result(1.1)], past)
    assert at_limit.passed and at_limit.reference is not None
    assert at_limit.reference.run_id == "run-a"  # the last that passed, not the last
    assert at_limit.reference.limit == pytest.approx(1.1)
    assert "no worse than the last passed run by 10%" in at_limit.expected
    [over] = judge_relative([check], [_result(1.1001)], past)
    assert not over.passed
    assert "worse than run run-a (v1)'s 1.00s by more than 10%" in over.reason, over.reason
    # `last`: the failed run is the reference.
    [last] = _checks(tmp_path, "not_worse_than: last, by: 10%")
    [judged] = judge_relative([last], [_result(1.5)], past)
    assert judged.passed and judged.reference and judged.reference.run_id == "run-b"
    # A duration margin, and lower-is-worse.
    [margin] = _checks(tmp_path, "not_worse_than: last_passed, by: 200ms")
    assert judge_relative([margin], [_result(1.2)], past)[0].passed
    assert not judge_relative([margin], [_result(1.25)], past)[0].passed
    [lower] = _checks(tmp_path, "not_worse_than: last_passed, by: 10%, worse_when: lower")
    assert judge_relative([lower], [_result(0.9)], past)[0].passed
    assert not judge_relative([lower], [_result(0.85)], past)[0].passed


def test_the_interval_decides_whether_the_comparison_is_conclusive(tmp_path: Path) -> None:
    [check] = _checks(tmp_path, "not_worse_than: last_passed, by: 10%")
    past = [_past("run-a", 1.0)]
    sure = judge_relative([check], [_result(1.0, interval=(0.95, 1.05))], past)[0]
    assert sure.passed and sure.conclusive is True
    straddles = judge_relative([check], [_result(1.0, interval=(0.9, 1.3))], past)[0]
    assert straddles.passed and straddles.conclusive is False
    surely_worse = judge_relative([check], [_result(1.5, interval=(1.3, 1.7))], past)[0]
    assert not surely_worse.passed and surely_worse.conclusive is True


@pytest.mark.parametrize(
    ("previous", "why"),
    [
        (None, "not compared with an earlier run: the history is gone"),
        ([], "the history has no earlier run of this drill"),
        (
            [_past("run-a", 1.0, verdict="failed")],
            "no earlier run of this drill in the history passed",
        ),
        ([_past("run-a", None)], "the reference run run-a observed nothing for it"),
    ],
)
def test_without_a_reference_the_check_keeps_its_verdict_and_is_not_conclusive(
    tmp_path: Path, previous: list[PastRun] | None, why: str
) -> None:
    [check] = _checks(tmp_path, "not_worse_than: last_passed, by: 10%")
    [judged] = judge_relative([check], [_result(9.0)], previous, "the history is gone")
    assert judged.passed and judged.conclusive is False and judged.reference is None
    assert why in judged.reason, judged.reason


def test_the_reference_runs_come_from_the_history_per_drill_and_twin(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite")
    for run, p99 in ((1, 1.0), (2, 1.5), (3, 3.0)):  # run 3 fails its p99 < 2s
        store.record(past_journal(run, p99=p99, tmp_path=tmp_path))
    store.record(past_journal(4, p99=1.0, twin="unsound", tmp_path=tmp_path))
    location = str(store.path)
    later = past_journal(9).started_at
    previous, why = reference_runs(location, "demo", "", later)
    assert why is None and previous is not None
    assert [(r.run_id, r.verdict) for r in previous] == [("run-2", "passed"), ("run-3", "failed")]
    # Only runs that started before this one.
    earlier, _ = reference_runs(location, "demo", "", past_journal(2).started_at)
    assert [r.run_id for r in earlier or []] == ["run-1"]
    twin, _ = reference_runs(location, "demo", "unsound", later)
    assert [r.run_id for r in twin or []] == ["run-4"]
    assert reference_runs("none", "demo", "", later) == (
        None,
        "the run history is off (--history none)",
    )


class _Gateway(BaseHTTPRequestHandler):
    """A stub OpenAI-compatible gateway answering two tokens after ``delay`` seconds."""

    protocol_version = "HTTP/1.1"
    delay = 0.0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        time.sleep(self.delay)
        chunks = [{"choices": [{"index": 0, "delta": {"content": "hi "}, "finish_reason": f}]}
                  for f in (None, "stop")]  # fmt: skip
        payload = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
        reply(self, payload + b"data: [DONE]\n\n", "text/event-stream")

    def do_GET(self) -> None:
        reply(self, b"ok", "text/plain")

    def log_message(self, *args: Any) -> None:
        pass


def test_a_run_slower_than_the_last_that_passed_fails_naming_it(tmp_path: Path) -> None:
    drill = tmp_path / "drill.yaml"
    drill.write_text(DRILL)
    history = str(tmp_path / "history.sqlite")
    runs = []
    for delay, label in ((0.0, "v1"), (0.3, "v2")):
        _Gateway.delay = delay
        out = tmp_path / label
        with serving(_Gateway) as url:
            result, [journal] = run_drill(
                drill, out, "--gateway", url, "--history", history, "--label", label, timeout=120
            )
        runs.append((result, {c["label"]: c for c in journal["checks"]}, journal))
    (first, first_checks, first_journal), (second, second_checks, _) = runs
    # The first run has nothing to compare with: its own verdict, not conclusive, and why.
    assert first.returncode == 0, first.stdout + first.stderr
    e2e = first_checks["e2e.p50 during steady"]
    assert e2e["passed"] and e2e["conclusive"] is False and e2e["reference"] is None
    assert "the history has no earlier run of this drill" in e2e["reason"], e2e
    # The second, 0.3 s slower at the median, fails against the first (50% of a few ms).
    assert second.returncode == 1, second.stdout + second.stderr
    e2e = second_checks["e2e.p50 during steady"]
    assert not e2e["passed"], e2e
    assert e2e["reference"]["run_id"] == first_journal["run_id"]
    assert e2e["reference"]["label"] == "v1" and e2e["reference"]["which"] == "last_passed"
    assert f"worse than run {first_journal['run_id']} (v1)'s" in e2e["reason"], e2e
    assert "no worse than the last passed run by 50%" in second.stdout, second.stdout
