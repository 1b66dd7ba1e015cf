"""The harness's L7 hop, against real vLLM: every per-request fault, applied through its
injector, changes what a client of the hop gets exactly as it says; the hop records what it
saw; an upstream failure stays a failure through the hop.

The client here is the test itself, calling the stack's hop for ``vllm-0`` (hop -> Toxiproxy ->
vLLM), so that what is asserted is what the hop did, not what a gateway made of it."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter

from drills.common.hop import HopClient, HopRecord
from drills.common.toxiproxy import Toxic, ToxiproxyClient
from drills.model.scenario import Fault
from injectors import InjectionContext, build
from tests.conftest import RunningStack

pytestmark = pytest.mark.stack

TOKENS = 6


def _fault(kind: str, **fields: Any) -> Any:
    """A scenario's ``hop.*`` fault on vllm-0, validated as a scenario's would be."""
    return TypeAdapter(Fault).validate_python({"kind": kind, "target": "vllm-0", **fields})


class Hop:
    def __init__(self, stack: RunningStack) -> None:
        self.stack = stack
        up = next(u for u in stack.config.upstreams if u.name == "vllm-0")
        self.url = f"http://{stack.config.host}:{up.hop_port}"
        self.control = HopClient(stack.hop_url)
        self.context = InjectionContext("hoptest", stack.toxiproxy_url, hop_url=stack.hop_url)
        self.applied: list[Any] = []

    def inject(self, kind: str, **fields: Any) -> tuple[Any, dict[str, Any]]:
        injector = build(_fault(kind, **fields), self.context, len(self.applied))
        evidence = injector.apply()
        self.applied.append(injector)
        return injector, evidence

    def body(self, stream: bool = True) -> dict[str, Any]:
        return {
            "model": self.stack.config.engine.served_name,
            "prompt": "Hello",
            "max_tokens": TOKENS,
            "min_tokens": TOKENS,  # a fixed length: every chunk count below is exact
            "stream": stream,
        }

    def stream(
        self, timeout: float = 60.0, **headers: str
    ) -> tuple[list[tuple[float, bytes]], float]:
        """``(arrival time, SSE event)`` for each event of one streamed completion, and when
        the request was sent."""
        events: list[tuple[float, bytes]] = []
        sent = time.time()
        with (
            httpx.Client(timeout=timeout) as client,
            client.stream(
                "POST", f"{self.url}/v1/completions", json=self.body(), headers=headers
            ) as r,
        ):
            assert r.status_code == 200, r.read()
            pending = b""
            for data in r.iter_raw():
                pending += data
                while b"\n\n" in pending:
                    event, _, pending = pending.partition(b"\n\n")
                    events.append((time.time(), event))
        return events, sent

    def records(self, since: int) -> list[HopRecord]:
        return [r for r in self.control.all_records(since) if r.hop == "vllm-0"]

    def close(self) -> None:
        for injector in self.applied:
            injector.revert()
        self.control.close()


@pytest.fixture
def hop(stack: RunningStack, toxi: ToxiproxyClient) -> Iterator[Hop]:
    h = Hop(stack)
    try:
        yield h
        for injector in h.applied:
            injector.revert()
        assert not any(h.control.faults(n) for n in h.control.hops()), "faults left on the hop"
    finally:
        h.close()


def _data(events: list[tuple[float, bytes]]) -> list[bytes]:
    return [e.removeprefix(b"data: ") for _, e in events]


def test_a_sound_stream_passes_through_and_is_recorded(hop: Hop) -> None:
    since = hop.control.next_seq()
    trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    events, _ = hop.stream(traceparent=trace)
    data = _data(events)
    assert data[-1] == b"[DONE]"
    assert json.loads(data[-2])["choices"][0]["finish_reason"] == "length"
    (record,) = hop.records(since)
    assert record.status == 200 and record.outcome == "complete" and record.done
    assert record.finish_reason == "length" and record.chunks == len(events)
    assert record.traceparent == trace and record.fault is None
    assert record.first_byte_s is not None and record.ended_at is not None


def test_status_429_with_retry_after_never_reaches_the_engine(hop: Hop) -> None:
    injector, evidence = hop.inject("hop.status", status=429, retry_after="2s")
    assert evidence["kind"] == "hop.status" and evidence["status"] == 429
    since = hop.control.next_seq()
    r = httpx.post(f"{hop.url}/v1/completions", json=hop.body(stream=False), timeout=30)
    assert r.status_code == 429 and r.headers["retry-after"] == "2"
    assert r.json()["error"]["type"] == "rate_limit_exceeded"
    health = httpx.get(f"{hop.url}/health", timeout=10)
    assert health.status_code == 200  # only model calls are touched
    outcome = injector.revert()
    assert outcome["method"] == "removed" and outcome["hits"] == 1
    assert injector.revert() == {"reverted": False, "reason": "never applied"}
    records = hop.records(since)
    assert [(r.path, r.status, r.outcome) for r in records] == [
        ("/v1/completions", 429, "injected"),
        ("/health", 200, "complete"),
    ]


def test_toxicity_hits_a_share_of_the_calls(hop: Hop) -> None:
    injector, _ = hop.inject("hop.status", status=503, toxicity=0.5)
    codes = [
        httpx.post(
            f"{hop.url}/v1/completions", json={**hop.body(False), "max_tokens": 1, "min_tokens": 1}
        ).status_code
        for _ in range(16)
    ]
    outcome = injector.revert()
    assert 0 < codes.count(503) < 16, codes
    assert outcome["hits"] == codes.count(503)
    assert set(codes) == {200, 503}


def test_first_token_delay_holds_only_the_first_token(hop: Hop) -> None:
    events, sent = hop.stream()  # the engine's own pace, for comparison
    plain_first = events[0][0] - sent
    hop.inject("hop.first_token_delay", delay="2s")
    events, sent = hop.stream()
    first = events[0][0] - sent
    assert first >= 2.0
    assert first >= plain_first + 1.5
    assert _data(events)[-1] == b"[DONE]"  # the rest of the answer is whole


def test_stall_after_n_chunks(hop: Hop) -> None:
    hop.inject("hop.stall", after_chunks=2, duration="2s")
    events, _ = hop.stream()
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(events)]
    assert gaps[1] >= 2.0  # between the 2nd and the 3rd event
    assert max(gaps[:1] + gaps[2:]) < 2.0
    assert _data(events)[-1] == b"[DONE]"


def test_clean_cut_ends_the_http_response_without_done(hop: Hop) -> None:
    since = hop.control.next_seq()
    hop.inject("hop.cut", after_chunks=2, clean=True)
    events, _ = hop.stream()  # no exception: the HTTP response ended properly
    data = _data(events)
    assert len(data) == 2 and b"[DONE]" not in data
    assert all(json.loads(d)["choices"][0]["finish_reason"] is None for d in data)
    (record,) = hop.records(since)
    assert record.outcome == "injected" and record.fault_kind == "hop.cut"
    assert record.chunks == 2 and not record.done and record.finish_reason is None


def test_unclean_cut_drops_the_connection_mid_body(hop: Hop) -> None:
    hop.inject("hop.cut", after_chunks=2, clean=False)
    with pytest.raises(httpx.RemoteProtocolError):
        hop.stream()


def test_malformed_chunk(hop: Hop) -> None:
    hop.inject("hop.malformed", after_chunks=1)
    events, _ = hop.stream()
    data = _data(events)
    json.loads(data[0])
    with pytest.raises(json.JSONDecodeError):
        json.loads(data[1])
    assert data[-1] == b"[DONE]"


def test_wedge_keeps_health_green_while_completions_hang(hop: Hop) -> None:
    since = hop.control.next_seq()
    hop.inject("hop.wedge")
    assert httpx.get(f"{hop.url}/health", timeout=10).status_code == 200
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{hop.url}/v1/completions", json=hop.body(False), timeout=1.5)
    time.sleep(0.3)
    records = hop.records(since)
    assert [(r.path, r.outcome) for r in records] == [
        ("/health", "complete"),
        ("/v1/completions", "client_disconnected"),
    ]


def test_an_upstream_cut_stays_a_cut_through_the_hop(hop: Hop, toxi: ToxiproxyClient) -> None:
    """Toxiproxy behind the hop drops the stream after 300 bytes: the hop must not turn that
    into a clean end (what LiteLLM does), nor into an answer of its own."""
    since = hop.control.next_seq()
    toxi.add_toxic(
        "vllm-0", Toxic("hoptest-limit", "limit_data", "downstream", 1.0, {"bytes": 300})
    )
    with pytest.raises(httpx.RemoteProtocolError):
        hop.stream()
    (record,) = hop.records(since)
    assert record.outcome == "upstream_error" and not record.done


def test_an_unknown_hop_is_refused_and_nothing_is_applied(hop: Hop) -> None:
    bad = _fault("hop.status", status=500).model_copy(update={"target": "nope"})
    injector = build(bad, hop.context, 99)
    with pytest.raises(Exception, match="no hop 'nope'"):
        injector.apply()
    assert all(not hop.control.faults(n) for n in hop.control.hops())
