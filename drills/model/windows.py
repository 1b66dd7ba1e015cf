"""Which window each request counts in. Every request counts in exactly one, so that none is
invisible, and a request that met a fault is charged to that fault.

The rule (the README's "Which window a request counts in"):

1. A request counts in the phase it was sent in (``warmup`` before the first phase, ``after``
   past the last).
2. Except when it met a fault it was not sent under: a request still in flight when a fault was
   applied counts in that fault's window (at the moment of the application), and one sent after
   the fault's scheduled end but before its revert had finished counts in it too (at the last
   instant of the schedule). The first such fault, by application, wins.

Requests that end in another phase than the one they count in are the straddling ones; each
carries why (``Record.straddles``), and the report counts them per phase.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from drills.model.journal import FaultRecord
from drills.model.records import Record

__all__ = ["charge"]


def _phase_at(at: float, phases: dict[str, tuple[float, float]]) -> str:
    for name, (start, end) in phases.items():
        if start <= at < end:
            return name
    first = min((s for s, _ in phases.values()), default=math.inf)
    return "warmup" if at < first else "after"


def charge(
    records: Iterable[Record],
    phases: dict[str, tuple[float, float]],
    faults: Iterable[FaultRecord],
) -> None:
    """Set ``counted_at``, ``phase`` and ``straddles`` of every record (in place)."""
    t0 = min((s for s, _ in phases.values()), default=0.0)
    spans = sorted(
        (
            f.applied_at,
            f.reverted_at if f.reverted_at is not None else math.inf,
            t0 + f.scheduled_end,
            f,
        )
        for f in faults
        if f.applied_at is not None
    )
    for record in records:
        sent = record.start
        ended = sent + (record.e2e or 0.0)
        at, why = sent, None
        for applied, reverted, scheduled_end, fault in spans:
            what = f"{fault.kind} on {fault.target}"
            if sent < applied < ended:
                at = applied
                why = f"sent {applied - sent:.2f}s before {what} was applied, in flight when it was"
                break
            if scheduled_end <= sent < reverted:
                at = math.nextafter(scheduled_end, -math.inf)
                late = sent - scheduled_end
                why = f"sent {late:.3f}s after {what} was due to end, before its revert finished"
                break
        phase = _phase_at(at, phases)
        if why is None and phase in phases and ended > phases[phase][1]:
            why = f"answered {ended - phases[phase][1]:.2f}s after {phase} ended"
        record.counted_at, record.phase, record.straddles = at, phase, why
