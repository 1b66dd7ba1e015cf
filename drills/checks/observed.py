"""What the harness saw itself at its L7 hop: attempts per client request, and when a gateway
stopped sending to a hop (a breaker, an ejection or a cooldown, seen from outside).

A gateway that opens a breaker, ejects an upstream or cools a deployment down does it because
attempts there failed, and then stops sending to it. From outside that shows as a failed attempt
at the hop followed by a run of client requests none of which reached it. How long a run must be
depends on the gateway's routing: a random router skips a hop that has a share ``p`` of the
traffic ``k`` times in a row with probability ``(1 - p)^k``. ``skip_run`` takes the hop's share
before the window (or an even split) and asks for a run that chance would give less than once in
twenty drills, after any of the failed attempts in the window (at least 3). A run of at least 3
also counts when one of its requests reached no model hop at all while it lasted (answered
without an upstream, as a fallback is when every breaker is open): no router skips a hop by luck
that way. The opening is dated when the failed attempt ended: the failure the gateway acted on.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from drills.checks.base import Evaluation
from drills.common.hop import HopRecord
from drills.model.records import Record

__all__ = [
    "ALPHA",
    "MIN_RUN",
    "TIMING_SLACK",
    "Opening",
    "attempts",
    "attribute",
    "failed",
    "find_openings",
    "model_calls",
    "openings",
    "refused_at_hop",
    "share",
    "skip_run",
]


def behind_hop(ev: Evaluation, hop: str) -> bool:
    """Calls to ``hop`` went through the harness's L7 hop in this run: it fronts that hop
    (the model hops), so what reached it can be seen there. The vector DB and the tool
    server are reached through Toxiproxy only: no L7 hop sees their calls."""
    return ev.hop_records is not None and any(r.hop == hop for r in ev.hop_records)


def refused_at_hop(ev: Evaluation, hop: str, start: float, end: float) -> str | None:
    """Why the hop could not see the gateway's attempts at ``hop`` in ``[start, end]``, or
    ``None``. A cut announced to the hop (``toxiproxy.down`` behind it: its evidence's
    ``hops_refusing``) makes the hop refuse connections as the cut upstream does, so that a
    gateway retries as it would without the hop; then its attempts never reach the hop, and
    a run of requests that missed it says nothing of a breaker."""
    for fault in ev.faults:
        if fault.applied_at is None or hop not in (fault.evidence or {}).get("hops_refusing", []):
            continue
        if fault.applied_at <= end and (fault.reverted_at or end) >= start:
            return (
                f"the L7 hop refused connections to {hop} while {fault.kind} on "
                f"{fault.target} held (as the cut upstream did, so that the gateway retries as "
                "it would without the hop): the gateway's attempts could not be seen there"
            )
    return None


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


def ended(ev: Evaluation, hop: str | None, start: float, end: float) -> int:
    """Attempts that ended in ``(start, end]`` (at ``hop``, or at every model hop): what a
    gateway's counter with an outcome label counts over that span, since it counts an attempt
    once its outcome is known. One the hop never saw end counts at its arrival."""
    return sum(
        1
        for r in model_calls(ev, hop)
        if start < (r.ended_at if r.ended_at is not None else r.arrived_at) <= end
    )


ALPHA = 0.05
"""The chance of an opening seen where a random router merely skipped a hop by luck."""


def failed(record: HopRecord) -> bool:
    """An attempt a gateway would count against the upstream."""
    status = record.status or 0
    return record.outcome != "complete" or status >= 500 or status == 429


def share(ev: Evaluation, hop: str, before: float) -> float:
    """The hop's share of the client requests before ``before`` (an even split if unknown)."""
    clients = sum(1 for r in ev.records if r.start < before)
    hops = {r.hop for r in model_calls(ev)}
    if clients == 0:
        return 1 / max(1, len(hops))
    mine = sum(1 for r in model_calls(ev, hop) if r.arrived_at < before)
    return min(0.95, max(1 / max(2, 2 * len(hops)), mine / clients))


MIN_RUN = 3
"""The shortest run of skipped client requests that counts, whatever the evidence."""


def skip_run(ev: Evaluation, hop: str, start: float, failures: int) -> int:
    """Client requests in a row that must miss ``hop`` after a failed attempt for the gap to be
    the gateway's doing rather than its router's luck (module docstring)."""
    p = share(ev, hop, start)
    return max(MIN_RUN, math.ceil(math.log(ALPHA / max(1, failures)) / math.log(1 - p)))


@dataclass(frozen=True)
class Opening:
    at: float
    """When the failed attempt the gateway acted on ended."""
    confirmed_at: float
    """When the harness had the evidence: the start of the skipped request that completed it."""


def openings(ev: Evaluation, hop: str, start: float, end: float) -> tuple[list[float], int]:
    """When the gateway stopped sending to ``hop`` in ``[start, end]``, seen from the hop; and
    the run of skipped client requests that took."""
    found, needed = find_openings(ev, hop, start, end)
    return [o.at for o in found], needed


def find_openings(ev: Evaluation, hop: str, start: float, end: float) -> tuple[list[Opening], int]:
    """``openings``, each with when its evidence was complete.

    Searches sorted times (``bisect``) rather than rescanning: a retry storm sends tens of
    thousands of attempts to a failing hop (33,385 in one twin of the retry-storm drill, where
    the rescans took 24 s)."""
    calls = model_calls(ev, hop)
    arrivals = [c.arrived_at for c in model_calls(ev)]  # sorted
    # A client request during which no attempt reached any model hop was answered without an
    # upstream (a fallback with every breaker open): no router's luck skips a hop that way.
    clients = sorted(
        (r.start, _alone(arrivals, r.start, r.start + (r.e2e or 0.0))) for r in ev.records
    )
    starts = [t for t, _ in clients]
    window = [c for c in calls if start <= c.arrived_at <= end]
    times = [c.arrived_at for c in window]  # sorted
    needed = skip_run(ev, hop, start, sum(1 for c in window if failed(c)))
    found: list[Opening] = []
    for i, call in enumerate(window):
        if not failed(call):
            continue
        ended = call.ended_at or call.arrived_at
        # The next attempt at the hop after this one ended (or the window's end).
        j = bisect_right(times, ended, lo=i + 1)
        until = times[j] if j < len(times) else end
        skipped = clients[bisect_right(starts, ended) : bisect_left(starts, until)]
        confirmed = _confirmed(skipped, needed)
        if confirmed is not None and not (found and _same_gap(times, found[-1].at, ended)):
            found.append(Opening(ended, confirmed))
    return found, needed


def _alone(arrivals: list[float], start: float, end: float) -> bool:
    """No attempt reached any model hop in ``[start, end]`` (``arrivals`` sorted)."""
    k = bisect_left(arrivals, start)
    return not (k < len(arrivals) and arrivals[k] <= end)


def _confirmed(skipped: list[tuple[float, bool]], needed: int) -> float | None:
    """When a run of skipped requests became evidence enough (``None``: it never did)."""
    seen_alone = False
    for k, (t, alone) in enumerate(skipped, start=1):
        seen_alone = seen_alone or alone
        if k >= needed or (k >= MIN_RUN and seen_alone):
            return t
    return None


def _same_gap(times: list[float], a: float, b: float) -> bool:
    """No attempt arrived strictly between ``a`` and ``b`` (``times`` sorted)."""
    k = bisect_right(times, a)
    return not (k < len(times) and times[k] < b)


TIMING_SLACK = 0.05
"""Seconds between an attempt's end and the client's end for a match by timing."""


def attribute(records: list[Record], hop_records: list[HopRecord]) -> None:
    """Set each client record's ``attempts`` and ``served_by`` from what reached the L7 hop.

    By trace id where the gateway passes ``traceparent`` on (each attempt carries the client's
    trace id); otherwise by timing: the one complete attempt that ended within
    ``TIMING_SLACK`` of the client's answer, while the request was in flight (none, or more
    than one, and the record says nothing)."""
    calls = [r for r in hop_records if r.method == "POST" and r.path.startswith("/v1/")]
    by_trace: dict[str, list[HopRecord]] = {}
    for call in calls:
        trace = _trace_id(call.traceparent)
        if trace is not None:
            by_trace.setdefault(trace, []).append(call)
    for record in records:
        mine = by_trace.get(record.trace_id)
        if mine:
            record.attempts = len(mine)
            record.first_call = min(mine, key=lambda c: c.arrived_at).hop
            served = [c for c in mine if c.outcome == "complete" and c.status == 200]
            if served:
                record.served_by, record.served_by_how = served[-1].hop, "trace"
            continue
        if record.e2e is None:
            continue
        end = record.start + record.e2e
        near = [
            c
            for c in calls
            if c.outcome == "complete"
            and c.status == 200
            and c.ended_at is not None
            and record.start <= c.arrived_at
            and abs(c.ended_at - end) <= TIMING_SLACK
        ]
        if len(near) == 1:
            record.served_by, record.served_by_how = near[0].hop, "timing"


def _trace_id(traceparent: str | None) -> str | None:
    parts = (traceparent or "").split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None
