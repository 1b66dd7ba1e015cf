"""How well the harness sees the embedded gateway's breakers from outside, from drill journals.

For each breaker opening the gateway reports about itself (``drills_gateway_breaker_opened_
timestamp_seconds``, its own clock), the opening the harness found at its L7 hop
(``drills.checks.observed``) is paired with it, side by side:

- dating: the observed opening minus the gateway's own (the observed one is dated at the end of
  the failed attempt the gateway acted on);
- detection: when the harness had the evidence (the start of the skipped client request that
  completed the rule's run) minus the gateway's own opening time.

Run the sound inference-latency drill first (it opens every breaker), then:

    .venv/bin/drills run scenarios/inference-latency.yaml --out /tmp/b
    .venv/bin/python bench/breaker_observation.py /tmp/b/*/journal.json

Measured on the 2-core development machine (2026-12-02), the sound drill as shipped (2 users)
and a copy with ``users: 8`` (``sed 's/^  users: 2/  users: 8/'``, runbook paths made absolute):

- 2 users, 1.1 requests/s in the fault: 10 openings paired; dating median 0 ms, max 1967 ms;
  detection median 3006 ms, max 21220 ms;
- 8 users, 7.3 requests/s in the fault: 10 of 12 paired (the 2 left: the gateway reopened a
  breaker with no client request skipping the hop before the fault ended); dating median 0 ms,
  max 379 ms; detection median 296 ms, max 2627 ms.

The goal (under 1 s) is met at the second load and not at the first, because detection waits
for evidence that only client requests bring: a run of at least 3 skipped requests (more when
the hop's share is large and no request was answered without any upstream). At 1.1 requests/s
three requests take close to 3 s whatever the harness does; at a production rate it is a
fraction of a second. The dating error over 1 s is one opening in the 2-user run: the gateway
opened its breaker on the failure of an attempt that had arrived before the previous failure
ended, and the harness dated the opening at that earlier end (from outside the two cannot be
told apart without knowing the gateway's threshold).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from drills.checks import Evaluation
from drills.checks.observed import find_openings, model_calls
from drills.model.journal import Journal


def main() -> None:
    dating: list[float] = []
    detection: list[float] = []
    for name in sys.argv[1:]:
        journal = Journal.model_validate_json(Path(name).read_text())
        phases = {p.name: (p.start, p.end) for p in journal.phases}
        ev = Evaluation(
            scenario=None,  # type: ignore[arg-type]  # the rule reads records only
            records=journal.records,
            phases=phases,
            run_window=(journal.origin, journal.ended_at),
            faults=journal.faults,
        )
        ev.hop_records = journal.hop_records
        for hop in sorted({r.hop for r in model_calls(ev)}):
            claimed = sorted(
                {
                    s.value
                    for p in journal.probes
                    if p.source == "gateway"
                    for s in p.samples
                    if s.name == "drills_gateway_breaker_opened_timestamp_seconds"
                    and s.labels.get("upstream") == hop
                    and s.value > journal.origin
                }
            )
            seen, _ = find_openings(ev, hop, journal.origin, journal.ended_at)
            for opened in claimed:
                near = [o for o in seen if abs(o.at - opened) < 5]
                if not near:
                    print(f"{name}: {hop} opened at +{opened - journal.origin:.1f}s, not seen")
                    continue
                o = min(near, key=lambda x: abs(x.at - opened))
                dating.append((o.at - opened) * 1000)
                detection.append((o.confirmed_at - opened) * 1000)
    if not dating:
        raise SystemExit("no breaker opening in these journals (run the sound drill first)")
    print(f"openings paired: {len(dating)}")
    print(
        f"dating (observed - gateway's own), ms: median {statistics.median(dating):.0f}, "
        f"max |.| {max(abs(d) for d in dating):.0f}"
    )
    print(
        f"detection (evidence complete - gateway's own), ms: median "
        f"{statistics.median(detection):.0f}, max {max(detection):.0f}"
    )


if __name__ == "__main__":
    main()
