"""Scenario files: the shipped ones validate; bad ones are refused with file, line, field path,
value and what is allowed, by `drills validate` too (exit 2), touching nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from drills.model.scenario import load_scenario
from tests.helpers import problems

ROOT = Path(__file__).resolve().parent.parent
# Drill scenarios (game-day plans and their answers live beside them; tested in test_gameday).
SHIPPED = sorted(
    p
    for p in [
        *(ROOT / "scenarios").glob("*.yaml"),
        *(ROOT / "scenarios" / "litellm").glob("*.yaml"),
    ]
    if not p.name.startswith("gameday-")
)
LATENCY = (ROOT / "scenarios" / "inference-latency.yaml").read_text()


def write(tmp_path: Path, text: str) -> Path:
    """The drill at ``tmp_path/drill.yaml``, beside the shipped prompts and runbooks it names."""
    path = tmp_path / "drill.yaml"
    path.write_text(text)
    for folder in ("prompts", "runbooks"):
        shutil.copytree(ROOT / "scenarios" / folder, tmp_path / folder, dirs_exist_ok=True)
    return path


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_scenarios_validate(path: Path) -> None:
    scenario, _ = load_scenario(path)
    assert scenario.expect and scenario.phases


def test_unknown_fault_kind_lists_the_known_ones(tmp_path: Path) -> None:
    text = LATENCY.replace(
        "{kind: toxiproxy.latency, target: vllm-1", "{kind: toxiproxy.lag, target: vllm-1"
    )
    path = write(tmp_path, text)
    found = problems(load_scenario, path)
    assert any(
        p.startswith(f"{path}:{line_of(text, 'toxiproxy.lag')} phases[1].inject[1]")
        and "toxiproxy.lag" in p
        and "toxiproxy.latency" in p
        and "toxiproxy.limit_data" in p
        for p in found
    ), found


def test_duration_without_unit(tmp_path: Path) -> None:
    text = LATENCY.replace("target: vllm-0, latency: 3s}", "target: vllm-0, latency: 3}")
    path = write(tmp_path, text)
    [problem] = problems(load_scenario, path)
    assert f":{line_of(text, 'latency: 3}')} phases[1].inject[0].latency:" in problem
    assert "a duration needs a unit" in problem and "(got 3)" in problem


def test_fault_outside_its_phase(tmp_path: Path) -> None:
    # Cross-field checks run once every field is valid on its own.
    text = LATENCY.replace("target: backup, latency: 3s}", "target: backup, latency: 3s, at: 40s}")
    path = write(tmp_path, text)
    [problem] = problems(load_scenario, path)
    assert (
        f":{line_of(text, 'at: 40s')} phases[1].inject[2].at: starts after its phase ends"
        in problem
    )


def test_a_fault_window_of_zero_is_refused(tmp_path: Path) -> None:
    text = LATENCY.replace("target: backup, latency: 3s}", "target: backup, latency: 3s, for: 0s}")
    path = write(tmp_path, text)
    [problem] = problems(load_scenario, path)
    assert f":{line_of(text, 'for: 0s')} phases[1].inject[2].for:" in problem, problem
    assert "a fault lasts longer than 0s" in problem and "(got '0s')" in problem


def test_an_abort_condition_over_zero_seconds_is_refused(tmp_path: Path) -> None:
    text = LATENCY.replace("above: 0.95, for: 45s}", "above: 0.95, for: 0s}")
    path = write(tmp_path, text)
    [problem] = problems(load_scenario, path)
    assert f":{line_of(text, 'for: 0s')} abort_when[0].for:" in problem, problem
    assert "longer than 0s" in problem


def test_fault_on_a_hop_the_stack_does_not_have(tmp_path: Path) -> None:
    text = LATENCY.replace("target: backup, latency: 3s", "target: vllm-7, latency: 3s")
    path = write(tmp_path, text)
    [problem] = problems(load_scenario, path)
    assert problem.startswith(f"{path}:{line_of(text, 'vllm-7')} phases[1].inject[2].target:")
    assert "the stack has no hop 'vllm-7'; expected one of: vllm-0, vllm-1, backup" in problem


def test_an_engine_check_of_an_engine_the_stack_does_not_have(tmp_path: Path) -> None:
    text = LATENCY.replace(
        "expect:\n", "expect:\n  - {check: engine.waiting, source: backup, below: 1}\n", 1
    )
    path = write(tmp_path, text)
    [problem] = problems(load_scenario, path)
    # backup is a hop (to vllm-1's backup model), not an engine whose metrics are scraped.
    assert problem.startswith(f"{path}:{line_of(text, 'engine.waiting')} expect[0].source:")
    assert "the stack has no engine 'backup'; expected one of: vllm-0, vllm-1" in problem


@pytest.mark.parametrize(
    ("fault", "field", "message"),
    [
        (
            "{kind: hop.status, target: vllm-0, status: 200}",
            "status",
            "greater than or equal to 400",
        ),
        ("{kind: hop.cut, target: vllm-0, toxicity: 1.5}", "toxicity", "less than or equal to 1"),
        ("{kind: hop.stall, target: vllm-0, duration: 2}", "duration", "a duration needs a unit"),
        ("{kind: hop.cut, target: vllm-0, after: 2}", "after", "unknown field"),
    ],
)
def test_hop_fault_parameters_out_of_range(
    tmp_path: Path, fault: str, field: str, message: str
) -> None:
    text = LATENCY.replace("{kind: toxiproxy.latency, target: backup, latency: 3s}", fault)
    path = write(tmp_path, text)
    [problem] = problems(load_scenario, path)
    assert problem.startswith(f"{path}:{line_of(text, 'kind: hop.')} phases[1].inject[2].{field}:")
    assert message in problem


def test_a_hop_fault_on_a_hop_the_l7_hop_does_not_have(tmp_path: Path) -> None:
    text = LATENCY.replace(
        "{kind: toxiproxy.latency, target: backup, latency: 3s}",
        "{kind: hop.wedge, target: triton}",
    )
    path = write(tmp_path, text)
    [problem] = problems(load_scenario, path)
    assert problem.startswith(f"{path}:{line_of(text, 'hop.wedge')} phases[1].inject[2].target:")
    assert "the stack has no L7 hop 'triton'; expected one of: vllm-0, vllm-1, backup" in problem


def test_check_problems_name_the_check(tmp_path: Path) -> None:
    text = LATENCY.replace(
        "{check: e2e.p99, during: fault, below: 15s", "{check: e2e.p98, during: fault, below: 15s"
    )
    path = write(tmp_path, text)
    [problem] = problems(load_scenario, path)
    assert f":{line_of(text, 'e2e.p98')} expect[4]: unknown check 'e2e.p98'" in problem
    assert "expected one of: ttft.pNN, itl.pNN, e2e.pNN, error_rate" in problem
    text = LATENCY.replace(
        "{check: error_rate, during: recovery, below: 0.05",
        "{check: error_rate, during: later, below: 0.05",
    )
    [problem] = problems(load_scenario, write(tmp_path, text))
    assert (
        "expect[7].during: no phase of that name; expected one of: baseline, fault, recovery"
        in problem
    )
    assert "(got 'later')" in problem


def test_unknown_field_in_load(tmp_path: Path) -> None:
    text = LATENCY.replace("  max_tokens: 8", "  max_token: 8")
    path = write(tmp_path, text)
    [problem] = problems(load_scenario, path)
    assert f":{line_of(text, 'max_token: 8')} load.max_token: unknown field; allowed:" in problem


def validate(*paths: Path) -> subprocess.CompletedProcess[str]:
    """``drills validate PATHS`` in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "drills.cli", "validate", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_validate_cli_exit_codes(tmp_path: Path) -> None:
    good = validate(*SHIPPED)
    assert good.returncode == 0, good.stderr
    bad = write(tmp_path, LATENCY.replace("duration: 30s", "duration: soon", 1))
    result = validate(bad)
    assert result.returncode == 2
    assert "phases[1].duration: invalid duration 'soon'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_missing_prompts_file_is_refused_at_validation(tmp_path: Path) -> None:
    path = write(tmp_path, LATENCY.replace("prompts/short.jsonl", "prompts/nope.jsonl"))
    [problem] = problems(load_scenario, path)
    assert problem.startswith(f"{path}:{line_of(LATENCY, 'prompts/short.jsonl')} load.prompts: ")
    assert "nope.jsonl: cannot read the prompts file" in problem


def test_a_prompts_file_with_a_bad_line_names_that_line(tmp_path: Path) -> None:
    path = write(tmp_path, LATENCY)
    (tmp_path / "prompts" / "short.jsonl").write_text('{"prompt": "hi"}\n{"text": 1}\n')
    [problem] = problems(load_scenario, path)
    assert "short.jsonl:2: expected a 'prompt' (text) or 'messages' (a list) field" in problem


def test_a_runbook_anchor_no_heading_makes_is_refused(tmp_path: Path) -> None:
    text = LATENCY.replace("llm-latency.md#fallback", "llm-latency.md#fallbacks", 1)
    assert text != LATENCY
    path = write(tmp_path, text)
    [problem] = problems(load_scenario, path)
    assert ".runbook: runbooks/llm-latency.md has no heading that makes the anchor #fallbacks" in (
        problem
    )
    assert "fallback, " in problem  # the anchors it does have are listed


def test_a_runbook_file_that_is_not_there_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, LATENCY.replace("runbook: runbooks/llm-latency.md\n", "runbook: x.md\n"))
    [problem] = problems(load_scenario, path)
    assert f"{path}:{line_of(LATENCY, 'runbook: runbooks/llm-latency.md')} runbook: " in problem
    assert "no runbook file" in problem


@pytest.mark.parametrize(
    "link", ["javascript:alert(1)", "file:///etc/passwd", "data:text/html,x", "http:relative"]
)
def test_runbook_links_are_http_or_relative_only(tmp_path: Path, link: str) -> None:
    path = write(
        tmp_path, LATENCY.replace("runbook: runbooks/llm-latency.md\n", f"runbook: '{link}'\n")
    )
    [problem] = problems(load_scenario, path)
    assert "only http(s) URLs and relative paths are allowed as links" in problem


@pytest.mark.parametrize(
    ("bound", "why"),
    [
        ("above: 1", "above 1 can never be met: a share lies in 0..1"),
        ("above: 1.5", "above 1.5 can never be met"),
        ("below: 0", "below 0 can never be met: a share lies in 0..1"),
        ("below: 2", "below 2 can never fail: a share lies in 0..1"),
        ("above: -0.1", "above -0.1 can never fail"),
        ("below: 0.2, above: 0.5", "can never both be met"),
    ],
)
def test_rate_bounds_that_can_never_be_met_or_never_fail(
    tmp_path: Path, bound: str, why: str
) -> None:
    text = LATENCY.replace(
        "check: fallback_rate, during: fault, above: 0.8",
        f"check: fallback_rate, during: fault, {bound}",
    )
    assert text != LATENCY
    path = write(tmp_path, text)
    [problem] = problems(load_scenario, path)
    assert problem.startswith(
        f"{path}:{line_of(LATENCY, 'check: fallback_rate, during: fault, above: 0.8')} "
    )
    assert why in problem


def test_a_latency_bound_of_zero_can_never_be_met(tmp_path: Path) -> None:
    text = LATENCY.replace(
        "check: e2e.p99, during: fault, below: 15s", "check: e2e.p99, during: fault, below: 0s"
    )
    assert text != LATENCY
    [problem] = problems(load_scenario, write(tmp_path, text))
    assert "below 0s can never be met: a duration is 0s or more" in problem


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_scenarios_validate_against_the_published_schema(path: Path) -> None:
    # What an editor's YAML language server checks with `drills schema scenario`.
    import jsonschema
    import yaml

    from drills.model.schema import scenario_schema

    jsonschema.Draft202012Validator(scenario_schema()).validate(yaml.safe_load(path.read_text()))


def test_the_published_schema_refuses_what_the_loader_refuses() -> None:
    import jsonschema

    from drills.model.schema import scenario_schema

    validator = jsonschema.Draft202012Validator(scenario_schema())
    data = yaml_of(LATENCY)
    data["phases"][1]["inject"][0]["kind"] = "gpu_oom"
    assert not validator.is_valid(data)
    data = yaml_of(LATENCY)
    data["load"]["warmup"] = 10  # a duration without its unit
    assert not validator.is_valid(data)
    # Each check family's fields: those it needs, and none that only other families take.
    for bad in (
        {"check": "alert_fired", "during": "fault", "within": "5s"},  # no alert
        {"check": "promql", "below": 1},  # no query
        {"check": "error_rate", "below": 0.1, "alert": "X"},
        {"check": "ttft.p99", "below": "1s", "within": "5s"},
    ):
        data = yaml_of(LATENCY)
        data["expect"] = [bad]
        assert not validator.is_valid(data), bad
    for good in (
        {"check": "alert_fired", "alert": "X", "during": "fault", "within": "5s"},
        {"check": "alert_quiet", "alert": "LLM.*", "during": "baseline"},
        {"check": "ttft.p99", "below": "1s"},
    ):
        data = yaml_of(LATENCY)
        data["expect"] = [good]
        assert validator.is_valid(data), good


def yaml_of(text: str) -> dict:
    import yaml

    data: dict = yaml.safe_load(text)
    return data


def test_another_profile_is_checked_before_any_stack_starts(tmp_path: Path) -> None:
    # The shipped latency drill slows the backup hop, which the unsound profile does not have:
    # refused at once, exit 2, and no stack was started for it.
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "drills.cli",
            "run",
            str(ROOT / "scenarios" / "inference-latency.yaml"),
            "--profile",
            "unsound",
            "--out",
            str(tmp_path / "runs"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert out.returncode == 2, out.stderr
    assert "phases[1].inject[2].target: the stack has no hop 'backup'" in out.stderr
    assert not (tmp_path / "state" / "drills" / "stack").exists()


def test_a_scenario_dumps_every_field_of_its_faults() -> None:
    # The journal keeps the scenario as a dump: a fault must keep its own fields (latency,
    # jitter), not just those every fault has.
    import warnings

    scenario, _ = load_scenario(ROOT / "scenarios" / "inference-latency.yaml")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data = scenario.model_dump(mode="json", by_alias=True)
    fault = data["phases"][1]["inject"][0]
    assert fault["kind"] == "toxiproxy.latency" and fault["latency"] == "3s"


def test_validate_takes_every_shipped_file_of_ours_whatever_its_kind() -> None:
    """`drills validate scenarios/*.yaml` as the README shows it: drills, the game-day plan and
    its answers, recall queries and the stack profiles all pass, each named by its kind."""
    files = sorted(
        [
            *(ROOT / "scenarios").glob("*.yaml"),
            *(ROOT / "scenarios").glob("*/*.yaml"),
            *(ROOT / "stack" / "profiles").glob("*.yaml"),
        ]
    )
    result = validate(*files)
    assert result.returncode == 0, result.stderr
    kinds = dict(line.rsplit(": valid ", 1) for line in result.stdout.splitlines()[:-1])
    assert kinds[str(ROOT / "scenarios" / "gameday-quarterly.yaml")] == "game-day plan"
    assert kinds[str(ROOT / "scenarios" / "gameday-rehearsal.yaml")] == "game-day answers"
    assert kinds[str(ROOT / "scenarios" / "inference-latency.yaml")] == "drill"
    assert kinds[str(ROOT / "scenarios" / "retrieval" / "standard-queries.yaml")] == (
        "recall queries"
    )
    assert kinds[str(ROOT / "stack" / "profiles" / "sound.yaml")] == "stack profile"
    assert result.stdout.splitlines()[-1] == f"{len(files)} file(s) valid"


def test_validate_names_a_file_of_no_kind_and_the_kinds_there_are(tmp_path: Path) -> None:
    policy = tmp_path / "drills-safety.yaml"
    policy.write_text("allowed_hosts: [127.0.0.1]\nmax_users: 4\n")
    bad_policy = tmp_path / "bad-policy.yaml"
    bad_policy.write_text("allowed_hosts: [127.0.0.1]\nmax_users: -1\n")
    stranger = tmp_path / "compose.yaml"
    stranger.write_text("services:\n  web: {image: nginx}\n")
    both = tmp_path / "both.yaml"
    both.write_text("drill: x\ngameday: y\n")
    result = validate(policy, bad_policy, stranger, both)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{policy}: valid safety policy" in result.stdout
    assert f"{bad_policy}:2 max_users:" in result.stderr
    assert (
        f"{stranger}:1 this file is none of the files drills reads (top-level keys: services); "
        "a drill has `drill:` at the top; a game-day plan has `gameday:` at the top"
    ) in result.stderr
    assert (
        f"{both}:1 this file is more than one kind at once (drill, game-day plan)" in result.stderr
    )
    assert "Traceback" not in result.stderr


WORKFLOWS = (ROOT / "scenarios" / "multi-agent-wait.yaml").read_text()


def test_workflow_kinds_on_another_endpoint_are_refused(tmp_path: Path) -> None:
    text = WORKFLOWS.replace("  endpoint: workflow\n", "  endpoint: rag\n")
    path = write(tmp_path, text)
    [problem] = problems(load_scenario, path)
    assert f":{line_of(text, 'workflows: {brief')} load.workflows:" in problem
    assert "workflow kinds are for the workflow endpoint: set endpoint: workflow" in problem


def test_an_answer_rate_abort_takes_below_only(tmp_path: Path) -> None:
    text = WORKFLOWS.replace(
        "{check: answer_rate, below: 0.2, for: 10s}", "{check: answer_rate, above: 0.2, for: 10s}"
    )
    path = write(tmp_path, text)
    [problem] = problems(load_scenario, path)
    assert f":{line_of(text, 'check: answer_rate')} abort_when[0]:" in problem
    assert "give 'below' only" in problem


def test_a_workflow_check_naming_an_unknown_kind_is_refused(tmp_path: Path) -> None:
    text = WORKFLOWS.replace("workflow: lookup, during: fault", "workflow: search, during: fault")
    path = write(tmp_path, text)
    [problem] = problems(load_scenario, path)
    assert f":{line_of(text, 'workflow: search')} expect[4].workflow:" in problem
    assert "'brief'" in problem and "'lookup'" in problem and "(got 'search')" in problem
