"""Toxiproxy's faults: each of its toxics, and ``toxiproxy.down``, which cuts a proxy.

The spec of the family whose injector is ``injectors.toxiproxy``: what a scenario may write
(validated by ``drills.model.faults.Fault``), what the family needs of the stack, how it
previews. It imports only the model's base and the low layer."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from drills.common.units import Duration, Size
from drills.model.fault_spec import FaultSpec


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
