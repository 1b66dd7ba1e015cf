"""Journal size and report time per drill-hour: the journal as it is written now (probe scrapes
in columns, ``drills.model.columns``) against the format it replaced (every sample an object
of its own, indented), side by side on the same synthetic one-hour drill.

    .venv/bin/python bench/journal_size.py [--minutes 60] [--rounds 3]

The drill: 10 users, one request a second each (36,000 requests, each also seen at the L7
hop), four sources scraped every second (three vLLM engines and the gateway, 56 samples a
scrape: what the embedded stack's engines expose without histogram buckets). Prints each
format's size in MB and the median seconds to read it back and render the three reports
(``Journal.read`` + ``reports.render_all``), and their ratios.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from drills.model.journal import Journal
from reports import render_all

USERS = 10
SOURCES = ("vllm-0", "vllm-1", "vllm-2", "gateway")


def _scrape_names() -> list[tuple[str, dict[str, str]]]:
    """56 series a scrape: vLLM's gauges and counters, its histograms' sums and counts, and the
    process and Python collectors."""
    model = {"model_name": "smollm2", "engine": "0"}
    names: list[tuple[str, dict[str, str]]] = [
        ("vllm:num_requests_running", model),
        ("vllm:num_requests_waiting", model),
        ("vllm:kv_cache_usage_perc", model),
        ("vllm:num_preemptions_total", model),
        ("vllm:prompt_tokens_total", model),
        ("vllm:generation_tokens_total", model),
    ]
    for reason in ("stop", "length", "abort", "error"):
        names.append(("vllm:request_success_total", {**model, "finished_reason": reason}))
    for histogram in (
        "time_to_first_token_seconds",
        "inter_token_latency_seconds",
        "e2e_request_latency_seconds",
        "request_queue_time_seconds",
        "request_inference_time_seconds",
        "request_prefill_time_seconds",
        "request_decode_time_seconds",
        "request_prompt_tokens",
        "request_generation_tokens",
        "request_params_max_tokens",
        "iteration_tokens_total",
        "request_max_num_generation_tokens",
    ):
        names += [(f"vllm:{histogram}_sum", model), (f"vllm:{histogram}_count", model)]
    for gen in ("0", "1", "2"):
        for what in ("objects_collected_total", "collections_total", "uncollectable_total"):
            names.append((f"python_gc_{what}", {"generation": gen}))
    names += [
        (f"process_{what}", {})
        for what in (
            "virtual_memory_bytes",
            "resident_memory_bytes",
            "start_time_seconds",
            "cpu_seconds_total",
            "open_fds",
            "max_fds",
        )
    ]
    names.append(("python_info", {"implementation": "CPython", "version": "3.11.2"}))
    while len(names) < 56:
        names.append((f"http_requests_total_{len(names)}", {"handler": "/v1/chat/completions"}))
    return names


def synthetic(minutes: int, seed: int = 7) -> dict[str, Any]:
    rng = random.Random(seed)
    start = 1_767_225_600.0
    seconds = minutes * 60
    names = _scrape_names()
    probes = []
    for t in range(seconds):
        for source in SOURCES:
            probes.append(
                {
                    "time": start + t + rng.random() * 0.01,
                    "source": source,
                    "samples": [
                        {"name": n, "labels": labels, "value": round(rng.random() * 1000, 3)}
                        for n, labels in names
                    ],
                    "error": None,
                    "ended": None,
                }
            )
    records, hops = [], []
    for t in range(seconds):
        for user in range(USERS):
            sent = start + t + user / USERS
            trace = f"{rng.getrandbits(128):032x}"
            records.append(
                {
                    "start": sent,
                    "ttft": 0.2 + rng.random() * 0.1,
                    "itl": [round(0.05 + rng.random() * 0.01, 4) for _ in range(4)],
                    "e2e": 0.45 + rng.random() * 0.1,
                    "status": 200,
                    "tokens": 4,
                    "finish_reason": "length",
                    "route": "primary",
                    "upstream": f"vllm-{user % 3}",
                    "trace_id": trace,
                    "text": "Hello! How can I help?",
                }
            )
            hops.append(
                {
                    "seq": len(hops),
                    "hop": f"vllm-{user % 3}",
                    "method": "POST",
                    "path": "/v1/chat/completions",
                    "arrived_at": sent + 0.002,
                    "status": 200,
                    "first_byte_s": 0.2,
                    "chunks": 6,
                    "finish_reason": "length",
                    "done": True,
                    "bytes": 900,
                    "ended_at": sent + 0.45,
                    "traceparent": f"00-{trace}-{rng.getrandbits(64):016x}-01",
                }
            )
    phases = [
        {"name": "baseline", "start": start, "end": start + seconds / 3},
        {"name": "fault", "start": start + seconds / 3, "end": start + 2 * seconds / 3},
        {"name": "recovery", "start": start + 2 * seconds / 3, "end": start + seconds},
    ]
    return {
        "drill": "synthetic-hour",
        "title": "A synthetic one-hour drill (bench)",
        "run_id": "bench",
        "status": "completed",
        "deviated": False,
        "started_at": start,
        "t0": start,
        "ended_at": start + seconds,
        "stack": {"gateway": "http://127.0.0.1:1"},
        "phases": phases,
        "records": records,
        "hop_records": hops,
        "probes": probes,
        "run_dir": "",
    }


def timed_render(path: Path, out: Path) -> float:
    started = time.perf_counter()
    render_all(Journal.read(path), out)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    journal = Journal.model_validate(synthetic(args.minutes))
    with tempfile.TemporaryDirectory() as tmp:
        old, new = Path(tmp) / "old", Path(tmp) / "new"
        for d in (old, new):
            d.mkdir()
        # The format before: every sample an object, indented (``model_dump_json(indent=1)``
        # with the probes as a list of scrapes; format 2 is still read).
        before = journal.model_dump(mode="python")
        before["format"] = 2
        (old / "journal.json").write_text(json.dumps(before, indent=1))
        started = time.perf_counter()
        journal.write(new / "journal.json")
        write_s = time.perf_counter() - started
        sizes = {d.name: (d / "journal.json").stat().st_size / 1e6 for d in (old, new)}
        times: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(args.rounds):  # interleaved: the machine's noise hits both alike
            for d in (old, new):
                times[d.name].append(timed_render(d / "journal.json", d))
    medians = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"{args.minutes} min, {len(journal.records)} requests, {len(journal.probes)} scrapes, "
        f"{sum(len(p.samples) for p in journal.probes)} samples"
    )
    for name in ("old", "new"):
        print(
            f"{name}: {sizes[name]:8.1f} MB, read + render {medians[name]:6.2f} s "
            f"(median of {args.rounds})"
        )
    print(f"writing the new format: {write_s:.2f} s")
    print(
        f"new/old: size {sizes['new'] / sizes['old']:.3f}, "
        f"read + render {medians['new'] / medians['old']:.2f}"
    )


if __name__ == "__main__":
    main()
