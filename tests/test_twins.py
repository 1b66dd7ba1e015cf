"""Twins: the broken stacks a drill must fail on. Bad twin declarations are refused before any
stack starts (file:line field, exit 2); what counts as a twin that held; how the twin's stack
is had; its reports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import yaml

from drills.engine.twins import TwinPlan, in_twin_cluster, twin_outcome, without_absent
from drills.model.journal import CheckResult, RunStatus
from drills.model.scenario import load_scenario
from drills.model.twins import Twin
from reports.junit import twin_suite
from stack.beside import refusal
from stack.config import load_stack_config
from tests.helpers import anchored, problems

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
LATENCY = SCENARIOS / "inference-latency.yaml"
# Every shipped drill that can fail on this machine declares a twin (gpu-pod-loss-k8s's is run on
# the KWOK cluster by tests/test_kubernetes_faults.py). Not here: gpu-memory-pressure (it needs
# a GPU, and none has been lent to run a twin of it on).
WITH_TWINS = [
    "inference-latency.yaml",
    "gpu-pod-loss.yaml",
    "gpu-pod-loss-docker.yaml",
    "gpu-pod-loss-k8s.yaml",
    "vector-db-outage.yaml",
    "tool-saturation.yaml",
    "retry-storm.yaml",
    "canary.yaml",
    "gateway-queueing.yaml",
    "agent-resume.yaml",
    "multi-agent-wait.yaml",
    "litellm/latency-one-replica.yaml",
    "litellm/replica-killed.yaml",
    "litellm/stream-cut.yaml",
]


def copy_with_twins(tmp_path: Path, twins: list[dict]) -> tuple[Path, str]:
    """The shipped latency drill in ``tmp_path`` (its prompts and runbooks beside it) with
    ``twins`` in place of its own; the file's text."""
    import shutil

    data = yaml.safe_load(LATENCY.read_text())
    data["twins"] = twins
    for folder in ("prompts", "runbooks"):
        shutil.copytree(SCENARIOS / folder, tmp_path / folder, dirs_exist_ok=True)
    path = tmp_path / "drill.yaml"
    text = yaml.safe_dump(data, sort_keys=False)
    path.write_text(text)
    return path, text


def line_of(text: str, needle: str, after: str = "twins:") -> int:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(after))
    return next(i for i, line in enumerate(lines[start:], start + 1) if needle in line)


UNSOUND = {
    "profile": "unsound",
    "absent": ["backup"],
    "must_fail": ["fallback_rate during fault", "stack_lint"],
}


@pytest.mark.parametrize("name", WITH_TWINS)
def test_shipped_drills_declare_a_twin_that_validates(name: str) -> None:
    scenario, _ = load_scenario(SCENARIOS / name)
    assert scenario.twins, f"{name} declares no twin"
    labels = {c.label for c in scenario.expect}
    for twin in scenario.twins:
        assert twin.must_fail and set(twin.must_fail) <= labels


def test_a_twin_naming_a_check_the_drill_lacks_is_refused_with_its_line(tmp_path: Path) -> None:
    path, text = copy_with_twins(tmp_path, [{**UNSOUND, "must_fail": ["fallback_rate"]}])
    [problem] = problems(load_scenario, path)
    assert problem.startswith(f"{path}:{line_of(text, '- fallback_rate')} twins[0].must_fail[0]:")
    assert "the drill has no check of that label" in problem
    assert "fallback_rate during fault" in problem and "(got 'fallback_rate')" in problem


def test_an_empty_must_fail_is_refused(tmp_path: Path) -> None:
    path, text = copy_with_twins(tmp_path, [{**UNSOUND, "must_fail": []}])
    [problem] = problems(load_scenario, path)
    assert problem.startswith(f"{path}:{line_of(text, 'must_fail')} twins[0].must_fail:")
    assert "a twin that fails no check proves nothing" in problem


def test_a_twin_profile_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    path, text = copy_with_twins(tmp_path, [{**UNSOUND, "profile": "unsond"}])
    [problem] = problems(load_scenario, path)
    assert problem.startswith(f"{path}:{line_of(text, 'profile: unsond')} twins[0].profile:")
    assert "no such stack profile" in problem and "unsound" in problem


def test_a_target_the_twin_lacks_must_be_declared_absent(tmp_path: Path) -> None:
    path, _ = copy_with_twins(tmp_path, [{**UNSOUND, "absent": []}])
    [problem] = problems(load_scenario, path)
    assert "profile 'unsound' has no 'backup', which phases[1].inject[2] targets" in problem
    assert "list it in the twin's 'absent'" in problem
    # ... and what the twin has may not be declared absent.
    path, _ = copy_with_twins(tmp_path, [{**UNSOUND, "absent": ["backup", "vllm-1"]}])
    [problem] = problems(load_scenario, path)
    assert "twins[0].absent[1]: profile 'unsound' has 'vllm-1'" in problem


def test_a_check_both_must_and_may_fail_and_twins_of_one_name_are_refused(
    tmp_path: Path,
) -> None:
    twin = {**UNSOUND, "may_fail": ["stack_lint"]}
    path, _ = copy_with_twins(tmp_path, [twin, {**UNSOUND}])
    found = problems(load_scenario, path)
    assert any("twins[0].may_fail[0]: already in must_fail" in p for p in found), found
    assert any("twins[1].name: twin names must be unique" in p for p in found), found


def test_a_kubernetes_twin_moves_the_faults_to_an_allowed_namespace_only(tmp_path: Path) -> None:
    """Its namespace and context must be ones the drill allows (file:line, before anything is
    called); on the twin every kubernetes fault acts there, and nothing else changes."""
    source = SCENARIOS / "gpu-pod-loss-k8s.yaml"
    data = yaml.safe_load(source.read_text())
    data["twins"][0]["kubernetes"] = {"namespace": "prod", "context": "prod-eu"}
    path = tmp_path / "drill.yaml"
    text = yaml.safe_dump(data, sort_keys=False)
    path.write_text(anchored(text, SCENARIOS))
    found = problems(load_scenario, path)
    assert any(
        p.startswith(f"{path}:{line_of(text, 'namespace: prod')} twins[0].kubernetes.namespace:")
        and "not in the drill's kubernetes.allowed_namespaces (llm, llm-twin)" in p
        and "(got 'prod')" in p
        for p in found
    ), found
    assert any("twins[0].kubernetes.context: not in the drill's" in p for p in found), found
    # A twin that moves nothing, or belongs to a drill without kubernetes faults.
    data["twins"][0]["kubernetes"] = {}
    path.write_text(anchored(yaml.safe_dump(data, sort_keys=False), SCENARIOS))
    assert any(
        "names its 'namespace', its 'context' or both" in p for p in problems(load_scenario, path)
    )
    latency, _ = copy_with_twins(
        tmp_path, [{"kubernetes": {"namespace": "llm"}, "must_fail": ["stack_lint"]}]
    )
    assert any(
        "the drill has no kubernetes fault for the twin to move" in p
        for p in problems(load_scenario, latency)
    )

    scenario, _ = load_scenario(source)
    on_twin = in_twin_cluster(scenario, scenario.twins[0])
    (fault,) = on_twin.phases[1].inject
    assert fault.namespace == "llm-twin" and scenario.phases[1].inject[0].namespace == "llm"
    assert on_twin.model_copy(update={"phases": scenario.phases}) == scenario


def test_twin_on_the_cli_names_the_twins_there_are_and_exits_2(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}

    def drills(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "drills.cli", "run", *args, "--out", str(tmp_path / "runs")],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )

    out = drills(str(LATENCY), "--twin", "nosuch")
    assert out.returncode == 2, out.stderr
    assert "--twin: drill 'inference-latency' has no twin 'nosuch'; its twins: unsound" in (
        out.stderr
    )
    tiny = ROOT / "tests" / "scenarios" / "tiny.yaml"
    out = drills(str(tiny), "--twin")
    assert out.returncode == 2 and "declares no twins" in out.stderr, out.stderr
    # The dry run says what the twin is and touches nothing.
    out = drills(str(LATENCY), "--twin", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "twin unsound (profile unsound): must fail: fallback_rate during fault" in out.stdout
    assert "faults on backup are not applied" in out.stdout
    assert not (tmp_path / "state" / "drills" / "stack").exists()
    assert not (tmp_path / "runs").exists()


def result(label: str, passed: bool) -> CheckResult:
    return CheckResult(
        label=label,
        check=label.split()[0],
        during=None,
        expected="below 1",
        observed=0.0,
        observed_text="0",
        passed=passed,
        reason="",
        samples=1,
        runbook=None,
    )


def outcome(
    failed: set[str], status: RunStatus = RunStatus.COMPLETED, may_fail: tuple[str, ...] = ()
):
    twin = Twin(profile="unsound", must_fail=["a", "b"], may_fail=list(may_fail))
    checks = [result(label, label not in failed) for label in ("a", "b", "c", "d")]
    return twin_outcome(TwinPlan(twin, "test"), checks, status)


def test_a_twin_holds_only_when_exactly_the_named_checks_fail() -> None:
    assert outcome({"a", "b"}).held
    missed = outcome({"a"})
    assert not missed.held and missed.missed == ["b"]
    assert "passed but must fail: b" in missed.summary()
    unnamed = outcome({"a", "b", "c"})
    assert not unnamed.held and unnamed.unnamed == ["c"]
    assert "failed and not named by the twin: c" in unnamed.summary()
    assert outcome({"a", "b", "c"}, may_fail=("c",)).held
    assert outcome({"a", "b"}, may_fail=("c",)).held
    nothing = outcome(set())
    assert not nothing.held and nothing.cannot_tell
    assert "this drill cannot tell a broken stack from a sound one" in nothing.summary()
    aborted = outcome({"a", "b"}, RunStatus.ABORTED)
    assert not aborted.held and "was aborted" in aborted.summary()
    # What the journal keeps reads back the same.
    again = type(unnamed).model_validate(unnamed.model_dump(mode="json"))
    assert again == unnamed and not again.held


def test_a_twin_that_must_be_aborted_holds_only_when_its_abort_condition_stopped_it() -> None:
    twin = Twin(profile="unbounded-waits", must_fail=["a", "b"], aborts="answer_rate")
    checks = [result(label, label not in {"a", "b"}) for label in ("a", "b", "c")]
    plan = TwinPlan(twin, "test")
    stalled = {"cause": "abort_condition", "check": "answer_rate", "observed": 0.0}
    held = twin_outcome(plan, checks, RunStatus.ABORTED, stalled)
    assert held.held and "held: aborted by answer_rate and failed as declared: a, b" in (
        held.summary()
    )
    # Completed (the freeze never came), or stopped by another condition: not held.
    completed = twin_outcome(plan, checks, RunStatus.COMPLETED)
    assert not completed.held
    assert "its answer_rate abort condition must stop the run on it, and the run was completed" in (
        completed.summary()
    )
    errors = {"cause": "abort_condition", "check": "error_rate", "observed": 0.9}
    other = twin_outcome(plan, checks, RunStatus.ABORTED, errors)
    assert not other.held and "the run was aborted by error_rate" in other.summary()
    again = type(held).model_validate(held.model_dump(mode="json"))
    assert again == held and again.held


def test_a_twin_abort_the_drill_does_not_have_is_refused_with_its_line(tmp_path: Path) -> None:
    path, text = copy_with_twins(tmp_path, [{**UNSOUND, "aborts": "answer_rate"}])
    [problem] = problems(load_scenario, path)
    assert problem.startswith(f"{path}:{line_of(text, 'aborts: answer_rate')} twins[0].aborts:")
    assert "the drill has no abort condition of that check" in problem
    assert "(got 'answer_rate')" in problem


def test_faults_on_absent_hops_are_not_applied_on_the_twin() -> None:
    scenario, _ = load_scenario(LATENCY)
    twin = scenario.twin("unsound")
    on_twin, skipped = without_absent(scenario, twin)
    assert [f.target for f in on_twin.phases[1].inject] == ["vllm-0", "vllm-1"]
    assert skipped == (
        "phases[1].inject[2] toxiproxy.latency on backup (the twin's stack has none)",
    )
    assert [f.target for f in scenario.phases[1].inject] == ["vllm-0", "vllm-1", "backup"]


def test_gateway_only_twins_share_the_running_stack_and_others_do_not() -> None:
    sound = load_stack_config("sound")
    assert refusal(sound, load_stack_config("unsound")) is None
    assert refusal(sound, load_stack_config("unsound-single")) is None
    # The sound profile has no container engines' names of the docker one's ... but the same
    # replicas: what the gateway routes to is what matters.
    single = load_stack_config("unsound-single")
    assert refusal(single, sound) == "it has a replica 'vllm-1' the running stack does not"


def test_the_junit_suite_of_a_twin_passes_checks_that_fail_as_declared() -> None:
    from drills.model.journal import Journal, StackInfo

    def journal(failed: set[str]) -> Journal:
        twin = outcome(failed)
        return Journal(
            drill="d",
            title="t",
            run_id="r",
            status=RunStatus.COMPLETED,
            deviated=True,
            started_at=0.0,
            ended_at=1.0,
            stack=StackInfo(gateway="http://127.0.0.1:1"),
            checks=[result(label, label not in failed) for label in ("a", "b", "c", "d")],
            twin=twin,
            run_dir="/tmp/x",
        )

    suite = twin_suite(journal({"a", "b"}))
    assert suite.get("name") == "twin:d:unsound"
    assert (suite.get("tests"), suite.get("failures")) == ("5", "0")
    suite = twin_suite(journal({"a", "c"}))
    assert (suite.get("tests"), suite.get("failures")) == ("5", "3")
    failed = {c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None}
    assert failed == {"b", "c", "the twin held"}
    text = ET.tostring(suite, encoding="unicode")
    assert "b must fail on the twin unsound" in text and "c must pass on the twin" in text


def test_litellm_twins_belong_to_attached_drills_and_their_config_must_exist(
    tmp_path: Path,
) -> None:
    path, text = copy_with_twins(
        tmp_path, [{"litellm": "nosuch.yaml", "must_fail": ["stack_lint"]}]
    )
    found = problems(load_scenario, path)
    assert any(
        p.startswith(f"{path}:{line_of(text, 'litellm: nosuch.yaml')} twins[0].litellm:")
        and "a LiteLLM twin stands in for the gateway of a drill that attaches to one" in p
        for p in found
    ), found
    # On a drill that attaches, the config is read before anything starts.
    origin = SCENARIOS / "litellm" / "latency-one-replica.yaml"
    text = anchored(origin.read_text(), origin.parent).replace(
        str(ROOT / "stack" / "litellm" / "unsound.yaml"), "nosuch.yaml"
    )
    attached = tmp_path / "attached.yaml"
    attached.write_text(text)
    [problem] = problems(load_scenario, attached)
    assert problem.startswith(
        f"{attached}:{line_of(text, 'litellm: nosuch.yaml')} twins[0].litellm: cannot read "
        f"the LiteLLM config {tmp_path / 'nosuch.yaml'}: No such file or directory"
    ), problem
    both = copy_with_twins(tmp_path, [{**UNSOUND, "litellm": "x.yaml"}])[0]
    [problem] = problems(load_scenario, both)
    assert "exactly one of them (got profile, litellm)" in problem


def test_the_litellm_drills_twins_name_a_litellm_config_the_harness_starts() -> None:
    scenario, doc = load_scenario(SCENARIOS / "litellm" / "latency-one-replica.yaml")
    [twin] = scenario.twins
    assert twin.key == "unsound" and twin.litellm is not None
    assert (doc.path.parent / twin.litellm).resolve() == ROOT / "stack" / "litellm" / (
        "unsound.yaml"
    )
