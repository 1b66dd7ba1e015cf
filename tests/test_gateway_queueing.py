"""The gateway-queueing drill on the real stack: `drills gate --twins
scenarios/gateway-queueing.yaml` on the session's stack. A spike of 12 users against 8 engine
slots: on the sound profile the excess waits in the gateway's bounded queue and each engine's
own queue (engine.waiting: vllm:num_requests_waiting, scraped from each engine) stays empty; on its twin,
engine-queueing (admission wide open, its gateway run beside the same engines), the engines'
queues fill and the drill names both."""

from __future__ import annotations

from pathlib import Path

import pytest

from drills.model.scenario import load_scenario
from tests.conftest import RunningStack, gate_drill_and_twin

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
DRILL = ROOT / "scenarios" / "gateway-queueing.yaml"
TWIN = load_scenario(DRILL)[0].twin("engine-queueing")


def test_the_spike_queues_at_the_gateway_and_its_twin_in_the_engines(
    stack: RunningStack, tmp_path: Path
) -> None:
    drill, twin = gate_drill_and_twin(DRILL, stack, tmp_path, "--profile", str(stack.config_path))
    # The spike happened inside its phase: many more requests than in the baseline.
    by_phase = {p: sum(r["phase"] == p for r in drill["records"]) for p in ("baseline", "spike")}
    assert by_phase["spike"] > 3 * by_phase["baseline"], by_phase
    # The engines' own account, read from both engines' metrics (neither the gateway's word
    # nor the clients' view).
    (waiting,) = [c for c in drill["checks"] if c["check"] == "engine.waiting"]
    assert waiting["passed"] and waiting["observed"] == 0, waiting
    assert "vllm-0 0" in waiting["reason"] and "vllm-1 0" in waiting["reason"], waiting
    # The twin: the engines' own queues filled, seen in the engines' metrics.
    assert set(TWIN.must_fail) <= set(twin["twin"]["failed"])
    assert set(twin["twin"]["failed"]) <= set(TWIN.must_fail) | set(TWIN.may_fail)
    (queued,) = [c for c in twin["checks"] if c["check"] == "engine.waiting"]
    assert queued["observed"] >= 1 and "vllm:num_requests_waiting" in queued["reason"], queued
