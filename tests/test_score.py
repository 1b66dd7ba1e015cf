"""The resilience score (``drills.model.score``): its formula on known runs, a game day's as its
drills' weighted by their checks, its fading in `drills history`, and where it is shown (the
journal, the reports, the run history). A real game day's score is checked in
tests/test_gameday.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from drills.engine.history import HistoryStore
from drills.model.journal import Journal
from drills.model.scenario import load_scenario
from drills.model.score import HALF_LIFE_DAYS, Score, combined, faded, score_of
from reports import render_all
from tests.conftest import isolated_env
from tests.helpers import problems


def _check(label: str, passed: bool, conclusive: bool | None = True, severity: str = "critical"):
    return {"label": label, "check": "error_rate", "during": None, "expected": "< 0.05",
            "observed": 0.0 if passed else 0.5, "observed_text": "0.000" if passed else "0.500",
            "passed": passed, "reason": "", "samples": 40, "runbook": None,
            "conclusive": conclusive, "severity": severity}  # fmt: skip


def _journal(checks: list[dict[str, Any]], started: float, run: int = 1) -> Journal:
    data = {
        "drill": "demo", "title": "demo", "run_id": f"run-{run}", "status": "completed",
        "deviated": not all(c["passed"] for c in checks), "started_at": started,
        "ended_at": started + 60, "stack": {"gateway": "http://127.0.0.1:1"},
        "checks": checks, "run_dir": "runs",
    }  # fmt: skip
    journal = Journal.model_validate(data)
    outcome = "judged"
    return journal.model_copy(update={"score": score_of(journal.checks, outcome)})


def test_the_score_is_the_weight_of_the_checks_that_passed() -> None:
    checks = _journal(
        [
            _check("a", True),  # critical, sure: 3 of 3
            _check("b", True, conclusive=False),  # critical, not conclusive: 1.5 of 3
            _check("c", False, severity="warning"),  # warning, failed: 0 of 1
            _check("d", True, severity="warning", conclusive=None),  # no interval: 1 of 1
        ],
        0,
    ).checks
    score = score_of(checks, "judged")
    assert score is not None
    assert score.value == pytest.approx(round(100 * (3 + 1.5 + 0 + 1) / 8, 1))  # 68.8
    assert (score.weight, score.checks, score.unsure, score.failed) == (8, 4, 1, 1)
    assert score.why == "2 passed, 1 passed, not conclusive (half credit), 1 failed"
    aborted = score_of(checks, "aborted")
    assert aborted is not None and aborted.value == 0 and aborted.weight == 8
    assert score_of(checks, "not scored") is None
    assert score_of([], "judged") is None


def test_a_game_days_score_weighs_each_drill_by_its_checks() -> None:
    heavy = Score(value=100, weight=9, checks=3)
    light = Score(value=0, weight=3, checks=1, failed=1)
    day = combined([heavy, None, light])
    assert day is not None and day.value == 75 and day.weight == 12 and day.failed == 1
    assert combined([None]) is None


def test_a_score_halves_for_every_half_life_without_a_run() -> None:
    day = 86400
    assert faded(80, 0) == 80
    assert faded(80, HALF_LIFE_DAYS * day) == 40
    assert faded(80, 2 * HALF_LIFE_DAYS * day) == 20
    assert faded(80, -5) == 80  # a clock that went back fades nothing


def test_a_severity_outside_the_two_is_refused_where_it_is_written(tmp_path: Path) -> None:
    source = Path(__file__).resolve().parent / "scenarios" / "tiny.yaml"
    text = source.read_text()
    assert "runbook:" in text
    path = tmp_path / "tiny.yaml"
    bad = text.replace("check: error_rate,", "check: error_rate, severity: fatal,", 1)
    assert bad != text
    path.write_text(bad.replace("../../scenarios/", str(source.parents[2] / "scenarios") + "/"))
    [problem] = problems(load_scenario, path)
    assert "severity" in problem and "'critical' or 'warning'" in problem, problem


def test_the_score_is_kept_shown_and_faded(tmp_path: Path) -> None:
    now = time.time()
    store = HistoryStore(tmp_path / "history.sqlite")
    old = _journal([_check("a", True), _check("b", False)], now - 60 * 86400, run=1)
    new = _journal([_check("a", True), _check("b", True)], now - 15 * 86400, run=2)
    for journal in (old, new):
        store.record(journal)
    assert [r.score for r in store.runs("demo")] == [50, 100]
    # The reports show it.
    new.write(tmp_path / "journal.json")
    reports = render_all(Journal.read(tmp_path / "journal.json"), tmp_path)
    assert "Resilience score 100/100" in reports["html"].read_text()
    assert "resilience score **100**/100 (2 passed)" in reports["markdown"].read_text()
    # `drills history`: the score of each run, and the last one's faded by its 15 days.
    shown = subprocess.run(
        [sys.executable, "-m", "drills.cli", "history", "demo", "--history",
         str(tmp_path / "history.sqlite")],
        capture_output=True, text=True, timeout=60, env=isolated_env(tmp_path),
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "resilience score (#1 ... #2; - not scored): 50  100" in shown.stdout, shown.stdout
    expected = faded(100, 15 * 86400)  # 70.7
    assert f"  now {expected:g}: the last scored run was 15 day(s) ago" in shown.stdout
    as_json = subprocess.run(
        [sys.executable, "-m", "drills.cli", "history", "demo", "--json", "--history",
         str(tmp_path / "history.sqlite")],
        capture_output=True, text=True, timeout=60, env=isolated_env(tmp_path),
    )  # fmt: skip
    data = json.loads(as_json.stdout)
    assert [r["score"] for r in data["runs"]] == [50, 100]
    assert data["score_now"] == pytest.approx(expected, abs=0.1)
