"""Groups of requests and the checks that compare them (``group_ratio``, ``group_ks``): who is
in which group, what a longer or a matching canary gives, bad declarations refused with their
file and line, and the gateway's canary route (its share refused outside 0..1, the call the
canary gets)."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from drills.checks import Evaluation, evaluate
from drills.model.expect import Check
from drills.model.records import Record
from drills.model.scenario import Group, Scenario, load_scenario
from stack.config import load_stack_config
from tests.conftest import drills_cli
from tests.helpers import anchored, problems

ROOT = Path(__file__).resolve().parent.parent
CANARY = ROOT / "scenarios" / "canary.yaml"
T0 = 1_800_000_000.0


def scenario(*checks: dict[str, Any]) -> Scenario:
    return Scenario.model_validate(
        {
            "drill": "g",
            "title": "g",
            "load": {"users": 1},
            "groups": {"canary": {"first_call": ["canary"]}, "stable": {"upstream": ["vllm-0"]}},
            "phases": [{"name": "rollout", "duration": "40s"}],
            "expect": list(checks),
        }
    )


def answers(hop: str, lengths: list[int], e2e: float = 0.5, status: int = 200) -> list[Record]:
    return [
        Record(
            start=T0 + i * 0.1,
            ttft=0.1,
            e2e=e2e + n / 100,
            tokens=n,
            status=status,
            error=None if status == 200 else "HTTP 503",
            trace_id=f"{hop}-{i}",
            first_call=hop if hop == "canary" else None,
            upstream=hop,
        )
        for i, n in enumerate(lengths)
    ]


def judged(s: Scenario, records: list[Record]) -> list[Any]:
    for r in records:
        r.group = s.group_of(r)
    ev = Evaluation(s, records, {"rollout": (T0, T0 + 40)}, (T0, T0 + 40), [])
    return evaluate(ev)


def test_a_request_is_in_the_first_group_it_matches() -> None:
    s = scenario({"check": "error_rate", "below": 0.5})
    both = Record(start=T0, trace_id="x", first_call="canary", upstream="vllm-0")
    stable = Record(start=T0, trace_id="y", first_call="vllm-0", upstream="vllm-0")
    neither = Record(start=T0, trace_id="z", status=429, error="rejected")
    assert [s.group_of(r) for r in (both, stable, neither)] == ["canary", "stable", None]
    with pytest.raises(ValueError, match="a group needs at least one of"):
        Group()


RATIO = {"group": "canary", "against": "stable", "during": "rollout"}


def test_a_longer_canary_fails_the_length_and_latency_comparisons() -> None:
    rng = random.Random(7)
    stable = answers("vllm-0", [rng.randint(5, 12) for _ in range(80)])
    canary = answers("canary", [rng.randint(24, 32) for _ in range(30)])
    s = scenario(
        {"check": "group_ratio.tokens.p50", "below": 1.5, **RATIO},
        {"check": "group_ratio.tokens.p90", "below": 1.5, **RATIO},
        {"check": "group_ks.tokens", "above": 0.001, **RATIO},
        {"check": "group_ratio.e2e.p90", "below": 1.2, **RATIO},
    )
    p50, p90, ks, e2e = judged(s, stable + canary)
    assert not p50.passed and p50.observed > 2.5 and "canary: 30 answers" in p50.reason
    assert "stable: 80 answers" in p50.reason and p50.observed_text.endswith("x")
    assert not p90.passed
    assert not ks.passed and ks.observed < 1e-10 and "Kolmogorov-Smirnov D=1.00" in ks.reason
    assert "the two distributions differ" in ks.reason
    assert not e2e.passed


def test_a_canary_like_the_stable_version_passes() -> None:
    rng = random.Random(11)
    stable = answers("vllm-0", [rng.randint(5, 12) for _ in range(80)])
    canary = answers("canary", [rng.randint(5, 12) for _ in range(30)])
    s = scenario(
        {"check": "group_ratio.tokens.p50", "below": 1.5, **RATIO},
        {"check": "group_ks.tokens", "above": 0.001, **RATIO},
        {"check": "group_ratio.error_rate", "below": 2, **RATIO},
    )
    p50, ks, errors = judged(s, stable + canary)
    assert p50.passed and 0.6 < p50.observed < 1.5, p50.reason
    assert ks.passed and ks.observed > 0.001, ks.reason
    assert errors.passed and errors.observed == 0
    assert "taken as one request's share" in errors.reason


def test_failures_per_group_and_an_empty_group() -> None:
    stable = answers("vllm-0", [8] * 40)
    canary = answers("canary", [8] * 10) + answers("canary", [0] * 10, status=503)
    s = scenario(
        {"check": "group_ratio.error_rate", "below": 2, **RATIO},
        {"check": "group_ratio.tokens.p50", "below": 2, "group": "stable", "against": "canary"},
    )
    errors, _ = judged(s, stable + canary)
    # Half the canary's requests failed; none of the stable ones (1 in 40 taken): 20x.
    assert not errors.passed and errors.observed == pytest.approx(0.5 / (1 / 40))
    assert "canary 50.0% of 20, stable 0.0% of 40" in errors.reason
    (lonely,) = judged(scenario({"check": "group_ks.e2e", "above": 0.01, **RATIO}), stable)
    assert not lonely.passed and lonely.observed is None
    assert "no answered request of group 'canary'" in lonely.reason


def test_group_checks_need_declared_groups_named_with_their_line(tmp_path: Path) -> None:
    data = yaml.safe_load(anchored(CANARY.read_text(), CANARY.parent))
    data["expect"][1]["group"] = "canry"
    data["expect"][2]["against"] = "canary"
    path = tmp_path / "canary.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    found = problems(load_scenario, path)
    assert any(
        "expect[1].group: no such group; expected one of the drill's groups: canary, stable" in p
        and "'canry'" in p
        for p in found
    ), found
    assert any("expect[2].against: a group compared with itself" in p for p in found), found
    assert all(p.startswith(f"{path}:") for p in found)
    result = subprocess.run(
        drills_cli("run", str(path), "--dry-run"), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and "no such group" in result.stderr


def test_a_group_check_without_its_groups_is_refused() -> None:
    with pytest.raises(ValueError, match="needs 'group' and 'against'"):
        Check(check="group_ks.tokens", above=0.01)
    with pytest.raises(ValueError, match="above 1 can never be met"):
        Check(check="group_ks.tokens", above=1, group="a", against="b")


def test_a_canary_share_outside_0_1_is_refused_with_its_line(tmp_path: Path) -> None:
    text = (ROOT / "stack" / "profiles" / "canary.yaml").read_text()
    path = tmp_path / "canary.yaml"
    path.write_text(text.replace("share: 0.3", "share: 1.5"))
    (problem,) = problems(load_stack_config, path)
    line = next(i for i, s in enumerate(path.read_text().splitlines(), 1) if "share: 1.5" in s)
    assert problem.startswith(f"{path}:{line} gateway.canary.share") and "1.5" in problem
    result = subprocess.run(
        drills_cli("lint", str(path)), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and "gateway.canary.share" in result.stderr


def test_a_canary_route_needs_the_canary_hop(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "stack" / "profiles" / "canary.yaml").read_text())
    del data["canary"]
    path = tmp_path / "no-hop.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    (problem,) = problems(load_stack_config, path)
    assert "gateway.canary" in problem and "needs the canary's hop" in problem


def test_the_canary_call_carries_the_canary_sampling() -> None:
    from stack.gateway.metrics import GatewayMetrics
    from stack.gateway.router import Router

    config = load_stack_config("canary-long")
    router = Router(config.gateway, config.upstreams, config.host, GatewayMetrics())
    payload = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    body = router._canary_payload(payload)
    assert body["min_tokens"] == 36 and body["max_tokens"] == 36
    assert payload == {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    draws = [router._pools(canary=True)[0][0] for _ in range(2000)]
    assert 0.25 < draws.count("canary") / 2000 < 0.35  # share: 0.3
    assert all(router._pools(canary=False)[0][0] == "primary" for _ in range(50))
