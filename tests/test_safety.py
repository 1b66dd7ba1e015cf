"""Safety: the policy checked before anything is applied, the dry run that touches nothing, and
the kill switch (`drills abort`) that makes a running drill revert everything and stop."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from drills.common.errors import SafetyViolation
from drills.engine.safety import SafetyPolicy, check_scenario, load_policy
from drills.model.scenario import load_scenario
from tests.conftest import RunningStack, drills_cli, free_port, isolated_env
from tests.helpers import drill_with_docker_fault

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "scenarios" / "inference-latency.yaml"
TINY = ROOT / "tests" / "scenarios" / "tiny.yaml"
LONG = ROOT / "tests" / "scenarios" / "long-fault.yaml"


def refused(policy: SafetyPolicy, urls: dict[str, str] | None = None) -> list[str]:
    scenario, doc = load_scenario(SHIPPED)
    with pytest.raises(SafetyViolation) as info:
        check_scenario(scenario, doc, policy, urls)
    return info.value.problems


def test_blast_radius_and_allowed_targets_are_checked_with_locations() -> None:
    scenario, doc = load_scenario(SHIPPED)
    check_scenario(scenario, doc, SafetyPolicy())  # the defaults allow the shipped drill
    problems = refused(SafetyPolicy(max_faults_at_once=2))
    assert problems == [
        f"{SHIPPED}:{doc.line_of(('phases',))} phases: 3 faults would be active at once; "
        "max_faults_at_once is 2"
    ]
    problems = refused(SafetyPolicy(allowed_targets=["vllm-*"], protected_targets=["vllm-1"]))
    assert len(problems) == 2
    assert "phases[1].inject[1].target: 'vllm-1' is not an allowed target" in problems[0]
    assert "phases[1].inject[2].target: 'backup' is not an allowed target" in problems[1]
    line = doc.line_of(("phases", 1, "inject", 1, "target"))
    assert problems[0].startswith(f"{SHIPPED}:{line} ")
    assert (
        "toxiproxy.latency' is not an allowed fault kind"
        in refused(SafetyPolicy(allowed_kinds=["toxiproxy.down"]))[0]
    )
    assert "max_fault_duration is 10s" in refused(SafetyPolicy(max_fault_duration="10s"))[0]
    assert "max_targets is 1" in refused(SafetyPolicy(max_targets=1))[0]
    assert "max_users is 1" in refused(SafetyPolicy(max_users=1))[0]
    assert "max_drill_duration is 1m" in refused(SafetyPolicy(max_drill_duration="1m"))[0]


def test_only_loopback_by_default_and_credentials_never_echoed() -> None:
    problems = refused(
        SafetyPolicy(), {"gateway": "https://ops:hunter2@staging.example:8080", "toxiproxy": ""}
    )
    assert len(problems) == 2
    assert (
        "host 'staging.example' is not allowed; allowed_hosts: 127.0.0.1, localhost, ::1"
        in (problems[0])
    )
    assert "hunter2" not in problems[0] and "ops:***@staging.example" in problems[0]


def test_a_docker_daemon_off_the_allowed_hosts_is_refused(tmp_path: Path) -> None:
    policy = SafetyPolicy()
    for host, shown in (
        ("tcp://10.1.2.3:2376", "'10.1.2.3'"),
        ("ssh://ops:hunter2@build-box", "'build-box'"),
    ):
        path = drill_with_docker_fault(tmp_path, host)
        scenario, doc = load_scenario(path)
        with pytest.raises(SafetyViolation) as info:
            check_scenario(scenario, doc, policy)
        (problem,) = info.value.problems
        line = doc.line_of(("phases", 1, "inject", 1, "host"))
        assert problem.startswith(f"{path}:{line} phases[1].inject[1].host: Docker at ")
        assert f"host {shown} is not allowed; allowed_hosts: 127.0.0.1" in problem
        assert "hunter2" not in problem
    for allowed in ("unix:///run/docker.sock", "tcp://127.0.0.1:2375"):
        scenario, doc = load_scenario(drill_with_docker_fault(tmp_path, allowed))
        check_scenario(scenario, doc, policy)


def test_a_docker_daemon_that_cannot_be_reached_refuses_the_drill_untouched(
    stack: RunningStack, toxi: object, tmp_path: Path
) -> None:
    nowhere = f"tcp://127.0.0.1:{free_port()}"
    path = drill_with_docker_fault(tmp_path, nowhere)
    result = subprocess.run(
        drills_cli("run", str(path), *stack.attach_args(), "--out", str(tmp_path / "runs")),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    _, doc = load_scenario(path)
    line = doc.line_of(("phases", 1, "inject", 1))
    (message,) = [x for x in result.stderr.splitlines() if x.startswith("drills: ")]
    assert message.startswith(
        f"drills: {path}:{line} phases[1].inject[1]: Docker at {nowhere}: cannot connect: "
    )
    assert stack.toxics() == []  # its latency fault, due first, was never applied
    assert (
        not (tmp_path / "ledger.json").exists()
        or json.loads((tmp_path / "ledger.json").read_text()) == {}
    )


def test_policy_file_errors_are_located(tmp_path: Path) -> None:
    policy = tmp_path / "drills-safety.yaml"
    policy.write_text("allowed_hosts: [127.0.0.1]\nmax_faults_at_once: many\n")
    with pytest.raises(Exception) as info:
        load_policy(policy)
    assert f"{policy}:2 max_faults_at_once" in str(info.value)
    policy.write_text("allowed_hosts: [127.0.0.1]\nmax_users: 4\n")
    loaded = load_policy(policy)
    assert loaded.max_users == 4 and loaded.source == str(policy)


def test_dry_run_prints_the_plan_and_contacts_nothing(tmp_path: Path) -> None:
    # Attach endpoints on a port where nothing listens: any contact would fail the command.
    dead = f"http://127.0.0.1:{free_port()}"
    result = subprocess.run(
        drills_cli("run", str(SHIPPED), "--dry-run", "--gateway", dead, "--toxiproxy", dead),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "toxiproxy.latency on vllm-0" in out and "20s - 50s" in out
    assert "safety (built-in defaults): allowed" in out
    assert not (tmp_path / "runs").exists() and not (tmp_path / "ledger.json").exists()
    # A profile's hops are resolved from its config, still without starting anything.
    planned = subprocess.run(
        drills_cli("run", str(SHIPPED), "--dry-run", "--json"),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
        cwd=tmp_path,
    )
    plan = json.loads(planned.stdout)
    assert plan["faults"][0]["hop"] == {
        "role": "primary",
        "served_name": "smollm2",
        "proxy": "127.0.0.1:18200",
        "upstream": "127.0.0.1:18100",
        "l7_hop": "127.0.0.1:18220",
    }
    assert [p["name"] for p in plan["phases"]] == ["baseline", "fault", "recovery"]
    # Over the policy: the dry run says what would be refused, with exit code 2.
    policy = tmp_path / "tight.yaml"
    policy.write_text("max_faults_at_once: 1\n")
    tight = subprocess.run(
        drills_cli("run", str(SHIPPED), "--dry-run", "--safety", str(policy)),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
    )
    assert tight.returncode == 2 and "REFUSED" in tight.stdout
    assert "max_faults_at_once is 1" in tight.stdout


def test_the_wrapper_resolves_relative_paths_and_the_policy_from_where_the_caller_stands(
    tmp_path: Path,
) -> None:
    """`bash stack/bootstrap.sh drills ...` from another folder: the scenario, `--out` and the
    `./drills-safety.yaml` there are the caller's, not the repository's. (The policy one is a
    safety matter: a tighter policy in the user's folder must not be ignored.)"""
    here = tmp_path / "team"
    here.mkdir()
    shutil.copy(SHIPPED, here / "latency.yaml")
    for folder in ("prompts", "runbooks", "monitoring"):
        shutil.copytree(SHIPPED.parent / folder, here / folder)
    (here / "drills-safety.yaml").write_text("max_faults_at_once: 1\n")

    def wrapped(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(ROOT / "stack" / "bootstrap.sh"), "drills", *args],
            capture_output=True,
            text=True,
            env=isolated_env(tmp_path),
            cwd=here,
            timeout=300,
        )

    tight = wrapped("run", "latency.yaml", "--dry-run")
    assert tight.returncode == 2, tight.stdout + tight.stderr
    assert "safety (drills-safety.yaml): REFUSED" in tight.stdout, tight.stdout
    valid = wrapped("validate", "latency.yaml", "drills-safety.yaml")
    assert valid.returncode == 0, valid.stderr
    assert "latency.yaml: valid drill" in valid.stdout
    assert "drills-safety.yaml: valid safety policy" in valid.stdout


@pytest.mark.stack
def test_a_refused_drill_applies_nothing(stack: RunningStack, toxi: object, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("protected_targets: [vllm-0]\n")
    result = subprocess.run(
        drills_cli(
            "run",
            str(TINY),
            "--gateway",
            stack.gateway_url,
            "--toxiproxy",
            stack.toxiproxy_url,
            "--safety",
            str(policy),
            "--out",
            str(tmp_path / "runs"),
        ),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "refused by the safety policy (nothing was applied)" in result.stderr
    assert f"{TINY}:" in result.stderr and "'vllm-0' is not an allowed target" in result.stderr
    assert stack.toxics() == []
    assert not (tmp_path / "runs").exists()


@pytest.mark.stack
def test_kill_switch_reverts_everything_and_marks_the_run_aborted(
    stack: RunningStack, toxi: object, tmp_path: Path
) -> None:
    env = isolated_env(tmp_path)
    proc = subprocess.Popen(
        drills_cli(
            "run",
            str(LONG),
            "--gateway",
            stack.gateway_url,
            "--toxiproxy",
            stack.toxiproxy_url,
            "--out",
            str(tmp_path / "runs"),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not stack.toxics():
            assert time.monotonic() < deadline and proc.poll() is None, "the fault never landed"
            time.sleep(0.2)
        # From another terminal: `drills abort`.
        abort = subprocess.run(
            drills_cli("abort", "--reason", "game master says stop"),
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
        assert abort.returncode == 0, abort.stderr
        assert "abort sent to drill long-fault" in abort.stdout
        sent = time.monotonic()
        output, _ = proc.communicate(timeout=60)
        stopped_in = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, output
    assert stopped_in < 20  # the fault had 2 minutes left
    assert stack.toxics() == []
    journal = json.loads(next((tmp_path / "runs").glob("*/journal.json")).read_text())
    assert journal["status"] == "aborted" and journal["verdict"] == "aborted"
    assert journal["aborted"]["reason"] == "kill switch (drills abort)"
    assert journal["aborted"]["by"] and "game master says stop" in json.dumps(journal["aborted"])
    assert all(f["reverted_at"] for f in journal["faults"])
    # Nothing is left registered or applied; a second abort says so and succeeds.
    again = subprocess.run(drills_cli("abort"), capture_output=True, text=True, env=env)
    assert again.returncode == 0, again.stderr
    assert "no drill is running on this machine and no fault is in force" in again.stdout


def test_a_corrupt_ledger_is_refused_and_kept_never_emptied(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.json"
    ledger.write_text('{"run-0": {"kind": "toxiproxy.latency", "target": "vllm-0"')  # cut off
    env = isolated_env(tmp_path)
    for command in ("faults", "abort"):
        out = subprocess.run(drills_cli(command), capture_output=True, text=True, env=env)
        assert out.returncode == 2, (command, out.stdout, out.stderr)
        assert f"{ledger}: the ledger of applied faults is not JSON" in out.stderr
        assert "a copy is kept at" in out.stderr
    kept = list(tmp_path.glob("ledger.json.corrupt-*"))
    assert kept and kept[0].read_text() == ledger.read_text()  # untouched, and a copy aside


def test_faults_and_abort_refuse_a_ledger_that_is_not_there(tmp_path: Path) -> None:
    for command in ("faults", "abort"):
        out = subprocess.run(
            drills_cli(command, "--ledger", str(tmp_path / "nope.json")),
            capture_output=True,
            text=True,
            env=isolated_env(tmp_path),
        )
        assert out.returncode == 2 and "--ledger" in out.stderr and "no such file" in out.stderr


def test_json_is_one_document_on_stdout_for_every_command_that_takes_it(tmp_path: Path) -> None:
    """``--json`` is never ignored: run, gate and game day print their plan (dry run) as one
    JSON document, validate its verdicts; nothing is contacted."""
    env = isolated_env(tmp_path, KUBECONFIG=str(tmp_path / "no-such-kubeconfig"))

    def cli(*args: str) -> tuple[int, object]:
        result = subprocess.run(
            drills_cli(*args, "--json"), capture_output=True, text=True, env=env, cwd=tmp_path
        )
        return result.returncode, json.loads(result.stdout)

    code, plans = cli("run", str(SHIPPED), "--twin", "--dry-run")
    assert code == 0 and isinstance(plans, list)
    assert [p["twin"] for p in plans] == ["unsound", "feared-alerts"]
    assert plans[0]["plan"]["faults"][0]["kind"] == "toxiproxy.latency"
    code, plans = cli("gate", str(SHIPPED), str(TINY), "--dry-run")
    assert code == 0 and isinstance(plans, list) and len(plans) == 2
    day = ROOT / "scenarios" / "gameday-quarterly.yaml"
    answers = ROOT / "scenarios" / "gameday-rehearsal.yaml"
    code, plan = cli("gameday", str(day), "--answers", str(answers), "--dry-run")
    assert code == 0 and isinstance(plan, dict) and plan["gameday"] == "quarterly"
    steps = plan["steps"]
    assert any("drill" in s and s["drill"]["faults"] for s in steps)
    go = next(s for s in steps if "checkpoint" in s and s["checkpoint"]["id"] == "go-ahead")
    assert go["pre_answered"] == {"answer": "yes", "by": "rehearsal (no people)"}
    code, checked = cli("validate", str(SHIPPED), str(answers))
    assert code == 0 and checked == {
        "valid": [
            {"path": str(SHIPPED), "kind": "drill"},
            {"path": str(answers), "kind": "game-day answers"},
        ],
        "problems": [],
    }
    bad = tmp_path / "bad.yaml"
    bad.write_text(SHIPPED.read_text().replace("duration: 20s", "duration: 20 parsecs", 1))
    code, checked = cli("validate", str(bad))
    assert code == 2 and isinstance(checked, dict) and checked["valid"] == []
    assert f"{bad}:" in checked["problems"][0] and "duration" in checked["problems"][0]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "ledger.json").exists()


def test_a_closed_pipe_is_an_exit_code_not_a_traceback(tmp_path: Path) -> None:
    """``drills schema scenario | head -1`` where head has gone: exit 141, and no traceback."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    try:
        result = subprocess.run(
            drills_cli("schema", "scenario"),
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            env=isolated_env(tmp_path),
            timeout=60,
        )
    finally:
        os.close(write)
    assert result.returncode == 141, result.stderr
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr
    usage = subprocess.run(drills_cli("--help"), capture_output=True, text=True, timeout=60)
    assert "exit codes:" in usage.stdout and "3  a fault is still in force" in usage.stdout


def test_the_dry_runs_timeline_reads_in_one_unit(tmp_path: Path) -> None:
    """Offsets in seconds from the start, all of them: a phase at 120 s was printed '2m' beside
    '140s', two clocks on one line."""
    result = subprocess.run(
        drills_cli("run", str(SHIPPED.parent / "gpu-pod-loss.yaml"), "--dry-run"),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "20s - 120s   phase fault" in result.stdout, result.stdout
    assert "120s - 140s   phase recovery" in result.stdout, result.stdout
