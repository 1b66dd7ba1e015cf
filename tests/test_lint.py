"""`drills lint`: the timeout budget of a stack config, checked statically (no stack needed)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from drills.checks import Evaluation, evaluate
from drills.lint import lint_stack
from drills.model.expect import Check
from drills.model.scenario import load_scenario
from tests.conftest import PROFILES, drills_cli

ROOT = Path(__file__).resolve().parent.parent


def rules(findings: list) -> dict[str, str]:
    return {f.rule: f.severity for f in findings}


def test_the_sound_profile_has_no_findings() -> None:
    assert lint_stack("sound", client_timeout=60) == []


def test_the_unsound_profile_is_caught_on_every_contradiction() -> None:
    findings = lint_stack("unsound")
    assert rules(findings) == {
        "first-token-within-model-call": "error",
        "queue-within-request": "error",
        "retries-bounded": "error",
        "retries-budgeted": "error",
        "retries-back-off": "error",
        "request-covers-tiers": "error",
        "breakers-present": "error",
        "degraded-path": "error",
        "queue-at-gateway": "warning",
        # The RAG and agent paths (each rule once for gateway.rag and once for gateway.agent).
        "hop-retries-budgeted": "error",
        "hop-retries-back-off": "error",
        "hop-breakers-present": "error",
        "hop-degraded-path": "error",
        "hop-timeouts-within-request": "error",
    }
    hop_fields = sorted(f.field for f in findings if f.rule.startswith("hop-"))
    assert len(hop_fields) == 10
    assert "gateway.rag.no_context_text" in hop_fields
    assert "gateway.agent.graceful_text" in hop_fields
    # Each finding names file, line, field, the values and the fix.
    text = {f.rule: str(f) for f in findings}
    unsound = str(PROFILES / "unsound.yaml")
    lines = (PROFILES / "unsound.yaml").read_text().splitlines()
    first = text["first-token-within-model-call"]
    assert first.startswith(f"{unsound}:")
    line = int(first.split(":")[1].split()[0])
    assert lines[line - 1].strip().startswith("first_token: 30s")
    assert "first_token (30s) is longer than model_call (10s)" in first and "fix:" in first
    assert "request - fallback_reserve (8s) does not cover" in text["request-covers-tiers"]


def _variant(tmp_path: Path, **gateway: object) -> Path:
    data = yaml.safe_load((PROFILES / "sound.yaml").read_text())
    for key, value in gateway.items():
        section, _, field = key.partition("__")
        if field:
            data["gateway"][section][field] = value
        else:
            data["gateway"][section] = value
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_each_rule_fires_alone(tmp_path: Path) -> None:
    cases = {
        "connect-within-first-token": {"timeouts__connect": "3s"},
        "first-token-within-model-call": {"timeouts__first_token": "12s"},
        "queue-within-request": {"timeouts__queue": "15s"},
        "request-covers-tiers": {"timeouts__request": "9s"},
        "retries-bounded": {"retries__max_attempts": None},
        "retries-budgeted": {"retries__budget": None},
        "retries-back-off": {"retries__backoff_max": "0s", "retries__backoff_base": "0s"},
        "breakers-reset": {"breaker__reset_timeout": "0s"},
        "breakers-present": {"breaker": None},
        "degraded-path": {"fallback__text": None},
        "fallback-reserve": {"fallback_reserve": "0s"},
        "queue-at-gateway": {"admission__max_concurrency": 64},
        "agent-checkpoints": {"agent__checkpoints": False},
        "agent-stable-keys": {"agent__stable_keys": False},
        "orchestrator-wait-limit": {"orchestrator__wait_limit": None},
        "orchestrator-task-timeout": {"orchestrator__task_timeout": None},
        "orchestrator-wait-within-task": {"orchestrator__wait_limit": "6s"},
        "orchestrator-orphans": {"orchestrator__cancel_orphans": False},
    }
    for rule, change in cases.items():
        found = rules(lint_stack(_variant(tmp_path, **change)))
        assert rule in found, (rule, found)
        # request-covers-tiers follows from some of the others; nothing unrelated fires.
        assert set(found) <= {rule, "request-covers-tiers"}, (rule, found)


def test_the_unsound_agent_profile_is_caught_on_its_resume_rules() -> None:
    findings = lint_stack("unsound-agent")
    assert rules(findings) == {"agent-checkpoints": "error", "agent-stable-keys": "error"}
    assert {f.field for f in findings} == {
        "gateway.agent.checkpoints",
        "gateway.agent.stable_keys",
    }


def test_the_unbounded_waits_profile_is_caught_on_its_orchestrator_rules() -> None:
    findings = lint_stack("unbounded-waits")
    assert rules(findings) == {
        "orchestrator-wait-limit": "error",
        "orchestrator-task-timeout": "error",
        "orchestrator-orphans": "warning",
    }


def test_a_client_that_gives_up_before_the_gateway_is_an_error() -> None:
    found = lint_stack("sound", client_timeout=10)
    assert [f.rule for f in found] == ["client-outwaits-gateway"]
    assert "client's timeout (10s) is shorter than what the gateway may spend (15s)" in str(
        found[0]
    )


def test_cli_exit_codes(tmp_path: Path) -> None:
    ok = subprocess.run(drills_cli("lint", "sound"), capture_output=True, text=True)
    assert ok.returncode == 0 and "0 error(s)" in ok.stdout
    bad = subprocess.run(drills_cli("lint", "unsound"), capture_output=True, text=True)
    assert bad.returncode == 1 and "18 error(s), 1 warning(s)" in bad.stdout
    assert "[retries-budgeted]" in bad.stdout
    missing = subprocess.run(
        drills_cli("lint", str(tmp_path / "nope.yaml")), capture_output=True, text=True
    )
    assert missing.returncode == 2 and "nope.yaml" in missing.stderr
    assert "Traceback" not in missing.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text((PROFILES / "sound.yaml").read_text().replace("request: 15s", "request: 15"))
    invalid = subprocess.run(drills_cli("lint", str(broken)), capture_output=True, text=True)
    assert invalid.returncode == 2 and "gateway.timeouts.request" in invalid.stderr


def test_stack_lint_check_in_a_drill_fails_on_unsound_and_passes_on_sound() -> None:
    scenario, _ = load_scenario(ROOT / "scenarios" / "inference-latency.yaml")
    check = next(c for c in scenario.expect if c.check == "stack_lint")
    assert check.runbook and check.runbook.endswith("#timeouts")

    def result(lint: list[dict] | None) -> object:
        ev = Evaluation(scenario, [], {}, (0.0, 1.0), [], [], lint)
        return evaluate(ev, [check])[0]

    unsound = result([f.as_json() for f in lint_stack("unsound")])
    assert not unsound.passed and unsound.observed == 18
    assert "[request-covers-tiers]" in unsound.reason
    assert result([f.as_json() for f in lint_stack("sound")]).passed
    unknown = result(None)
    assert not unknown.passed and "no stack config known" in unknown.reason
    tolerant = evaluate(
        Evaluation(
            scenario, [], {}, (0.0, 1.0), [], [], [f.as_json() for f in lint_stack("unsound")]
        ),
        [Check(check="stack_lint", below=19)],
    )[0]
    assert tolerant.passed
