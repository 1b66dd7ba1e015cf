"""The shipped RAG and agent drills end to end on the real stack: each passes on the sound
policy and fails on the unsound one, naming the checks that caught it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from drills.engine.runner import Runner, RunOptions
from drills.model.scenario import Attach, load_scenario
from stack.config import load_stack_config
from tests.conftest import LiveGateway, RunningStack

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
VECTOR_DB_OUTAGE = ROOT / "scenarios" / "vector-db-outage.yaml"
TOOL_SATURATION = ROOT / "scenarios" / "tool-saturation.yaml"


def run(path: Path, gateway: str, stack: RunningStack, tmp_path: Path) -> dict:
    """Run a shipped drill attached to ``gateway`` over the session stack (its tool server's
    and Triton's metrics scraped too; its state tells the flood where the tool server is)."""
    rag = stack.config.rag
    assert rag is not None
    host = stack.config.host
    scenario, doc = load_scenario(path)
    options = RunOptions(
        out_dir=tmp_path / "runs",
        ledger=tmp_path / "ledger.json",
        state_dir=stack.state_dir,
        attach=Attach(
            gateway=gateway,
            toxiproxy=stack.toxiproxy_url,
            metrics={
                rag.tools.name: f"http://{host}:{rag.tools.port}/metrics",
                rag.embedder.name: f"http://{host}:{rag.embedder.metrics_port}/metrics",
            },
        ),
        stack_config=str(stack.config_path),
    )
    return Runner(scenario, doc, options).run().model_dump(mode="json")


def unsound_gateway(factory: Callable[..., LiveGateway]) -> LiveGateway:
    unsound = load_stack_config("unsound").gateway
    return factory(
        rag=unsound.rag.model_dump(mode="json"), agent=unsound.agent.model_dump(mode="json")
    )


def verdicts(journal: dict) -> dict[str, dict]:
    return {c["label"]: c for c in journal["checks"]}


def test_vector_db_outage_passes_on_the_sound_policy(stack: RunningStack, tmp_path: Path) -> None:
    journal = run(VECTOR_DB_OUTAGE, stack.gateway_url, stack, tmp_path)
    failed = [c for c in journal["checks"] if not c["passed"]]
    assert journal["verdict"] == "passed", failed
    checks = verdicts(journal)
    assert checks["missing_context_share during fault"]["observed"] >= 0.9
    assert checks["retrieval_recall during baseline"]["observed"] >= 0.8
    # The fault was read back from Toxiproxy (the hop disabled) and reverted.
    fault = journal["faults"][0]
    assert fault["kind"] == "toxiproxy.down" and fault["target"] == "vectordb"
    assert fault["reverted_at"] > fault["applied_at"]
    assert journal["retrieval"]["available"] is True
    assert all(p.enabled and not p.toxics for p in stack.toxiproxy.proxies().values())


def test_vector_db_outage_fails_on_the_unsound_policy_naming_the_checks(
    stack: RunningStack, gateway_factory: Callable[..., LiveGateway], tmp_path: Path
) -> None:
    gw = unsound_gateway(gateway_factory)
    journal = run(VECTOR_DB_OUTAGE, gw.url, stack, tmp_path)
    assert journal["verdict"] == "failed"
    checks = verdicts(journal)
    failed = {label for label, c in checks.items() if not c["passed"]}
    assert {
        "missing_context_share during fault",
        "error_rate during fault",
        "breaker_opens vectordb during fault",
        "retry_amplification vectordb during fault",
    } <= failed, failed
    # Five immediate attempts per question at the dead hop, counted per user request.
    assert checks["retry_amplification vectordb during fault"]["observed"] >= 4
    assert checks["error_rate during baseline"]["passed"]
    summary = (Path(journal["run_dir"]) / "summary.md").read_text()
    assert "vector-db-outage.md#retry-amplification" in summary


def test_tool_saturation_passes_on_the_sound_policy(stack: RunningStack, tmp_path: Path) -> None:
    journal = run(TOOL_SATURATION, stack.gateway_url, stack, tmp_path)
    failed = [c for c in journal["checks"] if not c["passed"]]
    assert journal["verdict"] == "passed", failed
    fault = journal["faults"][0]
    assert fault["kind"] == "tool.saturate"
    # Evidence: the tool server's pool was full, and what the flood did is in the journal.
    assert fault["evidence"]["tool_inflight"] >= 1
    assert fault["rollback"]["method"] == "flood stopped"
    assert fault["rollback"]["flood"]["calls"] > 0
    assert fault["rollback"]["flood"]["latency_p95"] is not None


def test_tool_saturation_fails_on_the_unsound_policy_naming_the_checks(
    stack: RunningStack, gateway_factory: Callable[..., LiveGateway], tmp_path: Path
) -> None:
    gw = unsound_gateway(gateway_factory)
    journal = run(TOOL_SATURATION, gw.url, stack, tmp_path)
    assert journal["verdict"] == "failed"
    checks = verdicts(journal)
    failed = {label for label, c in checks.items() if not c["passed"]}
    # Retries of a saturated tool add to the flood: the tool server counts them.
    assert {
        "retry_amplification tools:search_kb during fault",
        "breaker_opens tools:search_kb during fault",
    } <= failed, failed
    amplification = checks["retry_amplification tools:search_kb during fault"]
    assert "counted by the tool server" in amplification["reason"]
    assert amplification["observed"] >= 1.5
    assert checks["error_rate during baseline"]["passed"]
