"""`drills gameday`: drills in order with people in the loop (pre-answered and live checkpoints,
observer notes from another terminal) and one combined report."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from drills.gameday import load_plan
from drills.model.gameday_journal import DayJournal
from drills.model.journal import Journal
from drills.model.score import score_of
from reports.gameday import render_html, render_markdown
from tests.conftest import RunningStack, drills_cli, isolated_env

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "scenarios" / "tiny.yaml"
RUNBOOK = ROOT / "scenarios" / "runbooks" / "llm-latency.md"

PLAN = f"""
gameday: test-day
title: A short game day (tests)
facilitator: dana
steps:
  - note: Welcome; the kill switch is drills abort.
  - checkpoint: {{id: go-ahead, ask: "On-call approves faults now", who: on-call,
                  runbook: "{RUNBOOK}#before-you-start"}}
  - drill: {TINY}
    notes: Watch the dashboard.
  - checkpoint: {{id: banner, ask: "Did the banner show?", who: product, on_no: continue,
                  runbook: "{RUNBOOK}#fallback"}}
  - checkpoint: {{id: retro, kind: answer, ask: "What do we fix first?", who: facilitator}}
"""


def write(tmp_path: Path, plan: str = PLAN, answers: str | None = None) -> list[str]:
    (tmp_path / "plan.yaml").write_text(plan)
    args = [str(tmp_path / "plan.yaml"), "--out", str(tmp_path / "days")]
    if answers is not None:
        (tmp_path / "answers.yaml").write_text(answers)
        args += ["--answers", str(tmp_path / "answers.yaml")]
    return args


def day_journal(tmp_path: Path) -> dict:
    return json.loads(next((tmp_path / "days").glob("gameday-*/gameday.json")).read_text())


@pytest.mark.stack
def test_a_game_day_with_rehearsed_and_live_checkpoints_and_notes(
    stack: RunningStack, toxi: object, tmp_path: Path
) -> None:
    env = isolated_env(tmp_path)
    args = write(tmp_path, answers="answers:\n  go-ahead: {answer: 'yes', by: carol}\n")
    proc = subprocess.Popen(
        drills_cli(
            "gameday",
            *args,
            "--gateway",
            stack.gateway_url,
            "--toxiproxy",
            stack.toxiproxy_url,
        ),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdin is not None
    try:
        deadline = time.monotonic() + 90
        while not stack.toxics():  # the drill's fault is on: an observer writes a note
            assert time.monotonic() < deadline and proc.poll() is None, "the drill never started"
            time.sleep(0.2)
        note = subprocess.run(
            drills_cli("note", "p99 jumped on the dashboard", "--by", "bob"),
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
        assert note.returncode == 0 and "noted in gameday test-day" in note.stdout
        # The people in the room answer at the prompts: a note, a confirmation, a name, an answer.
        out, err = proc.communicate(
            "note: banner flickered once\nyes\nalice\nraise the request timeout\nerin\n",
            timeout=240,
        )
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out + err
    assert "[checkpoint banner] (product) Did the banner show?" in err
    assert "verdict: passed" in out and out.strip().endswith("index.html")

    day = day_journal(tmp_path)
    assert day["verdict"] == "passed" and day["status"] == "completed"
    steps = {s.get("id") or s["kind"]: s for s in day["steps"]}
    assert steps["go-ahead"]["by"] == "carol" and steps["go-ahead"]["source"] == "rehearsal"
    assert steps["banner"]["answer"] == "yes" and steps["banner"]["by"] == "alice"
    assert steps["banner"]["source"] == "terminal"
    assert steps["retro"]["answer"] == "raise the request timeout"
    assert steps["drill"]["verdict"] == "passed"
    notes = {(n["by"], n["text"]) for n in day["notes"]}
    assert notes == {("bob", "p99 jumped on the dashboard"), ("room", "banner flickered once")}
    # One timeline, in time order, holding the drill's own events and the people's.
    events = [(e["source"], e["event"]) for e in day["timeline"]]
    times = [e["time"] for e in day["timeline"]]
    assert times == sorted(times)
    for expected in [
        ("checkpoint", "answered"),
        ("tiny", "phase_start"),
        ("tiny", "fault_applied"),
        ("tiny", "fault_reverted"),
        ("observer", "note"),
        ("drill", "drill_end"),
    ]:
        assert expected in events, expected
    # The drill's events are recorded as they happen, so bob's note (written while the fault
    # was on) stands between the fault's application and its revert.
    assert (
        events.index(("tiny", "fault_applied"))
        < events.index(("observer", "note"))
        < events.index(("tiny", "fault_reverted"))
    )
    # Runbook coverage: steps reached by a check or a checkpoint vs never reached.
    (runbook,) = day["runbooks"]
    coverage = {s["anchor"]: s["exercised"] for s in runbook["steps"]}
    assert coverage == {
        "before-you-start": True,
        "timeouts": False,
        "fallback": True,
        "breakers": False,
        "recovery": False,
        "detection": False,
    }
    by = {s["anchor"]: s["by"] for s in runbook["steps"]}
    assert {"by": "checkpoint go-ahead", "passed": True} in by["before-you-start"]
    assert {"by": "tiny: error_rate during fault", "passed": True} in by["fallback"]
    # The day's resilience score is its one drill's, which is its checks' (drills.model.score).
    drill = Journal.read(Path(steps["drill"]["run_dir"]))
    assert drill.score is not None and drill.score == score_of(drill.checks, "judged")
    assert steps["drill"]["score"]["value"] == day["score"]["value"] == drill.score.value
    page = next((tmp_path / "days").glob("gameday-*/index.html")).read_text()
    assert f"Resilience score {drill.score.value:g}/100" in page

    # Who saw it: the drill's detection matrix is on the day, and the day's report opens with
    # it (200 ms on one replica at one user: no error; no Prometheus named, so no alerts read).
    (row,) = steps["drill"]["detection"]
    assert row["what"] == "toxiproxy.latency on vllm-0" and row["phase"] == "fault", row
    day_dir = Path(out.strip().splitlines()[-1].removeprefix("report: ")).parent
    html = (day_dir / "index.html").read_text()
    for text in ("Timeline, minute by minute", "never reached", "alice", "p99 jumped"):
        assert text in html
    assert html.index("Who saw it, how fast") < html.index("<h2>Drills</h2>")
    assert "toxiproxy.latency on vllm-0 (fault)" in html and "alerts not read" in html
    assert (day_dir / "runs").is_dir() and (day_dir / "junit.xml").exists()
    assert "banner" in (day_dir / "junit.xml").read_text()
    assert stack.toxics() == []


def test_a_no_at_a_stop_checkpoint_ends_the_day_before_its_drills(tmp_path: Path) -> None:
    args = write(tmp_path, answers="answers:\n  go-ahead: {answer: 'no', by: the on-call}\n")
    result = subprocess.run(
        drills_cli(
            "gameday", *args, "--gateway", "http://127.0.0.1:1", "--toxiproxy", "http://127.0.0.1:1"
        ),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 1, result.stderr
    day = day_journal(tmp_path)
    assert day["status"] == "stopped" and day["stop_reason"] == "checkpoint go-ahead"
    assert day["verdict"] == "failed"
    assert [s["kind"] for s in day["skipped"]] == ["drill", "checkpoint", "checkpoint"]
    assert not any(s["kind"] == "drill" for s in day["steps"])
    html = (Path(next((tmp_path / "days").glob("gameday-*"))) / "index.html").read_text()
    assert "the day stopped before this step" in html


def test_end_of_input_at_a_checkpoint_is_no_answer(tmp_path: Path) -> None:
    result = subprocess.run(
        drills_cli(
            "gameday",
            *write(tmp_path),
            "--gateway",
            "http://127.0.0.1:1",
            "--toxiproxy",
            "http://127.0.0.1:1",
        ),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 1
    step = day_journal(tmp_path)["steps"][1]
    assert step["answer"] is None and step["source"] == "end-of-input"


def test_bad_plans_and_answers_are_located(tmp_path: Path) -> None:
    bad = PLAN.replace(f"drill: {TINY}", "drill: missing.yaml").replace(
        "- note: Welcome", "- note: Welcome\n    drill: x.yaml\n  - note: Hi"
    )
    (tmp_path / "plan.yaml").write_text(bad)
    result = subprocess.run(
        drills_cli("gameday", str(tmp_path / "plan.yaml"), "--dry-run"),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
    )
    assert result.returncode == 2
    assert "steps[0]: a step is exactly one of: note, checkpoint, drill (got note, drill)" in (
        result.stderr
    )
    (tmp_path / "plan.yaml").write_text(PLAN.replace(f"drill: {TINY}", "drill: missing.yaml"))
    result = subprocess.run(
        drills_cli("gameday", str(tmp_path / "plan.yaml"), "--dry-run"),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
    )
    assert result.returncode == 2 and "steps[2].drill: no such scenario file 'missing.yaml'" in (
        result.stderr
    )
    (tmp_path / "answers.yaml").write_text("answers:\n  go-ahed: 'yes'\n")
    (tmp_path / "plan.yaml").write_text(PLAN)
    result = subprocess.run(
        drills_cli(
            "gameday", str(tmp_path / "plan.yaml"), "--answers", str(tmp_path / "answers.yaml")
        ),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
    )
    assert result.returncode == 2
    assert "answers.yaml:2 answers.go-ahed: the plan has no such checkpoint; expected one of: " in (
        result.stderr
    )


def test_the_shipped_plan_loads_with_its_rehearsal_answers() -> None:
    plan, _, drills = load_plan(ROOT / "scenarios" / "gameday-quarterly.yaml")
    # The seed's four quarterly drills, every one of them a drill (none left to do by hand).
    assert [s.drill for s in plan.steps if s.drill] == [
        "inference-latency.yaml",
        "gpu-pod-loss.yaml",
        "vector-db-outage.yaml",
        "tool-saturation.yaml",
    ]
    assert len(drills) == 4
    result = subprocess.run(
        drills_cli(
            "gameday",
            str(ROOT / "scenarios" / "gameday-quarterly.yaml"),
            "--dry-run",
            "--answers",
            str(ROOT / "scenarios" / "gameday-rehearsal.yaml"),
        ),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "pre-answered: yes" in result.stdout


def _sign(layer: str, after: float | None, what: str, runbook: str | None = None) -> dict:
    return {"layer": layer, "after": after, "what": what, "runbook": runbook}


def test_the_days_report_opens_with_who_was_paged_for_what_and_how_fast(tmp_path: Path) -> None:
    """Rendered from a day's record alone: per drill and fault, the first sign, the alerts that
    fired and the pages, each with its time and runbook step; a fault no one saw, and an alert
    that fired but paged no one, stand out."""
    runbook = "runbooks/gpu-pod-loss.md#replacement"
    kill = {
        "fault": 0,
        "what": "process.kill on vllm-0",
        "phase": "fault",
        "applied_at": 100.0,
        "detected": True,
        "signs": [
            _sign("client", None, "every answer during the fault was a normal one"),
            _sign("engine, its metrics", 0.8, "vllm-0: its metrics stopped answering (refused)"),
            _sign("alert pending", 1.9, "LLMEngineDown{instance=vllm-0}", runbook),
            _sign("alert firing", 6.9, "LLMEngineDown{instance=vllm-0}", runbook),
            _sign("page", 8.1, "LLMEngineDown reached the pager (receiver oncall)", runbook),
        ],
    }
    slow = {
        "fault": 0,
        "what": "toxiproxy.latency on vllm-1",
        "phase": "fault",
        "applied_at": 200.0,
        "detected": False,
        "signs": [
            _sign("client", None, "every answer during the fault was a normal one"),
            _sign("alert firing", None, "nothing fired"),
        ],
    }
    unpaged = {**slow, "what": "toxiproxy.down on vllm-1", "detected": True}
    unpaged["signs"] = [
        _sign("alert firing", 3.0, "LLMBreakerOpen{upstream=vllm-1}"),
        _sign("page", None, "not read: the drill runs no pager"),
    ]
    day = {
        "gameday": "g",
        "title": "Quarterly",
        "verdict": "failed",
        "status": "completed",
        "started_at": 0.0,
        "ended_at": 600.0,
        "steps": [
            {"kind": "drill", "drill": "pod-loss", "verdict": "passed", "detection": [kill]},
            {"kind": "drill", "drill": "latency", "verdict": "failed", "detection": [slow]},
            {"kind": "drill", "drill": "hop-down", "verdict": "passed", "detection": [unpaged]},
            {"kind": "drill", "drill": "not-run", "verdict": "error", "error": "refused"},
        ],
        "skipped": [],
        "timeline": [],
        "runbooks": [],
        "notes": [],
    }
    journal = DayJournal.of(day)
    html = render_html(journal, tmp_path)
    assert html.index("Who saw it, how fast") < html.index("<h2>Drills</h2>")
    table = html[html.index('<table id="detection">') : html.index("</table>")]
    rows = table.split("<tr")[2:]
    assert len(rows) == 3, table
    assert "engine, its metrics +0.8s: vllm-0: its metrics stopped answering" in rows[0]
    assert f"LLMEngineDown{{instance=vllm-0}} +6.9s -&gt; {runbook}" in rows[0]
    assert "LLMEngineDown reached the pager (receiver oncall) +8.1s" in rows[0]
    assert 'class="fail"' in rows[1] and "not detected" in rows[1] and "no alert fired" in rows[1]
    assert "names no runbook step" in rows[2] and "no pager ran" in rows[2]
    md = render_markdown(journal)
    assert md.index("Who saw it, how fast") < md.index("| step | what | result |")
    assert (
        "| `latency` | toxiproxy.latency on vllm-1 (fault) | not detected | no alert fired | "
        "nobody was paged |"
    ) in md, md


def test_the_days_journal_is_typed_and_reads_its_first_format(tmp_path: Path) -> None:
    """``gameday.json`` is written through ``DayJournal`` (format 2, every field present); a
    format-1 journal (the same shape, written as a plain dict) reads and renders the same."""
    first = {
        "format": 1,
        "gameday": "g",
        "title": "T",
        "status": "completed",
        "verdict": "passed",
        "started_at": 0.0,
        "ended_at": 60.0,
        "steps": [
            {
                "index": 0,
                "kind": "checkpoint",
                "started_at": 1.0,
                "id": "go",
                "ask": "Go?",
                "answer": "yes",
                "by": "carol",
                "source": "rehearsal",
                "confirmed": True,
            },
            {
                "index": 1,
                "kind": "drill",
                "started_at": 2.0,
                "drill": "d",
                "verdict": "passed",
                "checks": [
                    {
                        "label": "error_rate",
                        "passed": True,
                        "observed_text": "0",
                        "expected": "< 0.01",
                        "runbook": None,
                    }
                ],
            },
        ],
        "timeline": [
            {
                "time": 1.0,
                "source": "checkpoint",
                "event": "answered",
                "id": "go",
                "answer": "yes",
                "by": "carol",
                "via": "rehearsal",
            }
        ],
    }
    old = tmp_path / "old"
    old.mkdir()
    (old / "gameday.json").write_text(json.dumps(first))
    day = DayJournal.load(old)
    assert day.format == 2 and day.checkpoints()[0].by == "carol"
    assert day.timeline[0].detail("answer") == "yes"
    new = tmp_path / "new"
    new.mkdir()
    day.write(new / "gameday.json")
    written = json.loads((new / "gameday.json").read_text())
    assert written["format"] == 2 and written["steps"][0]["drill"] is None
    assert written["timeline"][0]["via"] == "rehearsal"
    assert render_markdown(DayJournal.load(new)) == render_markdown(day)
    # A field the day does not know is refused where it is written, not lost.
    with pytest.raises(ValueError, match=r"steps\.0\.answred"):
        DayJournal.of({**first, "steps": [{**first["steps"][0], "answred": "yes"}]})  # type: ignore[dict-item]
