"""The stack as a user drives it: status shows every component and proxy, `up` twice is
harmless, the supervisor restarts a dead component with backoff and records it, and the
supervisor-run gateway answers through the proxies."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from drills.common.errors import StackError
from drills.common.system import pid_alive
from stack import control
from stack.state import read_events, read_state
from tests.conftest import RunningStack, processes_naming, relocated_profile

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "drills.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_status_json_shows_components_health_endpoints_and_proxies(stack: RunningStack) -> None:
    result = cli("stack", "status", "--json", "--state-dir", str(stack.state_dir))
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["healthy"] and status["stack"] == "sound"
    comps = {c["name"]: c for c in status["components"]}
    assert set(comps) == {
        "toxiproxy",
        "vllm-0",
        "vllm-1",
        "triton",
        "vectordb",
        "tools",
        "hop",
        "gateway",
        "backup",
        "canary",
    }
    cfg = stack.config
    rag = cfg.rag
    assert rag is not None
    for name, kind, port, proxy_port in (
        ("triton", "embedder", rag.embedder.port, rag.embedder.proxy_port),
        ("vectordb", "vectordb", rag.vector_db.port, rag.vector_db.proxy_port),
        ("tools", "tools", rag.tools.port, rag.tools.proxy_port),
    ):
        comp = comps[name]
        assert comp["healthy"] and comp["kind"] == kind, comp
        assert comp["endpoint"] == f"http://127.0.0.1:{port}"
        assert comp["proxy"] == name
        assert comp["proxy_listen"] == f"127.0.0.1:{proxy_port}"
    assert comps["triton"]["metrics_url"] == f"http://127.0.0.1:{rag.embedder.metrics_port}/metrics"
    for replica in cfg.replicas:
        comp = comps[replica.name]
        assert comp["healthy"] and comp["kind"] == "engine"
        assert comp["endpoint"] == f"http://127.0.0.1:{replica.port}"
        assert comp["proxy"] == replica.name
        assert comp["proxy_listen"] == f"127.0.0.1:{replica.proxy_port}"
        assert comp["hop_listen"] == f"127.0.0.1:{replica.hop_port}"  # what the gateway calls
    assert comps["tools"]["hop_listen"] is None  # the L7 hop fronts the model hops only
    assert comps["backup"]["hop_listen"] == f"127.0.0.1:{cfg.backup.hop_port}"  # type: ignore[union-attr]
    assert comps["backup"]["proxy_listen"] == f"127.0.0.1:{cfg.backup.proxy_port}"  # type: ignore[union-attr]
    assert comps["gateway"]["endpoint"] == stack.gateway_url
    # The harness's L7 hop runs with the stack (gateway -> hop -> Toxiproxy -> engine).
    assert comps["hop"]["healthy"] and comps["hop"]["kind"] == "hop"
    assert comps["hop"]["endpoint"] == stack.hop_url

    table = cli("stack", "status", "--state-dir", str(stack.state_dir))
    assert table.returncode == 0
    assert "stack 'sound': healthy" in table.stdout
    assert f"vllm-0 (127.0.0.1:{cfg.replicas[0].proxy_port})" in table.stdout


def _shape(text: str) -> list[list[str]]:
    """A status table's lines as fields, ports, the state folder and restart counts blanked."""
    rows = []
    for line in text.strip().splitlines():
        line = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", line)
        line = re.sub(r"\(state: [^)]*\)", "(state: STATE)", line)
        fields = line.split()
        if len(fields) >= 8 and fields[-2].isdigit():  # RESTARTS, before TOXICS
            fields[-2] = "N"
        rows.append(fields)
    return rows


def test_the_readme_status_sample_is_what_status_prints(stack: RunningStack) -> None:
    from tests.test_readme import BLOCKS

    sample = next(body for _, _, body in BLOCKS if body.startswith("$ bash stack/bootstrap.sh"))
    command, _, shown = sample.partition("\n")
    assert command == "$ bash stack/bootstrap.sh drills stack status"
    printed = cli("stack", "status", "--state-dir", str(stack.state_dir))
    assert printed.returncode == 0, printed.stderr
    assert _shape(shown) == _shape(printed.stdout)


def test_up_again_is_harmless_and_another_config_is_refused(
    stack: RunningStack, tmp_path: Path
) -> None:
    before = read_state(stack.state_dir)
    assert before is not None
    started = time.monotonic()
    result = cli(
        "stack", "up", "--profile", str(stack.config_path), "--state-dir", str(stack.state_dir)
    )
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 30
    after = read_state(stack.state_dir)
    assert after is not None and after.supervisor_pid == before.supervisor_pid
    assert {n: c["pid"] for n, c in after.components.items()} == {
        n: c["pid"] for n, c in before.components.items()
    }
    other = relocated_profile("sound", tmp_path / "other.yaml")
    with pytest.raises(StackError, match="already running"):
        control.up(other, stack.state_dir)


def test_stack_gateway_answers_through_the_proxies(stack: RunningStack) -> None:
    # Drills earlier in the session may have opened breakers; the gateway's own probes close
    # them within a reset timeout once the hops are healthy, with no traffic needed.
    # (The RAG and agent hops' breakers close on their next call after the reset timeout.)
    models = ("vllm-0", "vllm-1", "backup")
    deadline = time.monotonic() + stack.config.gateway.breaker.reset_timeout + 10  # type: ignore[union-attr]
    breakers: dict[str, str] = {}
    while time.monotonic() < deadline:
        breakers = httpx.get(f"{stack.gateway_url}/health").json()["breakers"]
        if all(breakers[m] == "closed" for m in models):
            break
        time.sleep(0.2)
    assert {m: breakers[m] for m in models} == dict.fromkeys(models, "closed")
    assert set(breakers) == {
        *models,
        "canary",  # its hop has a breaker; the sound policy routes nothing to it
        "triton",
        "vectordb",
        "tools:search_kb",
        "tools:read_report_table",
        "tools:send_message",
    }
    response = httpx.post(
        f"{stack.gateway_url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4},
        timeout=30,
    )
    assert response.status_code == 200
    assert response.headers["x-drills-route"] == "primary"
    assert response.headers["x-drills-upstream"] in {"vllm-0", "vllm-1"}
    assert response.json()["choices"][0]["message"]["content"]
    metrics = httpx.get(f"{stack.gateway_url}/metrics").text
    assert 'drills_gateway_breaker_state{upstream="backup"} 0.0' in metrics


def _wait_gateway_healthy(stack: RunningStack, restarts: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        current = {c.name: c for c in control.status(stack.state_dir).components}
        gateway = current["gateway"]
        # Both the supervisor's record and a live probe must agree.
        if gateway.status == "healthy" and gateway.healthy and gateway.restarts == restarts:
            return
        time.sleep(0.2)
    raise AssertionError(f"gateway not healthy after restart {restarts}")


def test_supervisor_restarts_a_killed_component_with_backoff_and_records_it(
    stack: RunningStack,
) -> None:
    # The session's stack may have had its gateway killed by earlier drills (agent-resume):
    # counted from here, after its backoff has reset (healthy for reset_after).
    initial = stack.config.supervisor.initial_delay
    before = next(c for c in control.status(stack.state_dir).components if c.name == "gateway")
    assert before.status == "healthy"
    state = read_state(stack.state_dir)
    assert state is not None
    healthy_since = state.components["gateway"]["healthy_since"] or 0.0
    reset = healthy_since + stack.config.supervisor.reset_after + 1.0  # + one supervisor tick
    time.sleep(max(0.0, reset - time.time()) if before.restarts else 0.0)
    since = time.time()
    for restart in (1, 2):
        state = read_state(stack.state_dir)
        assert state is not None
        pid = state.components["gateway"]["pid"]
        os.kill(pid, signal.SIGKILL)
        _wait_gateway_healthy(stack, before.restarts + restart)

    events = [e for e in read_events(stack.state_dir, component="gateway") if e.time >= since]
    kinds = [e.event for e in events]
    assert kinds == ["exited", "restart_scheduled", "started", "healthy"] * 2
    exits = [e for e in events if e.event == "exited"]
    assert all(e.reason == "killed by signal SIGKILL" for e in exits)
    delays = [e.delay for e in events if e.event == "restart_scheduled"]
    assert delays == [initial, initial * 2]  # exponential backoff, like CrashLoopBackOff
    # The restart really waited its delay before starting again.
    second_exit = exits[1].time
    second_start = [e for e in events if e.event == "started"][1].time
    assert second_start - second_exit >= initial * 2 - 0.1

    response = httpx.post(
        f"{stack.gateway_url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
        timeout=30,
    )
    assert response.status_code == 200
    table = cli("stack", "status", "--json", "--state-dir", str(stack.state_dir))
    gateway = next(c for c in json.loads(table.stdout)["components"] if c["name"] == "gateway")
    assert gateway["restarts"] == before.restarts + 2
    assert gateway["last_exit"] == "killed by signal SIGKILL"


def test_a_run_replaces_the_idle_stack_a_run_started_but_never_the_users(tmp_path: Path) -> None:
    """Two single-replica stacks on free ports, one after the other in one state folder: the
    second profile replaces the first only when a run asks, a run started the first, and no
    other run uses it; otherwise it is refused with the one command to type."""
    state = tmp_path / "state"
    first = relocated_profile("unsound-single", tmp_path / "first.yaml")
    second = relocated_profile("unsound-single", tmp_path / "second.yaml")
    try:
        control.up(first, state, by="run")
        assert control.owner(state) == "run"
        before = read_state(state)
        assert before is not None
        with pytest.raises(StackError, match=r"another run is using it; .*`drills stack down`"):
            control.up(second, state, by="run", idle=lambda: False)
        with pytest.raises(StackError, match=r"it is running; .*`drills stack down` first"):
            control.up(second, state)  # `drills stack up` of another profile: never replaces
        control.up(second, state, by="run", idle=lambda: True)
        after = read_state(state)
        assert after is not None and after.supervisor_pid != before.supervisor_pid
        assert not pid_alive(before.supervisor_pid)
        assert (state / "stack.yaml").read_text() == second.read_text()
        # Brought up by the user (`drills stack up` of the same profile): now the user's.
        control.up(second, state)
        assert control.owner(state) == "user"
        with pytest.raises(StackError, match="brought up with `drills stack up`"):
            control.up(first, state, by="run", idle=lambda: True)
    finally:
        control.down(state)


def test_a_stack_started_without_the_retrieval_part_is_used_or_completed_as_needed(
    tmp_path: Path,
) -> None:
    """A one-engine profile with the retrieval part: a drill that needs none of it starts
    neither Triton, the vector DB nor the tool server; one that needs it, or `drills stack up`,
    replaces that idle stack with the whole profile, which a later drill uses as it is."""
    state = tmp_path / "state"
    source = relocated_profile("unsound-single", tmp_path / "single.yaml")
    data = yaml.safe_load(source.read_text())
    data["rag"] = yaml.safe_load(relocated_profile("sound", tmp_path / "sound.yaml").read_text())[
        "rag"
    ]
    source.write_text(yaml.safe_dump(data, sort_keys=False))
    rag_parts = {"triton", "vectordb", "tools"}
    try:
        partial = control.up(source, state, by="run", parts=())
        names = {c.name for c in partial.components}
        assert not names & rag_parts and {"toxiproxy", "vllm-0", "gateway"} <= names, names
        assert partial.left_out == ["rag"] and control.left_out(state) == {"rag"}
        assert (state / "profile.yaml").read_text() == source.read_text()
        assert "rag" not in yaml.safe_load((state / "stack.yaml").read_text())
        # The gateway of a stack without the part has no RAG route, and says so with a 404.
        gateway = next(c for c in partial.components if c.name == "gateway").endpoint
        assert httpx.post(f"{gateway}/v1/rag/answer", json={}).status_code == 404
        shown = cli("stack", "status", "--state-dir", str(state))
        assert "started without rag (no drill it ran needed it;" in shown.stdout
        before = read_state(state)
        assert before is not None
        # The same need again: the same stack.
        control.up(source, state, by="run", parts=(), idle=lambda: True)
        again = read_state(state)
        assert again is not None and again.supervisor_pid == before.supervisor_pid
        with pytest.raises(
            StackError,
            match=r"without rag, which this drill needs, and another run is using it; to use "
            r"'unsound-single' with rag, run `drills stack down` first",
        ):
            control.up(source, state, by="run", parts=("rag",), idle=lambda: False)
        # `drills stack up` (the whole profile, the user's) replaces the idle run's stack.
        whole = control.up(source, state, idle=lambda: True)
        assert rag_parts <= {c.name for c in whole.components} and whole.left_out == []
        assert not pid_alive(before.supervisor_pid) and control.owner(state) == "user"
        after = read_state(state)
        assert after is not None
        # A drill that needs less uses the whole stack as it is.
        control.up(source, state, by="run", parts=(), idle=lambda: True)
        last = read_state(state)
        assert last is not None and last.supervisor_pid == after.supervisor_pid
    finally:
        control.down(state)


def test_a_twins_gateway_beside_the_stack_stops_when_its_drill_is_killed(
    stack: RunningStack, tmp_path: Path
) -> None:
    """A drill's twin gateway runs beside the stack under a supervisor of its own; a drill
    killed with SIGKILL never stops it itself, so its parent-death signal must."""
    workdir = tmp_path / "beside"
    script = (
        "import time\n"
        "from pathlib import Path\n"
        "from stack.beside import gateway_beside\n"
        f"with gateway_beside(Path({str(stack.state_dir / 'stack.yaml')!r}), 'unsound', "
        f"Path({str(workdir)!r})) as url:\n"
        "    print(url, flush=True)\n"
        "    time.sleep(600)\n"
    )
    drill = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert drill.stdout is not None
    url = drill.stdout.readline().strip()
    assert url.startswith("http://"), url
    assert httpx.get(f"{url}/health", timeout=5).status_code == 200
    beside = processes_naming(workdir)  # its supervisor and its gateway
    assert len(beside) >= 2, beside
    os.kill(drill.pid, signal.SIGKILL)
    drill.wait(timeout=10)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(pid_alive(p) for p in beside):
        time.sleep(0.2)
    left = [p for p in beside if pid_alive(p)]
    for pid in left:  # stop what failed the test, by its pid
        os.kill(pid, signal.SIGKILL)
    assert not left, f"the beside gateway's processes outlived their drill: {left}"
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{url}/health", timeout=2)
    assert stack.gateway_url != url and httpx.get(f"{stack.gateway_url}/health").status_code == 200
