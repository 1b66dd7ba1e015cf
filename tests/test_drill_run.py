"""Drills end to end against the real stack: load through Locust, latency through Toxiproxy,
checks, journal and reports; the sound policy passes, the unsound one fails naming the checks;
interrupts and crashes leave no fault behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal
from xml.etree import ElementTree as ET

import pytest

from drills.common.system import pid_alive
from drills.common.toxiproxy import Toxic, ToxiproxyClient
from drills.engine.ledger import Ledger
from drills.engine.options import RunOptions
from drills.engine.runner import Runner
from drills.model.scenario import Attach, FaultSpec, load_scenario
from injectors import InjectionContext, register
from tests.conftest import (
    RunningStack,
    drills_cli,
    isolated_env,
    processes_naming,
    run_embedded,
    run_twin,
)
from tests.helpers import drill_account, shortened, twin_account
from tests.jaeger_env import Jaeger

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
SHORT = ROOT / "tests" / "scenarios" / "short-latency.yaml"
SHIPPED = ROOT / "scenarios" / "inference-latency.yaml"


def sized_latency(tmp_path: Path) -> Path:
    """The shipped latency drill with a 10 s baseline (10-20 answers at 2 users). Its recovery
    keeps its 30 s: its error bound there (0.05) over the 20-40 answers of a 20 s recovery
    would fail on one stray error."""
    return shortened(SHIPPED, tmp_path, baseline="10s")


def toxiproxy_url(stack: RunningStack) -> str:
    return f"http://{stack.config.host}:{stack.config.toxiproxy.api_port}"


def run(
    path: Path, gateway: str, stack: RunningStack, tmp_path: Path, config: str | None = None
) -> dict:
    """Run a drill attached to ``gateway``; ``config`` is the stack config its ``stack_lint``
    check reads (default: the session stack's)."""
    scenario, doc = load_scenario(path)
    options = RunOptions(
        out_dir=tmp_path / "runs",
        ledger=tmp_path / "ledger.json",
        attach=Attach(gateway=gateway, toxiproxy=toxiproxy_url(stack), hop=stack.hop_url),
        stack_config=config or str(stack.config_path),
    )
    return Runner(scenario, doc, options).run().model_dump(mode="json")


def run_argv(stack: RunningStack, tmp_path: Path) -> list[str]:
    """`drills run` of the short drill, attached to the session's stack."""
    return [
        sys.executable,
        "-m",
        "drills.cli",
        "run",
        str(SHORT),
        *stack.attach_args(),
        "--out",
        str(tmp_path / "runs"),
    ]


def by_label(journal: dict) -> dict[str, dict]:
    return {c["label"]: c for c in journal["checks"]}


def test_shipped_latency_drill_passes_on_the_sound_stack(
    stack: RunningStack, tmp_path: Path
) -> None:
    journal = run_embedded(sized_latency(tmp_path), stack, tmp_path)
    assert journal["verdict"] == "passed", drill_account(journal)
    assert journal["status"] == "completed"
    checks = by_label(journal)
    # The stack's monitoring, started for the drill, saw the latency: the first-token alert
    # fired and paged during the fault, after the first fallback answers (each one 6 s or more:
    # three 2 s first-token timeouts), and nothing fired in the baseline.
    fired = checks["alert_fired LLMFirstTokenSlow during fault"]["observed"]
    paged = checks["alert_paged LLMFirstTokenSlow during fault"]["observed"]
    assert 5 <= fired <= paged, (fired, paged)
    assert checks["alert_quiet LLM.* during baseline"]["passed"]
    # A row of the detection matrix per fault (the latency on each of the three hops), each
    # with the alert and the runbook step it named.
    assert [row["what"] for row in journal["detection"]] == [
        f"toxiproxy.latency on {hop}" for hop in ("vllm-0", "vllm-1", "backup")
    ]
    for row in journal["detection"]:
        firing = [s for s in row["signs"] if s["what"].startswith("LLMFirstTokenSlow")]
        assert firing and all(s["runbook"].endswith("llm-latency.md#timeouts") for s in firing)
    # Evidence that each fault landed, read back from Toxiproxy, and that each was reverted.
    for fault in journal["faults"]:
        names = [t["name"] for t in fault["evidence"]["toxics"]]
        assert any(n.startswith("drills-") for n in names)
        assert fault["applied_at"] < fault["reverted_at"]
        assert fault["rollback"]["method"] in ("removed", "recreated")
    assert all(p.toxics == () for p in stack.toxiproxy.proxies().values())
    run_dir = Path(journal["run_dir"])
    for name in ("index.html", "junit.xml", "summary.md", "records.jsonl"):
        assert (run_dir / name).exists()
    suite = ET.parse(run_dir / "junit.xml").getroot()
    assert int(suite.get("tests", "0")) == len(journal["checks"]) + 1
    assert suite.get("failures") == "0"


def supervisor_pid(stack: RunningStack) -> int:
    from stack.state import read_state

    state = read_state(stack.state_dir)
    assert state is not None
    return state.supervisor_pid


def test_shipped_latency_drill_on_its_unsound_twin_fails_exactly_the_checks_it_names(
    stack: RunningStack, tmp_path: Path
) -> None:
    before = supervisor_pid(stack)
    result, [journal] = run_twin(sized_latency(tmp_path), stack, tmp_path, "unsound")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    twin = journal["twin"]
    assert twin["held"] and twin["name"] == "unsound", twin
    assert "twin unsound: held: failed as declared" in result.stdout
    # The twin's gateway ran beside the session's stack: no second start-up, nothing left.
    assert "gateway beside" in twin["stack"], twin["stack"]
    assert supervisor_pid(stack) == before
    assert journal["stack"]["profile"] is None and journal["stack"]["gateway"] != (
        stack.gateway_url
    )
    assert processes_naming(tmp_path / "runs") == [], "the twin's gateway outlived its run"
    # The fault on the backup hop, which the unsound profile has none of, was not applied.
    assert [f["target"] for f in journal["faults"]] == ["vllm-0", "vllm-1"]
    assert twin["skipped_faults"] == [
        "phases[1].inject[2] toxiproxy.latency on backup (the twin's stack has none)"
    ]
    checks = by_label(journal)
    failed = {label for label, c in checks.items() if not c["passed"]}
    # No first-token timeout that can fire before the request's own, no fallback text, no
    # breakers: users wait out the latency on every request, and no breaker ever opens. The
    # config's contradictions are caught statically too.
    assert failed == {"fallback_rate during fault", "breaker_opened_within vllm-0", "stack_lint"}
    assert checks["fallback_rate during fault"]["observed"] == 0.0
    assert checks["breaker_opened_within vllm-0"]["observed_text"] == "no data"
    # Judged from outside: the L7 hop saw the gateway keep sending to the slow replica.
    opened = checks["breaker_opened_within vllm-0"]
    assert opened["source"] == "observed", opened
    assert "the gateway never stopped sending to vllm-0" in opened["reason"], opened
    # Failures link to the runbook step that covers them, in every report; each report says
    # it is a twin's.
    run_dir = Path(journal["run_dir"])
    summary = (run_dir / "summary.md").read_text()
    assert "llm-latency.md#fallback" in summary and "**FAIL**" in summary
    assert "### Twin `unsound` of drill `inference-latency`: **HELD**" in summary
    junit = ET.parse(run_dir / "junit.xml").getroot()
    assert junit.get("name") == "twin:inference-latency:unsound"
    assert junit.get("failures") == "0", ET.tostring(junit, encoding="unicode")
    html = (run_dir / "index.html").read_text()
    assert "llm-latency.md#breakers" in html and "TWIN unsound: HELD" in html


def test_shipped_latency_drill_on_its_feared_alerts_twin_fails_only_the_detection_checks(
    stack: RunningStack, tmp_path: Path
) -> None:
    result, [journal] = run_twin(sized_latency(tmp_path), stack, tmp_path, "feared-alerts")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    twin = journal["twin"]
    assert twin["held"] and twin["name"] == "feared-alerts", twin_account(journal)
    checks = by_label(journal)
    failed = {label for label, c in checks.items() if not c["passed"]}
    # The stack degraded as designed (fallback text, breakers, recovery); only the monitoring
    # failed: a five-minute median never saw a 30 s spike, so nothing fired and nothing paged.
    assert failed == {
        "alert_fired LLMFirstTokenSlow during fault",
        "alert_paged LLMFirstTokenSlow during fault",
        "alert_runbook LLM.* during fault",
    }, failed
    assert checks["alert_quiet LLM.* during baseline"]["passed"]
    # Prometheus loaded the feared rules in place of the stack's: the run's own rules file.
    home = Path(journal["run_dir"]) / "monitoring"
    assert "feared-rules.yml" in (home / "prometheus.yml").read_text()
    assert processes_naming(home) == []


def test_cli_run_exit_code_and_report_path(
    stack: RunningStack,
    tmp_path: Path,
    jaeger: Jaeger,
) -> None:
    history = tmp_path / "history.sqlite"
    result = subprocess.run(
        [
            *run_argv(stack, tmp_path),
            "--label",
            "v1.2.3",
            "--history",
            str(history),
            "--otlp",
            jaeger.otlp,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "DRILLS_LEDGER": str(tmp_path / "ledger.json")},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = result.stdout.strip().splitlines()[-1]
    assert report.startswith("report: ") and report.endswith("index.html")
    assert Path(report.removeprefix("report: ")).exists()
    assert "[fault" in result.stderr and "req/s" in result.stderr  # live progress
    # A report re-renders from the journal alone.
    run_dir = Path(report.removeprefix("report: ")).parent
    (run_dir / "index.html").unlink()
    again = subprocess.run(
        [sys.executable, "-m", "drills.cli", "report", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0 and (run_dir / "index.html").exists()
    # The run is in the run history, under its label, with its checks.
    journal = json.loads((run_dir / "journal.json").read_text())
    assert journal["label"] == "v1.2.3" and journal["history"]["written"], journal["history"]
    kept = subprocess.run(
        [sys.executable, "-m", "drills.cli", "history", journal["drill"], "--history",
         str(history), "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert kept.returncode == 0, kept.stdout + kept.stderr
    [run] = json.loads(kept.stdout)["runs"]
    assert run["run_id"] == journal["run_id"] and run["label"] == "v1.2.3"
    assert [c["label"] for c in run["checks"]] == [c["label"] for c in journal["checks"]]
    # The run is one trace on the team's tracing backend (a real Jaeger, over OTLP/HTTP): the
    # drill, its phases, its three faults, each request linked to the trace its traceparent
    # started (drills.engine.tracing; the trace's shape in detail: tests/test_tracing.py).
    sent = journal["trace"]
    assert sent["exported"], sent
    assert f"trace {sent['trace_id']} ({sent['spans']} spans) sent to" in result.stderr
    spans = jaeger.trace(sent["trace_id"], sent["spans"])["spans"]
    names = [s["operationName"] for s in spans]  # type: ignore[attr-defined]
    assert names.count(f"drill {journal['drill']}") == 1
    assert sorted(n for n in names if n.startswith("fault ")) == sorted(
        f"fault {f['kind']} {f['target']}" for f in journal["faults"]
    )
    assert {n for n in names if n.startswith("phase ")} == {
        f"phase {p['name']}" for p in journal["phases"]
    }
    linked = {r["traceID"] for s in spans for r in s["references"]}  # type: ignore[attr-defined]
    sent_ids = {r["trace_id"] for r in journal["records"]}
    assert len(sent_ids) == len(journal["records"]) > 0 and sent_ids <= linked


def _start_cli(stack: RunningStack, tmp_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        run_argv(stack, tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "DRILLS_LEDGER": str(tmp_path / "ledger.json")},
    )


def _run_with_faults_in_force(stack: RunningStack, tmp_path: Path) -> subprocess.Popen[str]:
    """`drills run` of the short drill, once its three latency toxics are in force."""
    proc = _start_cli(stack, tmp_path)
    _wait_for_toxics(stack, 3)
    return proc


def _load_processes(tmp_path: Path) -> list[int]:
    """Locust processes started for runs under ``tmp_path`` (found by their environment)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if f"DRILLS_LOAD_CONFIG={tmp_path}".encode() in environ:
            pids.append(int(entry.name))
    return pids


def _wait_for_toxics(stack: RunningStack, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        toxics = [t for p in stack.toxiproxy.proxies().values() for t in p.toxics]
        if len(toxics) >= count:
            return
        time.sleep(0.2)
    raise AssertionError("the faults never landed")


def test_sigterm_reverts_every_fault_and_marks_the_run_interrupted(
    stack: RunningStack, toxi: object, tmp_path: Path
) -> None:
    proc = _run_with_faults_in_force(stack, tmp_path)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, output
    assert all(p.toxics == () for p in stack.toxiproxy.proxies().values())
    journal = json.loads(next((tmp_path / "runs").glob("*/journal.json")).read_text())
    assert journal["status"] == "interrupted" and journal["verdict"] == "interrupted"
    assert all(f["reverted_at"] for f in journal["faults"])
    assert Ledger(tmp_path / "ledger.json").entries() == {}


def test_faults_left_by_a_killed_run_and_its_killed_watchdog_are_removed_by_the_next_run(
    stack: RunningStack, toxi: object, tmp_path: Path
) -> None:
    proc = _run_with_faults_in_force(stack, tmp_path)
    load = _load_processes(tmp_path)
    assert load, "the run's Locust process was not found"
    os.kill(_watchdog_pid(tmp_path), signal.SIGKILL)  # the dead-man's switch dies as well
    proc.kill()  # SIGKILL: no revert can run
    proc.wait()
    # Its load dies with it: nothing keeps hammering a stack nobody watches.
    deadline = time.monotonic() + 15
    while any(pid_alive(pid) for pid in load) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(pid_alive(pid) for pid in load)
    left = [t.name for p in stack.toxiproxy.proxies().values() for t in p.toxics]
    assert len(left) == 3 and all(n.startswith("drills-") for n in left)
    assert len(Ledger(tmp_path / "ledger.json").entries()) == 3

    shutil.rmtree(tmp_path / "runs")
    # The next run removes them before it starts, says so, and runs normally.
    journal = run(SHORT, stack.gateway_url, stack, tmp_path)
    removed = journal["rollbacks"]["swept"]
    assert sorted(r["target"] for r in removed) == ["backup", "vllm-0", "vllm-1"]
    assert journal["timeline"][0]["event"] == "phase_start"
    html = (Path(journal["run_dir"]) / "index.html").read_text()
    assert "removed 3 fault(s) left behind by an earlier run" in html
    assert all(p.toxics == () for p in stack.toxiproxy.proxies().values())
    assert Ledger(tmp_path / "ledger.json").entries() == {}
    assert journal["verdict"] == "passed", drill_account(journal)


def test_abort_condition_stops_the_drill_and_reverts(
    stack: RunningStack, toxi: object, tmp_path: Path
) -> None:
    started = time.monotonic()
    journal = run(
        ROOT / "tests" / "scenarios" / "abort-on-fallbacks.yaml", stack.gateway_url, stack, tmp_path
    )
    assert time.monotonic() - started < 40  # far less than the 68 s the phases add up to
    assert journal["status"] == "aborted" and journal["verdict"] == "aborted"
    assert journal["aborted"]["check"] == "fallback_rate" and journal["aborted"]["observed"] > 0.5
    assert [e["event"] for e in journal["timeline"]].count("aborted") == 1
    assert all(f["reverted_at"] for f in journal["faults"])
    assert all(p.enabled and p.toxics == () for p in stack.toxiproxy.proxies().values())
    assert {r["phase"] for r in journal["records"]} <= {"warmup", "baseline", "fault"}
    suite = ET.parse(Path(journal["run_dir"]) / "junit.xml").getroot()
    assert suite.get("errors") == "1"


class _BrokenRevertFault(FaultSpec):
    kind: Literal["test.broken_revert"]


class _BrokenRevert:
    """A fault whose revert raises ``RuntimeError`` (a bug, not a ``RevertError``): the other
    faults' reverts and the journal must not depend on it."""

    spec = _BrokenRevertFault

    def __init__(self, fault: _BrokenRevertFault, context: object, index: int) -> None:
        self.kind, self.target = fault.kind, fault.target

    def apply(self) -> dict:
        return {"applied_at": time.time()}

    def revert(self) -> dict:
        raise RuntimeError("the revert has a bug")

    def ledger_entry(self) -> dict:
        return {"kind": self.kind, "target": self.target}

    @staticmethod
    def revert_entry(entry: dict) -> dict:
        return {"method": "nothing to undo"}


class _ForgetfulRevertFault(FaultSpec):
    kind: Literal["test.forgetful_revert"]


class _ForgetfulRevert:
    """A fault whose revert says it removed its toxic and did not: only the chain read after
    the drill against the chain read before it can tell."""

    spec = _ForgetfulRevertFault
    TOXIC = Toxic("forgotten", "latency", attributes={"latency": 1})

    def __init__(self, fault: _ForgetfulRevertFault, context: InjectionContext, index: int) -> None:
        self.kind, self.target, self.url = fault.kind, fault.target, context.toxiproxy_url

    def apply(self) -> dict:
        with ToxiproxyClient(self.url) as client:
            client.add_toxic(self.target, self.TOXIC)
        return {"applied_at": time.time()}

    def revert(self) -> dict:
        return {"method": "toxic removed"}  # it was not

    def ledger_entry(self) -> dict:
        return {"kind": self.kind, "target": self.target}

    @staticmethod
    def revert_entry(entry: dict) -> dict:
        return {"method": "nothing to undo"}


def test_a_revert_that_raises_runtime_error_spares_the_other_reverts_and_the_journal(
    stack: RunningStack, toxi: object, tmp_path: Path
) -> None:
    register("test.broken_revert", _BrokenRevert)
    register("test.forgetful_revert", _ForgetfulRevert)
    drill = tmp_path / "broken-revert.yaml"
    drill.write_text(
        SHORT.read_text()
        .replace("../../scenarios/", f"{ROOT / 'scenarios'}/")
        .replace(  # (four faults at once: the default policy's most)
            "      - {kind: toxiproxy.latency, target: backup, latency: 3s}\n",
            "      - {kind: test.broken_revert, target: nothing}\n"
            "      - {kind: test.forgetful_revert, target: vllm-1}\n",
        )
    )
    try:
        journal = run(drill, stack.gateway_url, stack, tmp_path)
        # Every toxic the drill's faults reverted is gone although one revert in the same exit
        # stack raised; the one a revert only said it removed is still there.
        left = {n: [t.name for t in p.toxics] for n, p in stack.toxiproxy.proxies().items()}
        assert {n: t for n, t in left.items() if t} == {"vllm-1": ["forgotten"]}, left
    finally:
        stack.toxiproxy.remove_toxic("vllm-1", _ForgetfulRevert.TOXIC.name)
    # The chain read after the drill says so, whatever the revert claimed.
    assert journal["rollbacks"]["differs"] == [
        "proxy vllm-1: toxic left behind: forgotten (latency, downstream, toxicity 1, "
        "{'jitter': 0, 'latency': 1})"
    ]
    assert journal["status"] == "failed" and journal["verdict"] == "failed"
    assert journal["rollbacks"]["failed"] == [
        "test.broken_revert on nothing: RuntimeError: the revert has a bug"
    ]
    broken = next(f for f in journal["faults"] if f["kind"] == "test.broken_revert")
    assert broken["error"] == "revert failed: RuntimeError: the revert has a bug"
    # Retried with backoff (4 tries at the window's end), every attempt in the journal.
    tries = broken["revert_attempts"]
    assert [a["attempt"] for a in tries[:4]] == [1, 2, 3, 4], tries
    assert all(a["error"] == "RuntimeError: the revert has a bug" for a in tries)
    assert tries[3]["at"] - tries[0]["at"] >= 0.5 + 1 + 2 - 0.1
    assert all(f["reverted_at"] for f in journal["faults"] if f["kind"] != "test.broken_revert")
    summary = (Path(journal["run_dir"]) / "summary.md").read_text()
    assert "differs from before the drill: proxy vllm-1: toxic left behind" in summary
    # Its ledger entry stays for the next sweep; the others are gone.
    assert [e["kind"] for e in Ledger(tmp_path / "ledger.json").entries().values()] == [
        "test.broken_revert"
    ]
    suite = ET.parse(Path(journal["run_dir"]) / "junit.xml").getroot()
    reverted = next(c for c in suite.iter("testcase") if c.get("name") == "every fault reverted")
    assert reverted.find("failure") is not None


def test_abort_with_its_runner_gone_clears_what_the_ledger_holds(
    stack: RunningStack, toxi: object, tmp_path: Path
) -> None:
    env = isolated_env(tmp_path)
    proc = subprocess.Popen(
        run_argv(stack, tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    _wait_for_toxics(stack, 3)
    # The watchdog dies first (SIGKILL too), then the runner: nobody is left to revert.
    os.kill(_watchdog_pid(tmp_path), signal.SIGKILL)
    proc.kill()  # SIGKILL: the OOM killer, a cancelled CI job
    proc.wait()
    listed = subprocess.run(drills_cli("faults"), capture_output=True, text=True, env=env)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == 3 and all("run gone: `drills abort` removes it" in line for line in lines)
    assert {line.split()[1] for line in lines} == {"toxiproxy.latency"}
    aborted = subprocess.run(drills_cli("abort"), capture_output=True, text=True, env=env)
    assert aborted.returncode == 0, aborted.stdout + aborted.stderr
    for hop in ("vllm-0", "vllm-1", "backup"):
        assert f"removed toxiproxy.latency on {hop}" in aborted.stdout
    assert "removed 3 fault(s)" in aborted.stdout
    assert stack.toxics() == []
    assert Ledger(tmp_path / "ledger.json").entries() == {}


def _watchdog_pid(tmp_path: Path) -> int:
    """The pid of the watchdog of the one run under ``tmp_path`` (its first line says)."""
    (log,) = (tmp_path / "runs").glob("*/watchdog.jsonl")
    first = json.loads(log.read_text().splitlines()[0])
    assert first["event"] == "watching"
    return int(first["watchdog_pid"])


def _ledger_empty(tmp_path: Path) -> bool:
    return Ledger(tmp_path / "ledger.json").entries() == {}


def _gone(pid: int) -> bool:
    return not pid_alive(pid)


def _wait(condition: Callable[[], bool], timeout: float) -> float:
    """Seconds until ``condition()`` held (raises if it never did within ``timeout``)."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not within {timeout}s")
        time.sleep(0.1)
    return time.monotonic() - started


def test_sigkill_of_the_runner_its_watchdog_reverts_every_fault_and_nothing_is_left(
    stack: RunningStack, toxi: object, tmp_path: Path
) -> None:
    proc = _run_with_faults_in_force(stack, tmp_path)
    watchdog = _watchdog_pid(tmp_path)
    proc.kill()  # SIGKILL: no handler of the runner runs
    proc.wait()
    # The goal is 5 s: bench/runner_kill.py measures it. A toxic goes before its
    # ledger entry does, so both are waited for.
    _wait(lambda: stack.toxics() == [] and _ledger_empty(tmp_path), 15)
    _wait(lambda: _gone(watchdog) and not _load_processes(tmp_path), 15)
    (log,) = (tmp_path / "runs").glob("*/watchdog.jsonl")
    actions = [json.loads(line) for line in log.read_text().splitlines()]
    reverted = [a for a in actions if a["event"] == "reverted"]
    assert sorted(a["target"] for a in reverted) == ["backup", "vllm-0", "vllm-1"]
    assert all("is gone" in a["why"] for a in reverted)
    assert actions[-1]["event"] == "runner_gone"


def test_a_stuck_runner_its_faults_are_reverted_once_they_outlive_their_schedule(
    stack: RunningStack, toxi: object, tmp_path: Path
) -> None:
    """SIGSTOP stands for a runner hung in a call: alive, doing nothing. The faults' scheduled
    end plus the policy's grace (1 s here) passes, and the watchdog reverts them."""
    safety = tmp_path / "safety.yaml"
    safety.write_text("fault_grace: 1s\n")
    proc = subprocess.Popen(
        [*run_argv(stack, tmp_path), "--safety", str(safety), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "DRILLS_LEDGER": str(tmp_path / "ledger.json")},
    )
    _wait_for_toxics(stack, 3)
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        # The fault phase is 8 s; a toxic goes before its ledger entry does.
        _wait(lambda: stack.toxics() == [] and _ledger_empty(tmp_path), 8 + 1 + 15)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    output, errors = proc.communicate(timeout=120)
    assert proc.returncode == 1, output + errors
    written = list((tmp_path / "runs").glob("*/journal.json"))
    assert written, output + errors
    journal = json.loads(written[0].read_text())
    # --json: stdout is the outcome alone (progress went to stderr), and it points at the rest.
    outcome = json.loads(output)
    assert outcome["status"] == "failed" and outcome["verdict"] == "failed", outcome
    assert outcome["left_in_force"] == [] and outcome["journal"] == str(written[0])
    assert {c["label"] for c in outcome["checks"]} == {c["label"] for c in journal["checks"]}
    assert "drill short-latency:" in errors  # what it says as it goes is on stderr
    actions = journal["rollbacks"]["watchdog"]
    assert sorted(a["target"] for a in actions) == ["backup", "vllm-0", "vllm-1"], actions
    assert all(
        a["event"] == "reverted" and "outlived its scheduled end" in a["why"] for a in actions
    )
    assert journal["status"] == "failed"
    html = (Path(journal["run_dir"]) / "index.html").read_text()
    assert "The run's watchdog reverted toxiproxy.latency" in html


def test_sigterm_of_the_whole_process_group_reverts_everything_and_leaves_no_process(
    stack: RunningStack, toxi: object, tmp_path: Path
) -> None:
    """A CI cancel: SIGTERM to the runner's process group at once."""
    proc = subprocess.Popen(
        run_argv(stack, tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "DRILLS_LEDGER": str(tmp_path / "ledger.json")},
        start_new_session=True,  # its own group, so the signal reaches it and not pytest
    )
    _wait_for_toxics(stack, 3)
    # One drill at a time: a second one on the same stack (by its profile, where the first
    # attached to it) is refused at once, naming the first, and touches nothing.
    second = subprocess.run(
        drills_cli(
            "run", str(SHORT), "--profile", str(stack.config_path), "--state-dir",
            str(stack.state_dir), "--out", str(tmp_path / "second"),
        ),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "DRILLS_LEDGER": str(tmp_path / "second-ledger.json")},
    )  # fmt: skip
    assert second.returncode == 2, second.stdout + second.stderr
    assert "drill short-latency (run " in second.stderr and f"pid {proc.pid}" in second.stderr
    assert f"toxiproxy {stack.toxiproxy_url}" in second.stderr, second.stderr
    assert "`drills faults`" in second.stderr and "nothing was applied" in second.stderr
    assert len(stack.toxics()) == 3 and not (tmp_path / "second").exists()
    holds = subprocess.run(
        drills_cli("faults", "--json"), capture_output=True, text=True, timeout=60
    )
    (held,) = [r for r in json.loads(holds.stdout)["runs"] if r["pid"] == proc.pid]
    assert f"gateway {stack.gateway_url}" in held["claims"], held
    watchdog = _watchdog_pid(tmp_path)
    os.killpg(proc.pid, signal.SIGTERM)
    output, _ = proc.communicate(timeout=90)
    assert proc.returncode == 1, output
    assert stack.toxics() == []
    assert Ledger(tmp_path / "ledger.json").entries() == {}
    journal = json.loads(next((tmp_path / "runs").glob("*/journal.json")).read_text())
    assert journal["status"] == "interrupted" and all(f["reverted_at"] for f in journal["faults"])
    _wait(lambda: _gone(watchdog) and not _load_processes(tmp_path), 15)
