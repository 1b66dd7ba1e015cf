"""First run on a fresh machine: the README's main command, from a clean clone and empty caches,
to the drill's verdict.

Each round clones this checkout's HEAD into a temporary folder and runs
``bash stack/bootstrap.sh drills run scenarios/inference-latency.yaml --stop-stack`` there with
every cache empty (``DRILLS_CACHE``, uv's, pip's, Go's build and module caches, the stack's
state), so the harness environment, Toxiproxy's build, vLLM's environment, the model's
conversion and the stack's start are all in the time, as on a new machine (packages still come
from the package index, as there). Rounds alternate the default (the stack started with what
the drill needs: no retrieval part) with ``--with rag`` (the whole sound profile, as every run
started it before), so the two are measured side by side. Each phase's time is read from the
run's own log lines, stamped as they arrive.

    .venv/bin/python bench/first_run.py --rounds 1
    .venv/bin/python bench/first_run.py --rounds 1 --only default

Needs the stack's ports free (no stack up) and about 15 GB in the temporary folder per round
(the caches are removed after each).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKS = {
    "harness venv": "drill inference-latency:",
    "toxiproxy, engine env, model (side by side)": "supervisor started",
    "stack start": "[warm-up]",
    "drill (warm-up, phases, checks, report)": "report: ",
}


def one(variant: str, keep: bool) -> dict[str, float]:
    """Seconds of each phase of one first run, and ``total``."""
    tmp = Path(tempfile.mkdtemp(prefix=f"drills-first-{variant}-"))
    try:
        repo = tmp / "repo"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
        env = {
            **os.environ,
            "DRILLS_CACHE": str(tmp / "cache"),
            "UV_CACHE_DIR": str(tmp / "uv"),
            "PIP_CACHE_DIR": str(tmp / "pip"),
            "GOCACHE": str(tmp / "go-build"),
            "GOMODCACHE": str(tmp / "go-mod"),
            "DRILLS_STATE_DIR": str(tmp / "state"),
            "XDG_STATE_HOME": str(tmp / "xdg"),
        }
        command = [
            "bash",
            "stack/bootstrap.sh",
            "drills",
            "run",
            "scenarios/inference-latency.yaml",
        ]
        command += ["--stop-stack", *(["--with", "rag"] if variant == "with-rag" else [])]
        started = time.monotonic()
        seen: dict[str, float] = {}
        with subprocess.Popen(
            command, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc:
            assert proc.stdout is not None
            with open(tmp.parent / f"drills-first-{variant}.log", "w") as log:
                for line in proc.stdout:
                    log.write(line)
                    for phase, mark in MARKS.items():
                        if mark in line and phase not in seen:
                            seen[phase] = time.monotonic() - started
        total = time.monotonic() - started
        if proc.returncode != 0:
            raise SystemExit(f"{variant}: exit code {proc.returncode}; see {log.name}")
        phases, last = {}, 0.0
        for phase in MARKS:
            at = seen.get(phase, total)
            phases[phase] = at - last
            last = at
        phases["total"] = total
        return phases
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", choices=["default", "with-rag"])
    parser.add_argument("--keep", action="store_true", help="keep each round's folder")
    args = parser.parse_args()
    variants = [args.only] if args.only else ["default", "with-rag"]
    results: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    for _ in range(args.rounds):
        for variant in variants:
            phases = one(variant, args.keep)
            results[variant].append(phases)
            print(variant, {k: round(v, 1) for k, v in phases.items()}, flush=True)
    print("\nmedian seconds per phase:")
    for variant, rounds in results.items():
        print(f"  {variant}:")
        for phase in [*MARKS, "total"]:
            print(f"    {phase:45s} {statistics.median(r[phase] for r in rounds):7.1f}")
    if len(variants) == 2:
        ratio = statistics.median(r["total"] for r in results["default"]) / statistics.median(
            r["total"] for r in results["with-rag"]
        )
        print(f"  default / with-rag total: {ratio:.2f}")


if __name__ == "__main__":
    main()
