"""Measurement accuracy: the harness's TTFT and end-to-end times vs vLLM's own histograms for
the same requests, at low and moderate load.

Attaches to a running stack (``drills stack up`` first) and sends drills' Locust load straight to
one engine (no gateway, no proxy), so both sides see exactly the same requests. vLLM exposes
histograms, not per-request values, so the comparison is of means over the run
(``_sum / _count`` deltas), next to the harness's medians. The difference is what the harness
adds on top of the engine's own view: HTTP, SSE framing, client scheduling.

    .venv/bin/python bench/measurement_accuracy.py --users 1 4 --seconds 30
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from drills.load import LoadProcess, RecordReader
from drills.model.scenario import FallbackRule, LoadConfig
from drills.probes import parse_samples
from stack.config import load_stack_config
from stack.state import default_state_dir

METRICS = ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds")


def scrape(url: str) -> dict[str, float]:
    totals: dict[str, float] = {}
    for sample in parse_samples(httpx.get(url, timeout=5).text):
        for metric in METRICS:
            if sample["name"] in (f"{metric}_sum", f"{metric}_count"):
                totals[sample["name"]] = totals.get(sample["name"], 0.0) + sample["value"]
    return totals


def mean(after: dict[str, float], before: dict[str, float], metric: str) -> float:
    """Mean in ms of a vLLM histogram over the interval between two scrapes."""
    total = after[f"{metric}_sum"] - before[f"{metric}_sum"]
    count = after[f"{metric}_count"] - before[f"{metric}_count"]
    return 1000 * total / count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state-dir", type=Path, default=default_state_dir())
    parser.add_argument("--users", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--seconds", type=float, default=30)
    args = parser.parse_args()
    config = load_stack_config(args.state_dir / "stack.yaml")
    replica = config.replicas[0]
    engine = f"http://{config.host}:{replica.port}"
    print(f"engine {replica.name} at {engine}; {args.seconds:.0f} s per load level; ms")
    print(
        f"{'users':>5} {'n':>4} | {'ttft harness mean':>17} {'vllm mean':>9} {'diff':>6} "
        f"{'harness p50':>11} | {'e2e harness mean':>16} {'vllm mean':>9} {'diff':>6}"
    )
    for users in args.users:
        with tempfile.TemporaryDirectory() as tmp:
            records = Path(tmp) / "records.jsonl"
            load = LoadConfig(
                users=users,
                spawn_rate=100,
                wait="0s",
                warmup="0s",
                max_tokens=16,
                model=config.engine.served_name,
            )
            before = scrape(f"{engine}/metrics")
            process = LoadProcess(
                engine,
                load,
                FallbackRule(header=None),
                [[{"role": "user", "content": "Say hello in one sentence."}]],
                records,
                args.seconds + 30,
            )
            process.start()
            time.sleep(args.seconds)
            process.stop()  # lets requests in flight finish (Locust's stop timeout)
            time.sleep(1)
            after = scrape(f"{engine}/metrics")
            done = [r for r in RecordReader(records).read_new() if not r.error]
        n = (
            after["vllm:e2e_request_latency_seconds_count"]
            - before["vllm:e2e_request_latency_seconds_count"]
        )

        ttft = [r.ttft * 1000 for r in done if r.ttft is not None]
        e2e = [r.e2e * 1000 for r in done if r.e2e is not None]
        vt, ve = (mean(after, before, m) for m in METRICS)
        print(
            f"{users:>5} {len(done):>4} | {statistics.mean(ttft):17.1f} {vt:9.1f} "
            f"{statistics.mean(ttft) - vt:6.1f} {statistics.median(ttft):11.1f} | "
            f"{statistics.mean(e2e):16.1f} {ve:9.1f} {statistics.mean(e2e) - ve:6.1f}"
            + ("" if n == len(done) else f"  (vLLM counted {n:.0f} requests)")
        )


if __name__ == "__main__":
    main()
