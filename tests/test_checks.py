"""Checks over windows of request records and probe samples (pure logic; made-up records)."""

from __future__ import annotations

from typing import Any

import pytest

from drills.checks import Evaluation, evaluate, percentile
from drills.model.expect import Check
from drills.model.journal import FaultRecord, Probe
from drills.model.records import Record
from drills.model.scenario import Scenario
from tests.helpers import made_up_record, made_up_scenario

T0 = 1_800_000_000.0


def scenario(*checks: dict[str, Any]) -> Scenario:
    down: dict[str, Any] = {"kind": "toxiproxy.down", "target": "vllm-0"}
    scenario: Scenario = made_up_scenario(down, list(checks), recovery=True)
    return scenario


def rec(at: float, e2e: float = 0.5, status: int = 200, fallback: bool = False) -> Record:
    return made_up_record(T0 + at, e2e, status, fallback)


def fault(**kw: Any) -> FaultRecord:
    """A latency fault on vllm-0 applied in the fault phase, with ``kw`` over it."""
    base = {
        "index": 0,
        "phase": "fault",
        "kind": "toxiproxy.down",
        "target": "vllm-0",
        "scheduled_offset": 10.0,
        "scheduled_end": 20.0,
        "applied_at": T0 + 10.1,
        "reverted_at": T0 + 20.0,
    }
    return FaultRecord.model_validate({**base, **kw})


def ev(s: Scenario, records: list[Record], **kw: Any) -> Evaluation:
    phases = {
        "baseline": (T0, T0 + 10),
        "fault": (T0 + 10, T0 + 20),
        "recovery": (T0 + 20, T0 + 40),
    }
    faults = kw.pop("faults", [fault()])
    probes = [Probe.model_validate(p) for p in kw.pop("probes", [])]
    return Evaluation(s, records, phases, (T0, T0 + 40), faults, probes, **kw)


def test_percentile_interpolates() -> None:
    assert percentile([1.0], 99) == 1.0
    assert percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    assert percentile(list(range(101)), 99) == pytest.approx(99)


def test_a_check_with_no_data_fails_and_says_so() -> None:
    s = scenario(
        {"check": "e2e.p99", "during": "fault", "below": "2s"},
        {"check": "error_rate", "during": "fault", "below": 0.1},
    )
    results = evaluate(ev(s, [rec(1), rec(2)]))
    assert [r.passed for r in results] == [False, False]
    assert results[0].observed_text == "no data"
    assert "no e2e samples among 0 requests" in results[0].reason
    assert results[1].reason == "no requests started in the window"


def test_rates_and_latency_per_phase() -> None:
    s = scenario(
        {"check": "error_rate", "during": "fault", "below": 0.3},
        {"check": "fallback_rate", "during": "fault", "above": 0.4},
        {"check": "e2e.p50", "during": "baseline", "below": "600ms"},
    )
    records = [rec(i) for i in range(10)] + [
        rec(11, status=502),
        rec(12, fallback=True),
        rec(13, fallback=True),
        rec(14),
    ]
    results = evaluate(ev(s, records))
    assert results[0].observed == pytest.approx(0.25) and results[0].passed
    assert results[1].observed == pytest.approx(0.5) and results[1].passed
    assert results[2].observed == pytest.approx(0.5) and results[2].passed


def test_breaker_opened_within_reads_the_gateways_opening_time() -> None:
    s = scenario({"check": "breaker_opened_within", "target": "vllm-0", "below": "5s"})
    probes = [
        {
            "time": T0 + t,
            "source": "gateway",
            "samples": [
                {
                    "name": "drills_gateway_breaker_opened_timestamp_seconds",
                    "labels": {"upstream": "vllm-0"},
                    "value": opened,
                }
            ],
        }
        for t, opened in ((9, 0.0), (12, T0 + 12.6), (15, T0 + 12.6))
    ]
    [result] = evaluate(ev(s, [], probes=probes))
    assert result.observed == pytest.approx(2.5) and result.passed
    [never] = evaluate(ev(s, [], probes=probes[:1]))
    assert not never.passed and "never opened" in never.reason


def test_recovered_within_finds_the_first_window_meeting_the_slo() -> None:
    s = scenario({"check": "recovered_within", "below": "5s"})
    records = [rec(i * 0.5, e2e=0.4) for i in range(20)]  # baseline p90 0.4 -> bound 0.8
    records += [rec(20 + i * 0.5, fallback=True, e2e=0.01) for i in range(12)]  # 6 s bad
    records += [rec(26 + i * 0.5, e2e=0.45) for i in range(28)]
    [result] = evaluate(ev(s, records))
    assert result.observed == pytest.approx(6.0)
    assert not result.passed and "held again 6.0s after the fault ended" in result.reason


def test_check_model_refuses_incoherent_bounds() -> None:
    with pytest.raises(ValueError, match="compares durations"):
        Check(check="ttft.p99", below=2)
    with pytest.raises(ValueError, match="needs a bound"):
        Check(check="error_rate")
    with pytest.raises(ValueError, match="needs a target"):
        Check(check="breaker_opened_within", below="1s")


def test_a_request_the_fault_caught_counts_under_the_fault_not_in_the_baseline() -> None:
    s = scenario(
        {"check": "e2e.p99", "during": "baseline", "below": "1s"},
        {"check": "fallback_rate", "during": "fault", "above": 0.9},
    )
    records = [rec(i, e2e=0.5) for i in range(9)]
    records.append(rec(9.9, e2e=8.0, fallback=True))  # sent in baseline, served under the fault
    records += [rec(12 + i, e2e=0.01, fallback=True) for i in range(5)]
    base, fault = evaluate(ev(s, records))
    assert base.passed and base.samples == 9
    assert fault.passed and fault.samples == 6
    caught = records[9]
    assert caught.phase == "fault" and caught.counted_at == T0 + 10.1
    assert caught.straddles and "in flight when it was" in caught.straddles


def test_every_request_counts_in_exactly_one_window_even_those_hanging_past_the_fault() -> None:
    s = scenario({"check": "error_rate", "during": "recovery", "below": 0.01})
    hung = Record(start=T0 + 15, e2e=12.0, status=0, error="ReadTimeout", trace_id="h")
    during_revert = rec(20.01, e2e=0.2, status=502)  # sent before the revert had finished
    late = rec(19.5, e2e=3.0)  # sent under the fault, answered in recovery
    clean = [rec(22 + i, e2e=0.2) for i in range(5)]
    records = [rec(i, e2e=0.2) for i in range(9)] + [hung, during_revert, late, *clean]
    evaluation = ev(s, records, faults=[fault(reverted_at=T0 + 20.05)])
    (recovery,) = evaluate(evaluation)
    # The hung request and the one sent while the revert ran count under the fault; recovery
    # sees only what was sent once the fault was gone.
    assert recovery.passed and recovery.samples == 5, recovery
    assert [r.phase for r in (hung, during_revert, late)] == ["fault"] * 3
    assert "before its revert finished" in (during_revert.straddles or "")
    assert "answered" in (hung.straddles or "") and "answered" in (late.straddles or "")
    windows = {
        name: evaluation.requests_in(start, end) for name, (start, end) in evaluation.phases.items()
    }
    counted = [r for rs in windows.values() for r in rs]
    assert sorted(map(id, counted)) == sorted(map(id, records))  # each once, none left out


def test_spread_is_the_p99_over_the_p50_of_the_window() -> None:
    steady = [rec(10.5 + i * 0.05, e2e=1.0) for i in range(99)] + [rec(15, e2e=1.2)]
    jumpy = [rec(10.5 + i * 0.05, e2e=0.5) for i in range(90)] + [
        rec(15 + i * 0.1, e2e=8.0) for i in range(10)
    ]
    s = scenario({"check": "spread.e2e", "during": "fault", "below": 2})
    (calm,) = evaluate(ev(s, steady))
    assert calm.passed and calm.observed == pytest.approx(1.0, abs=0.2)
    (spiky,) = evaluate(ev(s, jumpy))
    assert not spiky.passed and spiky.observed == pytest.approx(16.0)
    assert "e2e p99 8000ms over p50 500ms: 16.00x" in spiky.reason
    (empty,) = evaluate(ev(scenario({"check": "spread.itl", "during": "baseline", "below": 2}), []))
    assert not empty.passed and empty.observed is None


def test_prometheus_checks_of_two_sources_have_labels_of_their_own() -> None:
    s = scenario(
        *(
            {
                "check": "prometheus",
                "source": src,
                "metric": "vllm:num_requests_waiting",
                "below": 1,
            }
            for src in ("vllm-0", "vllm-1")
        )
    )
    assert [c.label for c in s.expect] == [
        "prometheus vllm-0 vllm:num_requests_waiting",
        "prometheus vllm-1 vllm:num_requests_waiting",
    ]


def engine_scrape(at: float, source: str, **values: float) -> dict[str, Any]:
    """One scrape of a vLLM engine: ``waiting``, ``kv`` (under vLLM's older name with
    ``old_kv``), ``aborts`` and ``stops`` (request_success_total by finished_reason)."""
    samples = [{"name": "vllm:num_requests_running", "value": 1.0}]
    if "waiting" in values:
        samples.append({"name": "vllm:num_requests_waiting", "value": values["waiting"]})
    if "kv" in values:
        samples.append({"name": "vllm:kv_cache_usage_perc", "value": values["kv"]})
    if "old_kv" in values:
        samples.append({"name": "vllm:gpu_cache_usage_perc", "value": values["old_kv"]})
    for reason, key in (("abort", "aborts"), ("stop", "stops")):
        if key in values:
            samples.append(
                {
                    "name": "vllm:request_success_total",
                    "labels": {"finished_reason": reason, "model_name": "m"},
                    "value": values[key],
                }
            )
    return {"time": T0 + at, "source": source, "samples": samples}


def test_engine_gauges_are_judged_at_the_worst_engine_and_name_each() -> None:
    s = scenario({"check": "engine.waiting", "during": "fault", "below": 1})
    probes = [
        engine_scrape(5, "vllm-0", waiting=7),  # before the window: not counted
        engine_scrape(12, "vllm-0", waiting=0),
        engine_scrape(12, "vllm-1", waiting=2),
        engine_scrape(15, "vllm-1", waiting=1),
        {"time": T0 + 12, "source": "gateway", "samples": [{"name": "x", "value": 9}]},
    ]
    (queued,) = evaluate(ev(s, [], probes=probes))
    assert not queued.passed and queued.observed == 2
    assert "vllm-0 0, vllm-1 2" in queued.reason and "vllm:num_requests_waiting" in queued.reason
    assert "expected < 1" in queued.reason
    one = scenario({"check": "engine.waiting", "source": "vllm-0", "during": "fault", "below": 1})
    (calm,) = evaluate(ev(one, [], probes=probes))
    assert calm.passed and calm.observed == 0 and calm.label == "engine.waiting vllm-0 during fault"


def test_engine_counters_sum_over_engines_and_survive_a_restart() -> None:
    s = scenario({"check": "engine.requests.abort", "during": "fault", "below": 1})
    probes = [
        engine_scrape(9, "vllm-0", aborts=10, stops=50),  # the starting point
        engine_scrape(12, "vllm-0", aborts=13, stops=52),
        engine_scrape(15, "vllm-0", aborts=1, stops=0),  # killed and replaced: from zero
        engine_scrape(18, "vllm-0", aborts=2, stops=3),
        engine_scrape(12, "vllm-1", aborts=0, stops=4),
        engine_scrape(18, "vllm-1", aborts=4, stops=9),
    ]
    (aborted,) = evaluate(ev(s, [], probes=probes))
    # vllm-0: 3 + 1 (after the reset) + 1 = 5; vllm-1: 4.
    assert aborted.observed == 9 and not aborted.passed
    assert "vllm-0 5, vllm-1 4" in aborted.reason and "requests finished (abort)" in aborted.reason
    stops = scenario({"check": "engine.requests.stop", "during": "fault", "above": 5})
    (served,) = evaluate(ev(stops, [], probes=probes))
    assert served.observed == 2 + 0 + 3 + 5 and served.passed


def test_engine_kv_cache_reads_the_name_of_the_engines_vllm_version() -> None:
    s = scenario({"check": "engine.kv_cache", "during": "fault", "below": 0.9})
    (new,) = evaluate(ev(s, [], probes=[engine_scrape(12, "vllm-0", kv=0.95)]))
    assert not new.passed and new.observed == pytest.approx(0.95) and "0.950" in new.reason
    (old,) = evaluate(ev(s, [], probes=[engine_scrape(12, "vllm-0", old_kv=0.4)]))
    assert old.passed and "vllm:gpu_cache_usage_perc" in old.reason


def test_engine_checks_without_engine_metrics_fail_and_say_where_to_list_them() -> None:
    s = scenario({"check": "engine.waiting", "below": 1})
    gateway_only = [{"time": T0 + 12, "source": "gateway", "samples": [{"name": "x", "value": 1}]}]
    (none,) = evaluate(ev(s, [], probes=gateway_only))
    assert not none.passed and none.observed is None
    assert "stack.attach.metrics" in none.reason
    absent = scenario({"check": "engine.preemptions", "source": "vllm-1", "below": 1})
    (missing,) = evaluate(ev(absent, [], probes=[engine_scrape(12, "vllm-1", waiting=0)]))
    assert not missing.passed and "vllm:num_preemptions_total" in missing.reason


def test_engine_checks_take_no_metric_labels_or_agg() -> None:
    for extra in ({"metric": "vllm:x"}, {"labels": {"a": "b"}}, {"agg": "max"}):
        with pytest.raises(ValueError, match="reads its own metric from the engines"):
            Check.model_validate({"check": "engine.waiting", "below": 1, **extra})
    with pytest.raises(ValueError, match=r"engine\.requests\.REASON"):
        Check.model_validate({"check": "engine.requests.unknown", "below": 1})


def test_the_detection_matrix_reads_each_engines_own_metrics() -> None:
    """The engine layer: an engine whose endpoint stopped answering, one whose process started
    anew, one whose queue rose above anything it showed before the fault, and one that showed
    nothing (left out). Alerts and pages not read are said to be."""
    from drills.checks.detection import detection_matrix

    def started(at: float, source: str, start: float, **values: float) -> dict[str, Any]:
        scrape = engine_scrape(at, source, **values)
        scrape["samples"].append({"name": "process_start_time_seconds", "value": start})
        return scrape

    probes = [
        engine_scrape(5, "vllm-0", waiting=0),
        {"time": T0 + 11, "source": "vllm-0", "error": "[Errno 111] Connection refused"},
        started(5, "vllm-1", 100.0, waiting=0),
        started(12.5, "vllm-1", 200.0, waiting=0),
        engine_scrape(4, "vllm-2", waiting=2),
        engine_scrape(6, "vllm-2", waiting=1),
        engine_scrape(13, "vllm-2", waiting=2),  # no more than before: not a sign
        engine_scrape(14, "vllm-2", waiting=5),
        engine_scrape(5, "vllm-3", waiting=1),
        engine_scrape(15, "vllm-3", waiting=1),
        engine_scrape(25, "vllm-2", waiting=9),  # after the revert: another story
    ]
    (row,) = detection_matrix(ev(scenario(), [], probes=probes), None)
    engine = {
        s.what: round(s.after or -1, 1) for s in row.signs if s.layer == "engine, its metrics"
    }
    assert engine == {
        "vllm-0: its metrics stopped answering ([Errno 111] Connection refused)": 0.9,
        "vllm-1: a new process: it restarted": 2.4,
        "vllm-2: requests waiting rose to 5 (before the fault: at most 2)": 3.9,
    }
    assert row.detected
    unread = {s.layer: s.what for s in row.signs if s.after is None}
    assert unread["alerts"] == "not read: the drill names no Prometheus"
    assert unread["page"] == "not read: the drill runs no pager"
    # Read, and nothing came: said so, not left blank.
    (quiet,) = detection_matrix(ev(scenario(), [], probes=[], pages=[]), [])
    assert {(s.layer, s.what) for s in quiet.signs if s.after is None} >= {
        ("alert firing", "no alert fired after the fault"),
        ("page", "no page reached the pager after the fault"),
    }
    assert not quiet.detected


def test_the_detection_matrix_keeps_the_scenarios_order_not_the_clocks() -> None:
    """The faults of one phase are applied together; the one whose clock read first is
    chance. The rows follow the scenario (a report that reordered them from run to run could
    not be compared with the last), while an alert check still times from the first applied."""
    from drills.checks.detection import detection_matrix
    from drills.checks.onset import onsets_of

    faults = [
        fault(index=0, target="vllm-0", applied_at=T0 + 10.3),
        fault(index=1, target="vllm-1", applied_at=T0 + 10.1),
        fault(index=2, target="backup", applied_at=T0 + 10.2),
    ]
    run = ev(scenario(), [], faults=faults, probes=[], pages=[])
    rows = detection_matrix(run, [])
    assert [r.fault for r in rows] == [0, 1, 2]
    assert [r.what for r in rows] == [
        f"toxiproxy.down on {t}" for t in ("vllm-0", "vllm-1", "backup")
    ]
    assert onsets_of(run, "fault")[0].fault is faults[1]


def spike_scenario(*checks: dict[str, Any]) -> Scenario:
    """No fault: 1 user, 4 from +10 s for 10 s (the phases of ``ev``, renamed)."""
    return Scenario.model_validate(
        {
            "drill": "t",
            "title": "t",
            "load": {"users": 4, "shape": {"kind": "spike", "base": 1, "at": "10s", "for": "10s"}},
            "phases": [
                {"name": "baseline", "duration": "10s"},
                {"name": "spike", "duration": "10s"},
                {"name": "after", "duration": "20s"},
            ],
            "expect": list(checks) or [{"check": "error_rate", "below": 0.5}],
        }
    )


def spike_ev(s: Scenario, **kw: Any) -> Evaluation:
    phases = {
        "baseline": (T0, T0 + 10),
        "spike": (T0 + 10, T0 + 20),
        "after": (T0 + 20, T0 + 40),
    }
    probes = [Probe.model_validate(p) for p in kw.pop("probes", [])]
    return Evaluation(s, [], phases, (T0, T0 + 40), [], probes, **kw)


def test_a_load_spike_is_detected_and_paged_from_its_start_as_a_fault_would_be() -> None:
    """A drill with no fault (the evening peak): the detection matrix has a row for the spike,
    timed from the instant the load shape raises the users (the run's origin + ``at``), and
    the page checks measure from it. A phase where neither a fault nor the spike began has
    nothing to measure from, and says so."""
    from drills.checks.detection import detection_matrix
    from drills.checks.onset import onsets_of
    from drills.model.journal import Page

    page = Page.model_validate(
        {
            "received_at": T0 + 10 + 7.5,
            "status": "firing",
            "receiver": "on-call",
            "alerts": [
                {
                    "name": "LLMFirstTokenSlow",
                    "status": "firing",
                    "annotations": {"runbook_url": "runbooks/q.md#detection"},
                }
            ],
        }
    )
    s = spike_scenario(
        {"check": "alert_paged", "alert": "LLMFirstTokenSlow", "during": "spike", "within": "10s"},
        {"check": "alert_paged", "alert": "LLMFirstTokenSlow", "during": "spike", "within": "5s"},
        {
            "check": "alert_paged",
            "alert": "LLMFirstTokenSlow",
            "during": "baseline",
            "within": "5s",
        },
    )
    probes = [
        engine_scrape(5, "vllm-0", waiting=0),
        engine_scrape(14, "vllm-0", waiting=3),
    ]
    run = spike_ev(s, probes=probes, pages=[page])
    (spike,) = onsets_of(run, "spike")
    assert (spike.at, spike.ended_at, spike.phase) == (T0 + 10, T0 + 20, "spike")
    assert spike.what == "the load spike (1 to 4 users)" and spike.fault is None
    assert onsets_of(run, "baseline") == [] and onsets_of(run, None) == [spike]

    in_time, late, nothing = evaluate(run)
    assert in_time.passed and in_time.observed == pytest.approx(7.5)
    assert "7.5s after the load spike (1 to 4 users) began" in in_time.reason
    assert not late.passed and late.observed == pytest.approx(7.5)
    assert not nothing.passed and nothing.observed is None
    assert "no fault was applied and no load spike began in phase baseline" in nothing.reason

    (row,) = detection_matrix(run, [])
    assert row.fault is None and row.phase == "spike" and row.applied_at == T0 + 10
    signs = {s.layer: (s.after, s.what) for s in row.signs}
    assert signs["client"] == (None, "every answer during the spike was a normal one")
    assert signs["engine, its metrics"] == (
        pytest.approx(4.0),
        "vllm-0: requests waiting rose to 3 (before the spike: at most 0)",
    )
    assert signs["page"][0] == pytest.approx(7.5)
    assert signs["alert firing"] == (None, "no alert fired after the spike")
    assert "gateway, its claim" not in signs  # no upstream was faulted: nothing to claim
    assert row.detected
