"""What the harness reads from the stack while a drill runs: Prometheus scrapes of every
source (``metrics``), NVML samples, and the retrieval recall probe (``retrieval``)."""

from __future__ import annotations

from drills.common.prometheus import parse_samples
from drills.probes.metrics import Prober

__all__ = ["Prober", "parse_samples"]
