"""Stack start-up time: from `drills stack up` to every component healthy.

Warm start (the default): everything installed and the model converted and cached; measures
process start, imports and model loads only. Each round is a full up + down. The sound profile
is started with and without its ``rag`` section (Triton with the embedding model, Chroma seeded
with the runbooks, the MCP tool server), alternately, so that the cost of the new components is
measured side by side on the same machine; each component's own time to healthy is read from
the stack's events.
Cold start (``--cold``): an empty cache, so the engine and retrieval environments are installed
(from the package index or uv's download cache), the model converted and Toxiproxy built first.

    .venv/bin/python bench/stack_start.py --rounds 3
    .venv/bin/python bench/stack_start.py --cold
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from stack import control
from stack.config import profile_path


def one(config: Path, state_dir: Path) -> tuple[float, dict[str, float]]:
    """Seconds to healthy, and each component's seconds from its start to healthy."""
    started = time.monotonic()
    status = control.up(config, state_dir)
    elapsed = time.monotonic() - started
    assert status.healthy
    first: dict[str, float] = {}
    ready: dict[str, float] = {}
    for line in (state_dir / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "started":
            first.setdefault(event["component"], event["time"])
        elif event["event"] == "healthy":
            ready.setdefault(event["component"], event["time"])
    control.down(state_dir)
    return elapsed, {c: ready[c] - first[c] for c in ready if c in first}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", default="sound")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="start from an empty cache")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        full = profile_path(args.profile)
        data = yaml.safe_load(full.read_text())
        data.pop("rag", None)
        bare = root / "model-only.yaml"
        bare.write_text(yaml.safe_dump(data, sort_keys=False))
        if args.cold:
            os.environ["DRILLS_CACHE"] = str(root / "cache")
            elapsed, parts = one(full, root / "state")
            print(
                f"cold start: {elapsed:.1f} s; "
                + ", ".join(f"{c} {t:.1f}" for c, t in parts.items())
            )
            return
        with_rag: list[float] = []
        without: list[float] = []
        parts_rag: dict[str, list[float]] = {}
        for i in range(args.rounds):
            t, _ = one(bare, root / f"bare{i}")
            without.append(t)
            t, parts = one(full, root / f"full{i}")
            with_rag.append(t)
            for component, seconds in parts.items():
                parts_rag.setdefault(component, []).append(seconds)
    print("model-only stack: " + ", ".join(f"{t:.1f}" for t in without) + " s")
    print("with RAG + tools: " + ", ".join(f"{t:.1f}" for t in with_rag) + " s")
    med_bare, med_rag = statistics.median(without), statistics.median(with_rag)
    print(
        f"median over {args.rounds} rounds: model-only {med_bare:.1f} s, with RAG + tools "
        f"{med_rag:.1f} s (ratio {med_rag / med_bare:.2f})"
    )
    for component, values in parts_rag.items():
        print(f"  {component:10s} start to healthy, median {statistics.median(values):.1f} s")


if __name__ == "__main__":
    main()
