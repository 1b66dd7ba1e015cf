"""Shared fixtures: one real embedded stack per test session, and real gateways on free ports.

The stack (Toxiproxy, two vLLM replicas, the gateway, under the supervisor) is the shipped
``sound`` profile with every port moved to a free one and its state in a temporary folder, so
a developer's own stack on the default ports is left alone. Tests that need a gateway with
another policy start one in this process (a real uvicorn server on a free port) in front of the
same Toxiproxy proxies.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import yaml

from drills.common.ports import free_port
from drills.common.system import pid_alive
from drills.common.toxiproxy import Proxy, ToxiproxyClient
from drills.engine.options import RunOptions
from drills.engine.runner import Runner
from drills.model.scenario import load_scenario
from stack import control
from stack.config import GatewayConfig, StackConfig, load_stack_config
from stack.gateway.app import Gateway, create_app
from tests.helpers import drill_account, twin_account

pytest_plugins = [
    "pytester",
    "tests.docker_env",
    "tests.jaeger_env",
    "tests.kube_env",
    "tests.postgres_env",
    "tests.scheduling",
]

PROFILES = Path(__file__).resolve().parent.parent / "stack" / "profiles"


@pytest.fixture(autouse=True, scope="session")
def _session_run_history(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Runs made by the tests keep their run history in the session's temporary folder, not
    in the user's (``drills.engine.history``; child processes inherit it)."""
    import os

    os.environ["DRILLS_HISTORY"] = str(tmp_path_factory.mktemp("history") / "history.sqlite")


def relocated_profile(name: str, out: Path) -> Path:
    """The shipped profile ``name`` with every port replaced by a free one (none twice: see
    ``drills.common.ports``)."""
    data = yaml.safe_load((PROFILES / f"{name}.yaml").read_text())
    data["toxiproxy"]["api_port"] = free_port()
    data["gateway"]["port"] = free_port()
    if data.get("hop"):
        data["hop"]["control_port"] = free_port()
    extra = [data[k] for k in ("backup", "canary") if data.get(k)]
    for replica in [*data["replicas"], *extra]:
        for key in ("port", "proxy_port", "hop_port"):
            if key in replica:
                replica[key] = free_port()
    for section in (data.get("rag") or {}).values():
        if isinstance(section, dict):
            for key in ("port", "grpc_port", "metrics_port", "proxy_port"):
                if key in section:
                    section[key] = free_port()
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


@dataclass
class RunningStack:
    config: StackConfig
    config_path: Path
    state_dir: Path
    toxiproxy: ToxiproxyClient

    @property
    def gateway_url(self) -> str:
        return f"http://{self.config.host}:{self.config.gateway.port}"

    @property
    def toxiproxy_url(self) -> str:
        return f"http://{self.config.host}:{self.config.toxiproxy.api_port}"

    @property
    def hop_url(self) -> str:
        """The control API of the stack's L7 hop."""
        assert self.config.hop is not None
        return f"http://{self.config.host}:{self.config.hop.control_port}"

    def attach_args(self, gateway: str | None = None, toxiproxy: bool = True) -> list[str]:
        """``drills run``'s flags that attach to this stack (its gateway, or ``gateway``;
        its Toxiproxy unless ``toxiproxy`` is false)."""
        return [
            "--gateway",
            gateway or self.gateway_url,
            *(["--toxiproxy", self.toxiproxy_url] if toxiproxy else []),
            "--hop",
            self.hop_url,
        ]

    def toxics(self) -> list[str]:
        """Names of every toxic on every proxy now."""
        return [t.name for p in self.toxiproxy.proxies().values() for t in p.toxics]


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    """The real stack, up for the whole session; stopped at the end, leaving no process."""
    root = tmp_path_factory.mktemp("stack")
    config_path = relocated_profile("sound", root / "sound.yaml")
    state_dir = root / "state"
    status = control.up(config_path, state_dir)
    assert status.healthy, status.as_json()
    config = load_stack_config(config_path)
    client = ToxiproxyClient(f"http://{config.host}:{config.toxiproxy.api_port}")
    try:
        yield RunningStack(config, config_path, state_dir, client)
    finally:
        client.close()
        pids = _stack_pids(state_dir)
        control.down(state_dir)
        leftovers = [pid for pid in pids if pid_alive(pid)]
        assert not leftovers, f"processes left behind by `stack down`: {leftovers}"


def _stack_pids(state_dir: Path) -> list[int]:
    from stack.state import read_state

    state = read_state(state_dir)
    assert state is not None
    pids = [state.supervisor_pid]
    for comp in state.components.values():
        if comp.get("pgid"):
            pids.extend(control._group_members(int(comp["pgid"])))
    return pids


def isolated_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment for a ``drills`` child process whose ledger and run registry live under
    ``tmp_path`` (so a test's ``drills abort`` reaches only its own runs)."""
    import os

    return {
        **os.environ,
        "DRILLS_LEDGER": str(tmp_path / "ledger.json"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        **extra,
    }


def drills_cli(*args: str) -> list[str]:
    import sys

    return [sys.executable, "-m", "drills.cli", *args]


def clean_snapshots(config: StackConfig) -> list[Proxy]:
    """Every proxy of the stack as it is with no fault applied."""
    host = config.host
    return [
        Proxy(u.name, f"{host}:{u.listen_port}", f"{host}:{u.upstream_port}", True)
        for u in [*config.upstreams, *config.rag_hops]
    ]


@pytest.fixture
def toxi(stack: RunningStack) -> Iterator[ToxiproxyClient]:
    """The stack's Toxiproxy, reset (every proxy enabled, no toxic) before and after the test."""
    snapshots = clean_snapshots(stack.config)
    stack.toxiproxy.reset(snapshots)
    yield stack.toxiproxy
    stack.toxiproxy.reset(snapshots)


@dataclass
class LiveGateway:
    url: str
    gateway: Gateway
    client: httpx.Client

    def chat(
        self,
        content: str = "Say hello.",
        *,
        max_tokens: int = 4,
        stream: bool = False,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> httpx.Response:
        body = {
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            "stream": stream,
            **extra,
        }
        return self.client.post("/v1/chat/completions", json=body, headers=headers or {})

    def metric(self, name: str, **labels: str) -> float:
        value = self.gateway.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else float(value)


class _ThreadedServer(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # the test process keeps its own handlers
        pass


@pytest.fixture
def gateway_factory(stack: RunningStack) -> Iterator[Callable[..., LiveGateway]]:
    """Start a real gateway over the stack's proxies with a modified policy.

    ``gateway_factory(timeouts={...}, retries={...}, breaker=..., backup=True)`` merges the
    given sections into the sound profile's gateway config; ``replicas=["vllm-0"]`` keeps only
    those primaries.
    """
    started: list[tuple[_ThreadedServer, threading.Thread, httpx.Client]] = []

    def start(
        *, backup: bool = True, replicas: list[str] | None = None, **sections: Any
    ) -> LiveGateway:
        base = stack.config.gateway.model_dump(mode="json")
        for key, value in sections.items():
            if isinstance(value, dict) and isinstance(base.get(key), dict):
                base[key] = {**base[key], **value}
            else:
                base[key] = value
        port = free_port()
        base["port"] = port
        config = stack.config.model_copy(
            update={
                "gateway": GatewayConfig.model_validate(base),
                "backup": stack.config.backup if backup else None,
                "replicas": [
                    r for r in stack.config.replicas if replicas is None or r.name in replicas
                ],
            }
        )
        app = create_app(config)
        server = _ThreadedServer(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline, "test gateway did not start"
            time.sleep(0.02)
        url = f"http://127.0.0.1:{port}"
        client = httpx.Client(base_url=url, timeout=60)
        started.append((server, thread, client))
        return LiveGateway(url, app.state.gateway, client)

    yield start
    for server, thread, client in started:
        client.close()
        server.should_exit = True
        thread.join(timeout=10)


def run_drill(
    scenario: Path, tmp_path: Path, *extra: str, timeout: float = 600
) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    """`drills run SCENARIO EXTRA... --out TMP/runs` in a child process with its own ledger and
    registry; the journals it wrote."""
    result = subprocess.run(
        drills_cli("run", str(scenario), *extra, "--out", str(tmp_path / "runs")),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=isolated_env(tmp_path),
    )
    journals = [
        json.loads(p.read_text()) for p in sorted((tmp_path / "runs").glob("*/journal.json"))
    ]
    return result, journals


def run_attached(
    path: Path, stack: RunningStack, tmp_path: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    """`drills run PATH EXTRA...` attached to the session's stack (its gateway, Toxiproxy and
    L7 hop), run directories under ``tmp_path/runs``."""
    return subprocess.run(
        drills_cli("run", str(path), *stack.attach_args(), "--out", str(tmp_path / "runs"), *extra),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
        timeout=300,
    )


def run_on_stack(
    scenario: Path, stack: RunningStack, tmp_path: Path, *extra: str
) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    """`drills run SCENARIO EXTRA...` on the session's stack (its profile, its state
    directory); the journals it wrote."""
    on_stack = ("--profile", str(stack.config_path), "--state-dir", str(stack.state_dir))
    return run_drill(scenario, tmp_path, *extra, *on_stack)


def run_twin(
    scenario: Path, stack: RunningStack, tmp_path: Path, *twin: str
) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    """`drills run SCENARIO --twin [NAME]` on the session's stack: the twin's gateway runs
    beside it; the journals of the twin runs."""
    return run_on_stack(scenario, stack, tmp_path, "--twin", *twin)


def run_embedded(path: Path, stack: RunningStack, tmp_path: Path) -> dict:
    """Run a drill on the session's stack as its profile: the path a user's ``drills run``
    takes on the embedded stack, whose monitoring starts for a drill that asks it."""
    scenario, doc = load_scenario(path)
    options = RunOptions(
        out_dir=tmp_path / "runs",
        ledger=tmp_path / "ledger.json",
        profile=str(stack.config_path),
        state_dir=stack.state_dir,
    )
    return Runner(scenario, doc, options).run().model_dump(mode="json")


def processes_naming(path: Path) -> list[int]:
    """Live processes whose command line names ``path``."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(path) in cmdline:
            found.append(int(proc.name))
    return found


def gate_drill_and_twin(
    scenario: Path, stack: RunningStack, tmp_path: Path, *extra: str, profile: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`drills gate --twins SCENARIO EXTRA...` on the session's stack, for a drill with one
    twin: the drill's journal, which must have passed, and its twin's, which must have held."""
    drill, twins = gate_drill_and_twins(scenario, stack, tmp_path, *extra, profile=profile)
    (twin,) = twins.values()
    return drill, twin


def gate_drill_and_twins(
    scenario: Path, stack: RunningStack, tmp_path: Path, *extra: str, profile: bool = False
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """`drills gate --twins SCENARIO EXTRA...` on the session's stack (its state directory;
    ``profile``: its config as the drill's profile too); the drill's journal, which must have
    passed, and each twin's by name, which must have held."""
    if profile:
        extra = (*extra, "--profile", str(stack.config_path))
    out = tmp_path / "gate"
    result = subprocess.run(
        drills_cli(
            "gate",
            "--twins",
            str(scenario),
            *extra,
            "--state-dir",
            str(stack.state_dir),
            "--out",
            str(out),
        ),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
        timeout=600,
    )
    drills: list[dict[str, Any]] = []
    twins: dict[str, dict[str, Any]] = {}
    for path in sorted(out.glob("runs/**/journal.json")):
        journal = json.loads(path.read_text())
        if journal.get("twin"):
            twins[journal["twin"]["name"]] = journal
        else:
            drills.append(journal)
    declared = {t.key for t in load_scenario(scenario)[0].twins}
    assert len(drills) == 1 and set(twins) == declared, (
        result.stdout[-3000:] + result.stderr[-3000:]
    )
    drill = drills[0]
    assert drill["verdict"] == "passed", drill_account(drill)
    for twin in twins.values():
        assert twin["twin"]["held"], twin_account(twin)
    assert result.returncode == 0, result.stdout[-3000:]
    return drill, twins
