"""The dead-man's switch: a small process beside each run that reverts the run's faults when
the runner cannot.

``Watchdog.start`` launches ``python -m drills.engine.watchdog`` in a session of its own, so the
runner's SIGKILL (the OOM killer, a cancelled CI job) and a SIGTERM of the runner's whole
process group pass it by. It holds the ledger's path and the runner's pid and start time (a
later process that reuses the pid is not the runner), and every ``POLL`` seconds it reads the
run's entries in the ledger. It reverts them, from what the ledger holds (so remote faults too:
a Toxiproxy on another host, a Kubernetes cluster):

- when the runner is gone: at once, then it exits;
- when a fault outlives its scheduled end by more than the grace period (the entry's
  ``deadline``), while the runner lives: a runner stuck in a hung call.

Each revert is retried with backoff (``drills.engine.faults.RETRY``); what it did goes, one JSON
line per action, to ``watchdog.jsonl`` in the run directory. The runner stops it (SIGTERM, by
pid and start time) once its own reverts are done. If the watchdog dies too, the runner still
reverts as before, and the next run's sweep (or ``drills abort``) removes what is left.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from drills.common.errors import StackError
from drills.common.jsonl import read_jsonl
from drills.common.system import start_time, stop_helper
from drills.engine.faults import RETRY
from drills.engine.ledger import CorruptLedger, Ledger
from injectors.base import revert_entry

__all__ = ["Watchdog", "main"]

logger = logging.getLogger(__name__)

POLL = 0.5
"""Seconds between two looks at the runner and the ledger."""
READY_TIMEOUT = 10.0
GIVE_UP_AFTER = 300.0
"""Seconds the watchdog keeps retrying the reverts of a dead runner before it leaves them to
the next sweep (``drills abort``)."""


@dataclass
class Watchdog:
    """The watchdog process of one run, as the runner holds it."""

    pid: int
    started: int | None
    log: Path

    @classmethod
    def start(cls, run_id: str, ledger: Path, run_dir: Path) -> Watchdog:
        """Start the run's watchdog and wait until it watches (raises ``StackError`` if it
        does not: a drill must not apply a fault nobody would remove)."""
        log = run_dir / "watchdog.jsonl"
        stderr = open(run_dir / "watchdog.log", "ab")  # noqa: SIM115 (the child holds it)
        try:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "drills.engine.watchdog",
                    "--run-id",
                    run_id,
                    "--pid",
                    str(os.getpid()),
                    "--pid-start",
                    str(start_time(os.getpid())),
                    "--ledger",
                    str(ledger.resolve()),
                    "--log",
                    str(log.resolve()),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                start_new_session=True,
            )
        finally:
            stderr.close()
        assert proc.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT
        line = b""
        os.set_blocking(proc.stdout.fileno(), False)
        while time.monotonic() < deadline and not line.endswith(b"\n"):
            line += proc.stdout.read() or b""
            if proc.poll() is not None:
                break
            time.sleep(0.02)
        proc.stdout.close()
        if line.strip() != b"watching":
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            raise StackError(
                f"the run's watchdog did not start (see {run_dir / 'watchdog.log'}); no fault "
                "is applied without one"
            )
        return cls(proc.pid, start_time(proc.pid), log)

    def stop(self) -> None:
        """Stop the watchdog (the runner's own reverts are done)."""
        try:
            stop_helper(self.pid, self.started, timeout=10.0)
        except TimeoutError:
            logger.warning("the run's watchdog (pid %d) did not stop", self.pid)
        # It is our child: reap it, so it does not linger as a zombie.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, os.WNOHANG)

    def actions(self) -> list[dict[str, Any]]:
        """What it did (each revert it made or tried), as written to ``watchdog.jsonl``."""
        return read_jsonl(self.log)


class _Watch:
    def __init__(self, args: argparse.Namespace) -> None:
        self.run_id: str = args.run_id
        self.pid: int = args.pid
        self.pid_start: int | None = None if args.pid_start == "None" else int(args.pid_start)
        self.ledger = Ledger(Path(args.ledger))
        self.log = Path(args.log)
        self.stopping = False
        self.failing_since: float | None = None

    def runner_alive(self) -> bool:
        return start_time(self.pid) == self.pid_start

    def note(self, **what: Any) -> None:
        with open(self.log, "a") as out:
            out.write(json.dumps({"at": time.time(), **what}) + "\n")

    def entries(self) -> dict[str, dict[str, Any]]:
        try:
            found = self.ledger.entries()
        except CorruptLedger as exc:
            self.note(event="ledger_corrupt", error=str(exc))
            return {}
        return {k: e for k, e in found.items() if k.startswith(f"{self.run_id}-")}

    def revert(self, key: str, entry: dict[str, Any], why: str) -> bool:

        attempts: list[dict[str, Any]] = []
        try:
            for attempt in RETRY.retrying():
                with attempt:
                    try:
                        outcome = revert_entry(entry)
                    except Exception as exc:
                        attempts.append(
                            {"at": time.time(), "error": f"{type(exc).__name__}: {exc}"}
                        )
                        raise
        except Exception:
            self.note(event="revert_failed", key=key, why=why, attempts=attempts, **_what(entry))
            return False
        self.ledger.forget(key)
        self.note(
            event="reverted",
            key=key,
            why=why,
            method=outcome.get("method"),
            attempts=len(attempts) + 1,
            **_what(entry),
        )
        return True

    def round(self) -> bool:
        """One look; whether to keep watching."""
        alive = self.runner_alive()
        now = time.time()
        entries = self.entries()
        if alive:
            for key, entry in entries.items():
                deadline = entry.get("deadline")
                if isinstance(deadline, int | float) and now > deadline:
                    late = now - float(entry.get("scheduled_end_at") or deadline)
                    self.revert(key, entry, f"outlived its scheduled end by {late:.1f}s")
            return True
        if not entries:
            self.note(event="runner_gone", pid=self.pid, left=0)
            return False
        results = [
            self.revert(k, e, f"its runner (pid {self.pid}) is gone") for k, e in entries.items()
        ]
        if all(results):
            self.note(event="runner_gone", pid=self.pid, left=0)
            return False
        self.failing_since = self.failing_since or now
        if now - self.failing_since > GIVE_UP_AFTER:
            self.note(event="gave_up", left=sorted(self.entries()))
            return False
        return True

    def run(self) -> int:
        def stop(signum: int, frame: FrameType | None) -> None:
            self.stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C of the terminal is the runner's
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closed terminal, or laptop lid
        self.note(
            event="watching", pid=self.pid, watchdog_pid=os.getpid(), ledger=str(self.ledger.path)
        )
        sys.stdout.write("watching\n")
        sys.stdout.flush()
        os.close(1)
        while not self.stopping:
            if not self.round():
                return 0
            time.sleep(POLL)
        self.note(event="stopped")
        return 0


def _what(entry: dict[str, Any]) -> dict[str, Any]:
    return {"kind": entry.get("kind"), "target": entry.get("target")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m drills.engine.watchdog")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--pid-start", required=True)
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    return _Watch(args).run()


if __name__ == "__main__":
    sys.exit(main())
