"""Stack start-up time: from `drills stack up` to every component healthy.

Warm start (the default): everything installed and the model converted and cached; measures
process start, vLLM import and model load only. Each round is a full up + down, run in turn.
Cold start (``--cold``): an empty cache, so the engine environment is installed (from the
package index or uv's download cache), the model converted and Toxiproxy built first.

    .venv/bin/python bench/stack_start.py --rounds 3
    .venv/bin/python bench/stack_start.py --cold
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from stack import control


def one(profile: str, state_dir: Path) -> float:
    started = time.monotonic()
    status = control.up(profile, state_dir)
    elapsed = time.monotonic() - started
    assert status.healthy
    control.down(state_dir)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", default="sound")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="start from an empty cache")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.cold:
            os.environ["DRILLS_CACHE"] = str(Path(tmp) / "cache")
            print(f"cold start: {one(args.profile, Path(tmp) / 'state'):.1f} s")
            return
        times = [one(args.profile, Path(tmp) / f"state{i}") for i in range(args.rounds)]
    print("warm start: " + ", ".join(f"{t:.1f}" for t in times) + " s")
    print(f"warm start median: {statistics.median(times):.1f} s over {len(times)} rounds")


if __name__ == "__main__":
    main()
