"""A real PostgreSQL server for the run-history tests: Debian's PostgreSQL (``postgresql``, which
stack/bootstrap.sh installs for the test command without starting its service), a cluster made
by initdb in a temporary folder, on a free loopback port, started once per test session and
stopped at its end. ``postgres_db`` gives each test a database of its own."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from drills.common.ports import free_port

__all__ = ["postgres_db", "postgres_server"]


def _binaries() -> Path | None:
    """The bin folder of the newest PostgreSQL Debian installed (its commands are not on PATH)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: p.parts[-3])
    return found[-1].parent if found else None


def _as_postgres(argv: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run it as Debian's ``postgres`` user."""
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL of a PostgreSQL server (trust authentication on loopback, user ``drills``)."""
    binaries = _binaries()
    if binaries is None:
        pytest.fail(
            "the PostgreSQL history tests start a real PostgreSQL: they need Debian's "
            "postgresql package (stack/bootstrap.sh installs it for `pytest` when run as root)"
        )
    # Not under pytest's temporary folders: those are root's alone, and the server runs as
    # the postgres user.
    root = Path(tempfile.mkdtemp(prefix="drills-pg-"))
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sockets, "postgres")
    subprocess.run(
        _as_postgres([str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "drills",
                      "-E", "UTF8", "--no-sync"]),
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    port = free_port()
    log = open(root / "postgres.log", "wb")  # noqa: SIM115 - closed at teardown
    server = subprocess.Popen(
        _as_postgres([str(binaries / "postgres"), "-D", str(data), "-p", str(port),
                      "-k", str(sockets), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"]),
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"postgresql://drills@127.0.0.1:{port}/postgres"
    try:
        _wait_ready(url, server, root / "postgres.log")
        yield url
    finally:
        _stop(server, data)
        log.close()
        shutil.rmtree(root, ignore_errors=True)


def _wait_ready(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    import psycopg

    deadline = time.monotonic() + 60
    while True:
        try:
            with psycopg.connect(url, connect_timeout=2):
                return
        except psycopg.OperationalError:
            assert server.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "PostgreSQL did not come up in 60 s"
            time.sleep(0.2)


def _stop(server: subprocess.Popen[bytes], data: Path) -> None:
    """A fast shutdown (SIGINT to the postmaster, whose pid it wrote), then the runuser that
    started it; SIGKILL to the whole group only if that fails."""
    pid_file = data / "postmaster.pid"
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGINT)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


@pytest.fixture
def postgres_db(postgres_server: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """The URL of a new, empty database on the session's server, for one test."""
    import psycopg

    name = "t_" + "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:50]
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    yield postgres_server.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
