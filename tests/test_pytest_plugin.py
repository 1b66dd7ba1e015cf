"""The pytest plugin, accepted through pytester: drill files collected as tests (a case per
check), markers, options, clean collection errors, and a real drill run on the session's stack."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from tests.conftest import RunningStack

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

DRILL = """
drill: plugin-demo
title: Plugin demo
runbook: runbook.md
tags: [smoke, latency]
load: {users: 1, prompts: ["Say hi."], max_tokens: 4, warmup: 2s, timeout: 30s, wait: 500ms}
phases:
  - {name: baseline, duration: 4s}
  - name: fault
    duration: 4s
    inject:
      - {kind: toxiproxy.latency, target: vllm-0, latency: 100ms}
expect:
  - {check: error_rate, during: baseline, below: 0.5}
  - {check: e2e.p50, during: baseline, below: 1ms, runbook: "runbook.md#slow-answers"}
  - {check: error_rate, during: fault, below: 0.5}
"""

RUNBOOK = "# Runbook\n\n## Slow answers\n\nLook at the engine queue first.\n"


@pytest.fixture
def drill_dir(pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DRILLS_LEDGER", str(tmp_path / "ledger.json"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    pytester.makefile(".yaml", drill_demo=DRILL)
    pytester.makefile(".md", runbook=RUNBOOK)
    pytester.makefile(".yaml", other="title: not a drill\n")
    return pytester.path


def test_drill_files_are_collected_with_a_case_per_check(
    pytester: pytest.Pytester, drill_dir: Path
) -> None:
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(
        [
            "drill_demo.yaml::plugin-demo::error_rate during baseline",
            "drill_demo.yaml::plugin-demo::e2e.p50 during baseline",
            "drill_demo.yaml::plugin-demo::error_rate during fault",
            "drill_demo.yaml::plugin-demo::every fault reverted",
            "*4 tests collected*",
        ]
    )
    assert "other.yaml" not in result.stdout.str()
    # Markers: every drill is marked `drill` and with its tags (strict markers stay happy).
    selected = pytester.runpytest_subprocess(
        "--collect-only", "-q", "-m", "smoke and drill", "--strict-markers"
    )
    selected.stdout.fnmatch_lines(["*4 tests collected*"])
    none = pytester.runpytest_subprocess("--collect-only", "-q", "-m", "not latency")
    none.stdout.fnmatch_lines(["*4 deselected*"])


def test_options_have_their_own_group(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(
        ["drills: fault drills as tests:", "*--drills-profile=*", "*--drills-gateway=*"]
    )


def test_a_bad_drill_file_is_a_clean_collection_error(
    pytester: pytest.Pytester, drill_dir: Path
) -> None:
    pytester.makefile(".yaml", drill_bad=DRILL.replace("latency: 100ms", "latency: fast"))
    result = pytester.runpytest_subprocess("--collect-only", "-q")
    result.stdout.fnmatch_lines(
        ["*drill_bad.yaml:11 phases[[]1[]].inject[[]0[]].latency: *(got 'fast')*"]
    )
    assert "Traceback" not in result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED


def test_toxiproxy_alone_is_refused_and_gateway_alone_needs_no_toxiproxy_fault(
    pytester: pytest.Pytester, drill_dir: Path
) -> None:
    result = pytester.runpytest_subprocess("--drills-toxiproxy", "http://127.0.0.1:1")
    result.stderr.fnmatch_lines(["*--drills-toxiproxy without --drills-gateway*"])
    result = pytester.runpytest_subprocess("--drills-prometheus", "prom:9090")
    result.stderr.fnmatch_lines(["*--drills-prometheus: 'prom:9090' is not an http(s):// URL*"])
    # The drill here has a Toxiproxy fault: attached with a gateway alone, it is refused
    # before anything runs, naming the fault.
    result = pytester.runpytest_subprocess("--drills-gateway", "http://127.0.0.1:1")
    result.stdout.fnmatch_lines(["*injects through Toxiproxy (phases[[]1[]].inject[[]0[]]*"])


@pytest.mark.stack
def test_a_drill_runs_once_and_reports_each_check(
    pytester: pytest.Pytester, drill_dir: Path, stack: RunningStack, toxi: object
) -> None:
    result = pytester.runpytest_subprocess(
        "--drills-gateway",
        stack.gateway_url,
        "--drills-toxiproxy",
        stack.toxiproxy_url,
        "--drills-out",
        str(drill_dir / "runs"),
        "--junitxml",
        str(drill_dir / "junit.xml"),
        "-p",
        "no:cacheprovider",
        timeout=300,
    )
    result.assert_outcomes(passed=3, failed=1)
    # The failure text: observed value, expectation, reason, runbook step and report.
    result.stdout.fnmatch_lines(
        [
            "*e2e.p50 during baseline: observed *ms, expected < 1ms",
            "*runbook: runbook.md#slow-answers",
            "*report: *index.html",
        ]
    )
    assert "Traceback" not in result.stdout.str()
    assert len(list((drill_dir / "runs").glob("plugin-demo-*/journal.json"))) == 1  # ran once
    cases = ET.parse(drill_dir / "junit.xml").getroot().iter("testcase")
    outcome = {c.get("name"): c.find("failure") is None for c in cases}
    assert outcome == {
        "error_rate during baseline": True,
        "e2e.p50 during baseline": False,
        "error_rate during fault": True,
        "every fault reverted": True,
    }
    assert stack.toxics() == []


def test_drills_run_fixture_for_python_tests(pytester: pytest.Pytester, drill_dir: Path) -> None:
    pytester.makepyfile(
        test_fixture="""
        def test_fixture_is_there(drills_run, drills_session):
            assert callable(drills_run)
            assert drills_session.run == drills_run
        """
    )
    result = pytester.runpytest_subprocess("test_fixture.py", "-q")
    result.assert_outcomes(passed=1)


TWIN_DRILL = """
drill: plugin-twin
title: Plugin twin demo
load: {users: 1, prompts: ["Say hi."], max_tokens: 4, warmup: 2s, timeout: 30s, wait: 500ms}
phases:
  - {name: baseline, duration: 4s}
expect:
  - {check: error_rate, during: baseline, below: 0.5}
  - {check: stack_lint}
twins:
  - {profile: unsound, must_fail: [stack_lint], why: timeouts that contradict each other}
"""


def test_twins_are_collected_and_run_as_items(
    pytester: pytest.Pytester,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stack: RunningStack,
    toxi: object,
) -> None:
    monkeypatch.setenv("DRILLS_LEDGER", str(tmp_path / "ledger.json"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    pytester.makefile(".yaml", drill_twin=TWIN_DRILL)
    # Without --drills-twins only the drill itself is collected.
    plain = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    plain.stdout.fnmatch_lines(["*3 tests collected*"])
    result = pytester.runpytest_subprocess(
        "--drills-twins",
        "--drills-profile",
        str(stack.config_path),
        "--drills-state-dir",
        str(stack.state_dir),
        "--drills-out",
        str(pytester.path / "runs"),
        "--junitxml",
        str(pytester.path / "junit.xml"),
        "-p",
        "no:cacheprovider",
        "-v",
        timeout=300,
    )
    # On the sound stack stack_lint passes; on the twin it fails, as the twin says: all pass.
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["*plugin-twin?twin unsound?::the twin held PASSED*"])
    cases = [
        f"{c.get('classname')}::{c.get('name')}"
        for c in ET.parse(pytester.path / "junit.xml").getroot().iter("testcase")
    ]
    assert len(cases) == 6 and all(
        c.find("failure") is None
        for c in ET.parse(pytester.path / "junit.xml").getroot().iter("testcase")
    ), cases
    # pytest's JUnit writer mangles names with brackets: "...[twin unsound]::stack_lint]".
    twin_cases = [c for c in cases if "plugin-twin[twin unsound]" in c]
    assert any("::stack_lint" in c for c in twin_cases), cases
    assert any("::the twin held" in c for c in twin_cases), cases
    journals = sorted((pytester.path / "runs").glob("plugin-twin-twin-unsound-*/journal.json"))
    assert len(journals) == 1  # the twin ran once for its three items
