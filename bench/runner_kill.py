"""The harness drilled by itself: SIGKILL the runner at random moments of a real drill and count
what is left 10 s later (faults, ledger entries, processes), and how long the watchdog took
from the runner's death to its last revert.

Attaches to a running stack (``drills stack up`` first; the sound profile's hops). Each round
runs ``drills run`` on a drill of two fault phases (a latency toxic on vllm-0, then one on
vllm-1 and one on backup at once) with its own ledger and state folder, and kills it:

  before     0.3-3 s after the start, before the first fault
  during     0.2-4 s into the first fault
  between    in the gap after the first fault was reverted, before the second
  revert     inside the second phase's two reverts: Toxiproxy is paused (SIGSTOP) 0.3 s before
             their scheduled end, so that the runner's DELETEs hang; the runner is killed
             0.6 s later and Toxiproxy resumed at once (its toxics and ledger entries are
             both still there when the runner dies)

Then it waits 10 s and reads back: toxics on the stack's proxies (goal 0), ledger entries
(goal 0), the run's Locust and watchdog processes still alive (goal 0). The watchdog's time is
from the SIGKILL to the last "reverted" line of its ``watchdog.jsonl`` (median and max).

    .venv/bin/drills stack up && .venv/bin/python bench/runner_kill.py --rounds 20
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from drills.common.system import pid_alive
from stack.config import load_stack_config
from stack.state import default_state_dir, read_state

ROOT = Path(__file__).resolve().parents[1]
MOMENTS = ("before", "during", "between", "revert")
DRILL = """\
drill: runner-kill
title: Runner kill bench
stack:
  attach: {{gateway: "{gateway}", toxiproxy: "{toxiproxy}", hop: "{hop}"}}
load: {{users: 2, spawn_rate: 2, prompts: ["Say hello."], max_tokens: 4, warmup: 2s}}
phases:
  - {{name: baseline, duration: 4s}}
  - name: first
    duration: 5s
    inject: [{{kind: toxiproxy.latency, target: vllm-0, latency: 1s}}]
  - {{name: gap, duration: 3s}}
  - name: second
    duration: 5s
    inject:
      - {{kind: toxiproxy.latency, target: vllm-1, latency: 1s}}
      - {{kind: toxiproxy.latency, target: backup, latency: 1s}}
  - {{name: recovery, duration: 2s}}
expect:
  - {{check: error_rate, below: 1}}
"""


def toxics(api: str) -> int:
    proxies = httpx.get(f"{api}/proxies", timeout=5).json()
    return sum(len(p.get("toxics") or []) for p in proxies.values())


def wait_for(condition: Callable[[], bool], timeout: float, step: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return False


def processes_of(folder: Path) -> list[int]:
    """Live processes whose environment or command line names ``folder`` (the run's Locust,
    its watchdog)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            text = (entry / "environ").read_bytes() + (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if str(folder).encode() in text and pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def one_round(
    moment: str, drill: Path, api: str, toxiproxy_pid: int, folder: Path
) -> dict[str, Any]:
    env = {
        **os.environ,
        "DRILLS_LEDGER": str(folder / "ledger.json"),
        "XDG_STATE_HOME": str(folder / "state"),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "drills.cli", "run", str(drill), "--out", str(folder / "runs")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=folder,
    )
    if moment == "before":
        time.sleep(random.uniform(0.3, 3.0))
    elif moment == "during":
        wait_for(lambda: toxics(api) >= 1, 30)
        time.sleep(random.uniform(0.2, 4.0))
    elif moment == "between":
        wait_for(lambda: toxics(api) >= 1, 30)
        wait_for(lambda: toxics(api) == 0, 30)
        time.sleep(random.uniform(0.0, 2.5))
    else:
        wait_for(lambda: toxics(api) >= 1, 30)
        wait_for(lambda: toxics(api) == 0, 30)
        wait_for(lambda: toxics(api) >= 2, 30, step=0.002)
    ledger = folder / "ledger.json"
    if moment == "revert":
        # The second phase's faults end 5 s after they land. Toxiproxy is paused (SIGSTOP)
        # just before, so that the runner's reverts hang in their DELETE; the runner is
        # killed inside them, and Toxiproxy resumes at once.
        time.sleep(4.7)
        in_force = toxics(api)
        os.kill(toxiproxy_pid, signal.SIGSTOP)
        try:
            time.sleep(0.6)
            in_ledger = len(json.loads(ledger.read_text())) if ledger.exists() else 0
            killed_at = time.time()
            proc.kill()
            proc.wait()
        finally:
            os.kill(toxiproxy_pid, signal.SIGCONT)
    else:
        killed_at = time.time()
        in_force = toxics(api)
        in_ledger = len(json.loads(ledger.read_text())) if ledger.exists() else 0
        proc.kill()
        proc.wait()
    time.sleep(10)
    entries = json.loads(ledger.read_text()) if ledger.exists() else {}
    reverted = []
    for log in (folder / "runs").glob("*/watchdog.jsonl"):
        for line in log.read_text().splitlines():
            action = json.loads(line)
            if action.get("event") == "reverted":
                reverted.append(action["at"])
    return {
        "moment": moment,
        "in_force_at_kill": in_force,
        "ledger_at_kill": in_ledger,
        "faults_left": toxics(api),
        "ledger_left": len(entries),
        "processes_left": len(processes_of(folder)),
        "watchdog_s": max(reverted) - killed_at if reverted else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state-dir", type=Path, default=default_state_dir())
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--moments", nargs="+", choices=MOMENTS, default=list(MOMENTS))
    args = parser.parse_args()
    random.seed(args.seed)
    config = load_stack_config(args.state_dir / "stack.yaml")
    host = config.host
    api = f"http://{host}:{config.toxiproxy.api_port}"
    state = read_state(args.state_dir)
    assert state is not None, f"no stack in {args.state_dir}: drills stack up"
    toxiproxy_pid = int(state.components["toxiproxy"]["pid"])
    if toxics(api):
        raise SystemExit(f"{api} has toxics already: remove them first (drills abort)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="runner-kill-") as tmp:
        drill = Path(tmp) / "runner-kill.yaml"
        drill.write_text(
            DRILL.format(
                gateway=f"http://{host}:{config.gateway.port}",
                toxiproxy=api,
                hop=f"http://{host}:{config.hop.control_port}" if config.hop else "",
            )
        )
        for i in range(args.rounds):
            moment = args.moments[i % len(args.moments)]
            folder = Path(tmp) / f"round-{i}"
            folder.mkdir()
            row = one_round(moment, drill, api, toxiproxy_pid, folder)
            rows.append(row)
            print(json.dumps(row), flush=True)
            if row["faults_left"]:
                # Leave the stack clean for the next round, and say so.
                subprocess.run(
                    [sys.executable, "-m", "drills.cli", "abort"],
                    env={**os.environ, "DRILLS_LEDGER": str(folder / "ledger.json")},
                    check=False,
                )
    times = [r["watchdog_s"] for r in rows if r["watchdog_s"] is not None]
    counts = ", ".join(f"{m} {sum(r['moment'] == m for r in rows)}" for m in args.moments)
    print(f"rounds: {len(rows)} ({counts})")
    print(f"with a fault in force at the kill: {sum(r['in_force_at_kill'] > 0 for r in rows)}")
    print(f"with a ledger entry at the kill: {sum(r['ledger_at_kill'] > 0 for r in rows)}")
    print(f"faults left 10 s later: {sum(r['faults_left'] for r in rows)} (goal 0)")
    print(f"ledger entries left: {sum(r['ledger_left'] for r in rows)} (goal 0)")
    print(f"processes left (Locust, watchdog): {sum(r['processes_left'] for r in rows)} (goal 0)")
    if times:
        print(
            f"runner's death -> watchdog's last revert: median {statistics.median(times):.2f} s, "
            f"max {max(times):.2f} s ({len(times)} rounds with a revert to make)"
        )


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    main()
