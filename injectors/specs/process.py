"""Faults on the embedded stack's processes: ``process.kill`` and ``process.freeze``.

The spec of the family whose injector is ``injectors.process``: what a scenario may write
(validated by ``drills.model.faults.Fault``), what the family needs of the stack, how it
previews. It imports only the model's base and the low layer."""

from __future__ import annotations

from typing import Literal

from drills.common.units import Duration
from drills.model.fault_spec import FaultSpec


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
