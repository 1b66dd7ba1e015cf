"""How much load one Locust process of drills sustains while its TTFT stays accurate.

Against a deliberately fast stub upstream (bench/stub_upstream.py) whose first token comes
after a known delay, one Locust process runs N users with no think time; we report requests per
second, concurrent streams, and the TTFT the harness measured vs the stub's known TTFT (the
excess is measurement error: client scheduling, parsing, gevent). This benchmark is about the
harness, not a model.

    .venv/bin/python bench/load_capacity.py --users 1 8 32 64 --seconds 10
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import free_port, wait_until_up

from drills.load import LoadProcess, RecordReader
from drills.model.scenario import FallbackRule, LoadConfig

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--users", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--first-token-ms", type=float, default=50)
    args = parser.parse_args()
    port = free_port()
    stub = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "bench" / "stub_upstream.py"),
            str(port),
            "8",
            str(args.first_token_ms / 1000),
        ]
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(f"{url}/health")
        print(f"stub first token after {args.first_token_ms:.0f} ms; {args.seconds:.0f} s per row")
        print(
            f"{'users':>6} {'req/s':>8} {'ttft p50':>9} {'ttft p99':>9} {'error p50':>10} "
            f"{'errors':>7}"
        )
        for users in args.users:
            with tempfile.TemporaryDirectory() as tmp:
                records = Path(tmp) / "records.jsonl"
                load = LoadConfig(
                    users=users, spawn_rate=1000, wait="0s", warmup="0s", max_tokens=8
                )
                process = LoadProcess(
                    url,
                    load,
                    FallbackRule(),
                    [[{"role": "user", "content": "hi"}]],
                    records,
                    args.seconds + 5,
                )
                process.start()
                time.sleep(3)  # Locust's own start-up and spawning
                reader = RecordReader(records)
                reader.read_new()
                began = time.time()
                time.sleep(args.seconds)
                process.stop()
                done = [r for r in reader.read_new() if began <= r.start < began + args.seconds]
            ok = [r for r in done if not r.error]
            ttft = [r.ttft * 1000 for r in ok if r.ttft is not None]
            if not ttft:
                print(f"{users:>6} no successful requests")
                continue
            p50 = statistics.median(ttft)
            p99 = statistics.quantiles(ttft, n=100)[98] if len(ttft) > 2 else max(ttft)
            print(
                f"{users:>6} {len(done) / args.seconds:8.1f} {p50:8.1f}ms {p99:8.1f}ms "
                f"{p50 - args.first_token_ms:9.1f}ms {len(done) - len(ok):7d}"
            )
    finally:
        stub.terminate()
        stub.wait(timeout=10)


if __name__ == "__main__":
    main()
