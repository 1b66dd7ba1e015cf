"""Our Toxiproxy client against a real toxiproxy-server (started here, on free ports).

The upstream behind the proxy is a small stub TCP server that trickles bytes: these tests are
about Toxiproxy and our client, not about what sits behind the proxy.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from drills.common.errors import ToxiproxyError
from drills.common.toxiproxy import Proxy, Toxic, ToxiproxyClient
from injectors.toxiproxy import revert_entry
from stack.provision import ensure_toxiproxy
from tests.conftest import free_port, run_drill
from tests.helpers import serving, toxiproxy_server
from tests.test_open_loop import Gateway as StubGateway


class TrickleServer:
    """Stub upstream: answers every connection with ``count`` bytes, one every 50 ms, then
    closes it."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        with conn:
            for _ in range(self.count):
                if self._stop.is_set():
                    return
                try:
                    conn.sendall(b"x")
                except OSError:
                    return
                time.sleep(0.05)

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


@pytest.fixture
def toxiproxy() -> Iterator[ToxiproxyClient]:
    """The Toxiproxy the stack runs: the pinned version with drills' fix for stuck toxics."""
    with toxiproxy_server(ensure_toxiproxy()) as client:
        yield client


@pytest.fixture
def stock_toxiproxy() -> Iterator[ToxiproxyClient]:
    """The pinned version as released, as a user's own Toxiproxy would be."""
    with toxiproxy_server(ensure_toxiproxy(stock=True)) as client:
        yield client


@pytest.fixture
def upstream() -> Iterator[TrickleServer]:
    """Three bytes and a clean close: every connection ends on its own."""
    server = TrickleServer(count=3)
    yield server
    server.close()


@pytest.fixture
def endless_upstream() -> Iterator[TrickleServer]:
    """Trickles for 10 s: a client that hangs up leaves data in flight."""
    server = TrickleServer(count=200)
    yield server
    server.close()


def _make_proxy(client: ToxiproxyClient, upstream: TrickleServer) -> Proxy:
    proxy = Proxy("up", f"127.0.0.1:{free_port()}", f"127.0.0.1:{upstream.port}", True)
    client.create(proxy)
    return proxy


def _first_byte_after(listen: str) -> float:
    """Seconds to the first byte; reads the answer to its end, as a polite client does."""
    host, port = listen.rsplit(":", 1)
    started = time.monotonic()
    first = None
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        while conn.recv(16):
            first = first or time.monotonic()
    assert first is not None
    return first - started


def test_toxics_land_are_read_back_and_removing_twice_is_harmless(
    toxiproxy: ToxiproxyClient, upstream: TrickleServer
) -> None:
    proxy = _make_proxy(toxiproxy, upstream)
    assert _first_byte_after(proxy.listen) < 0.3
    added = toxiproxy.add_toxic("up", Toxic("slow", "latency", "downstream", 1.0, {"latency": 600}))
    assert added.attributes["latency"] == 600
    assert [t.name for t in toxiproxy.toxics("up")] == ["slow"]
    assert _first_byte_after(proxy.listen) >= 0.6
    assert toxiproxy.remove_toxic("up", "slow") == "removed"
    assert toxiproxy.remove_toxic("up", "slow") == "absent"
    assert toxiproxy.toxics("up") == []


def test_disabled_proxy_refuses_connections(
    toxiproxy: ToxiproxyClient, upstream: TrickleServer
) -> None:
    proxy = _make_proxy(toxiproxy, upstream)
    toxiproxy.set_enabled("up", False)
    host, port = proxy.listen.rsplit(":", 1)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=2)
    toxiproxy.set_enabled("up", True)
    assert _first_byte_after(proxy.listen) < 0.3


def _hang_up_during_latency(client: ToxiproxyClient, proxy: Proxy) -> None:
    """Abandon a connection while a latency toxic holds its data (what a gateway's first-token
    timeout does)."""
    client.add_toxic("up", Toxic("slow", "latency", "downstream", 1.0, {"latency": 3000}))
    host, port = proxy.listen.rsplit(":", 1)
    conn = socket.create_connection((host, int(port)))
    time.sleep(0.5)
    conn.close()
    time.sleep(0.3)


def test_our_build_removes_a_toxic_after_a_client_hung_up(
    toxiproxy: ToxiproxyClient, endless_upstream: TrickleServer
) -> None:
    proxy = _make_proxy(toxiproxy, endless_upstream)
    _hang_up_during_latency(toxiproxy, proxy)
    started = time.monotonic()
    assert toxiproxy.remove_toxic("up", "slow", timeout=1.0) == "removed"
    assert time.monotonic() - started < 1.0
    assert toxiproxy.toxics("up") == []


def test_removal_stuck_in_stock_toxiproxy_falls_back_to_recreating_the_proxy(
    stock_toxiproxy: ToxiproxyClient, endless_upstream: TrickleServer
) -> None:
    toxiproxy = stock_toxiproxy
    proxy = _make_proxy(toxiproxy, endless_upstream)
    # In the released Toxiproxy the latency toxic now blocks on a link nobody reads, and a
    # plain removal cannot finish.
    _hang_up_during_latency(toxiproxy, proxy)

    with pytest.raises(ToxiproxyError, match="stuck"):
        toxiproxy.remove_toxic("up", "slow", timeout=1.0)
    started = time.monotonic()
    outcome = toxiproxy.remove_toxic("up", "slow", snapshot=proxy, timeout=1.0)
    assert outcome == "recreated"
    assert time.monotonic() - started < 5
    # The proxy is back as it was before the fault: no toxic, and fast again.
    again = toxiproxy.proxy("up")
    assert again.toxics == () and again.enabled and again.upstream == proxy.upstream
    host, port = proxy.listen.rsplit(":", 1)
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        assert conn.recv(1) == b"x"
    assert time.monotonic() - started < 0.3


@pytest.mark.parametrize(
    ("fault", "attributes"),
    [
        (
            {"kind": "toxiproxy.latency", "latency": "250ms", "jitter": "50ms"},
            {"latency": 250, "jitter": 50},
        ),
        ({"kind": "toxiproxy.timeout", "timeout": "2s"}, {"timeout": 2000}),
        ({"kind": "toxiproxy.bandwidth", "rate": "64KB"}, {"rate": 64}),
        ({"kind": "toxiproxy.reset_peer", "timeout": "100ms"}, {"timeout": 100}),
        ({"kind": "toxiproxy.slow_close", "delay": "1s"}, {"delay": 1000}),
        (
            {
                "kind": "toxiproxy.slicer",
                "average_size": "64B",
                "size_variation": "16B",
                "delay": "2ms",
            },
            {"average_size": 64, "size_variation": 16, "delay": 2000},
        ),
        ({"kind": "toxiproxy.limit_data", "bytes": "1KiB"}, {"bytes": 1024}),
    ],
    ids=lambda v: v["kind"] if isinstance(v, dict) and "kind" in v else "",
)
def test_every_toxic_kind_lands_with_its_attributes_and_reverts(
    toxiproxy: ToxiproxyClient, upstream: TrickleServer, fault: dict, attributes: dict
) -> None:
    from drills.model.scenario import Phase
    from injectors import InjectionContext, build

    _make_proxy(toxiproxy, upstream)
    spec = Phase.model_validate(
        {
            "name": "p",
            "duration": "10s",
            "inject": [{**fault, "target": "up", "stream": "upstream", "toxicity": 0.5}],
        }
    ).inject[0]
    injector = build(spec, InjectionContext("t1", toxiproxy.base_url, toxiproxy), 0)
    evidence = injector.apply()
    [toxic] = evidence["toxics"]
    assert toxic["type"] == fault["kind"].split(".")[1]
    assert toxic["stream"] == "upstream" and toxic["toxicity"] == 0.5
    assert {k: toxic["attributes"][k] for k in attributes} == attributes
    assert injector.revert()["method"] == "removed"
    assert injector.revert() == {"reverted": False, "reason": "never applied"}  # twice: harmless
    assert toxiproxy.toxics("up") == []


def test_down_fault_disables_the_hop_and_reverts(
    toxiproxy: ToxiproxyClient, upstream: TrickleServer
) -> None:
    from drills.model.scenario import Phase
    from injectors import InjectionContext, build

    proxy = _make_proxy(toxiproxy, upstream)
    spec = Phase.model_validate(
        {"name": "p", "duration": "10s", "inject": [{"kind": "toxiproxy.down", "target": "up"}]}
    ).inject[0]
    injector = build(spec, InjectionContext("t2", toxiproxy.base_url, toxiproxy), 0)
    assert injector.apply()["enabled"] is False
    host, port = proxy.listen.rsplit(":", 1)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=2)
    assert injector.revert()["method"] == "enabled"
    assert toxiproxy.proxy("up").enabled
    missing = Phase.model_validate(
        {"name": "p", "duration": "10s", "inject": [{"kind": "toxiproxy.down", "target": "nope"}]}
    ).inject[0]
    with pytest.raises(ToxiproxyError, match="has no proxy 'nope'; it has: up"):
        build(missing, InjectionContext("t3", toxiproxy.base_url, toxiproxy), 0).apply()


@pytest.mark.parametrize("first_out", ["first", "second"])
def test_two_cuts_of_one_hop_hold_it_down_until_the_last_is_reverted(
    toxiproxy: ToxiproxyClient, upstream: TrickleServer, first_out: str
) -> None:
    """Overlapping ``toxiproxy.down`` windows on one proxy (or one phase's cut meeting the next
    one's): the hop stays down while either holds it, and the last revert restores what was
    there before the first, as does a sweep of their ledger entries in either order."""
    from drills.model.scenario import Phase
    from injectors import InjectionContext, build

    proxy = _make_proxy(toxiproxy, upstream)
    host, port = proxy.listen.rsplit(":", 1)
    spec = Phase.model_validate(
        {"name": "p", "duration": "10s", "inject": [{"kind": "toxiproxy.down", "target": "up"}]}
    ).inject[0]
    context = InjectionContext("t4", toxiproxy.base_url, toxiproxy)
    one, two = build(spec, context, 0), build(spec, context, 1)
    one.apply()
    assert two.apply()["enabled"] is False
    entries = [one.ledger_entry(), two.ledger_entry()]
    assert [e["snapshot"]["enabled"] for e in entries] == [True, True]
    out, last = (one, two) if first_out == "first" else (two, one)
    held = out.revert()
    assert held["method"] == "still held" and held["held_by"], held
    assert not toxiproxy.proxy("up").enabled
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=2)
    assert last.revert()["method"] == "enabled"
    assert toxiproxy.proxy("up").enabled
    # A crashed run's sweep reverts both entries, in any order: the hop comes back up.
    toxiproxy.set_enabled("up", False)
    for entry in reversed(entries):
        revert_entry(entry)
    assert toxiproxy.proxy("up").enabled


class NotToxiproxy(BaseHTTPRequestHandler):
    """Something else on the port a user named as their Toxiproxy: a web page."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


def test_a_url_that_is_not_toxiproxy_is_named_as_such() -> None:
    with (
        serving(NotToxiproxy) as url,
        ToxiproxyClient(url) as client,
        pytest.raises(ToxiproxyError, match=r"the answer is not Toxiproxy's list of proxies"),
    ):
        client.proxies()


def test_a_hop_cut_in_two_phases_in_a_row_is_up_after_the_drill(
    toxiproxy: ToxiproxyClient, upstream: TrickleServer, tmp_path: Path
) -> None:
    """The runner reverts the windows that end before it applies those that begin at the same
    instant, and the cuts compose: a hop cut in two consecutive phases is up after the drill.
    (It was left down, with every fault reported reverted and an empty ledger.) The load goes
    to a stub gateway of ours; the faults go to a real Toxiproxy."""
    toxiproxy.create(
        Proxy("vllm-0", f"127.0.0.1:{free_port()}", f"127.0.0.1:{upstream.port}", True)
    )
    drill = tmp_path / "drill.yaml"
    drill.write_text(
        "drill: cut-twice\n"
        "title: one hop cut in two phases in a row\n"
        "load: {users: 1, prompts: [hi], warmup: 3s, timeout: 5s, max_tokens: 2, wait: 200ms}\n"
        "phases:\n"
        "  - {name: first, duration: 2s, inject: [{kind: toxiproxy.down, target: vllm-0}]}\n"
        "  - {name: second, duration: 2s, inject: [{kind: toxiproxy.down, target: vllm-0}]}\n"
        "  - {name: after, duration: 1s}\n"
        "expect:\n"
        "  - {during: first, check: error_rate, below: 0.5}\n"
    )
    with serving(StubGateway) as url:
        result, (journal,) = run_drill(
            drill, tmp_path, "--gateway", url, "--toxiproxy", toxiproxy.base_url, timeout=120
        )
    assert result.returncode == 0, result.stdout + result.stderr
    assert toxiproxy.proxy("vllm-0").enabled
    faults = journal["faults"]
    first, second = sorted(faults, key=lambda f: f["applied_at"])
    assert first["reverted_at"] <= second["applied_at"], faults  # reverted, then applied
    assert first["evidence"]["enabled"] is second["evidence"]["enabled"] is False
