"""The run history (``drills.engine.history``) on a real SQLite file: runs kept with their
checks and read back per drill, twin and label; `drills history` as a table and as JSON; the
report's history table; a history that cannot be written loses nothing; locations this
version cannot keep are refused before anything runs. A real run keeps itself in the history
in tests/test_drill_run.py (test_cli_run_exit_code_and_report_path)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from drills.common.errors import InputError
from drills.common.ports import free_port
from drills.engine.history import (
    HistoryStore,
    PostgresHistory,
    Store,
    keep,
    open_history,
    reference_runs,
)
from drills.model.journal import Journal
from reports import render_all
from tests.conftest import isolated_env

T0 = 1_800_000_000.0


def journal(
    run: int,
    *,
    drill: str = "demo",
    p99: float = 1.2,
    label: str | None = None,
    twin: str | None = None,
    tmp_path: Path | None = None,
) -> Journal:
    """A run of ``drill`` ``run`` hours after T0: an error-rate check that passes and a p99
    that passes below 2 s."""
    started = T0 + run * 3600
    checks: list[dict[str, Any]] = [
        {"label": "error_rate during fault", "check": "error_rate", "during": "fault",
         "expected": "< 0.05", "observed": 0.0, "observed_text": "0.000", "passed": True,
         "reason": "", "samples": 40, "runbook": None, "interval": [0.0, 0.09],
         "conclusive": False},
        {"label": "e2e.p99 during fault", "check": "e2e.p99", "during": "fault",
         "expected": "< 2s", "observed": p99, "observed_text": f"{p99:.2f}s",
         "passed": p99 < 2, "reason": "", "samples": 40, "runbook": None},
    ]  # fmt: skip
    data: dict[str, Any] = {
        "drill": drill,
        "title": drill,
        "run_id": f"run-{run}",
        "status": "completed",
        "deviated": p99 >= 2,
        "started_at": started,
        "ended_at": started + 60,
        "stack": {"gateway": "http://127.0.0.1:1", "profile": "sound"},
        "checks": checks,
        "run_dir": str(tmp_path or Path("runs")),
        "label": label,
    }
    if twin is not None:
        data["twin"] = {"name": twin, "stack": "beside", "must_fail": ["e2e.p99 during fault"]}
    return Journal.model_validate(data)


def test_runs_are_kept_and_read_back_per_drill_twin_and_label(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite")
    store.record(journal(1, label="v1"))
    store.record(journal(3, label="v2", p99=3.0))
    store.record(journal(2, label="v1"))
    store.record(journal(4, twin="unsound", p99=5.0))
    store.record(journal(5, drill="other"))
    runs = store.runs("demo")
    assert [r.run_id for r in runs] == ["run-1", "run-2", "run-3"]  # oldest first
    assert [r.verdict for r in runs] == ["passed", "passed", "failed"]
    assert [(c.label, c.observed, c.passed) for c in runs[2].checks] == [
        ("error_rate during fault", 0.0, True),
        ("e2e.p99 during fault", 3.0, False),
    ]
    assert runs[0].checks[0].conclusive is False
    assert [r.run_id for r in store.runs("demo", label="v1")] == ["run-1", "run-2"]
    assert [r.run_id for r in store.runs("demo", last=2)] == ["run-2", "run-3"]
    assert [r.run_id for r in store.runs("demo", twin="unsound")] == ["run-4"]
    assert store.drills() == {"demo": 3, "other": 1}
    # Kept again (a report re-rendered and re-kept): replaced, not doubled.
    store.record(journal(3, label="v2", p99=3.0))
    assert len(store.runs("demo")) == 3


def test_a_run_is_kept_with_the_runs_before_it_and_its_report_shows_them(tmp_path: Path) -> None:
    where = str(tmp_path / "history.sqlite")
    for run, p99 in ((1, 1.1), (2, 1.3)):
        kept = keep(journal(run, label=f"v{run}", p99=p99), where)
        assert kept.history is not None and kept.history.written
    now = keep(journal(3, label="v3", p99=2.5, tmp_path=tmp_path), where)
    assert now.history is not None and now.history.written
    assert now.history.store == f"sqlite:///{(tmp_path / 'history.sqlite').resolve()}"
    assert [r.label for r in now.history.previous] == ["v1", "v2"]
    # The journal carries them: the reports render from it alone, after a round trip.
    now.write(tmp_path / "journal.json")
    reports = render_all(Journal.read(tmp_path / "journal.json"), tmp_path)
    html = reports["html"].read_text()
    table = html[html.index('<table id="history">') :]
    table = table[: table.index("</table>")]
    assert ">v1<br>" in table and ">v3<br>" in table
    assert '<td class="pass">1.10s</td><td class="pass">1.30s</td><td class="fail">2.50s</td>' in (
        table
    )
    summary = reports["markdown"].read_text()
    assert "History: the last 2 run(s) before this one: passed, passed" in summary
    assert "- e2e.p99 during fault **fails** now (2.50s); the last run: 1.30s" in summary
    # Off: nothing kept, nothing shown.
    off = keep(journal(4), "none")
    assert off.history is None
    assert len(HistoryStore(tmp_path / "history.sqlite").runs("demo")) == 3


def test_a_history_that_cannot_be_written_loses_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    kept = keep(journal(1, tmp_path=tmp_path), str(blocker / "history.sqlite"))
    assert kept.history is not None and not kept.history.written
    assert "could not keep the run in sqlite:///" in (kept.history.reason or "")
    assert [c.label for c in kept.checks] == ["error_rate during fault", "e2e.p99 during fault"]
    # The journal and its reports are complete, and say so.
    kept.write(tmp_path / "journal.json")
    reports = render_all(Journal.read(tmp_path / "journal.json"), tmp_path)
    assert "this run is not in it: could not keep the run" in reports["html"].read_text()
    assert "This run is not in the run history" in reports["markdown"].read_text()


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ("mysql://drills:secret@db.example/drills", r"'mysql://drills:\*\*\*@db.example/drills'"),
        ("sqlite://relative.sqlite", "sqlite:///ABSOLUTE/PATH"),
        ("redis://localhost", "unknown kind 'redis'"),
    ],
)
def test_a_history_this_version_cannot_keep_is_refused(where: str, said: str) -> None:
    with pytest.raises(InputError, match=said):
        open_history(where)


def drills(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "drills.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=isolated_env(tmp_path),
    )


def test_drills_history_shows_each_check_across_the_runs(tmp_path: Path) -> None:
    where = tmp_path / "history.sqlite"
    store = HistoryStore(where)
    for run, p99 in ((1, 1.1), (2, 2.4), (3, 1.2)):
        store.record(journal(run, label=f"v{run}", p99=p99))
    shown = drills(tmp_path, "history", "demo", "--history", str(where))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("demo: the last 3 run(s) in sqlite:///")
    assert lines[1].split()[:2] == ["#1", "run-1"] and lines[1].endswith("passed      v1")
    assert "failed" in lines[2]
    assert "  error_rate during fault  0.000?  0.000?  0.000?" in lines
    assert "  e2e.p99 during fault     1.10s  2.40s!  1.20s" in lines
    as_json = json.loads(drills(tmp_path, "history", "demo", "--history", str(where),
                                "--json", "--last", "2").stdout)  # fmt: skip
    assert [r["run_id"] for r in as_json["runs"]] == ["run-2", "run-3"]
    listed = drills(tmp_path, "history", "--history", str(where))
    assert listed.returncode == 0 and "  demo: 3 run(s)" in listed.stdout
    # A drill with no runs: said, with the drills that have some, exit 2.
    unknown = drills(tmp_path, "history", "dmeo", "--history", str(where))
    assert unknown.returncode == 2
    assert "no run of 'dmeo' in sqlite:///" in unknown.stderr
    assert "drills with runs: demo (3)" in unknown.stderr


def test_a_bad_history_flag_is_refused_before_the_run(tmp_path: Path) -> None:
    scenario = Path(__file__).resolve().parent / "scenarios" / "tiny.yaml"
    refused = drills(tmp_path, "run", str(scenario), "--history", "mysql://u:p@db/x", "--dry-run")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "unknown kind 'mysql'" in refused.stderr
    assert "u:p" not in refused.stderr  # the URL's credentials are not echoed


def _kept_everywhere(stores: list[Store]) -> None:
    for store in stores:
        for run, p99, label in ((1, 1.1, "v1"), (2, 2.4, "v2"), (3, 1.2, "v1")):
            store.record(journal(run, label=label, p99=p99))
        store.record(journal(4, twin="unsound", p99=5.0))
        store.record(journal(5, drill="other"))
        store.record(journal(2, label="v2", p99=2.4))  # kept again: replaced


def test_a_postgresql_history_keeps_and_reads_what_an_sqlite_one_does(
    tmp_path: Path, postgres_db: str
) -> None:
    """The same runs kept in a real PostgreSQL server and in an SQLite file read back the same,
    to the last digit of their times."""
    sqlite, postgres = open_history(str(tmp_path / "h.sqlite")), open_history(postgres_db)
    assert isinstance(postgres, PostgresHistory) and sqlite is not None
    _kept_everywhere([sqlite, postgres])
    for drill, twin, label in (("demo", "", None), ("demo", "", "v1"), ("demo", "unsound", None)):
        runs = postgres.runs(drill, twin=twin, label=label)
        assert runs and runs == sqlite.runs(drill, twin=twin, label=label)
    assert [r.started_at for r in postgres.runs("demo")] == [T0 + 3600 * n for n in (1, 2, 3)]
    assert postgres.drills() == sqlite.drills() == {"demo": 3, "other": 1}
    later = T0 + 9 * 3600
    assert reference_runs(postgres_db, "demo", "", later) == reference_runs(
        str(tmp_path / "h.sqlite"), "demo", "", later
    )
    # A run kept through `keep` carries the runs before it, from PostgreSQL.
    now = keep(journal(6, label="v3", tmp_path=tmp_path), postgres_db)
    assert now.history is not None and now.history.written, now.history
    assert now.history.store == postgres_db
    assert [r.run_id for r in now.history.previous] == ["run-1", "run-2", "run-3"]


def test_an_unreachable_postgresql_history_loses_nothing_and_shows_no_password(
    tmp_path: Path,
) -> None:
    closed = f"postgresql://drills:s3cret@127.0.0.1:{free_port()}/drills"
    kept = keep(journal(1, tmp_path=tmp_path), closed)
    assert kept.history is not None and not kept.history.written
    reason = kept.history.reason or ""
    assert reason.startswith("could not keep the run in postgresql://drills:***@127.0.0.1:")
    assert "s3cret" not in reason and "s3cret" not in kept.history.store
    assert len(kept.checks) == 2  # the run's own account is whole
    # Reading it: one line, exit 1, no password.
    shown = drills(tmp_path, "history", "demo", "--history", closed)
    assert shown.returncode == 1, shown.stdout + shown.stderr
    [line] = shown.stderr.splitlines()
    assert line.startswith("drills: postgresql://drills:***@127.0.0.1:"), line
    assert "s3cret" not in shown.stderr


def test_drills_history_reads_a_postgresql_history(tmp_path: Path, postgres_db: str) -> None:
    store = open_history(postgres_db)
    assert store is not None
    _kept_everywhere([store])
    shown = drills(tmp_path, "history", "demo", "--history", postgres_db, "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["store"] == postgres_db
    assert [r["run_id"] for r in data["runs"]] == ["run-1", "run-2", "run-3"]
    listed = drills(tmp_path, "history", "--history", postgres_db)
    assert listed.returncode == 0 and "  demo: 3 run(s)" in listed.stdout, listed.stdout
