"""The fault models of a drill's phases: each built-in family's spec (Toxiproxy toxics, the L7
hop's rules, process, Docker, Kubernetes, GPU and tool faults), and ``Fault``, which validates
one of them, or a plugin's, by its ``kind``. Re-exported by ``drills.model.scenario``."""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any, ClassVar, Literal, Union, get_args

from pydantic import (
    ConfigDict,
    Field,
    PlainValidator,
    SerializeAsAny,
    TypeAdapter,
    field_validator,
    model_validator,
)

from drills.common.hop import (
    CutRule,
    FirstTokenDelayRule,
    MalformedRule,
    StallRule,
    StatusRule,
    WedgeRule,
)
from drills.common.units import Duration, Size
from drills.model.spec import SpecModel as _Model

# -- faults ---------------------------------------------------------------------------------


class FaultSpec(_Model):
    """The fields every fault has. A fault family's model subclasses it and narrows ``kind``
    to its own ``Literal``; a third-party family does the same and names the model as the
    ``spec`` attribute of its injector (``injectors.base``), so that its faults validate, with
    file:line errors, exactly like the built-in ones."""

    # What the family is, for the runner, validation, the dry run and the safety policy to ask
    # (none of them names a kind). A plugin's family declares what applies to it; the defaults
    # are what an unknown family gets.
    kills: ClassVar[frozenset[str]] = frozenset()
    """The kinds of this family that take their target away (a kill, a stop, a deleted pod):
    what ``replacement_ready_within`` and the ``killed`` rule of a check's target look for."""
    replaced: ClassVar[frozenset[str] | None] = None
    """The kinds a phase with ``until: replaced`` can wait for: their injectors say during the
    run when the target is back (``Recovers``). ``None``, a plugin's default: any of its
    kinds, its injector tells at run time whether it can."""
    on_toxiproxy: ClassVar[bool] = False
    """Acts through Toxiproxy: an attached stack must name one (``stack.attach.toxiproxy``)."""
    on_hop: ClassVar[bool] = False
    """Acts through the harness's L7 hop (``drills.hop``)."""
    on_stack_process: ClassVar[bool] = False
    """Acts on a process of the embedded stack: the stack's state must be known."""
    hardware: ClassVar[str | None] = None
    """The hardware it needs (``"GPU"``): refused before the stack starts where there is none."""
    orchestrator: ClassVar[str | None] = None
    """The orchestrator it acts through (``"Docker"``, ``"Kubernetes"``): the dry run asks it
    what the fault would hit."""
    resolves: ClassVar[str] = "at run time"
    """How its target is found, in the dry run's words."""

    @property
    def daemon(self) -> str | None:
        """The remote daemon the fault acts through (a Docker host's URL), whose host the
        safety policy's ``allowed_hosts`` must allow; ``None``: none, or a local one."""
        return None

    kind: str
    target: str = Field(min_length=1)
    at: Duration = 0.0
    """Offset from the start of the phase."""
    for_: Duration | None = Field(default=None, alias="for")
    """How long the fault lasts; by default until the phase ends."""

    @field_validator("for_")
    @classmethod
    def _window(cls, value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise ValueError(
                "a fault lasts longer than 0s (e.g. for: 10s); leave 'for' out to keep it "
                "until its phase ends"
            )
        return value

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, use_attribute_docstrings=True
    )


class _ToxicBase(FaultSpec):
    """A Toxiproxy fault; ``target`` is the proxy (a hop of the stack: vllm-0, backup, ...)."""

    on_toxiproxy = True
    replaced = frozenset()

    stream: Literal["upstream", "downstream"] = "downstream"
    toxicity: float = Field(default=1.0, ge=0.0, le=1.0)

    def toxic_attributes(self) -> dict[str, int]:
        """Toxiproxy's attributes for this toxic, in Toxiproxy's own units."""
        return {}


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


class LatencyFault(_ToxicBase):
    kind: Literal["toxiproxy.latency"]
    latency: Duration
    jitter: Duration = 0.0

    def toxic_attributes(self) -> dict[str, int]:
        return {"latency": _ms(self.latency), "jitter": _ms(self.jitter)}


class DownFault(_ToxicBase):
    """The hop is cut: the proxy stops listening (connections are refused)."""

    kind: Literal["toxiproxy.down"]


class TimeoutFault(_ToxicBase):
    """Data stops flowing; the connection is closed after ``timeout`` (0: held open forever)."""

    kind: Literal["toxiproxy.timeout"]
    timeout: Duration = 0.0

    def toxic_attributes(self) -> dict[str, int]:
        return {"timeout": _ms(self.timeout)}


class BandwidthFault(_ToxicBase):
    kind: Literal["toxiproxy.bandwidth"]
    rate: Size
    """Bytes per second (Toxiproxy counts in KB/s; rounded down, at least 1)."""

    def toxic_attributes(self) -> dict[str, int]:
        return {"rate": max(1, self.rate // 1000)}


class ResetPeerFault(_ToxicBase):
    kind: Literal["toxiproxy.reset_peer"]
    timeout: Duration = 0.0

    def toxic_attributes(self) -> dict[str, int]:
        return {"timeout": _ms(self.timeout)}


class SlowCloseFault(_ToxicBase):
    kind: Literal["toxiproxy.slow_close"]
    delay: Duration

    def toxic_attributes(self) -> dict[str, int]:
        return {"delay": _ms(self.delay)}


class SlicerFault(_ToxicBase):
    kind: Literal["toxiproxy.slicer"]
    average_size: Size
    size_variation: Size = 0
    delay: Duration = 0.0

    def toxic_attributes(self) -> dict[str, int]:
        return {
            "average_size": self.average_size,
            "size_variation": self.size_variation,
            "delay": round(self.delay * 1_000_000),  # microseconds
        }


class LimitDataFault(_ToxicBase):
    kind: Literal["toxiproxy.limit_data"]
    bytes: Size

    def toxic_attributes(self) -> dict[str, int]:
        return {"bytes": self.bytes}


class _HopFault(FaultSpec):
    """A per-request fault of the harness's L7 hop (``drills.hop``); ``target`` is the hop (a
    model upstream: vllm-0, backup, ...). The rule's own fields come first in each subclass's
    bases, so that its ``kind`` is the one that counts."""

    on_hop = True
    replaced = frozenset()
    resolves = "the listener of that name on the stack's L7 hop (drills.hop), at run time"

    def rule(self) -> dict[str, Any]:
        """What the hop's control API is sent (the rule's fields, in its units)."""
        fields = set(type(self).model_fields) - set(FaultSpec.model_fields) | {"kind"}
        return self.model_dump(mode="json", include=fields)


class HopStatusFault(StatusRule, _HopFault):
    """Model calls answered with an HTTP error by the hop (429 with ``retry_after``, 500, 503)."""

    kind: Literal["hop.status"]


class HopFirstTokenDelayFault(FirstTokenDelayRule, _HopFault):
    """The first token (and the headers) of each answer held back for ``delay``."""

    kind: Literal["hop.first_token_delay"]


class HopStallFault(StallRule, _HopFault):
    """The stream stops for ``duration`` after ``after_chunks`` events (a hung decode)."""

    kind: Literal["hop.stall"]


class HopCutFault(CutRule, _HopFault):
    """The stream ends after ``after_chunks`` events, cleanly (``clean: true``) or not."""

    kind: Literal["hop.cut"]


class HopMalformedFault(MalformedRule, _HopFault):
    """One event of the stream is not JSON."""

    kind: Literal["hop.malformed"]


class HopWedgeFault(WedgeRule, _HopFault):
    """Model calls hang while ``/health`` answers 200 (the wedged engine)."""

    kind: Literal["hop.wedge"]


HOP_FAULTS: tuple[type[FaultSpec], ...] = (
    HopStatusFault,
    HopFirstTokenDelayFault,
    HopStallFault,
    HopCutFault,
    HopMalformedFault,
    HopWedgeFault,
)


class ProcessKillFault(FaultSpec):
    """Kill a component of the embedded stack (``target``: vllm-0, vllm-1, gateway, ...), its
    whole process group, the way a node loss or an OOM kill takes it. The supervisor brings a
    replacement up; the window (``for``, or the rest of the phase) is the time the drill watches
    the stack carry on without it."""

    kills = frozenset({"process.kill"})
    replaced = frozenset({"process.kill"})
    on_stack_process = True
    resolves = "the embedded stack's component of that name, at run time"

    kind: Literal["process.kill"]
    signal: Literal["SIGKILL", "SIGTERM"] = "SIGKILL"
    grace: Duration = 10.0
    """With SIGTERM: how long the process may take to exit before SIGKILL follows."""


class ProcessFreezeFault(FaultSpec):
    """Freeze a component (SIGSTOP on its process group): the hung worker that still holds its
    port and its connections. Thawed (SIGCONT) when the window ends."""

    replaced = frozenset()
    on_stack_process = True
    resolves = "the embedded stack's component of that name, at run time"

    kind: Literal["process.freeze"]


class DockerFault(FaultSpec):
    """A fault on containers. ``target`` selects them: a container name, or
    ``label:KEY=VALUE[,KEY=VALUE]``; ``mode`` says how many of those matched are hit."""

    kills = frozenset({"docker.kill", "docker.stop"})
    replaced = frozenset({"docker.kill", "docker.restart"})
    orchestrator = "Docker"
    resolves = "containers matching the selector, at run time"

    kind: Literal[
        "docker.kill", "docker.stop", "docker.restart", "docker.pause", "docker.disconnect"
    ]
    mode: Literal["one", "all"] = "one"
    signal: str = Field(default="SIGKILL", pattern=r"^SIG[A-Z0-9]+$")
    """docker.kill: the signal."""
    grace: Duration = 10.0
    """docker.stop / docker.restart: time to exit after SIGTERM."""
    network: str | None = None
    """docker.disconnect: the network to cut (default: every network of the container)."""
    host: str | None = Field(default=None, pattern=r"^(unix|tcp|ssh|http|https)://.+")
    """The Docker daemon: ``unix:///path``, ``tcp://HOST:PORT`` (TLS from ``DOCKER_TLS_VERIFY``
    and ``DOCKER_CERT_PATH``) or ``ssh://USER@HOST``; its host must be in the safety policy's
    ``allowed_hosts``. Default: ``$DOCKER_HOST``, else the current Docker context, else the
    local socket."""

    @property
    def selector(self) -> tuple[str | None, dict[str, str]]:
        """``(name, labels)`` for the Docker API."""
        if not self.target.startswith("label:"):
            return self.target, {}
        labels: dict[str, str] = {}
        for pair in self.target.removeprefix("label:").split(","):
            key, _, value = pair.partition("=")
            labels[key.strip()] = value.strip()
        return None, labels

    @model_validator(mode="after")
    def _selector_syntax(self) -> DockerFault:
        if self.target.startswith("label:"):
            pairs = self.target.removeprefix("label:").split(",")
            if not all("=" in p and p.split("=", 1)[0].strip() for p in pairs):
                raise ValueError(
                    f"target {self.target!r}: a label selector is label:KEY=VALUE[,KEY=VALUE]"
                )
        if self.network is not None and self.kind != "docker.disconnect":
            raise ValueError("'network' applies to docker.disconnect only")
        return self

    @property
    def daemon(self) -> str | None:
        return self.host


class GpuMemoryPressureFault(FaultSpec):
    """Hold ``share`` of GPU ``target``'s memory (a device index) for the window: the KV cache
    squeezed by another tenant. Released on revert."""

    replaced = frozenset()
    hardware = "GPU"
    resolves = "the GPU of that index on this host, through NVML, at run time"

    kind: Literal["gpu.memory_pressure"]
    target: str = Field(pattern=r"^[0-9]+$")
    share: float = Field(gt=0, le=0.95)


class ToolSaturateFault(FaultSpec):
    """Flood MCP tool ``target`` (``search_kb``, ...) with ``concurrency`` calls at once for the
    window, as another tenant's agents would; stopped on revert."""

    replaced = frozenset()
    resolves = "the MCP tool of that name on the stack's tool server, flooded at run time"

    kind: Literal["tool.saturate"]
    target: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    concurrency: int = Field(default=16, ge=1, le=256)
    """Sessions the flood opens, and calls it keeps in flight (fewer with ``queue_wait``)."""
    queue_wait: Duration | None = Field(default=None, gt=0)
    """Size the flood to the tool server's speed: before the drill, time a burst of calls,
    and keep ``queue_wait`` x the measured calls per second in flight (at most
    ``concurrency``), so that a call arriving in the window waits about this long whatever
    the machine. Unset: all ``concurrency`` sessions call at once."""
    arguments: dict[str, Any] = Field(
        default_factory=lambda: {"query": "what do I do when the model answers slowly?"}
    )
    agent: str = "flood"
    """The agent id the flood calls as (it must be allowed the tool)."""
    call_timeout: Duration = 30.0
    url: str | None = None
    """The tool server (default: the embedded stack's ``tools`` component)."""


class KubernetesFault(FaultSpec):
    """A fault on a Kubernetes cluster. ``target`` is, by kind: a label selector of the pods to
    delete (``app=vllm,role=primary``), the node to cordon or drain, the deployment to scale.
    Namespaces and contexts must be allowed (the scenario's ``kubernetes`` section and the
    safety policy) before anything is called."""

    kills = frozenset({"kubernetes.delete_pod"})
    replaced = frozenset({"kubernetes.delete_pod"})
    orchestrator = "Kubernetes"
    resolves = "pods, nodes or deployments listed below (read from the cluster now)"

    kind: Literal[
        "kubernetes.delete_pod", "kubernetes.cordon", "kubernetes.drain", "kubernetes.scale"
    ]
    namespace: str = Field(default="default", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    gpu: bool = False
    """delete_pod: only pods that request a GPU (``nvidia.com/gpu``)."""
    node: str | None = None
    """delete_pod: only pods running on this node."""
    mode: Literal["one", "all", "count", "percent"] = "one"
    count: int | None = Field(default=None, ge=1)
    percent: float | None = Field(default=None, gt=0, le=100)
    grace: Duration = 0.0
    """delete_pod: the pods' termination grace period."""
    replicas: int | None = Field(default=None, ge=0)
    """scale: the replica count during the fault (restored on revert)."""
    eviction_timeout: Duration = Field(default=60.0, gt=0)
    """drain: how long to keep retrying an eviction that a PodDisruptionBudget refuses (HTTP
    429), as ``kubectl drain`` does; every refusal is in the fault's evidence."""

    @model_validator(mode="after")
    def _coherent(self) -> KubernetesFault:
        if self.mode == "count" and self.count is None:
            raise ValueError("mode 'count' needs 'count'")
        if self.mode == "percent" and self.percent is None:
            raise ValueError("mode 'percent' needs 'percent'")
        if self.kind == "kubernetes.scale" and self.replicas is None:
            raise ValueError("kubernetes.scale needs 'replicas'")
        if self.kind != "kubernetes.delete_pod" and (self.gpu or self.node):
            raise ValueError("'gpu' and 'node' select pods: kubernetes.delete_pod only")
        return self


class KubernetesScope(_Model):
    """Where a drill may act on Kubernetes; anything else is refused before any call."""

    kubeconfig: str | None = None
    """Default ``$KUBECONFIG`` or ``~/.kube/config`` (relative to the scenario file)."""
    context: str | None = None
    """Default: the kubeconfig's current context."""
    allowed_namespaces: list[str] = Field(min_length=1)
    allowed_contexts: list[str] = Field(min_length=1)


BUILTIN_FAULTS: tuple[type[FaultSpec], ...] = (
    ToolSaturateFault,
    GpuMemoryPressureFault,
    KubernetesFault,
    ProcessKillFault,
    ProcessFreezeFault,
    DockerFault,
    LatencyFault,
    DownFault,
    TimeoutFault,
    BandwidthFault,
    ResetPeerFault,
    SlowCloseFault,
    SlicerFault,
    LimitDataFault,
    *HOP_FAULTS,
)
"""The fault models of the built-in families; plugins add theirs (``fault_models``)."""


def fault_models() -> tuple[type[FaultSpec], ...]:
    """Every fault model a scenario may use: the built-in ones and those of the injectors that
    plugins register (``injectors.base.plugin_specs``)."""
    # Imported here: the injectors build on this model, so it reaches their registry only
    # when asked (at the top this would be an import cycle).
    from injectors.base import plugin_specs

    extra = [m for m in plugin_specs() if isinstance(m, type) and issubclass(m, FaultSpec)]
    return (*BUILTIN_FAULTS, *(m for m in extra if m not in BUILTIN_FAULTS))


@lru_cache(maxsize=8)
def _fault_adapter(models: tuple[type[FaultSpec], ...]) -> TypeAdapter[Any]:
    union: Any = Annotated[Union[models], Field(discriminator="kind")]  # noqa: UP007
    return TypeAdapter(union)


def _validate_fault(value: Any) -> FaultSpec:
    # The union is assembled when a scenario is validated, not when this module is imported:
    # a plugin's fault kind validates exactly like a built-in one.
    if isinstance(value, FaultSpec):
        return value
    if isinstance(value, dict) and isinstance(value.get("kind"), str):
        # Imported here: as in fault_models, the injectors build on this model.
        from injectors.base import plugin_problem

        problem = plugin_problem(value["kind"])
        if problem is not None:  # a plugin's kind that cannot be used: say why, not "unknown"
            raise ValueError(str(problem))
    fault: FaultSpec = _fault_adapter(fault_models()).validate_python(value)
    return fault


Fault = Annotated[SerializeAsAny[FaultSpec], PlainValidator(_validate_fault)]
"""One fault of a phase: a model of ``fault_models()``, chosen by its ``kind``."""


def kinds_of(model: type[FaultSpec]) -> tuple[str, ...]:
    """The ``kind`` values a fault model accepts (its ``Literal``)."""
    return tuple(str(k) for k in get_args(model.model_fields["kind"].annotation))


def family_of(kind: str) -> type[FaultSpec] | None:
    """The model of the family that ``kind`` belongs to (a built-in or a plugin's); ``None``
    for a kind no family declares (then nothing is assumed of it)."""
    for model in fault_models():
        if kind in kinds_of(model):
            return model
    return None


def kills(kind: str) -> bool:
    """Whether a fault of ``kind`` takes its target away (``FaultSpec.kills``)."""
    family = family_of(kind)
    return family is not None and kind in family.kills


def waits_for_replacement(kind: str) -> bool:
    """Whether a phase with ``until: replaced`` can wait for a fault of ``kind``: one its
    family declares (``FaultSpec.replaced``), or any kind of a family that leaves it to its
    injector (``Recovers``)."""
    family = family_of(kind)
    if family is None:
        return True  # a kind of no known family: its injector tells, or the run says why not
    return family.replaced is None or kind in family.replaced


def replaced_kinds() -> tuple[str, ...]:
    """The built-in kinds a phase with ``until: replaced`` can wait for (for messages)."""
    return tuple(
        sorted(k for m in BUILTIN_FAULTS for k in kinds_of(m) if m.replaced and k in m.replaced)
    )
