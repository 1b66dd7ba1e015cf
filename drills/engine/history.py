"""The run history: every run's verdict and checks, kept so that "is this release worse than
last week's?" has an answer (``drills history DRILL``, and each report's history table).

Where it is kept (``--history``, else ``$DRILLS_HISTORY``, else
``$XDG_STATE_HOME/drills/history.sqlite``):

- an SQLite file: ``sqlite:///ABSOLUTE/PATH`` or a plain path;
- a team's shared PostgreSQL: ``postgresql://USER:PASSWORD@HOST:PORT/DATABASE`` (libpq's URL,
  its ``?sslmode=...`` and the ``PG*`` variables included), through psycopg 3; the tables are
  made on first use, under an advisory lock so that two runs ending at once agree;
- ``none``: no history; the runs are in their journals only.

Each run is one row of ``runs`` (its drill, twin, label, times, verdict, journal's folder) and
one row of ``checks`` per check (label, observed value and text, passed, conclusive, interval).
Twin runs are kept beside their drill's, under the twin's name, and compared only with runs of
the same twin. Keeping a run never fails it: a history that cannot be written is said in the
journal (``history.written: false`` and why), and the run, its journal and its reports are
complete all the same.
"""

from __future__ import annotations

import os
import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager, closing, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from drills.common.errors import HistoryError, InputError
from drills.common.system import state_home
from drills.model.journal import Journal, PastCheck, PastRun, RunHistory

__all__ = [
    "HistoryStore",
    "PostgresHistory",
    "Store",
    "default_location",
    "keep",
    "open_history",
    "reference_runs",
]

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    drill TEXT NOT NULL,
    twin TEXT NOT NULL DEFAULT '',
    label TEXT,
    started_at REAL NOT NULL,
    ended_at REAL NOT NULL,
    verdict TEXT NOT NULL,
    scenario_path TEXT,
    run_dir TEXT,
    kept_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_drill ON runs (drill, twin, started_at);
CREATE TABLE IF NOT EXISTS checks (
    run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    label TEXT NOT NULL,
    check_name TEXT NOT NULL,
    observed REAL,
    observed_text TEXT NOT NULL,
    expected TEXT NOT NULL,
    passed INTEGER NOT NULL,
    conclusive INTEGER,
    low REAL,
    high REAL,
    samples INTEGER NOT NULL,
    PRIMARY KEY (run_id, position)
);
CREATE TABLE IF NOT EXISTS scores (
    run_id TEXT PRIMARY KEY REFERENCES runs (run_id) ON DELETE CASCADE,
    score REAL NOT NULL,
    weight REAL NOT NULL
);
"""

PG_SCHEMA = SCHEMA.replace(" REAL", " DOUBLE PRECISION")
"""The same tables in PostgreSQL, whose REAL is a 4-byte float: times to the second need 8."""
PG_LOCK = 0x647269_6C6C73  # pg_advisory_xact_lock's key for making the tables ("drills")

PREVIOUS = 10
"""How many earlier runs a journal carries for its report."""


def default_location() -> str:
    """``$DRILLS_HISTORY``, else the SQLite file beside the ledger and the run registry."""
    return os.environ.get("DRILLS_HISTORY") or str(state_home() / "history.sqlite")


def open_history(location: str | None) -> Store | None:
    """The store at ``location`` (``None``: the default one); ``None`` for ``none``.
    ``InputError`` for a location of a kind this version cannot keep a history in."""
    where = default_location() if location is None else location
    if where.strip().lower() == "none":
        return None
    scheme, sep, rest = where.partition("://")
    if not sep:
        return HistoryStore(Path(where).expanduser())
    if scheme == "sqlite":
        if not rest.startswith("/"):
            raise InputError(
                f"--history {where!r}: an SQLite history is sqlite:///ABSOLUTE/PATH (three "
                "slashes) or a plain path"
            )
        return HistoryStore(Path(rest))
    if scheme in ("postgresql", "postgres"):
        return PostgresHistory(where)
    raise InputError(
        f"--history {masked(where)!r}: unknown kind {scheme!r}; allowed: a path, "
        "sqlite:///PATH, postgresql://USER@HOST:PORT/DATABASE, none"
    )


def masked(url: str) -> str:
    """``url`` with its password, if any, shown as ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


class Store(ABC):
    """A history of runs and their checks in an SQL database; the two kinds below differ in
    how they connect and in how a statement names its parameters."""

    schema = SCHEMA
    marker = "?"

    @property
    @abstractmethod
    def location(self) -> str:
        """Where it is, as a URL, its password masked."""

    @abstractmethod
    def _connect(self) -> AbstractContextManager[Any]:
        """One transaction on a connection whose tables exist; ``HistoryError`` for any
        failure of the database's, in one line."""

    def _sql(self, statement: str) -> str:
        return statement.replace("?", self.marker)

    def record(self, journal: Journal) -> None:
        """Keep ``journal``'s run and checks (again, if it was kept before: replaced)."""
        twin = journal.twin.name if journal.twin else ""
        sql = self._sql
        with self._connect() as db:
            db.execute(sql("DELETE FROM runs WHERE run_id = ?"), (journal.run_id,))
            db.execute(
                sql(
                    "INSERT INTO runs (run_id, drill, twin, label, started_at, ended_at, "
                    "verdict, scenario_path, run_dir, kept_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                (
                    journal.run_id,
                    journal.drill,
                    twin,
                    journal.label,
                    journal.started_at,
                    journal.ended_at,
                    journal.verdict,
                    journal.scenario_path,
                    journal.run_dir,
                    time.time(),
                ),
            )
            db.cursor().executemany(
                sql(
                    "INSERT INTO checks (run_id, position, label, check_name, observed, "
                    "observed_text, expected, passed, conclusive, low, high, samples) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                [
                    (
                        journal.run_id,
                        i,
                        c.label,
                        c.check,
                        c.observed,
                        c.observed_text,
                        c.expected,
                        int(c.passed),
                        None if c.conclusive is None else int(c.conclusive),
                        c.interval[0] if c.interval else None,
                        c.interval[1] if c.interval else None,
                        c.samples,
                    )
                    for i, c in enumerate(journal.checks)
                ],
            )
            if journal.score is not None:
                db.execute(
                    sql("INSERT INTO scores (run_id, score, weight) VALUES (?, ?, ?)"),
                    (journal.run_id, journal.score.value, journal.score.weight),
                )

    def runs(
        self,
        drill: str,
        *,
        twin: str = "",
        label: str | None = None,
        last: int = 20,
        before: float | None = None,
        verdict: str | None = None,
    ) -> list[PastRun]:
        """The last ``last`` runs of ``drill`` (on ``twin``; with ``label``; started before
        ``before``; with ``verdict``), oldest first, each with its checks."""
        query = (
            "SELECT runs.run_id, label, started_at, verdict, score FROM runs "
            "LEFT JOIN scores ON scores.run_id = runs.run_id WHERE drill = ? AND twin = ?"
        )
        args: list[object] = [drill, twin]
        if label is not None:
            query += " AND label = ?"
            args.append(label)
        if verdict is not None:
            query += " AND verdict = ?"
            args.append(verdict)
        if before is not None:
            query += " AND started_at < ?"
            args.append(before)
        query += " ORDER BY started_at DESC LIMIT ?"
        args.append(last)
        with self._connect() as db:
            rows = db.execute(self._sql(query), args).fetchall()
            runs = []
            for run_id, run_label, started_at, verdict, score in reversed(rows):
                checks = [
                    PastCheck(
                        label=c[0],
                        observed=c[1],
                        observed_text=c[2],
                        passed=bool(c[3]),
                        conclusive=None if c[4] is None else bool(c[4]),
                    )
                    for c in db.execute(
                        self._sql(
                            "SELECT label, observed, observed_text, passed, conclusive "
                            "FROM checks WHERE run_id = ? ORDER BY position"
                        ),
                        (run_id,),
                    ).fetchall()
                ]
                runs.append(
                    PastRun(
                        run_id=run_id,
                        label=run_label,
                        started_at=started_at,
                        verdict=verdict,
                        checks=checks,
                        score=score,
                    )
                )
        return runs

    def drills(self) -> dict[str, int]:
        """Every drill the history has runs of (its own, not its twins'), with their count."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT drill, COUNT(*) FROM runs WHERE twin = '' GROUP BY drill ORDER BY drill"
            ).fetchall()
        return {drill: count for drill, count in rows}


class HistoryStore(Store):
    """An SQLite file of runs and their checks."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def location(self) -> str:
        return f"sqlite:///{self.path.resolve()}"

    def drills(self) -> dict[str, int]:
        return super().drills() if self.path.exists() else {}  # reading makes no file

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Runs of a gate or of two users on one machine may end at once: wait for the lock.
            with closing(sqlite3.connect(self.path, timeout=30)) as db:
                db.execute("PRAGMA foreign_keys = ON")
                with db:  # one transaction
                    db.executescript(self.schema)
                with db:
                    yield db
        except (sqlite3.Error, OSError) as exc:
            raise HistoryError(f"{self.location}: {exc}") from exc


class PostgresHistory(Store):
    """A team's shared PostgreSQL database of runs and their checks."""

    schema = PG_SCHEMA
    marker = "%s"

    def __init__(self, url: str, connect_timeout: float = 10) -> None:
        self.url = url
        self.connect_timeout = connect_timeout

    @property
    def location(self) -> str:
        return masked(self.url)

    @contextmanager
    def _connect(self) -> Iterator[Any]:
        # Imported here: psycopg (0.2 s) only for a PostgreSQL history.
        import psycopg

        try:
            timeout = max(1, round(self.connect_timeout))
            with psycopg.connect(self.url, connect_timeout=timeout) as db:
                # Two runs ending at once both make the tables: one at a time.
                db.execute("SELECT pg_advisory_xact_lock(%s)", (PG_LOCK,))
                db.execute(self.schema)
                db.commit()
                yield db  # committed when the block ends, rolled back on an error
        except psycopg.Error as exc:
            message = " ".join(str(exc).split()) or type(exc).__name__
            raise HistoryError(f"{self.location}: {message}") from exc


def reference_runs(
    location: str | None, drill: str, twin: str, before: float
) -> tuple[list[PastRun] | None, str | None]:
    """The runs a relative bound may compare with (``drills.engine.relative``): the last
    earlier run of ``drill`` on ``twin`` started before ``before``, and the last such run that
    passed, oldest first. ``(None, why)`` when no history can be read; never raises for it."""
    try:
        store = open_history(location)
    except InputError as exc:
        return None, str(exc)
    if store is None:
        return None, "the run history is off (--history none)"
    try:
        last = store.runs(drill, twin=twin, last=1, before=before)
        passed = store.runs(drill, twin=twin, last=1, before=before, verdict="passed")
    except HistoryError as exc:
        return None, f"could not read the run history {exc}"
    return sorted({r.run_id: r for r in last + passed}.values(), key=lambda r: r.started_at), None


def keep(journal: Journal, location: str | None) -> Journal:
    """``journal`` kept in the history at ``location`` (``None``: the default), with the
    history's account of it and the runs before it. Never raises for the store: a history
    that cannot be opened or written is said in ``journal.history`` instead."""
    try:
        store = open_history(location)
    except InputError as exc:  # validated before the run; kept safe here all the same
        return journal.model_copy(
            update={"history": RunHistory(store=str(location), written=False, reason=str(exc))}
        )
    if store is None:
        return journal
    twin = journal.twin.name if journal.twin else ""
    try:
        previous = store.runs(journal.drill, twin=twin, last=PREVIOUS, before=journal.started_at)
        store.record(journal)
    except HistoryError as exc:
        reason = f"could not keep the run in {exc}"
        history = RunHistory(store=store.location, written=False, reason=reason)
    else:
        history = RunHistory(store=store.location, written=True, previous=previous)
    return journal.model_copy(update={"history": history})
