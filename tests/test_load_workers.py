"""The load as a fleet: Locust workers under a master (this machine's processes, and workers
that connect from elsewhere through ``drills load-worker``), their records merged into one
file on the master's clock, the fleet's health in the journal, and a worker that never comes
named. Real Locust master and worker processes, against the stub upstream of
``test_open_loop`` (the subject is the harness's load generator, not any component).

One worker runs under libfaketime (Debian's ``faketime``), its wall clock 7 s ahead of the
machine's: the merge must move its records back onto the master's clock.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from drills.common.errors import LoadError
from drills.common.ports import free_port
from drills.load import LoadProcess, RecordReader
from drills.load.arrivals import dispersion
from drills.load.report import load_report
from drills.model.load import RemoteWorkers
from drills.model.records import Record
from drills.model.scenario import FallbackRule, LoadConfig
from tests.conftest import drills_cli
from tests.test_open_loop import upstream as upstream  # the stub upstream fixture


def _load(url: str, tmp_path: Path, **load: Any) -> LoadProcess:
    config = LoadConfig(warmup="0s", max_tokens=2, timeout="20s", **load)
    return LoadProcess(
        url,
        config,
        FallbackRule(),
        [[{"role": "user", "content": "hi"}]],
        tmp_path / "records.jsonl",
        60,
    )


def _run(process: LoadProcess, seconds: float) -> list[Record]:
    process.start()
    try:
        process.wait_for_workers()
        time.sleep(seconds)
    finally:
        process.stop()
    return RecordReader(process.records).read_new()


def _workers(process: LoadProcess) -> list[dict[str, Any]]:
    return [p for p in process.fleet()["processes"] if p["role"] == "worker"]


def test_two_local_workers_merge_their_records_into_one_file(
    upstream: str,
    tmp_path: Path,
) -> None:
    process = _load(upstream, tmp_path, users=4, workers=2, wait="100ms")
    before = time.time()
    records = _run(process, 5)
    after = time.time()
    assert records and all(not r.is_error for r in records), {r.error for r in records}
    workers = _workers(process)
    assert len(workers) == 2 and {r.worker for r in records} == {w["id"] for w in workers}
    assert sum(w["records"] for w in workers) == len(records)
    for worker in workers:
        # Same machine, same clock: the measured offset is within the probe's own error.
        assert abs(worker["offset"]) <= worker["rtt"] / 2 + 0.005, worker
    assert all(before <= r.start <= after for r in records)
    assert not [p for p in [process.process, *process.workers] if p and p.poll() is None]
    now = time.time()
    report = load_report(process.load, process.records, records, {"all": (before, now)})
    assert report.workers_expected == 2 and report.short is None
    assert {p.role for p in report.processes} == {"master", "worker"}


@pytest.mark.skipif(shutil.which("faketime") is None, reason="needs Debian's faketime")
def test_a_worker_whose_clock_is_7s_ahead_is_moved_onto_the_masters_clock(
    upstream: str,
    tmp_path: Path,
) -> None:
    """A remote worker, started the way a Job starts it (``drills load-worker``), on a host
    whose wall clock is 7 s ahead (libfaketime; its monotonic clock is shifted too, which
    changes nothing: only differences of it are used)."""
    port = free_port()
    remote = RemoteWorkers(workers=1, bind=f"127.0.0.1:{port}", wait="30s")
    process = _load(upstream, tmp_path, users=2, wait="100ms", remote=remote)
    process.start()
    skewed = subprocess.Popen(
        ["faketime", "-f", "+7s", *drills_cli("load-worker", "--master", f"127.0.0.1:{port}")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        before = time.time()
        process.wait_for_workers()
        time.sleep(4)
    finally:
        process.stop()
        skewed.wait(timeout=30)
    after = time.time()
    records = RecordReader(process.records).read_new()
    assert records and all(not r.is_error for r in records), {r.error for r in records}
    [worker] = _workers(process)
    assert worker["offset"] == pytest.approx(7.0, abs=worker["rtt"] / 2 + 0.01), worker
    assert all(before <= r.start <= after for r in records), (before, after, records[0].start)


def test_an_open_loop_rate_is_shared_between_the_workers(
    upstream: str,
    tmp_path: Path,
) -> None:
    rate = 40.0
    process = _load(upstream, tmp_path, rate=rate, arrival="poisson", workers=2)
    records = _run(process, 8)
    assert {r.worker for r in records} == {w["id"] for w in _workers(process)}
    sent = load_report(process.load, process.records, records, {"all": (0, time.time())})
    assert sent.short is None and sent.not_sent == 0 and sent.scheduled == len(records)
    starts = sorted(r.start for r in records)
    measured = dispersion(starts)
    assert measured is not None
    n, span = len(starts) - 1, starts[-1] - starts[0]
    # Two poisson streams at rate/2 make one poisson stream at rate: count and dispersion.
    assert abs(n - rate * span) < 4 * math.sqrt(rate * span) + 2, (n, rate * span)
    assert abs(math.log(measured[1])) < 4 * math.sqrt(1 / n), measured


def test_a_worker_that_never_comes_is_named_and_the_load_does_not_start(
    upstream: str,
    tmp_path: Path,
) -> None:
    port = free_port()
    remote = RemoteWorkers(workers=2, bind=f"127.0.0.1:{port}", wait="3s")
    process = _load(upstream, tmp_path, users=2, remote=remote, workers=1)
    process.start()
    try:
        with pytest.raises(LoadError) as info:
            process.wait_for_workers()
    finally:
        process.stop()
    message = str(info.value)
    assert message.startswith(
        f"only 1 of 3 load workers connected to the master at 127.0.0.1:{port}"
    )
    assert "the drill did not start its phases" in message
    assert RecordReader(process.records).read_new() == []


def test_load_worker_refuses_a_master_it_cannot_reach_with_exit_2() -> None:
    port = free_port()  # nothing listens there
    result = subprocess.run(
        drills_cli("load-worker", "--master", f"127.0.0.1:{port}", "--wait", "1s"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert f"--master 127.0.0.1:{port}: the load master cannot be reached" in result.stderr
    bad = subprocess.run(
        drills_cli("load-worker", "--master", "nowhere"), capture_output=True, text=True
    )
    assert bad.returncode == 2 and "expected HOST:PORT" in bad.stderr


def test_the_default_number_of_workers_follows_the_cores_and_the_streams() -> None:
    assert LoadConfig(users=4).local_workers(cores=8) == 1
    assert LoadConfig(users=4).expected_workers() == 0  # one process, no master
    assert LoadConfig(users=250).local_workers(cores=8) == 3
    assert LoadConfig(users=1000).local_workers(cores=2) == 2
    assert LoadConfig(rate=50, arrival="poisson", max_in_flight=512).local_workers(cores=16) == 6
    remote = RemoteWorkers(workers=4)
    assert LoadConfig(users=4, remote=remote).local_workers(cores=8) == 0
    assert LoadConfig(users=4, remote=remote).expected_workers() == 4
    assert LoadConfig(users=4, workers=1, remote=remote).expected_workers() == 5
    assert sys.executable  # the workers run the harness's own interpreter
