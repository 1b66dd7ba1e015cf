"""The chain read before and after a drill (``drills.engine.chain``), against a real
toxiproxy-server and a real stopped process: each way a fault can be left behind is named."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from drills.common.toxiproxy import Proxy, Toxic, ToxiproxyClient
from drills.engine.chain import differences, read_chain
from stack.provision import ensure_toxiproxy
from tests.helpers import toxiproxy_server


@pytest.fixture
def toxiproxy() -> Iterator[ToxiproxyClient]:
    with toxiproxy_server(ensure_toxiproxy()) as client:
        for name in ("vllm-0", "vllm-1", "backup"):
            client.create(Proxy(name, "127.0.0.1:0", "127.0.0.1:9", enabled=True))
        yield client


def test_an_unchanged_chain_has_no_difference(toxiproxy: ToxiproxyClient) -> None:
    toxiproxy.add_toxic("backup", Toxic("there-before", "latency", attributes={"latency": 5}))
    before = read_chain(toxiproxy.base_url, None, None)
    # A fault applied and reverted in between: what was there before (a toxic of the user's
    # own included) is there after, and nothing else.
    toxiproxy.set_enabled("vllm-0", False)
    toxiproxy.add_toxic("vllm-1", Toxic("drill", "latency", attributes={"latency": 3000}))
    toxiproxy.set_enabled("vllm-0", True)
    toxiproxy.remove_toxic("vllm-1", "drill")
    after = read_chain(toxiproxy.base_url, None, None)
    assert before.unread == after.unread == []
    assert differences(before, after) == []


def test_each_thing_left_behind_is_named(toxiproxy: ToxiproxyClient) -> None:
    toxiproxy.add_toxic("backup", Toxic("there-before", "latency", attributes={"latency": 5}))
    before = read_chain(toxiproxy.base_url, None, None)
    toxiproxy.set_enabled("vllm-0", False)
    toxiproxy.add_toxic("vllm-1", Toxic("drill", "timeout", attributes={"timeout": 0}))
    toxiproxy.remove_toxic("backup", "there-before")
    after = read_chain(toxiproxy.base_url, None, None)
    assert differences(before, after) == [
        "proxy backup: toxic there before the drill is gone: there-before (latency, "
        "downstream, toxicity 1, {'jitter': 0, 'latency': 5})",
        "proxy vllm-0: enabled was True, is False",
        "proxy vllm-1: toxic left behind: drill (timeout, downstream, toxicity 1, {'timeout': 0})",
    ]
    toxiproxy.delete("vllm-1")
    assert "proxy vllm-1: there before the drill, gone after it" in differences(
        before, read_chain(toxiproxy.base_url, None, None)
    )


def _until_state(pid: int, state: str) -> None:
    deadline = time.monotonic() + 5
    while (stat := Path(f"/proc/{pid}/stat").read_text())[stat.rindex(")") + 2] != state:
        assert time.monotonic() < deadline, stat
        time.sleep(0.01)


def test_a_process_left_stopped_is_named_and_an_unreadable_part_is_said() -> None:
    process = subprocess.Popen(["sleep", "60"])
    try:
        components = {"tools": {"pid": process.pid}, "gone": {"pid": 2**22 + 1}}
        before = read_chain(None, None, components)
        process.send_signal(signal.SIGSTOP)
        _until_state(process.pid, "T")  # a signal is delivered, not acted on, by kill(2)
        after = read_chain(None, None, components)
        assert differences(before, after) == [
            "process tools: stopped (SIGSTOP) after the drill, running before"
        ]
        process.send_signal(signal.SIGCONT)
        _until_state(process.pid, "S")
        assert differences(before, read_chain(None, None, components)) == []
    finally:
        process.kill()
        process.wait()
    # Nothing listens there: the part is said to be unread, and not compared.
    unread = read_chain("http://127.0.0.1:9", None, None)
    assert unread.proxies is None and "Toxiproxy at http://127.0.0.1:9" in unread.unread[0]
