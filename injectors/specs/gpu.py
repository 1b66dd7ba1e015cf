"""GPU faults: ``gpu.memory_pressure``.

The spec of the family whose injector is ``injectors.gpu``: what a scenario may write
(validated by ``drills.model.faults.Fault``), what the family needs of the stack, how it
previews. It imports only the model's base and the low layer."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from drills.model.fault_spec import FaultSpec


class GpuMemoryPressureFault(FaultSpec):
    """Hold ``share`` of GPU ``target``'s memory (a device index) for the window: the KV cache
    squeezed by another tenant. Released on revert."""

    replaced = frozenset()
    hardware = "GPU"
    resolves = "the GPU of that index on this host, through NVML, at run time"

    kind: Literal["gpu.memory_pressure"]
    target: str = Field(pattern=r"^[0-9]+$")
    share: float = Field(gt=0, le=0.95)
