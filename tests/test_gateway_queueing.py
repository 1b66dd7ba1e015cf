"""The gateway-queueing drill on the real stack: `drills gate --twins
scenarios/gateway-queueing.yaml` on the session's stack. A spike of 12 users against 8 engine
slots: on the sound profile the excess waits in the gateway's bounded queue and each engine's
own queue (vllm:num_requests_waiting, scraped from the engine) stays empty; on its twin,
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
    waiting = {c["label"]: c["observed"] for c in drill["checks"] if c["check"] == "prometheus"}
    assert len(waiting) == 2 and set(waiting.values()) == {0}
    # The twin: the engines' own queues filled, seen in the engines' metrics.
    assert set(TWIN.must_fail) <= set(twin["twin"]["failed"])
    assert set(twin["twin"]["failed"]) <= set(TWIN.must_fail) | set(TWIN.may_fail)
    queued = [c for c in twin["checks"] if c["check"] == "prometheus"]
    assert all(c["observed"] >= 1 for c in queued), queued
