"""The shipped RAG and agent drills end to end on the real stack: each passes on the sound
policy and fails on the unsound one, naming the checks that caught it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from drills.model.scenario import load_scenario
from tests.conftest import RunningStack, processes_naming, run_embedded, run_twin
from tests.helpers import drill_account, shortened, twin_account

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
VECTOR_DB_OUTAGE = ROOT / "scenarios" / "vector-db-outage.yaml"
TOOL_SATURATION = ROOT / "scenarios" / "tool-saturation.yaml"
# What each twin names: exactly these checks must fail on it.
VECTOR_DB_TWIN_FAILS = set(load_scenario(VECTOR_DB_OUTAGE)[0].twin("unsound").must_fail)
TOOL_TWIN_FAILS = set(load_scenario(TOOL_SATURATION)[0].twin("unsound").must_fail)
TOOL_TWIN_MAY_FAIL = set(load_scenario(TOOL_SATURATION)[0].twin("unsound").may_fail)


def sized(drill: Path, tmp_path: Path) -> Path:
    """A shipped drill with the test suite's shorter calm phases (its fault keeps its 30 s):
    10 s of baseline, and the 20 s of recovery its recovered_within needs."""
    return shortened(drill, tmp_path, baseline="10s", recovery="20s")


def verdicts(journal: dict) -> dict[str, dict]:
    return {c["label"]: c for c in journal["checks"]}


def test_vector_db_outage_passes_on_the_sound_policy(stack: RunningStack, tmp_path: Path) -> None:
    # As `drills run` on the embedded stack's profile: its monitoring starts for the drill.
    journal = run_embedded(sized(VECTOR_DB_OUTAGE, tmp_path), stack, tmp_path)
    assert journal["verdict"] == "passed", drill_account(journal)
    checks = verdicts(journal)
    # The stack's monitoring saw the outage: the retrieval alert fired and paged, naming the
    # runbook step for answers without context; the vector DB's open breaker names the
    # retrieval path's step, not an engine's.
    fired = checks["alert_fired LLMRetrievalFailing during fault"]["observed"]
    paged = checks["alert_paged LLMRetrievalFailing during fault"]["observed"]
    assert 5 <= fired <= paged, (fired, paged)
    (row,) = journal["detection"]
    pages = {s["what"].split()[0]: s["runbook"] for s in row["signs"] if s["layer"] == "page"}
    assert pages["LLMRetrievalFailing"].endswith("vector-db-outage.md#no-context-answers"), row
    assert pages["LLMRetrievalBreakerOpen"].endswith("vector-db-outage.md#retry-amplification")
    assert "LLMBreakerOpen" not in pages, row
    assert checks["missing_context_share during fault"]["observed"] >= 0.9
    assert checks["retrieval_recall during baseline"]["observed"] >= 0.8
    # The L7 hop fronts the model hops only: the vector DB's breaker is the gateway's word.
    opens = checks["breaker_opens vectordb during fault"]
    assert opens["source"] == "claimed" and "does not front vectordb" in opens["reason"], opens
    # The fault was read back from Toxiproxy (the hop disabled) and reverted.
    fault = journal["faults"][0]
    assert fault["kind"] == "toxiproxy.down" and fault["target"] == "vectordb"
    assert fault["reverted_at"] > fault["applied_at"]
    assert journal["retrieval"]["available"] is True
    assert all(p.enabled and not p.toxics for p in stack.toxiproxy.proxies().values())


def test_vector_db_outage_on_its_unsound_twin_fails_exactly_the_checks_it_names(
    stack: RunningStack, tmp_path: Path
) -> None:
    result, [journal] = run_twin(sized(VECTOR_DB_OUTAGE, tmp_path), stack, tmp_path, "unsound")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert journal["twin"]["held"], twin_account(journal)
    checks = verdicts(journal)
    failed = {label for label, c in checks.items() if not c["passed"]}
    assert failed == VECTOR_DB_TWIN_FAILS, failed
    # Five immediate attempts per question at the dead hop, counted per user request.
    assert checks["retry_amplification vectordb during fault"]["observed"] >= 4
    summary = (Path(journal["run_dir"]) / "summary.md").read_text()
    assert "vector-db-outage.md#retry-amplification" in summary


def test_vector_db_outage_on_its_dropped_pages_twin_fails_only_the_page(
    stack: RunningStack, tmp_path: Path
) -> None:
    """The sound stack and the stack's own rules, with an Alertmanager route that sends every
    alert to a receiver with no integration: the alert fires as on the drill, nobody is paged,
    and the one check that says so is the one that fails."""
    result, [journal] = run_twin(
        sized(VECTOR_DB_OUTAGE, tmp_path), stack, tmp_path, "dropped-pages"
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert journal["twin"]["held"], twin_account(journal)
    checks = verdicts(journal)
    failed = {label for label, c in checks.items() if not c["passed"]}
    assert failed == {"alert_paged LLMRetrievalFailing during fault"}, failed
    assert checks["alert_fired LLMRetrievalFailing during fault"]["passed"]
    assert journal["pages"] == []
    # The twin's Alertmanager routed every alert to the receiver with no integration, and the
    # monitoring started for the run is gone with it.
    home = Path(journal["run_dir"]) / "monitoring"
    routed = yaml.safe_load((home / "alertmanager.yml").read_text())["route"]
    assert routed["receiver"] == "nowhere", routed
    assert processes_naming(home) == []


def test_tool_saturation_passes_on_the_sound_policy(stack: RunningStack, tmp_path: Path) -> None:
    # As `drills run` on the embedded stack's profile: its monitoring starts for the drill.
    journal = run_embedded(sized(TOOL_SATURATION, tmp_path), stack, tmp_path)
    assert journal["verdict"] == "passed", drill_account(journal)
    # The stack's monitoring, started for the drill, saw the saturated tool: the tool-timeout
    # alert fired and paged, naming the runbook step for tool timeouts.
    checks = verdicts(journal)
    fired = checks["alert_fired LLMToolTimeouts {tool=search_kb} during fault"]["observed"]
    paged = checks["alert_paged LLMToolTimeouts {tool=search_kb} during fault"]["observed"]
    assert 5 <= fired <= paged, (fired, paged)
    (row,) = journal["detection"]
    pages = {s["what"].split()[0]: s["runbook"] for s in row["signs"] if s["layer"] == "page"}
    assert pages["LLMToolTimeouts"].endswith("tool-saturation.md#tool-timeouts"), row
    # The tool's open breaker pages with the tool's runbook step, not an engine's.
    assert pages["LLMToolBreakerOpen"].endswith("tool-saturation.md#breakers"), row
    assert "LLMBreakerOpen" not in pages, row
    fault = journal["faults"][0]
    assert fault["kind"] == "tool.saturate"
    # Evidence: the tool server's pool was full, and what the flood did is in the journal.
    assert fault["evidence"]["tool_inflight"] >= 1
    assert fault["rollback"]["method"] == "flood stopped"
    assert fault["rollback"]["flood"]["calls"] > 0
    assert fault["rollback"]["flood"]["latency_p95"] is not None


def test_tool_saturation_on_its_unsound_twin_fails_exactly_the_checks_it_names(
    stack: RunningStack, tmp_path: Path
) -> None:
    result, [journal] = run_twin(sized(TOOL_SATURATION, tmp_path), stack, tmp_path, "unsound")
    # How long the flood's calls queued (latency p50): the twin can only fail when an agent's
    # call waits past its 2 s attempt, so a failure shows the depth the flood reached.
    # (queue_wait sizes it to the tool server's measured speed: faults[].preflight.prepared)
    fault = journal["faults"][0]
    flood = f"the flood: {fault['preflight']} {fault['rollback'].get('flood')}\n"
    assert result.returncode == 0, flood + result.stdout + result.stderr[-3000:]
    assert journal["twin"]["held"], flood + twin_account(journal)
    checks = verdicts(journal)
    failed = {label for label, c in checks.items() if not c["passed"]}
    assert TOOL_TWIN_FAILS <= failed <= TOOL_TWIN_FAILS | TOOL_TWIN_MAY_FAIL, (flood, failed)
    # The timeout alert fires on the twin too, only later (its agent reports a timeout once
    # its retries are spent: see the twin's may_fail), and the page still reaches the pager.
    fired = checks["alert_fired LLMToolTimeouts {tool=search_kb} during fault"]
    assert fired["observed"] is not None, fired
    assert checks["alert_paged LLMToolTimeouts {tool=search_kb} during fault"]["passed"]
    # Retries of a saturated tool add to the flood: the tool server counts them.
    amplification = checks["retry_amplification tools:search_kb during fault"]
    assert "counted by the tool server" in amplification["reason"]
    assert amplification["observed"] >= 1.5


def test_tool_saturation_on_its_feared_alerts_twin_fails_only_the_detection_checks(
    stack: RunningStack, tmp_path: Path
) -> None:
    result, [journal] = run_twin(sized(TOOL_SATURATION, tmp_path), stack, tmp_path, "feared-alerts")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert journal["twin"]["held"], twin_account(journal)
    checks = verdicts(journal)
    failed = {label for label, c in checks.items() if not c["passed"]}
    # The agents stopped gracefully as designed; only the monitoring failed: the alert's metric
    # does not exist, so nothing fired and nothing paged.
    assert failed == set(load_scenario(TOOL_SATURATION)[0].twin("feared-alerts").must_fail)
    assert checks["breaker_opens tools:search_kb during fault"]["passed"]
