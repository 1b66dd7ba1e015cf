"""The fault lifecycle of one run: apply with a ledger entry first, revert whatever happens.

``FaultLifecycle.apply`` writes the fault's ledger entry before touching anything (a crash in
between leaves an entry the next sweep reverts) and records the evidence; ``revert`` never
raises: whatever a revert raises, it is recorded on the fault and in ``revert_errors``, the
ledger entry is kept for the next sweep, and the caller's other reverts and the journal go on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from drills.common.errors import RevertError
from drills.engine.ledger import Ledger
from drills.model.journal import FaultRecord
from injectors import Injector

__all__ = ["FaultLifecycle", "FaultRun", "parallel"]

logger = logging.getLogger(__name__)

EventSink = Callable[..., None]
"""``sink(event, **detail)``: where the lifecycle reports what it did (the run's timeline)."""


@dataclass
class FaultRun:
    """One scheduled fault of a run and everything that happened to it."""

    index: int
    phase: str
    offset: float
    end: float
    injector: Injector
    spec: dict[str, Any]
    applied_at: float | None = None
    reverted_at: float | None = None
    evidence: dict[str, Any] | None = None
    revert: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    """What the injector observed after the run (a killed process's replacement, ...)."""
    preflight: dict[str, Any] | None = None
    """What the injector said it would hit, read before anything was applied."""
    error: str | None = None
    revert_attempts: int = 0
    """Reverts that failed (one at the window's end, one more on the way out of the run)."""

    def record(self) -> FaultRecord:
        """What the journal keeps of it."""
        return FaultRecord(
            index=self.index,
            phase=self.phase,
            kind=self.injector.kind,
            target=self.injector.target,
            spec=self.spec,
            scheduled_offset=self.offset,
            scheduled_end=self.end,
            applied_at=self.applied_at,
            reverted_at=self.reverted_at,
            evidence=self.evidence,
            rollback=self.revert,
            after=self.after,
            preflight=self.preflight,
            error=self.error,
        )


def _silent(event: str, **detail: Any) -> None:
    logger.info("%s %s", event, detail)


@dataclass
class FaultLifecycle:
    run_id: str
    ledger: Ledger
    event: EventSink = _silent
    failed: dict[int, str] = field(default_factory=dict)
    """The faults whose last revert failed, by index: ``KIND on TARGET: error``."""

    @property
    def revert_errors(self) -> list[str]:
        """One line per fault that is still not reverted (its last attempt's error)."""
        return [self.failed[i] for i in sorted(self.failed)]

    def _key(self, fault: FaultRun) -> str:
        return f"{self.run_id}-{fault.index}"

    def apply(self, fault: FaultRun) -> None:
        """Apply ``fault``; raise what the injector raised (the drill cannot go on)."""
        key = self._key(fault)
        self.ledger.record(key, fault.injector.ledger_entry())
        try:
            fault.evidence = fault.injector.apply()
            fault.applied_at = fault.evidence.get("applied_at", time.time())
        except Exception as exc:
            fault.error = f"apply failed: {exc}"
            self.event(
                "fault_failed",
                fault=fault.index,
                kind=fault.injector.kind,
                target=fault.injector.target,
                error=str(exc),
            )
            raise
        finally:
            self.ledger.record(key, fault.injector.ledger_entry())
        self.event(
            "fault_applied",
            fault=fault.index,
            kind=fault.injector.kind,
            target=fault.injector.target,
        )

    def revert(self, fault: FaultRun) -> None:
        """Revert ``fault`` if it was applied (or its apply failed half-way); never raises."""
        if fault.reverted_at is not None or (fault.applied_at is None and fault.error is None):
            return
        try:
            fault.revert = fault.injector.revert()
            fault.reverted_at = fault.revert.get("finished_at", time.time())
        except Exception as exc:
            # Whatever one revert raises (a RevertError by contract, anything by accident), the
            # other faults' reverts and the journal still run: this is an exit-stack callback.
            # The ledger entry stays, so the next run's sweep (or `drills abort`) retries it.
            what = str(exc) if isinstance(exc, RevertError) else f"{type(exc).__name__}: {exc}"
            fault.error = f"revert failed: {what}"
            fault.revert_attempts += 1
            self.failed[fault.index] = f"{fault.injector.kind} on {fault.injector.target}: {what}"
            self.event(
                "revert_failed", fault=fault.index, attempt=fault.revert_attempts, error=what
            )
            return
        self.failed.pop(fault.index, None)
        self.ledger.forget(self._key(fault))
        self.event(
            "fault_reverted",
            fault=fault.index,
            kind=fault.injector.kind,
            target=fault.injector.target,
            method=(fault.revert or {}).get("method"),
        )


def parallel(action: Callable[[FaultRun], None], faults: list[FaultRun]) -> list[Exception | None]:
    """Run ``action`` on every fault at once (faults due together land together); the
    exception each raised, or ``None``, in order."""
    if not faults:
        return []

    def one(fault: FaultRun) -> Exception | None:
        try:
            action(fault)
        except Exception as exc:
            return exc
        return None

    if len(faults) == 1:
        return [one(faults[0])]
    with ThreadPoolExecutor(max_workers=len(faults)) as pool:
        return list(pool.map(one, faults))
