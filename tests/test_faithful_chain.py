"""A faithful chain: a cut upstream looks refused to the gateway, with or without the L7 hop.

The gateway here is a real third-party one, Debian's nginx (``stack.provision.ensure_nginx``),
in front of two upstreams. Like most gateways, nginx retries a request on the next upstream
when its connection is refused, but never a POST it has already sent (``proxy_next_upstream``'s
default, "non_idempotent" unset). Each upstream is a real Toxiproxy proxy in front of a small
HTTP server, and ``toxiproxy.down`` cuts one of them through the harness's own injector.

Without the hop, nginx's connect to the cut proxy is refused, and every request is answered by
the other upstream. Through the hop, it must be the same: the injector announces the cut to the
hop, which closes its listener before the proxy goes down and listens again once the proxy
accepts. Before this, the hop accepted nginx's connection and dropped it after the request was
sent: nginx answered 502 for each request that chose the cut upstream, and a drill judged such
a gateway worse than it is.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter

from drills.common.hop import HopClient
from drills.common.ports import free_port
from drills.common.toxiproxy import Proxy, ToxiproxyClient
from drills.model.scenario import Fault
from injectors import InjectionContext, build
from stack.provision import ensure_nginx, ensure_toxiproxy
from tests.helpers import toxiproxy_server

REQUESTS = 12
"""POSTs sent through nginx while one upstream is cut: nginx's round robin picks the cut one
for about half of them."""


class _Engine(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = json.dumps({"served_by": self.server.name}).encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@dataclass
class Chain:
    toxiproxy: ToxiproxyClient
    hop_url: str | None
    nginx: str
    """nginx's base URL."""

    def post(self) -> tuple[int, str | None]:
        answer = httpx.post(f"{self.nginx}/v1/chat/completions", json={"q": 1}, timeout=10)
        served = answer.json()["served_by"] if answer.status_code == 200 else None
        return answer.status_code, served

    def cut(self, proxy: str, announced: bool = True) -> Any:
        fault = TypeAdapter(Fault).validate_python({"kind": "toxiproxy.down", "target": proxy})
        hop_url = self.hop_url if announced else None
        context = InjectionContext("chaintest", self.toxiproxy.base_url, hop_url=hop_url)
        return build(fault, context, 0)


def _engine(name: str) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    server.name = name  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _wait_listening(port: int, what: str) -> None:
    deadline = time.monotonic() + 15
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert time.monotonic() < deadline, f"{what} does not listen on {port}"
        time.sleep(0.05)


@pytest.fixture
def upstreams() -> Iterator[tuple[ToxiproxyClient, dict[str, int]]]:
    """Toxiproxy proxies ``a`` and ``b``, each in front of an engine stub; their ports."""
    engines = {name: _engine(name) for name in ("a", "b")}
    ports = {name: free_port() for name in engines}
    with toxiproxy_server(ensure_toxiproxy()) as toxiproxy:
        for name, engine in engines.items():
            upstream = f"127.0.0.1:{engine.server_address[1]}"
            toxiproxy.create(Proxy(name, f"127.0.0.1:{ports[name]}", upstream, enabled=True))
        try:
            yield toxiproxy, ports
        finally:
            for engine in engines.values():
                engine.shutdown()
                engine.server_close()


@pytest.fixture
def hop(upstreams: tuple[ToxiproxyClient, dict[str, int]]) -> Iterator[tuple[str, dict[str, int]]]:
    """The harness's L7 hop (``python -m drills.hop``), one hop per proxy: its control URL and
    the hops' ports."""
    _, proxies = upstreams
    control = free_port()
    ports = {name: free_port() for name in proxies}
    args = [sys.executable, "-m", "drills.hop", "--control", f"127.0.0.1:{control}"]
    for name, port in ports.items():
        args += ["--hop", name, f"127.0.0.1:{port}", f"http://127.0.0.1:{proxies[name]}"]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for port in (control, *ports.values()):
            _wait_listening(port, "the hop")
        yield f"http://127.0.0.1:{control}", ports
    finally:
        process.terminate()
        process.wait(timeout=10)


def _nginx(tmp_path: Path, ports: dict[str, int]) -> Iterator[str]:
    """Debian's nginx in front of ``ports`` (round robin; an upstream that fails is never
    marked down, so each request's choice is the round robin's), in the foreground, one
    process; its base URL."""
    port = free_port()
    servers = "".join(f"    server 127.0.0.1:{p} max_fails=0;\n" for p in ports.values())
    temp = "".join(
        f"  {kind}_temp_path {tmp_path}/{kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    conf = tmp_path / "nginx.conf"
    conf.write_text(
        "daemon off;\nmaster_process off;\n"
        f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log info;\n"
        "events { worker_connections 64; }\n"
        "http {\n  access_log off;\n" + temp + "  upstream engines {\n" + servers + "  }\n"
        f"  server {{\n    listen 127.0.0.1:{port};\n"
        "    location / { proxy_pass http://engines; }\n  }\n}\n"
    )
    process = subprocess.Popen(
        [str(ensure_nginx()), "-p", str(tmp_path), "-c", str(conf), "-e", f"{tmp_path}/error.log"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_listening(port, "nginx")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def direct(upstreams: tuple[ToxiproxyClient, dict[str, int]], tmp_path: Path) -> Iterator[Chain]:
    """nginx -> Toxiproxy -> engine."""
    toxiproxy, proxies = upstreams
    for url in _nginx(tmp_path, proxies):
        yield Chain(toxiproxy, None, url)


@pytest.fixture
def through_hop(
    upstreams: tuple[ToxiproxyClient, dict[str, int]],
    hop: tuple[str, dict[str, int]],
    tmp_path: Path,
) -> Iterator[Chain]:
    """nginx -> the L7 hop -> Toxiproxy -> engine."""
    toxiproxy, _ = upstreams
    control, ports = hop
    for url in _nginx(tmp_path, ports):
        yield Chain(toxiproxy, control, url)


def _answers(chain: Chain) -> list[tuple[int, str | None]]:
    return [chain.post() for _ in range(REQUESTS)]


@pytest.mark.parametrize("path", ["direct", "through_hop"])
def test_a_cut_upstream_is_refused_and_nginx_retries_every_request_elsewhere(
    path: str, request: pytest.FixtureRequest
) -> None:
    chain: Chain = request.getfixturevalue(path)
    # Healthy: nginx's round robin spreads the requests over both.
    assert {served for _, served in _answers(chain)} == {"a", "b"}
    injector = chain.cut("a")
    evidence = injector.apply()
    try:
        if chain.hop_url is not None:
            assert evidence["hops_refusing"] == ["a"], evidence
            assert HopClient(chain.hop_url).refusing("a")
        # Refused, not dropped: nginx retried every request that chose `a` on `b`.
        assert _answers(chain) == [(200, "b")] * REQUESTS
    finally:
        outcome = injector.revert()
    if chain.hop_url is not None:
        assert outcome["hops_listening"] is True, outcome
    assert {served for _, served in _answers(chain)} == {"a", "b"}


def test_an_unannounced_refusal_is_mirrored_from_the_request_that_met_it(
    through_hop: Chain,
) -> None:
    """A cut the hop is not told of (someone else's, or a process that stopped listening): the
    request that meets the refusal is dropped (nginx had sent it: 502), and from then on the hop
    refuses too, until the upstream accepts again."""
    injector = through_hop.cut("a", announced=False)
    injector.apply()
    try:
        answers = _answers(through_hop)
        assert answers.count((502, None)) == 1, answers
        assert answers[answers.index((502, None)) + 1 :] == [(200, "b")] * (
            REQUESTS - 1 - answers.index((502, None))
        ), answers
        assert through_hop.hop_url is not None
        assert HopClient(through_hop.hop_url).refusing("a")
    finally:
        injector.revert()
    deadline = time.monotonic() + 5
    while HopClient(through_hop.hop_url).refusing("a"):
        assert time.monotonic() < deadline, "the hop did not listen again"
        time.sleep(0.05)
    assert {served for _, served in _answers(through_hop)} == {"a", "b"}


def test_nginx_is_debians_and_runs_unpacked() -> None:
    out = subprocess.run(
        [str(ensure_nginx()), "-v"], capture_output=True, text=True, check=True, env=os.environ
    )
    assert "nginx/1.22.1" in out.stderr
