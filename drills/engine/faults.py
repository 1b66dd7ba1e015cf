"""The fault lifecycle of one run: apply with a ledger entry first, revert whatever happens.

``FaultLifecycle.apply`` writes the fault's ledger entry before touching anything (a crash in
between leaves an entry the next sweep reverts) and records the evidence; ``revert`` tries the
injector's revert a bounded number of times with exponential backoff (tenacity: ``RETRY``),
each attempt in the journal, and never raises: whatever the last attempt raised is recorded on
the fault and in ``revert_errors``, the ledger entry is kept for the next sweep (or the
watchdog, or ``drills abort``), and the caller's other reverts and the journal go on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tenacity import Retrying, stop_after_attempt, stop_after_delay, wait_exponential

from drills.common.errors import InjectionFailed, RevertError
from drills.engine.ledger import Ledger
from drills.model.journal import FaultRecord
from injectors import Injector

__all__ = ["RETRY", "FaultLifecycle", "FaultRun", "RevertRetry", "parallel"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RevertRetry:
    """How often and how long one revert is tried: ``attempts`` at most, waiting ``initial``
    seconds after the first failure and doubling up to ``longest``, for ``budget`` seconds at
    most in all (a revert that hangs is bounded by its own client timeout)."""

    attempts: int = 4
    initial: float = 0.5
    longest: float = 4.0
    budget: float = 20.0

    def retrying(self) -> Retrying:
        return Retrying(
            stop=stop_after_attempt(self.attempts) | stop_after_delay(self.budget),
            wait=wait_exponential(multiplier=self.initial, max=self.longest),
            reraise=True,
        )


RETRY = RevertRetry()

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
    revert_attempts: list[dict[str, Any]] = field(default_factory=list)
    """Every attempt at reverting it: ``attempt``, ``at``, and ``error`` (``None``: it worked)."""

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
            revert_attempts=self.revert_attempts,
        )


def _silent(event: str, **detail: Any) -> None:
    logger.info("%s %s", event, detail)


@dataclass
class FaultLifecycle:
    run_id: str
    ledger: Ledger
    event: EventSink = _silent
    retry: RevertRetry = RETRY
    grace: float = 30.0
    """Seconds past its scheduled end a fault may stay in force before the run's watchdog
    reverts it, its runner alive or not (the ledger entry's ``deadline``)."""
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
        ends = time.time() + (fault.end - fault.offset)
        schedule = {"scheduled_end_at": ends, "deadline": ends + self.grace}
        self.ledger.record(key, {**fault.injector.ledger_entry(), **schedule})
        try:
            fault.evidence = fault.injector.apply()
            fault.applied_at = fault.evidence.get("applied_at", time.time())
        except Exception as exc:
            what = _what(exc)
            fault.error = f"apply failed: {what}"
            # A plugin's bug reads like a built-in's: its type and message always, its
            # traceback with -v.
            logger.debug(
                "apply of %s on %s", fault.injector.kind, fault.injector.target, exc_info=True
            )
            self.event(
                "fault_failed",
                fault=fault.index,
                kind=fault.injector.kind,
                target=fault.injector.target,
                error=what,
            )
            raise
        finally:
            self.ledger.record(key, {**fault.injector.ledger_entry(), **schedule})
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
            for attempt in self.retry.retrying():
                with attempt:
                    self._attempt(fault)
        except Exception as exc:
            # Whatever the last attempt raised (a RevertError by contract, anything by
            # accident), the other faults' reverts and the journal still run: this is an
            # exit-stack callback. The ledger entry stays, so the watchdog, the next run's
            # sweep or `drills abort` tries again.
            what = _what(exc)
            fault.error = f"revert failed: {what}"
            self.failed[fault.index] = f"{fault.injector.kind} on {fault.injector.target}: {what}"
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

    def _attempt(self, fault: FaultRun) -> None:
        """One try at reverting ``fault``, written down whatever it gives."""
        number = len(fault.revert_attempts) + 1
        try:
            fault.revert = fault.injector.revert()
        except Exception as exc:
            what = _what(exc)
            logger.debug(
                "revert of %s on %s", fault.injector.kind, fault.injector.target, exc_info=True
            )
            fault.revert_attempts.append({"attempt": number, "at": time.time(), "error": what})
            self.event("revert_failed", fault=fault.index, attempt=number, error=what)
            raise
        fault.revert_attempts.append({"attempt": number, "at": time.time(), "error": None})
        fault.reverted_at = fault.revert.get("finished_at", time.time())


def _what(exc: Exception) -> str:
    """An error as one line: drills' own fault errors by their message (it names the fault),
    anything else (a plugin's bug, a client's error) with its type, so that ``KeyError:
    'pids'`` never shows as ``'pids'``."""
    if isinstance(exc, RevertError | InjectionFailed):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


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
