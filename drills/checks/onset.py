"""Onsets: the instants a detection is timed from.

A fault's onset is its application, and it ends at its revert. A drill without a fault can still
provoke a failure: the evening peak of the field report is a load spike (``load.shape: spike``),
and a team's monitoring should see it as it sees a fault. The spike's onset is the instant the
load shape raises the users (``at`` after the drill's origin, the instant the load's own clock
counts from), and it ends ``for`` later.

The timed ``alert_*`` checks and the detection matrix measure from these: a check measures from
the faults applied in its ``during`` phase; a phase with no fault, from the load spike that
begins in it; a check without ``during``, from the run's first fault, else its spike.
"""

from __future__ import annotations

from dataclasses import dataclass

from drills.checks.base import Evaluation, applied_faults
from drills.model.journal import FaultRecord
from drills.model.load import SpikeShape

__all__ = ["Onset", "load_spikes", "onsets", "onsets_of"]


@dataclass(frozen=True)
class Onset:
    """One thing a detection is timed from."""

    at: float
    """When it began (epoch seconds): the fault's application, the spike's first second."""
    ended_at: float | None
    """When it ended (the fault's revert, the spike's last second); ``None``: it had not."""
    what: str
    """What it was, for a reason: ``toxiproxy.latency on vllm-0``, ``the load spike (2 to 12
    users)``."""
    began: str
    """The verb phrase of its start: ``was applied``, ``began``."""
    ended: str
    """... and of its end: ``was reverted``, ``ended``."""
    phase: str | None
    """The phase it began in."""
    fault: FaultRecord | None = None
    """The fault, when it is one."""


def _of_fault(fault: FaultRecord) -> Onset:
    assert fault.applied_at is not None
    return Onset(
        at=fault.applied_at,
        ended_at=fault.reverted_at,
        what=f"{fault.kind} on {fault.target}",
        began="was applied",
        ended="was reverted",
        phase=fault.phase,
        fault=fault,
    )


def _phase_at(ev: Evaluation, at: float) -> str | None:
    for name, (start, end) in ev.phases.items():
        if start <= at < end:
            return name
    return None


def load_spikes(ev: Evaluation) -> list[Onset]:
    """The load spike of the drill's shape, as an onset (none for other shapes, or a spike that
    fell outside the run)."""
    scenario = ev.scenario
    shape = scenario.load.shape if scenario is not None else None
    if not isinstance(shape, SpikeShape):
        return []
    origin, end = ev.run_window
    at = origin + shape.at
    if at >= end:
        return []
    return [
        Onset(
            at=at,
            ended_at=at + shape.for_ if at + shape.for_ <= end else None,
            what=f"the load spike ({shape.base} to {scenario.load.users} users)",
            began="began",
            ended="ended",
            phase=_phase_at(ev, at),
        )
    ]


def onsets(ev: Evaluation) -> list[Onset]:
    """Every onset of the run, in the scenario's order: phase by phase, a phase's faults as
    they are declared, then the load spike that began in it. Not by the instant each began:
    the faults of one phase are applied together, and which one's clock read first is chance
    (a report that reordered its rows from run to run could not be compared)."""
    order = {name: i for i, name in enumerate(ev.phases)}

    def key(o: Onset) -> tuple[int, int, float]:
        phase = order.get(o.phase or "", len(order))
        return (phase, o.fault.index if o.fault is not None else 1 << 30, o.at)

    return sorted([*(_of_fault(f) for f in applied_faults(ev)), *load_spikes(ev)], key=key)


def onsets_of(ev: Evaluation, during: str | None) -> list[Onset]:
    """What a check with this ``during`` measures from: the faults applied in that phase (in
    the run, without one); where there are none, the load spike that began there."""
    faults = [_of_fault(f) for f in applied_faults(ev) if during is None or f.phase == during]
    if faults:
        return sorted(faults, key=lambda o: o.at)
    return [s for s in load_spikes(ev) if during is None or s.phase == during]
