"""Agent tool faults: ``tool.saturate``.

The spec of the family whose injector is ``injectors.tool``: what a scenario may write
(validated by ``drills.model.faults.Fault``), what the family needs of the stack, how it
previews. It imports only the model's base and the low layer."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from drills.common.units import Duration
from drills.model.fault_spec import FaultSpec


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
