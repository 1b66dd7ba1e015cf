"""The run's phases in time: where each begins and ends, from the run's origin, and the phases
that end on a condition (``until: replaced``) instead of at their full duration.

A phase with ``until: replaced`` ends at the first tick (about once a second) at which every
kill fault it injected says its target is back (``injectors.base.Recovers``): the replacement
was ready. What was left of it is cut, and every later phase, with its faults, moves up by as
much; the journal keeps each phase's planned end beside its real one. A fault's ledger entry
keeps its planned schedule, later than the real one: the watchdog only ever reverts late.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from drills.engine.faults import FaultRun
from drills.model.scenario import Phase, waits_for_replacement
from injectors import Recovers

__all__ = ["PhaseClock", "replaced_at"]

MIN_CUT = 0.5
"""A phase whose condition is met less than this before its planned end just runs out."""


@dataclass
class PhaseClock:
    """Each phase's window, in seconds from the run's origin (``t0``)."""

    windows: dict[str, tuple[float, float]]
    planned: dict[str, tuple[float, float]] = field(default_factory=dict)
    """The windows as the scenario has them (before any phase ended early)."""
    cut: dict[str, float] = field(default_factory=dict)
    """Seconds cut from each phase that ended early."""

    @classmethod
    def of(cls, phases: Sequence[Phase]) -> PhaseClock:
        windows, offset = {}, 0.0
        for phase in phases:
            windows[phase.name] = (offset, offset + phase.duration)
            offset += phase.duration
        return cls(windows, dict(windows))

    @property
    def total(self) -> float:
        return max(end for _, end in self.windows.values())

    def phase_at(self, now: float) -> str:
        """The phase that holds ``now`` (seconds from the origin, before ``total``)."""
        return next(n for n, (s, e) in self.windows.items() if s <= now < e)

    def end_early(self, name: str, now: float, faults: list[FaultRun]) -> float:
        """End phase ``name`` at ``now``: its faults' windows close now (they are reverted on
        the next step of the timeline), later phases and their faults move up. The seconds
        cut (0: too close to its planned end to be worth it)."""
        start, end = self.windows[name]
        cut = end - now
        if cut < MIN_CUT:
            return 0.0
        names = list(self.windows)
        later = names[names.index(name) + 1 :]
        self.windows[name] = (start, now)
        for other in later:
            s, e = self.windows[other]
            self.windows[other] = (s - cut, e - cut)
        for fault in faults:
            if fault.phase == name:
                fault.end = min(fault.end, now)
            elif fault.phase in later:
                fault.offset -= cut
                fault.end -= cut
        self.cut[name] = cut
        return cut


def replaced_at(phase: Phase, faults: list[FaultRun]) -> float | None:
    """When every kill fault of ``phase`` had its target back (epoch seconds), read live from
    their injectors; ``None`` while one is not back yet, one was not applied, or the phase does
    not end on it. An injector that cannot tell (it raises) holds the phase to its duration."""
    if phase.until != "replaced":
        return None
    waiting = [
        f
        for f in faults
        if f.phase == phase.name
        and isinstance(f.injector, Recovers)
        and waits_for_replacement(f.injector.kind)
    ]
    if not waiting or any(f.applied_at is None for f in waiting):
        return None
    readies: list[float] = []
    for fault in waiting:
        assert isinstance(fault.injector, Recovers)
        try:
            ready = fault.injector.replaced_at()
        except Exception:
            return None
        if ready is None:
            return None
        readies.append(ready)
    return max(readies)
