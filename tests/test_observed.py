"""Checks judged from what the harness saw at its L7 hop: a gateway that stops sending to a hop
(breaker, ejection, cooldown) and attempts per client request, each with the gateway's claim
beside it, and the disagreement shown when the claim is wrong. The records are made up here;
tests/test_drill_run.py proves the same on the real stack."""

from __future__ import annotations

from collections.abc import Callable

from drills.checks import Evaluation, evaluate
from drills.checks.observed import attribute
from drills.common.hop import HopRecord
from drills.model.expect import Check
from drills.model.journal import Probe
from drills.model.records import Record
from tests.helpers import latency_fault_window, made_up_scenario

T0 = 1_800_000_000.0


def attempt(seq: int, hop: str, at: float, took: float = 0.5, **extra: object) -> HopRecord:
    return HopRecord.model_validate(
        {
            "seq": seq,
            "hop": hop,
            "method": "POST",
            "path": "/v1/chat/completions",
            "arrived_at": T0 + at,
            "ended_at": T0 + at + took,
            "status": 200,
            **extra,
        }
    )


def client(at: float) -> Record:
    record = Record.begin(f"{int(at * 1000):032x}", "chat")
    record.start, record.e2e, record.status = T0 + at, 0.5, 200
    return record


def evaluation(
    hop_records: list[HopRecord] | None, probes: list[Probe] | None = None
) -> Evaluation:
    latency = {"kind": "toxiproxy.latency", "target": "vllm-0", "latency": "3s"}
    fault, phases = latency_fault_window(T0)
    clients = [client(t * 0.5) for t in range(40)]  # a request every 0.5 s
    ev = Evaluation(
        made_up_scenario(latency), clients, phases, (T0, T0 + 20), [fault], probes or []
    )
    ev.hop_records = hop_records
    return ev


def round_robin(
    until: float, skip_vllm0_from: float | None = None, fail_from: float = 10.0
) -> list[HopRecord]:
    """Client requests alternate between the two replicas; from ``skip_vllm0_from`` on, every
    one goes to vllm-1 (vllm-0 taken out of rotation). Attempts at vllm-0 from ``fail_from``
    on fail (the gateway gave up on them: timed out and hung up)."""
    out = []
    for i in range(int(until / 0.5)):
        at = i * 0.5
        hop = "vllm-0" if i % 2 == 0 else "vllm-1"
        if skip_vllm0_from is not None and at >= skip_vllm0_from:
            hop = "vllm-1"
        gave_up = hop == "vllm-0" and at >= fail_from
        extra = {"outcome": "client_disconnected", "status": None} if gave_up else {}
        out.append(attempt(i, hop, at + 0.01, took=0.3, **extra))
    return out


def elsewhere(records: list[HopRecord], when: Callable[[float], bool]) -> list[HopRecord]:
    """The attempts at vllm-0 that arrived ``when`` sent to vllm-1 instead, and answered."""
    return [
        r.model_copy(update={"hop": "vllm-1", "outcome": "complete", "status": 200})
        if r.hop == "vllm-0" and when(r.arrived_at - T0)
        else r
        for r in records
    ]


def answered_without_upstream(records: list[Record], when: Callable[[float], bool]) -> None:
    for r in records:
        if when(r.start - T0):
            r.e2e = 0.005  # a fallback, served before any attempt could reach a hop


def gateway_says_open(at: float) -> Probe:
    return Probe.model_validate(
        {
            "time": T0 + at,
            "source": "gateway",
            "samples": [
                {
                    "name": "drills_gateway_breaker_opened_timestamp_seconds",
                    "labels": {"upstream": "vllm-0"},
                    "value": T0 + at,
                }
            ],
        }
    )


OPENED = Check(check="breaker_opened_within", target="vllm-0", below="5s")


def test_a_hop_taken_out_of_rotation_is_an_opening_seen_from_outside() -> None:
    ev = evaluation(round_robin(20, skip_vllm0_from=12), [gateway_says_open(11.4)])
    [opened] = evaluate(ev, [OPENED])
    # vllm-0's last attempt arrived at 11.01 and ended at 11.31: 1.31 s after the fault.
    assert opened.passed and opened.source == "observed"
    assert abs((opened.observed or 0) - 1.31) < 0.01
    assert "seen at the L7 hop" in opened.reason
    assert opened.claim and "opened after 1.4s" in opened.claim and not opened.disagrees


def test_a_gateway_that_claims_an_opening_it_never_acted_on_is_caught() -> None:
    ev = evaluation(round_robin(20), [gateway_says_open(12)])  # traffic never left vllm-0
    [opened] = evaluate(ev, [OPENED])
    assert not opened.passed and opened.observed is None
    assert "never stopped sending to vllm-0" in opened.reason
    assert opened.disagrees and "the gateway's claim disagrees" in opened.reason


def test_a_gateway_that_routes_around_without_saying_so_passes_on_what_it_did() -> None:
    other = gateway_says_open(11).model_copy(deep=True)
    other.samples[0].labels["upstream"] = "vllm-1"  # its metric exists, and says nothing of vllm-0
    ev = evaluation(round_robin(20, skip_vllm0_from=12), [other])
    [opened] = evaluate(ev, [OPENED])
    assert opened.passed and opened.disagrees
    assert (
        opened.claim == "the breaker of vllm-0 never opened after the fault began (the "
        "gateway's claim: drills_gateway_breaker_opened_timestamp_seconds (drills adapter))"
    )


def test_a_gateway_that_exports_no_breaker_metric_makes_no_claim_to_disagree_with() -> None:
    # LiteLLM proxy's Prometheus metrics are an Enterprise feature: the OSS proxy has none.
    silent = Probe.model_validate(
        {"time": T0 + 11, "source": "gateway", "samples": [{"name": "up", "value": 1.0}]}
    )
    ev = evaluation(round_robin(20, skip_vllm0_from=12), [silent])
    [opened] = evaluate(ev, [OPENED])
    assert opened.passed and not opened.disagrees
    assert opened.claim == (
        "the gateway makes no claim: none of its 1 scrapes had "
        "drills_gateway_breaker_opened_timestamp_seconds (drills adapter)"
    )


def test_a_random_router_skipping_a_healthy_hop_by_luck_is_no_opening() -> None:
    # Five requests in a row missed vllm-0 after it answered fine: a shuffle does that.
    records = elsewhere(round_robin(20, fail_from=99), lambda at: 12 < at < 14.5)
    [opened] = evaluate(evaluation(records), [OPENED])
    assert opened.observed is None and not opened.passed


def test_a_short_gap_after_a_failure_is_no_opening() -> None:
    # vllm-0 failed, then missed 3 requests in a row: a shuffle does that too.
    records = elsewhere(round_robin(20), lambda at: 12 < at < 13.5)
    [opened] = evaluate(evaluation(records), [OPENED])
    assert (
        opened.observed is None and "client requests in a row that all missed it" in opened.reason
    )


def test_requests_answered_without_any_upstream_make_a_short_run_count() -> None:
    # Every breaker open: the fallback is served without calling any hop, 4 requests in a row.
    records = [r for r in round_robin(20) if not 12 < r.arrived_at - T0 < 14]
    ev = evaluation(records)
    answered_without_upstream(ev.records, lambda at: 12 < at < 14)
    [opened] = evaluate(ev, [OPENED])
    assert opened.passed and abs((opened.observed or 0) - 1.31) < 0.01


def test_breaker_opens_counts_the_runs_of_skipped_requests() -> None:
    records = elsewhere(round_robin(20), lambda at: 10.5 < at < 14.5 or 15.5 < at < 19.5)
    ev = evaluation(records)
    [opens] = evaluate(ev, [Check(check="breaker_opens", target="vllm-0", during="fault", above=1)])
    assert opens.observed == 2 and opens.passed and opens.source == "observed"


def test_without_an_l7_hop_the_claim_is_all_there_is_and_says_so() -> None:
    ev = evaluation(None, [gateway_says_open(11.4)])
    [opened] = evaluate(ev, [OPENED])
    assert opened.passed and opened.source == "claimed"
    assert "no L7 hop to see it from outside" in opened.reason


def retried(also_vllm1: bool) -> list[HopRecord]:
    """Round robin for 10 s, then each client request of the fault phase makes two attempts
    at vllm-0 (and, ``also_vllm1``, one at vllm-1)."""
    records = round_robin(10)
    seq = len(records)
    for i in range(20):
        at = 10 + i * 0.5 + 0.01
        records += [attempt(seq, "vllm-0", at), attempt(seq + 1, "vllm-0", at + 0.1)]
        if also_vllm1:
            records.append(attempt(seq + 2, "vllm-1", at + 0.2))
        seq += 3
    return records


def upstream_attempts(at: float, **by_outcome: float) -> Probe:
    """A scrape of the gateway: its count of model calls at vllm-0, by outcome."""
    samples = [
        {
            "name": "drills_gateway_upstream_attempts_total",
            "labels": {"upstream": "vllm-0", "outcome": outcome},
            "value": value,
        }
        for outcome, value in by_outcome.items()
    ]
    return Probe.model_validate({"time": T0 + at, "source": "gateway", "samples": samples})


def test_retry_amplification_counted_at_the_hop() -> None:
    # Each client request in the fault phase made two attempts at vllm-0 and one at vllm-1.
    ev = evaluation(retried(also_vllm1=True))
    checks = [
        Check(check="retry_amplification", target="models", during="fault", below=1.5),
        Check(check="retry_amplification", target="vllm-0", during="fault", below=2.5),
    ]
    every, one = evaluate(ev, checks)
    assert every.observed == 3.0 and not every.passed
    assert "60 attempts reached every model hop (seen at the L7 hop) for 20 client" in every.reason
    assert one.observed == 2.0 and one.passed


def test_retry_amplification_at_a_fronted_hop_no_call_reached_is_the_hops_zero() -> None:
    # The L7 hop fronts the backup too, and no call reached it: the count there is 0 (seen
    # at the hop), not a question for the gateway's scrape (which this run has none of).
    ev = evaluation(retried(also_vllm1=False))
    ev.l7_hops = ["backup", "vllm-0", "vllm-1"]
    check = Check(check="retry_amplification", target="backup", during="fault", below=1.2)
    [idle] = evaluate(ev, [check])
    assert idle.observed == 0.0 and idle.passed, idle.reason
    assert "0 attempts reached backup (seen at the L7 hop)" in idle.reason
    # Not listed by the L7 hop: still the gateway's word (no scrape here: no data).
    ev.l7_hops = ["vllm-0", "vllm-1"]
    [unknown] = evaluate(ev, [check])
    assert unknown.observed is None and "no scrape of the gateway" in unknown.reason


def test_which_hop_served_a_request_by_trace_id_else_by_timing() -> None:
    retried, shuffled, ambiguous = client(1.0), client(3.0), client(5.0)
    trace = f"00-{retried.trace_id}-00f067aa0ba902b7-01"
    hop_records = [
        attempt(0, "vllm-0", 1.01, took=0.2, outcome="client_disconnected", traceparent=trace),
        attempt(1, "vllm-1", 1.25, took=0.24, traceparent=trace),
        attempt(2, "vllm-0", 3.01, took=0.48),  # no traceparent: LiteLLM does not pass it on
        attempt(3, "vllm-0", 5.01, took=0.48),
        attempt(4, "vllm-1", 5.02, took=0.47),
    ]
    attribute([retried, shuffled, ambiguous], hop_records)
    assert (retried.attempts, retried.served_by, retried.served_by_how) == (2, "vllm-1", "trace")
    assert (shuffled.attempts, shuffled.served_by, shuffled.served_by_how) == (
        None,
        "vllm-0",
        "timing",
    )
    assert (ambiguous.served_by, ambiguous.served_by_how) == (None, None)


def test_a_hop_the_l7_hop_does_not_front_is_judged_on_the_gateways_claim() -> None:
    # The L7 hop fronts the model hops; the vector DB is reached through Toxiproxy only. Its
    # breaker cannot be seen from outside, so the gateway's claim is all there is, said so.
    claim = Probe.model_validate(
        {
            "time": T0 + 12,
            "source": "gateway",
            "samples": [
                {
                    "name": "drills_gateway_breaker_transitions_total",
                    "labels": {"upstream": "vectordb", "to": "open"},
                    "value": 1.0,
                }
            ],
        }
    )
    before = claim.model_copy(
        update={"time": T0 + 9, "samples": [claim.samples[0].model_copy(update={"value": 0.0})]}
    )
    ev = evaluation(round_robin(20), [before, claim])
    [opens] = evaluate(
        ev, [Check(check="breaker_opens", target="vectordb", during="fault", above=0)]
    )
    assert opens.source == "claimed" and opens.passed, opens
    assert "the L7 hop does not front vectordb" in opens.reason


def test_the_gateways_own_count_of_model_calls_is_shown_beside_the_hops() -> None:
    # 40 attempts at vllm-0 in the fault window, seen at the hop; the embedded gateway counts
    # its model calls per upstream (drills_gateway_upstream_attempts_total): the same 40.
    records = retried(also_vllm1=False)
    check = Check(check="retry_amplification", target="vllm-0", during="fault", below=2.5)
    scrapes = [upstream_attempts(9.9, http_503=5), upstream_attempts(19.9, http_503=45)]
    [agrees] = evaluate(evaluation(records, scrapes), [check])
    assert agrees.observed == 2.0 and agrees.source == "observed"
    assert agrees.claim == "the gateway counted 40 attempts (2.00 per request)"
    assert not agrees.disagrees
    scrapes = [upstream_attempts(9.9, http_503=5), upstream_attempts(19.9, http_503=15)]
    [lies] = evaluate(evaluation(records, scrapes), [check])
    assert lies.disagrees and "the gateway's claim disagrees" in lies.reason


def test_an_honest_count_is_held_to_the_attempts_that_ended_between_its_scrapes() -> None:
    # Streams take 1.6 s: four attempts at vllm-0 that arrived in the baseline end after the
    # last scrape before the window, and the gateway counts an attempt when it ends. Its
    # scrapes fall 0.8 s before the window opens and 0.2 s before it closes. An honest count of
    # what ended between those scrapes is not a lie, however many arrived in the window (12);
    # a count of half is.
    records = [attempt(i, "vllm-0", 8.0 + i * 0.5, took=1.6) for i in range(4)]
    records += [attempt(4 + i, "vllm-0", 10.0 + i * 0.8, took=0.3) for i in range(12)]

    def counted(share: float) -> list[Probe]:
        return [
            upstream_attempts(
                at, ok=share * sum(1 for r in records if r.ended_at and r.ended_at <= T0 + at)
            )
            for at in (7.2, 8.2, 9.2, 10.2, 11.2, 12.2, 13.2, 14.2, 15.2, 16.2, 17.2, 18.2, 19.8)
        ]

    check = Check(check="retry_amplification", target="vllm-0", during="fault", below=2.5)
    [honest] = evaluate(evaluation(records, counted(1.0)), [check])
    assert "12 attempts reached vllm-0" in honest.reason, honest.reason
    assert honest.claim == "the gateway counted 16 attempts (0.80 per request)", honest.claim
    assert not honest.disagrees, honest.reason
    [lies] = evaluate(evaluation(records, counted(0.5)), [check])
    assert lies.disagrees and "the gateway's claim disagrees" in lies.reason


def test_the_gateways_breaker_probes_are_not_model_calls_in_its_claim() -> None:
    # The gateway probes an open breaker with GET /health and counts it as an attempt
    # (outcome probe_ok/probe_failed); the hop counts model calls only: so must the claim.
    records = [attempt(i, "vllm-0", 10 + i * 0.5 + 0.01) for i in range(20)]
    check = Check(check="retry_amplification", target="vllm-0", during="fault", below=2.5)
    scrapes = [
        upstream_attempts(9.9, ok=0, probe_failed=0),
        upstream_attempts(19.9, ok=20, probe_failed=8),
    ]
    [result] = evaluate(evaluation(records, scrapes), [check])
    assert result.claim == "the gateway counted 20 attempts (1.00 per request)"
    assert not result.disagrees
