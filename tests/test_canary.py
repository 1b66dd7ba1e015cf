"""The canary drill on the real stack: `drills gate --twins scenarios/canary.yaml` beside the
session's running stack (the user's, brought up once): the canary profile's gateway routes 30%
of chat requests to the canary hop; the drill passes when the canary answers as the stable
replicas do, and its twin (canary-long: answers of at least 36 tokens) fails on the answer-length
and latency comparisons, with the groups told apart at the L7 hop."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from drills.model.scenario import load_scenario
from tests.conftest import RunningStack, gate_drill_and_twin

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
CANARY = ROOT / "scenarios" / "canary.yaml"
TWIN_FAILS = set(load_scenario(CANARY)[0].twin("canary-long").must_fail)


def test_canary_drill_and_its_twin_beside_the_running_stack(
    stack: RunningStack, tmp_path: Path
) -> None:
    drill, twin = gate_drill_and_twin(CANARY, stack, tmp_path)
    # Both groups were seen at the L7 hop, by trace id, and the canary got about its share.
    groups = [r["group"] for r in drill["records"] if r["phase"] == "rollout"]
    canary, stable = groups.count("canary"), groups.count("stable")
    assert canary >= 15 and stable >= 30, (canary, stable)
    assert 0.15 < canary / (canary + stable) < 0.45
    on_canary = [r for r in drill["records"] if r["group"] == "canary"]
    assert all(r["first_call"] == "canary" for r in on_canary)
    # The gateway's claim agrees: what it says served a canary request is the canary hop.
    assert {r["upstream"] for r in on_canary} == {"canary"}
    # The stack it ran on is the session's, with the canary profile's gateway beside it.
    assert drill["stack"]["gateway"] != stack.gateway_url
    # The twin: exactly the comparisons it names failed.
    assert set(twin["twin"]["failed"]) == TWIN_FAILS
    tokens = next(c for c in twin["checks"] if c["check"] == "group_ks.tokens")
    assert tokens["observed"] < 1e-6 and "Kolmogorov-Smirnov" in tokens["reason"]
    root = ET.parse(tmp_path / "gate" / "junit.xml").getroot()
    suites = [s.get("name") for s in root]
    assert "drill:canary" in suites and any("twin" in (s or "") for s in suites), suites
    html = next((tmp_path / "gate").glob("runs/00-canary/canary-*/index.html")).read_text()
    assert "Answer lengths by group" in html
