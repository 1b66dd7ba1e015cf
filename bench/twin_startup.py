"""What one shared start-up saves a drill and its twin: the twin's stack had two ways, side by
side on one machine.

- **beside**: the drill's stack (sound) is running; the twin's gateway (profile unsound) starts
  beside it, in front of the same hops (``stack.beside``), until its health check answers, and
  stops. This is what ``drills run --twin`` does for a gateway-only twin.
- **whole**: the twin's profile brought up in place of the running stack (``control.up``
  replaces an idle stack a run started), then the drill's profile brought back for the next
  drill, as a run without sharing must.

Rounds alternate the two. Both use a state directory of their own and the profile's own ports,
so nothing else may be running on them.

    .venv/bin/python bench/twin_startup.py --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from stack import control
from stack.beside import gateway_beside


def beside(state_dir: Path, work: Path) -> float:
    started = time.monotonic()
    with gateway_beside(state_dir / "stack.yaml", "unsound", work):
        ready = time.monotonic() - started
    return ready


def whole(state_dir: Path, base: str, twin: str) -> tuple[float, float]:
    """Seconds to the twin's stack healthy, and to the drill's own stack back."""
    started = time.monotonic()
    assert control.up(twin, state_dir, by="run", idle=lambda: True, parts=frozenset()).healthy
    there = time.monotonic() - started
    started = time.monotonic()
    assert control.up(base, state_dir, by="run", idle=lambda: True, parts=frozenset()).healthy
    return there, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    near: list[float] = []
    there: list[float] = []
    back: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        state_dir = root / "state"
        # The stack a drill runs on; model parts only (the twin drills of the latency and
        # pod-loss families need no RAG part).
        assert control.up("sound", state_dir, by="run", parts=frozenset()).healthy
        try:
            for i in range(args.rounds):
                near.append(beside(state_dir, root / f"beside{i}"))
                t, b = whole(state_dir, "sound", "unsound")
                there.append(t)
                back.append(b)
        finally:
            control.down(state_dir)
    print("beside (twin gateway ready): " + ", ".join(f"{t:.2f}" for t in near) + " s")
    print("whole (twin profile up):      " + ", ".join(f"{t:.1f}" for t in there) + " s")
    print("whole (drill's profile back): " + ", ".join(f"{t:.1f}" for t in back) + " s")
    med_near = statistics.median(near)
    med_whole = statistics.median(there) + statistics.median(back)
    print(
        f"median over {args.rounds} rounds: beside {med_near:.2f} s, whole {med_whole:.1f} s "
        f"(twin up {statistics.median(there):.1f} + back {statistics.median(back):.1f}); "
        f"sharing saves {med_whole - med_near:.1f} s per twin (ratio {med_whole / med_near:.0f}x)"
    )


if __name__ == "__main__":
    main()
