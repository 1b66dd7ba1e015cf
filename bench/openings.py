"""What judging a breaker from outside costs when a retry storm floods the hop, side by side.

``breaker_opened_within`` finds when the gateway stopped sending to a hop from what reached the
harness's L7 hop (``drills.checks.observed.find_openings``). A retry storm sends tens of
thousands of attempts there (33,385 in one run of the retry-storm drill's unsound twin), and
the first version rescanned every attempt and every client request for each failed attempt:
quadratic. This bench times the current one against that first version, kept here verbatim as
the reference, on the same evaluation, alternating, and checks that both find the same
openings:

- synthetic storms of N failed attempts over a 30 s fault window at two hops, from 4 users
  whose requests loop for 8 s each (as the unsound twin's do), N given by ``--attempts``;
- or the journals given (``--journal``), each hop of each.

    .venv/bin/python bench/openings.py --attempts 1000 4000 16000 --rounds 3
    .venv/bin/python bench/openings.py --journal runs/retry-storm-twin-unsound-*/journal.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from drills.checks.base import Evaluation
from drills.checks.observed import (  # _confirmed: the same in both versions
    Opening,
    _confirmed,
    failed,
    find_openings,
    model_calls,
    skip_run,
)
from drills.common.hop import HopRecord
from drills.model.journal import FaultRecord
from drills.model.records import Record
from drills.model.scenario import Scenario, load_scenario

T0 = 1_800_000_000.0
Finder = Callable[[Evaluation, str, float, float], tuple[list[Opening], int]]


def rescanning_openings(
    ev: Evaluation, hop: str, start: float, end: float
) -> tuple[list[Opening], int]:
    """The first version of ``find_openings`` (before 7ddc030): the reference."""
    calls = model_calls(ev, hop)
    arrivals = [c.arrived_at for c in model_calls(ev)]
    clients = sorted(
        (r.start, not any(r.start <= t <= r.start + (r.e2e or 0.0) for t in arrivals))
        for r in ev.records
    )
    window = [c for c in calls if start <= c.arrived_at <= end]
    needed = skip_run(ev, hop, start, sum(1 for c in window if failed(c)))
    found: list[Opening] = []
    for i, call in enumerate(window):
        if not failed(call):
            continue
        ended = call.ended_at or call.arrived_at
        later = [c.arrived_at for c in window[i + 1 :] if c.arrived_at > ended]
        until = min(later, default=end)
        skipped = [(t, alone) for t, alone in clients if ended < t < until]
        confirmed = _confirmed(skipped, needed)
        gap = found and not any(found[-1].at < c.arrived_at < ended for c in window)
        if confirmed is not None and not gap:
            found.append(Opening(ended, confirmed))
    return found, needed


def storm(attempts: int) -> tuple[Evaluation, float, float]:
    """An evaluation of a made-up storm: 10 s of baseline, then ``attempts`` failed attempts
    spread over a 30 s fault at vllm-0 and vllm-1, from 4 users looping 8 s per request."""
    scenario = Scenario.model_validate(
        {
            "drill": "storm",
            "title": "storm",
            "load": {"users": 4},
            "phases": [
                {"name": "baseline", "duration": "10s"},
                {
                    "name": "fault",
                    "duration": "30s",
                    "inject": [{"kind": "hop.status", "target": "vllm-0", "status": 503}],
                },
            ],
            "expect": [{"check": "breaker_opened_within", "target": "vllm-0", "below": "10s"}],
        }
    )
    records, hops, seq = [], [], 0
    for user in range(4):
        t = T0 + user * 0.1
        while t < T0 + 10:  # baseline: answered in 0.5 s, alternating hops
            records.append(Record(start=t, e2e=0.5, status=200, trace_id="t"))
            hops.append(_call(seq, f"vllm-{seq % 2}", t + 0.01, t + 0.49, 200))
            seq, t = seq + 1, t + 0.5
        while t < T0 + 40:  # fault: each request loops over the two failing hops for 8 s
            records.append(Record(start=t, e2e=8.0, status=502, error="HTTP 502", trace_id="t"))
            t += 8.0
    step = 30.0 / attempts
    for k in range(attempts):
        at = T0 + 10 + k * step
        hops.append(_call(seq + k, f"vllm-{k % 2}", at, at + step / 2, 503))
    faults = [
        FaultRecord(
            index=0,
            phase="fault",
            kind="hop.status",
            target="vllm-0",
            scheduled_offset=10,
            scheduled_end=40,
            applied_at=T0 + 10,
            reverted_at=T0 + 40,
        )
    ]
    phases = {"baseline": (T0, T0 + 10), "fault": (T0 + 10, T0 + 40)}
    ev = Evaluation(scenario, records, phases, (T0, T0 + 40), faults, hop_records=hops)
    return ev, T0 + 10, T0 + 40


def _call(seq: int, hop: str, arrived: float, ended: float, status: int) -> HopRecord:
    return HopRecord(
        seq=seq,
        hop=hop,
        method="POST",
        path="/v1/chat/completions",
        arrived_at=arrived,
        ended_at=ended,
        status=status,
    )


def from_journal(path: Path) -> list[tuple[str, Evaluation, str, float, float]]:
    raw = json.loads(path.read_text())
    scenario, _ = load_scenario(Path(raw["scenario_path"]))
    phases = {p["name"]: (p["start"], p["end"]) for p in raw["phases"]}
    ev = Evaluation(
        scenario,
        [Record.model_validate(r) for r in raw["records"]],
        phases,
        (raw["t0"], raw["ended_at"]),
        [FaultRecord.model_validate(f) for f in raw["faults"]],
        hop_records=[HopRecord.model_validate(h) for h in raw["hop_records"]],
    )
    hops = sorted({h.hop for h in ev.hop_records or []})
    label = f"{path.parent.name[:40]} ({len(ev.hop_records or [])} attempts)"
    return [(f"{label} {hop}", ev, hop, raw["t0"], raw["ended_at"]) for hop in hops]


def timed(
    finder: Finder, ev: Evaluation, hop: str, start: float, end: float
) -> tuple[float, list[tuple[float, float]]]:
    began = time.perf_counter()
    found, _ = finder(ev, hop, start, end)
    return time.perf_counter() - began, [(o.at, o.confirmed_at) for o in found]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempts", type=int, nargs="*", default=[1000, 4000, 16000])
    parser.add_argument("--journal", type=Path, nargs="*", default=[])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cases = []
    for n in args.attempts:
        ev, start, end = storm(n)
        cases.append((f"storm of {n} attempts, vllm-0", ev, "vllm-0", start, end))
    for path in args.journal:
        cases += from_journal(path)
    print(f"{'case':<62} {'reference':>10} {'drills':>10} {'ratio':>8}  openings")
    for label, ev, hop, start, end in cases:
        ref, new = [], []
        for _ in range(args.rounds):  # alternating, so drift hits both alike
            t, ref_found = timed(rescanning_openings, ev, hop, start, end)
            ref.append(t)
            t, new_found = timed(find_openings, ev, hop, start, end)
            new.append(t)
            assert ref_found == new_found, f"{label}: the two disagree"
        r, n = statistics.median(ref), statistics.median(new)
        print(f"{label:<62} {r:>9.3f}s {n:>9.4f}s {r / n:>7.0f}x  {len(new_found)} (same)")


if __name__ == "__main__":
    main()
