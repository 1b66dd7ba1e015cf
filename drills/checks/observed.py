"""What the harness saw itself at its L7 hop: attempts per client request, and when a gateway
stopped sending to a hop (a breaker, an ejection or a cooldown, seen from outside).

A gateway that opens a breaker, ejects an upstream or cools a deployment down stops sending to
it. From outside that shows as a run of client requests none of whose attempts reached the hop,
although the hop had been getting its share. ``openings`` finds those runs: after each attempt
at the hop ended, it counts the client requests that began before the next attempt arrived;
``SKIPPED`` of them in a row (more than a round-robin or least-busy router skips a hop in normal
running, with the hops the drill has) is an opening, dated when that last attempt ended (the
failure the gateway acted on).
"""

from __future__ import annotations

from drills.checks.base import Evaluation
from drills.common.hop import HopRecord

__all__ = ["attempts", "model_calls", "openings", "skip_run"]


def model_calls(ev: Evaluation, hop: str | None = None) -> list[HopRecord]:
    """Model calls that reached the L7 hop (at ``hop``, or at any hop), by arrival."""
    records = ev.hop_records or []
    return sorted(
        (
            r
            for r in records
            if r.method == "POST" and r.path.startswith("/v1/") and (hop is None or r.hop == hop)
        ),
        key=lambda r: r.arrived_at,
    )


def attempts(ev: Evaluation, hop: str | None, start: float, end: float) -> int:
    """Attempts that arrived in ``[start, end)`` (at ``hop``, or at every model hop)."""
    return sum(1 for r in model_calls(ev, hop) if start <= r.arrived_at < end)


def skip_run(ev: Evaluation) -> int:
    """Client requests in a row that must miss a hop before it counts as taken out of
    rotation: one more than the model hops that shared the traffic, and at least 3."""
    hops = {r.hop for r in model_calls(ev)}
    return max(3, len(hops) + 1)


def openings(ev: Evaluation, hop: str, start: float, end: float) -> list[float]:
    """When the gateway stopped sending to ``hop`` in ``[start, end]``, seen from the hop."""
    calls = model_calls(ev, hop)
    clients = sorted(r.start for r in ev.records)
    needed = skip_run(ev)
    found: list[float] = []
    last_end = start
    for before in calls:  # attempts before the window set where the first gap begins
        if before.arrived_at < start:
            last_end = max(last_end, before.ended_at or before.arrived_at)
    window: list[HopRecord | None] = [c for c in calls if start <= c.arrived_at <= end]
    for call in [*window, None]:
        arrival = end if call is None else call.arrived_at
        skipped = sum(1 for t in clients if last_end < t < arrival)
        if skipped >= needed:
            found.append(last_end)
        if call is not None:
            last_end = max(last_end, call.ended_at or call.arrived_at)
    return found
