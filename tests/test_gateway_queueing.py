"""The gateway-queueing drill on the real stack: `drills gate --twins
scenarios/gateway-queueing.yaml` on the session's stack. A spike of 12 users against 8 engine
slots: on the sound profile the excess waits in the gateway's bounded queue and the engines'
own queues (engine.waiting: vllm:num_requests_waiting, scraped from each engine) stay empty;
on its twin, engine-queueing (admission wide open, its gateway run beside the same engines),
the engines' queues fill and the drill says so. The stack's monitoring watches both: the
capacity alert fires and pages from the spike's start on the sound profile, the engine-queue
alert on the twin; on the rules a team fears (feared-alerts), nobody is paged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from drills.checks import Evaluation
from drills.checks.engine import check_engine
from drills.model.expect import Check
from drills.model.journal import Journal
from drills.model.scenario import load_scenario
from tests.conftest import RunningStack, gate_drill_and_twins

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
DRILL = ROOT / "scenarios" / "gateway-queueing.yaml"
TWIN = load_scenario(DRILL)[0].twin("engine-queueing")
FEARED = load_scenario(DRILL)[0].twin("feared-alerts")
FIRED = "alert_fired LLMGatewayQueueing during spike"
PAGED = "alert_paged LLMGatewayQueueing during spike"
ENGINE_ALERT_QUIET = "alert_quiet LLMRequestsQueueing during spike"


def test_the_spike_queues_at_the_gateway_and_its_twin_in_the_engines(
    stack: RunningStack, tmp_path: Path
) -> None:
    drill, twins = gate_drill_and_twins(DRILL, stack, tmp_path, profile=True)
    twin, feared = twins["engine-queueing"], twins["feared-alerts"]
    # The spike happened inside its phase: many more requests than in the baseline.
    by_phase = {p: sum(r["phase"] == p for r in drill["records"]) for p in ("baseline", "spike")}
    assert by_phase["spike"] > 3 * by_phase["baseline"], by_phase
    # The engines' own account, read from both engines' metrics (neither the gateway's word
    # nor the clients' view).
    (waiting,) = [c for c in drill["checks"] if c["check"] == "engine.waiting"]
    assert waiting["passed"] and waiting["observed"] == 0, waiting
    assert "vllm-0 0" in waiting["reason"] and "vllm-1 0" in waiting["reason"], waiting
    # The twin: the engines' own queues filled, seen in the engines' metrics.
    assert set(TWIN.must_fail) <= set(twin["twin"]["failed"])
    assert set(twin["twin"]["failed"]) <= set(TWIN.must_fail) | set(TWIN.may_fail)
    (queued,) = [c for c in twin["checks"] if c["check"] == "engine.waiting"]
    assert queued["observed"] >= 1 and "vllm:num_requests_waiting" in queued["reason"], queued
    # The engines' account of finished requests agrees with the clients': with no fault and
    # no retry, every answer a client got is one request an engine finished (stop or length),
    # read from real vLLM's request_success_total. Measured equal on both profiles (159 and
    # 238); a request cut at the run's end may fall on either side.
    # Did the team see the peak: no fault, so the capacity alert is timed from the spike's
    # start; it fired and paged, the engine-queue alert stayed quiet, and the detection matrix
    # has the spike's row.
    checks = {c["label"]: c for c in drill["checks"]}
    assert "after the load spike (2 to 12 users) began" in checks[FIRED]["reason"], checks[FIRED]
    assert checks[FIRED]["observed"] <= checks[PAGED]["observed"], (checks[FIRED], checks[PAGED])
    assert checks[ENGINE_ALERT_QUIET]["passed"]
    (row,) = drill["detection"]
    assert row["fault"] is None and row["phase"] == "spike", row
    pages = {s["what"].split()[0]: s["runbook"] for s in row["signs"] if s["layer"] == "page"}
    assert pages["LLMGatewayQueueing"].endswith("gateway-queueing.md#capacity"), row
    # On the twin the engines queued, and the team's monitoring said so: the engine-queue alert
    # fired; the gateway's queue stayed empty, so its capacity alert never did.
    twin_checks = {c["label"]: c for c in twin["checks"]}
    assert twin_checks[ENGINE_ALERT_QUIET]["observed"] >= 1, twin_checks[ENGINE_ALERT_QUIET]
    assert "did not fire" in twin_checks[FIRED]["reason"], twin_checks[FIRED]
    # The rules a team fears: the queue alert only when the queue is full. The peak never
    # filled it: nothing fired, nobody was paged, and the checks that say so are named.
    assert set(feared["twin"]["failed"]) == set(FEARED.must_fail), feared["twin"]
    assert feared["pages"] == []
    for journal in (drill, twin):
        finished = sum(engine_account(journal, f"engine.requests.{r}") for r in ("stop", "length"))
        answered = sum(
            1
            for r in journal["records"]
            if r["status"] == 200 and not r["error"] and not r["fallback"]
        )
        assert abs(finished - answered) <= 2, (finished, answered)
        assert engine_account(journal, "engine.requests.abort") == 0


def engine_account(journal: dict[str, Any], name: str) -> float:
    """``name`` (an engine.* check) over the whole run of ``journal``, from its engine scrapes."""
    run = Journal.model_validate(journal)
    ev = Evaluation(
        scenario=None,  # type: ignore[arg-type]  # engine checks read the probes only
        records=run.records,
        phases={p.name: (p.start, p.end) for p in run.phases},
        run_window=(run.started_at, run.ended_at),
        faults=run.faults,
        probes=run.probes,
    )
    result = check_engine(Check.model_validate({"check": name, "below": 1e9}), ev)
    assert result.observed is not None, result.reason
    return result.observed
