"""GPU telemetry (NVML, through ``nvidia-ml-py``) and the GPU-memory-pressure fault.

Telemetry: per device, utilisation and memory used/total, sampled like a Prometheus scrape
(source ``gpu``), so ``prometheus`` checks read it. Pressure: a helper process holds a share of
one device's memory (CUDA driver API through ctypes: no framework needed) for the fault's window
and frees it by exiting on revert; evidence is NVML's memory reading before and after.

Without NVML (no driver, no GPU) both say so, naming the reason: the telemetry is recorded as
unavailable (checks on it fail as "unavailable", never pass), and the pressure fault does not
land (the drill stops, saying why).
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import time
from typing import Any

from drills.common.errors import DrillsError, InputError
from drills.common.system import revert_helper_entry, start_time
from injectors.base import InjectionContext

__all__ = [
    "GpuUnavailable",
    "MemoryPressure",
    "NeedsGpu",
    "gpu_samples",
    "nvml_status",
    "revert_entry",
]


class GpuUnavailable(DrillsError):
    """No usable NVML / CUDA driver here: GPU telemetry and faults cannot run."""


class NeedsGpu(InputError):
    """A drill with a GPU fault, where NVML finds no NVIDIA GPU (or not the one named): it is
    refused before anything starts (exit 2), never run and never passed."""


def _nvml() -> Any:
    try:
        # Imported here: NVML's bindings may be missing (no NVIDIA driver): said, not raised.
        import pynvml
    except ImportError as exc:
        raise GpuUnavailable(f"nvidia-ml-py is not installed ({exc})") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise GpuUnavailable(f"NVML unavailable: {exc}") from None
    return pynvml


def nvml_status() -> dict[str, Any]:
    """``{"available": True, "devices": [...]}`` or ``{"available": False, "reason": ...}``."""
    try:
        nvml = _nvml()
    except GpuUnavailable as exc:
        return {"available": False, "reason": str(exc)}
    try:
        count = nvml.nvmlDeviceGetCount()
        devices = []
        for index in range(count):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(handle)
            devices.append(
                {"index": index, "name": name if isinstance(name, str) else name.decode()}
            )
        return {
            "available": True,
            "driver": str(nvml.nvmlSystemGetDriverVersion()),
            "devices": devices,
        }
    finally:
        nvml.nvmlShutdown()


def gpu_samples() -> list[dict[str, Any]]:
    """One scrape: per device utilisation (%), memory used and total (bytes)."""
    nvml = _nvml()
    try:
        samples = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            rates = nvml.nvmlDeviceGetUtilizationRates(handle)
            labels = {"gpu": str(index)}
            samples += [
                {"name": "gpu_utilization_percent", "labels": labels, "value": float(rates.gpu)},
                {"name": "gpu_memory_used_bytes", "labels": labels, "value": float(memory.used)},
                {"name": "gpu_memory_total_bytes", "labels": labels, "value": float(memory.total)},
            ]
        return samples
    finally:
        nvml.nvmlShutdown()


def _memory(index: int) -> tuple[int, int]:
    nvml = _nvml()
    try:
        info = nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(index))
        return int(info.used), int(info.total)
    finally:
        nvml.nvmlShutdown()


class MemoryPressure:
    """``gpu.memory_pressure``: hold ``share`` of device ``target``'s memory for the window."""

    def __init__(self, fault: Any, context: InjectionContext, index: int) -> None:
        self.fault = fault
        self.kind: str = fault.kind
        self.target: str = fault.target
        self.holder: subprocess.Popen[bytes] | None = None
        self.entry: dict[str, Any] = {}

    def ledger_entry(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.target, **self.entry}

    def preflight(self) -> dict[str, Any]:
        """The device it would squeeze, read through NVML (nothing is held); ``NeedsGpu`` when
        there is no NVIDIA GPU here, or no device of that index."""
        status = nvml_status()
        if not status["available"]:
            raise NeedsGpu(
                f"{self.kind} on GPU {self.target} needs an NVIDIA GPU on this host "
                f"(NVML found none: {status['reason']})"
            )
        devices = status["devices"]
        index = int(self.target)
        if index >= len(devices):
            found = ", ".join(f"{d['index']} ({d['name']})" for d in devices)
            raise NeedsGpu(
                f"{self.kind}: there is no GPU {index} on this host; NVML found "
                f"{len(devices)}: {found}"
            )
        used, total = _memory(index)
        return {
            "device": index,
            "name": devices[index]["name"],
            "memory_used": used,
            "memory_total": total,
            "would_hold_bytes": int(total * self.fault.share),
        }

    def apply(self) -> dict[str, Any]:
        device = int(self.target)
        used, total = _memory(device)
        want = int(total * self.fault.share)
        self.holder = subprocess.Popen(
            [sys.executable, "-m", "injectors.gpu", str(device), str(want)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        assert self.holder.stdout is not None
        line = self.holder.stdout.readline().decode().strip()  # "held N" once allocated
        if not line.startswith("held"):
            err = self.holder.stderr.read().decode() if self.holder.stderr else ""
            self.holder.wait()
            raise GpuUnavailable(f"could not hold GPU {device} memory: {line or err.strip()}")
        self.entry = {"pid": self.holder.pid, "starttime": start_time(self.holder.pid)}
        after, _ = _memory(device)
        return {
            "applied_at": time.time(),
            "device": device,
            "requested_bytes": want,
            "memory_used_before": used,
            "memory_used_after": after,
            "memory_total": total,
            "holder_pid": self.holder.pid,
        }

    def revert(self) -> dict[str, Any]:
        outcome = revert_entry(self.ledger_entry())
        if self.holder is not None:
            self.holder.wait(timeout=30)
        return {**outcome, "finished_at": time.time()}


def revert_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """Stop the holder process (its exit frees the memory); harmless when it is gone."""
    return revert_helper_entry(
        entry, "the GPU memory holder", "released (holder stopped)", "nothing held"
    )


def _hold(device: int, size: int) -> None:
    """In the helper process: allocate ``size`` bytes on ``device`` and wait for SIGTERM."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        print(f"no CUDA driver: {exc}", flush=True)
        sys.exit(1)
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    for call, args in (
        ("cuInit", (0,)),
        ("cuDeviceGet", (ctypes.byref(dev), device)),
        ("cuCtxCreate_v2", (ctypes.byref(ctx), 0, dev)),
        ("cuMemAlloc_v2", (ctypes.byref(ptr), ctypes.c_size_t(size))),
    ):
        code = getattr(cuda, call)(*args)
        if code != 0:
            print(f"{call} failed with CUDA error {code}", flush=True)
            sys.exit(1)
    print(f"held {size}", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    _hold(int(sys.argv[1]), int(sys.argv[2]))
