"""The fault lifecycle: the ledger entry is written before a fault is applied, and every
revert runs even when another raises, whatever it raises; each revert is retried with backoff
a bounded number of times, every attempt recorded; a failure that stays is recorded, loud, and
its ledger entry kept for the next sweep. (Pure logic of ours: the injectors here are small
in-process classes that satisfy the Protocol, not stand-ins for a component.)"""

from __future__ import annotations

import contextlib
import itertools
import time
from pathlib import Path
from typing import Any

import pytest

from drills.common.errors import InjectionFailed, RevertError
from drills.engine.faults import FaultLifecycle, FaultRun, RevertRetry, parallel
from drills.engine.ledger import Ledger
from injectors import Injector


class Recorder:
    """An injector whose apply and revert do what it is told, and note that they ran."""

    kind = "test.record"

    def __init__(self, target: str, revert_raises: Exception | None = None) -> None:
        self.target = target
        self.revert_raises = revert_raises
        self.applied = self.reverted = 0

    def apply(self) -> dict[str, Any]:
        self.applied += 1
        return {"applied_at": time.time()}

    def revert(self) -> dict[str, Any]:
        if self.revert_raises is not None:
            raise self.revert_raises
        self.reverted += 1
        return {"finished_at": time.time(), "method": "undone"}

    def ledger_entry(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.target}


QUICK = RevertRetry(attempts=3, initial=0.01, longest=0.02)
"""Three tries, a few milliseconds apart: the policy's shape without its real waits."""


def fault(index: int, injector: Injector) -> FaultRun:
    return FaultRun(index, "fault", 0.0, 1.0, injector, {})


def test_every_revert_runs_when_one_raises_runtime_error(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.json")
    events: list[str] = []
    lifecycle = FaultLifecycle("run1", ledger, lambda event, **_: events.append(event), QUICK)
    first, broken, last = Recorder("a"), Recorder("b", RuntimeError("boom")), Recorder("c")
    faults = [fault(i, inj) for i, inj in enumerate((first, broken, last))]
    with contextlib.ExitStack() as stack:
        for planned in faults:
            stack.callback(lifecycle.revert, planned)
        for planned in faults:
            lifecycle.apply(planned)
        assert set(ledger.entries()) == {"run1-0", "run1-1", "run1-2"}
    assert (first.reverted, last.reverted) == (1, 1)
    assert lifecycle.revert_errors == ["test.record on b: RuntimeError: boom"]
    assert faults[1].error == "revert failed: RuntimeError: boom"
    assert events.count("fault_reverted") == 2 and "revert_failed" in events
    # The failed one stays in the ledger for the next sweep; the others are gone.
    assert set(ledger.entries()) == {"run1-1"}


def test_a_revert_tried_again_on_the_way_out_is_one_failure_with_its_attempts(
    tmp_path: Path,
) -> None:
    events: list[dict] = []
    lifecycle = FaultLifecycle(
        "run5", Ledger(tmp_path / "ledger.json"), lambda event, **d: events.append(d), QUICK
    )
    planned = fault(0, Recorder("y", RuntimeError("still stuck")))
    lifecycle.apply(planned)
    lifecycle.revert(planned)  # at the end of its window: three tries
    lifecycle.revert(planned)  # and again by the exit stack: three more
    assert lifecycle.revert_errors == ["test.record on y: RuntimeError: still stuck"]
    assert [e.get("attempt") for e in events if "attempt" in e] == [1, 2, 3, 4, 5, 6]
    attempts = planned.record().revert_attempts
    assert [a["attempt"] for a in attempts] == [1, 2, 3, 4, 5, 6]
    assert all(a["error"] == "RuntimeError: still stuck" for a in attempts)
    waits = [b["at"] - a["at"] for a, b in itertools.pairwise(attempts[:3])]
    assert all(w >= 0.009 for w in waits), waits  # it waited between tries


def test_a_revert_that_fails_twice_then_works_is_retried_and_forgotten(tmp_path: Path) -> None:
    class Flaky(Recorder):
        failures = 2

        def revert(self) -> dict[str, Any]:
            if self.failures:
                self.failures -= 1
                raise RevertError("Toxiproxy answered 503")
            return super().revert()

    ledger = Ledger(tmp_path / "ledger.json")
    lifecycle = FaultLifecycle("run6", ledger, retry=QUICK)
    planned = fault(0, Flaky("z"))
    lifecycle.apply(planned)
    lifecycle.revert(planned)
    assert planned.reverted_at is not None and lifecycle.revert_errors == []
    assert [a["error"] for a in planned.revert_attempts] == [
        "Toxiproxy answered 503",
        "Toxiproxy answered 503",
        None,
    ]
    assert ledger.entries() == {}


def test_revert_error_is_recorded_as_written(tmp_path: Path) -> None:
    lifecycle = FaultLifecycle("run2", Ledger(tmp_path / "ledger.json"), retry=QUICK)
    planned = fault(0, Recorder("x", RevertError("the proxy is gone")))
    lifecycle.apply(planned)
    lifecycle.revert(planned)
    assert lifecycle.revert_errors == ["test.record on x: the proxy is gone"]


def test_revert_twice_and_revert_unapplied_are_harmless(tmp_path: Path) -> None:
    lifecycle = FaultLifecycle("run3", Ledger(tmp_path / "ledger.json"))
    never, twice = Recorder("never"), Recorder("twice")
    lifecycle.revert(fault(0, never))
    planned = fault(1, twice)
    lifecycle.apply(planned)
    lifecycle.revert(planned)
    lifecycle.revert(planned)
    assert (never.reverted, twice.reverted) == (0, 1)
    assert lifecycle.revert_errors == []


def test_a_failed_apply_keeps_its_ledger_entry_and_raises(tmp_path: Path) -> None:
    class Refuses(Recorder):
        def apply(self) -> dict[str, Any]:
            raise InjectionFailed("no container matches label:app=vllm")

    ledger = Ledger(tmp_path / "ledger.json")
    lifecycle = FaultLifecycle("run4", ledger)
    planned = fault(0, Refuses("label:app=vllm"))
    errors = parallel(lifecycle.apply, [planned])
    assert isinstance(errors[0], InjectionFailed)
    assert "run4-0" in ledger.entries()
    lifecycle.revert(planned)  # a half-applied fault is reverted too
    assert "run4-0" not in ledger.entries()


@pytest.mark.parametrize("n", [1, 3])
def test_parallel_returns_each_outcome_in_order(n: int) -> None:
    def act(f: FaultRun) -> None:
        if f.index == 0:
            raise ValueError("first")

    out = parallel(act, [fault(i, Recorder(str(i))) for i in range(n)])
    assert isinstance(out[0], ValueError) and out[1:] == [None] * (n - 1)
