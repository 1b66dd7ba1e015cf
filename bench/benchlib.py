"""What the benchmarks share: free ports, waiting for a server, timing one streamed completion."""

from __future__ import annotations

import json
import statistics
import subprocess
import time

import httpx

from drills.common.ports import free_port

__all__ = ["alternate", "free_port", "report", "stop", "timed", "wait_until_up"]


def wait_until_up(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not come up within {timeout:.0f}s")


def timed(client: httpx.Client, url: str, body: dict[str, object]) -> tuple[float, float]:
    """(time to the first non-empty content delta, end-to-end) in ms for one streamed chat
    completion."""
    started = time.perf_counter()
    first = None
    with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if first is not None or not line.startswith("data:") or "[DONE]" in line:
                continue
            chunk = json.loads(line[5:])
            if any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or ()):
                first = time.perf_counter()
    end = time.perf_counter()
    return ((first or end) - started) * 1000, (end - started) * 1000


def alternate(
    paths: dict[str, str], body: dict[str, object], rounds: int, warmup: int = 20
) -> dict[str, list[tuple[float, float]]]:
    """``timed`` samples of each path, requests alternating between them (so all of them see
    the same machine load), after ``warmup`` requests to each."""
    samples: dict[str, list[tuple[float, float]]] = {p: [] for p in paths}
    with httpx.Client(timeout=30) as client:
        for url in paths.values():
            for _ in range(warmup):
                timed(client, url, body)
        for _ in range(rounds):
            for name, url in paths.items():
                samples[name].append(timed(client, url, body))
    return samples


def report(samples: dict[str, list[tuple[float, float]]], reference: str, subject: str) -> None:
    """Each path's medians (and e2e p99), then what ``subject`` adds to ``reference``: the
    median of the paired differences, to the first token and end to end."""
    width = max(map(len, samples)) + 1
    for name, rows in samples.items():
        ttft = statistics.median(r[0] for r in rows)
        e2e = statistics.median(r[1] for r in rows)
        p99 = statistics.quantiles([r[1] for r in rows], n=100)[98]
        print(f"{name:{width}} ttft {ttft:7.3f}  e2e {e2e:7.3f}  e2e p99 {p99:7.3f}")
    for i, what in enumerate(("ttft", "e2e")):
        pairs = zip(samples[subject], samples[reference], strict=True)
        diffs = [s[i] - r[i] for s, r in pairs]
        print(
            f"{subject} adds ({what}, median of paired differences): "
            f"{statistics.median(diffs):.3f} ms"
        )


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop the benchmark's own processes, by their ids."""
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)
