"""The fault models of a drill's phases: ``Fault``, which validates one of them by its
``kind``, a built-in family's or a plugin's. Each built-in family's spec sits beside its
injector, in ``injectors/specs/`` (Toxiproxy toxics, the L7 hop's rules, process, Docker,
Kubernetes, GPU and tool faults); they are re-exported here, and by ``drills.model.scenario``."""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any, Union, get_args

from pydantic import Field, PlainValidator, SerializeAsAny, TypeAdapter

from drills.model.fault_spec import FaultSpec
from drills.model.spec import SpecModel as _Model
from injectors.specs.docker import DockerFault
from injectors.specs.gpu import GpuMemoryPressureFault
from injectors.specs.hop import (
    HOP_FAULTS,
    HopCutFault,
    HopFirstTokenDelayFault,
    HopMalformedFault,
    HopStallFault,
    HopStatusFault,
    HopWedgeFault,
)
from injectors.specs.kubernetes import KubernetesFault
from injectors.specs.process import ProcessFreezeFault, ProcessKillFault
from injectors.specs.tool import ToolSaturateFault
from injectors.specs.toxiproxy import (
    BandwidthFault,
    DownFault,
    LatencyFault,
    LimitDataFault,
    ResetPeerFault,
    SlicerFault,
    SlowCloseFault,
    TimeoutFault,
)

__all__ = [
    "BUILTIN_FAULTS",
    "HOP_FAULTS",
    "BandwidthFault",
    "DockerFault",
    "DownFault",
    "Fault",
    "FaultSpec",
    "GpuMemoryPressureFault",
    "HopCutFault",
    "HopFirstTokenDelayFault",
    "HopMalformedFault",
    "HopStallFault",
    "HopStatusFault",
    "HopWedgeFault",
    "KubernetesFault",
    "KubernetesScope",
    "LatencyFault",
    "LimitDataFault",
    "ProcessFreezeFault",
    "ProcessKillFault",
    "ResetPeerFault",
    "SlicerFault",
    "SlowCloseFault",
    "TimeoutFault",
    "ToolSaturateFault",
    "family_of",
    "fault_models",
    "kills",
    "kinds_of",
    "replaced_kinds",
    "waits_for_replacement",
]


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
