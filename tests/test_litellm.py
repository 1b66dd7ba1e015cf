"""LiteLLM proxy, a real third-party gateway (pinned, hash-checked, started here), in front of the
embedded stack's model hops, drilled and judged from outside: what reached each hop (the L7
hop), and the answer each client got. The drills of scenarios/litellm/ pass or fail on it for the
reason they name, and each has its twin."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from stack import control
from stack.litellm import litellm_config, start, wait_ready
from tests.conftest import RunningStack, drills_cli, free_port, isolated_env, processes_naming
from tests.helpers import drill_account, twin_account

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
DRILLS = ROOT / "scenarios" / "litellm"


@pytest.fixture(scope="module")
def litellm(
    stack: RunningStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], str]]:
    """``litellm(policy)``: the URL of a LiteLLM proxy with that policy (stack/litellm/) in
    front of the stack's hops, started on first use and stopped when the module ends."""
    root = tmp_path_factory.mktemp("litellm")
    running: dict[str, tuple[str, subprocess.Popen[bytes]]] = {}

    def get(policy: str) -> str:
        if policy not in running:
            config = root / f"{policy}.yaml"
            config.write_text(yaml.safe_dump(litellm_config(stack.config, policy)))  # type: ignore[arg-type]
            port = free_port()
            process = start(config, port, root / f"{policy}.log")
            url = f"http://127.0.0.1:{port}"
            running[policy] = (url, process)
            wait_ready(url, process)
        return running[policy][0]

    yield get
    for _, process in running.values():
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def drill(
    name: str,
    stack: RunningStack,
    tmp_path: Path,
    gateway: str,
    adapter: str = "litellm",
    *extra: str,
    toxiproxy: bool = True,
) -> tuple[int, dict[str, Any], str]:
    """Run ``scenarios/litellm/NAME.yaml`` attached to ``gateway`` (and the stack's Toxiproxy
    unless ``toxiproxy`` is false); exit code, journal, stderr."""
    out = subprocess.run(
        drills_cli(
            "run",
            str(DRILLS / f"{name}.yaml"),
            *stack.attach_args(gateway, toxiproxy),
            "--adapter",
            adapter,
            "--out",
            str(tmp_path / "runs"),
            *extra,
        ),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
        timeout=600,
    )
    journal = json.loads(next((tmp_path / "runs").glob("*/journal.json")).read_text())
    return out.returncode, journal, out.stderr


def checks(journal: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["label"]: c for c in journal["checks"]}


def twin_run(
    name: str, stack: RunningStack, tmp_path: Path, adapter: str, must_fail: list[str]
) -> dict[str, Any]:
    """`drills run scenarios/litellm/NAME.yaml --twin`: the harness starts LiteLLM with the
    twin's policy (the deployments from the stack's state) in place of the drill's gateway and
    stops it after. The twin held, exactly ``must_fail`` failed, and LiteLLM is gone; its
    journal."""
    state = ("--state-dir", str(stack.state_dir))
    code, journal, stderr = drill(
        name, stack, tmp_path, stack.gateway_url, adapter, *state, "--twin"
    )
    assert code == 0, stderr
    twin = journal["twin"]
    assert twin["held"] and twin["failed"] == must_fail, twin
    assert twin["stack"].startswith("LiteLLM proxy started with "), twin["stack"]
    assert journal["stack"]["adapter"] == "litellm"
    assert processes_naming(tmp_path / "runs") == [], "the twin's LiteLLM outlived its run"
    return journal


def test_litellm_dresses_a_cut_stream_up_as_complete_and_the_drill_fails_on_it(
    stack: RunningStack, tmp_path: Path
) -> None:
    """The drill's twin: `--twin` starts LiteLLM with stack/litellm/sound.yaml in place of the
    embedded gateway, and the drill must fail on it for its completeness check alone."""
    journal = twin_run("stream-cut", stack, tmp_path, "drills", ["truncated_rate during fault"])
    results = checks(journal)
    cut = results["truncated_rate during fault"]
    assert not cut["passed"] and cut["observed"] > 0.5, cut
    fault = journal["phases"][1]
    in_fault = [r for r in journal["records"] if r["phase"] == "fault"]
    # What the client got: HTTP 200, a finish_reason and [DONE] LiteLLM made up, and too few tokens.
    faked = [r for r in in_fault if r["truncated"]]
    assert faked and all(r["status"] == 200 and r["finish_reason"] for r in faked)
    # What reached the hops: streams cut after 2 chunks, no [DONE] ever sent on.
    cuts = [
        h
        for h in journal["hop_records"]
        if fault["start"] <= h["arrived_at"] < fault["end"] and h["fault_kind"] == "hop.cut"
    ]
    assert cuts and all(not h["done"] and h["chunks"] == 2 for h in cuts)


def test_the_drill_passes_on_the_embedded_gateway_which_reports_the_cut(
    stack: RunningStack, tmp_path: Path
) -> None:
    # Attached without a Toxiproxy (its YAML names none, and none is given): a drill whose
    # faults are all at the L7 hop needs none, and touches none.
    code, journal, stderr = drill(
        "stream-cut", stack, tmp_path, stack.gateway_url, "drills", toxiproxy=False
    )
    results = checks(journal)
    assert results["truncated_rate during fault"]["passed"], results
    assert code == 0, stderr + "\n" + drill_account(journal)
    assert journal["stack"]["toxiproxy"] is None and "toxiproxy" not in journal["stack"]["metrics"]


def test_one_slow_replica_is_routed_around_and_seen_cooled_down(
    litellm: Callable[[str], str], stack: RunningStack, tmp_path: Path
) -> None:
    code, journal, stderr = drill("latency-one-replica", stack, tmp_path, litellm("sound"))
    results = checks(journal)
    opened = results["breaker_opened_within vllm-0"]
    assert opened["source"] == "observed" and "seen at the L7 hop" in opened["reason"], opened
    assert code == 0, stderr[-3000:] + "\n" + drill_account(journal)
    upstreams = {r["upstream"] for r in journal["records"] if r["upstream"]}
    assert upstreams <= {"vllm-0", "vllm-1"} and upstreams  # x-litellm-model-id, mapped


def test_the_unsound_twin_keeps_sending_to_the_slow_replica_and_fails(
    stack: RunningStack, tmp_path: Path
) -> None:
    # LiteLLM with stack/litellm/unsound.yaml, started by the harness.
    journal = twin_run(
        "latency-one-replica", stack, tmp_path, "litellm", ["breaker_opened_within vllm-0"]
    )
    results = checks(journal)
    opened = results["breaker_opened_within vllm-0"]
    assert "never stopped sending to vllm-0" in opened["reason"], opened
    # Judged from outside: the records name the hop LiteLLM answered from.
    assert {r["upstream"] for r in journal["records"] if r["upstream"]} <= {"vllm-0", "vllm-1"}
    config = yaml.safe_load(
        (tmp_path / "runs" / "twin-litellm-unsound" / "config.yaml").read_text()
    )
    assert [m["model_info"]["id"] for m in config["model_list"]] == ["vllm-0", "vllm-1"]


def wait_healthy(stack: RunningStack, timeout: float = 240) -> None:
    """Until the supervisor has the killed replica back (the next test needs both)."""
    deadline = time.monotonic() + timeout
    while not control.status(stack.state_dir).healthy:
        assert time.monotonic() < deadline, "the stack did not become healthy again"
        time.sleep(2)


def test_a_killed_replica_is_cooled_down_at_its_first_failure_and_costs_no_error(
    litellm: Callable[[str], str], stack: RunningStack, tmp_path: Path
) -> None:
    state = ("--state-dir", str(stack.state_dir))
    code, journal, stderr = drill(
        "replica-killed", stack, tmp_path, litellm("sound"), "litellm", *state
    )
    wait_healthy(stack)
    assert code == 0, stderr[-3000:] + "\n" + drill_account(journal)
    dead = [
        h for h in journal["hop_records"] if h["hop"] == "vllm-0" and h["outcome"] != "complete"
    ]
    assert dead and all(h["outcome"] == "upstream_error" for h in dead)  # refused/reset, as seen


def test_with_litellms_own_cooldown_logic_a_dead_replica_keeps_failing_requests(
    stack: RunningStack, tmp_path: Path
) -> None:
    """The twin: without allowed_fails LiteLLM does not cool a deployment down on connection
    errors, so its retries land on the dead replica again and clients get errors."""
    state = ("--state-dir", str(stack.state_dir))
    code, journal, stderr = drill(
        "replica-killed", stack, tmp_path, stack.gateway_url, "litellm", *state, "--twin"
    )
    wait_healthy(stack)
    assert code == 0, stderr + "\n" + drill_account(journal)
    assert journal["twin"]["held"], twin_account(journal)
    results = checks(journal)
    assert not results["error_rate during fault"]["passed"], results
    errors = [r["error"] for r in journal["records"] if r["phase"] == "fault" and r["error"]]
    assert errors and all("Connection error" in e for e in errors), errors
