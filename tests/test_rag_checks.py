"""The RAG and agent checks over made-up records and probe samples (pure logic)."""

from __future__ import annotations

from typing import Any

from drills.checks import Evaluation, evaluate
from drills.model.expect import Check
from drills.model.journal import Probe
from drills.model.records import Record
from tests.helpers import made_up_scenario

T0 = 1_800_000_000.0
PHASES = {"baseline": (T0, T0 + 10), "fault": (T0 + 10, T0 + 20)}


def evaluation(records: list[dict[str, Any]], probes: list[dict[str, Any]]) -> Evaluation:
    down = {"kind": "toxiproxy.down", "target": "vectordb"}
    scenario = made_up_scenario(down, [{"check": "error_rate", "below": 1}], endpoint="rag")
    return Evaluation(
        scenario,
        [Record.model_validate({"trace_id": "t", **r}) for r in records],
        PHASES,
        (T0, T0 + 20),
        [],
        [Probe.model_validate(p) for p in probes],
    )


def rag(at: float, missing: bool, status: int = 200) -> dict[str, Any]:
    return {
        "start": T0 + at,
        "e2e": 0.1,
        "status": status,
        "error": None if status == 200 else "HTTP 502",
        "endpoint": "rag",
        "missing_context": missing,
    }


def probe(at: float, source: str, name: str, value: float, **labels: str) -> dict[str, Any]:
    return {
        "time": T0 + at,
        "source": source,
        "samples": [{"name": name, "labels": labels, "value": value}],
    }


def scrape(at: float, source: str, *samples: tuple[str, float, dict[str, str]]) -> dict[str, Any]:
    """One scrape of ``source``: every sample it carried."""
    return {
        "time": T0 + at,
        "source": source,
        "samples": [{"name": n, "labels": labels, "value": v} for n, v, labels in samples],
    }


def one(ev: Evaluation, **check: Any) -> Any:
    return evaluate(ev, [Check.model_validate(check)])[0]


def test_missing_context_share_counts_errors_against_it() -> None:
    records = [rag(11, True), rag(12, True), rag(13, False, status=502), rag(14, True)]
    result = one(evaluation(records, []), check="missing_context_share", during="fault", above=0.9)
    assert result.observed == 0.75 and not result.passed
    assert "3 declared no context, 1 failed outright" in result.reason
    assert one(evaluation([], []), check="missing_context_share", above=0.5).observed is None


def test_retrieval_recall_uses_only_probe_runs_inside_the_window() -> None:
    runs = [
        {**probe(2, "retrieval", "drills_retrieval_recall", 0.9), "ended": T0 + 2.5},
        # Started in the baseline, finished under the fault: it measured both, so neither.
        {**probe(9.8, "retrieval", "drills_retrieval_recall", 0.0), "ended": T0 + 10.3},
        {**probe(12, "retrieval", "drills_retrieval_recall", 0.0), "ended": T0 + 12.4},
    ]
    ev = evaluation([], runs)
    assert one(ev, check="retrieval_recall", during="baseline", above=0.8).observed == 0.9
    assert one(ev, check="retrieval_recall", during="fault", above=0.8).observed == 0.0
    missing = one(evaluation([], []), check="retrieval_recall", above=0.8)
    assert not missing.passed and "unavailable" in missing.reason


def test_retry_amplification_counts_attempts_where_they_arrive() -> None:
    records = [rag(10 + i, True) for i in range(5)]
    # The tool server's counter for the gateway's agent, before and inside the window; the
    # flood's calls (another agent) do not count.
    calls = "drills_tools_received_total"
    probes = [
        scrape(9, "tools", (calls, 4, {"agent": "gateway-agent", "tool": "search_kb"})),
        scrape(
            19,
            "tools",
            (calls, 29, {"agent": "gateway-agent", "tool": "search_kb"}),
            (calls, 900, {"agent": "flood", "tool": "search_kb"}),
        ),
    ]
    ev = evaluation(records, probes)
    result = one(
        ev, check="retry_amplification", target="tools:search_kb", during="fault", below=1.5
    )
    assert result.observed == 5.0 and not result.passed
    assert "25 attempts at tools:search_kb (counted by the tool server) for 5 user requests" in (
        result.reason
    )
    # Other hops: the gateway's own attempt counter, shed calls (breaker open) excluded.
    attempts = "drills_gateway_hop_attempts_total"
    gateway = [
        scrape(11, "gateway", (attempts, 2, {"hop": "vectordb", "outcome": "connect"})),
        scrape(
            19,
            "gateway",
            (attempts, 5, {"hop": "vectordb", "outcome": "connect"}),
            (attempts, 50, {"hop": "vectordb", "outcome": "breaker_open"}),
        ),
    ]
    ev = evaluation(records, gateway)
    result = one(ev, check="retry_amplification", target="vectordb", during="fault", below=1.5)
    assert result.observed == 5 / 5 and result.passed


def test_breaker_opens_and_tool_timeouts_are_increases_in_the_window() -> None:
    opened = "drills_gateway_breaker_transitions_total"
    attempts = "drills_gateway_hop_attempts_total"
    probes = [
        scrape(5, "gateway", (opened, 1, {"upstream": "vectordb", "to": "open"})),
        scrape(
            15,
            "gateway",
            (opened, 3, {"upstream": "vectordb", "to": "open"}),
            (attempts, 4, {"hop": "tools:search_kb", "outcome": "timeout"}),
        ),
    ]
    ev = evaluation([], probes)
    assert one(ev, check="breaker_opens", target="vectordb", during="fault", above=0).observed == 2
    assert one(ev, check="tool_timeouts", during="fault", above=0).observed == 4
    baseline = one(ev, check="breaker_opens", target="vectordb", during="baseline", above=0)
    assert baseline.observed == 1


def test_the_shipped_standard_queries_are_found() -> None:
    from drills.probes.retrieval import STANDARD_QUERIES, load_queries

    assert STANDARD_QUERIES.is_file()
    assert len(load_queries(None).queries) >= 10
