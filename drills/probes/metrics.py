"""Probes: Prometheus scrapes of the stack's parts on an interval, kept for the journal.

A source is a metrics URL, or a callable that returns samples itself (the retrieval recall
probe, ``drills.probes.retrieval``); ``every`` slows a source down to its own interval."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from drills.common.prometheus import parse_samples
from injectors.gpu import GpuUnavailable, gpu_samples, nvml_status

__all__ = ["Prober"]

logger = logging.getLogger(__name__)


class Prober:
    """Scrapes ``sources`` (name -> metrics URL) every ``interval`` seconds in a thread."""

    def __init__(
        self,
        sources: dict[str, str | Callable[[], list[dict[str, Any]]]],
        interval: float,
        gpu: bool = False,
        every: dict[str, float] | None = None,
    ) -> None:
        self.sources = sources
        self.interval = interval
        self.every = every or {}
        self._last: dict[str, float] = {}
        self.results: list[dict[str, Any]] = []
        self.failures: dict[str, int] = {}
        self.gpu: dict[str, Any] | None = None
        """With ``gpu``: NVML's status (``available``, devices or the reason it is not)."""
        if gpu:
            self.gpu = nvml_status()
            if not self.gpu["available"]:
                logger.warning("GPU telemetry unavailable: %s", self.gpu["reason"])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="drills-probes", daemon=True)
        self._client = httpx.Client(timeout=min(interval, 2.0))

    def scrape_once(self, *, all_sources: bool = False) -> None:
        for source, url in self.sources.items():
            started = time.time()
            if not all_sources and started - self._last.get(source, 0.0) < self.every.get(
                source, 0.0
            ):
                continue
            self._last[source] = started
            try:
                if callable(url):
                    samples = url()
                else:
                    response = self._client.get(url)
                    response.raise_for_status()
                    samples = parse_samples(response.text)
            except (httpx.HTTPError, ValueError, OSError) as exc:
                self.failures[source] = self.failures.get(source, 0) + 1
                self.results.append(
                    {"time": started, "source": source, "error": str(exc)[:200], "samples": []}
                )
                continue
            result: dict[str, Any] = {"time": started, "source": source, "samples": samples}
            if callable(url):
                # A probe that runs queries takes a while: a check uses only runs that lie
                # entirely inside its window (one straddling the fault measured both sides).
                result["ended"] = time.time()
            self.results.append(result)
        if self.gpu is not None and self.gpu["available"]:
            started = time.time()
            try:
                self.results.append({"time": started, "source": "gpu", "samples": gpu_samples()})
            except GpuUnavailable as exc:
                self.failures["gpu"] = self.failures.get("gpu", 0) + 1
                self.results.append(
                    {"time": started, "source": "gpu", "error": str(exc), "samples": []}
                )

    def _loop(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            self.scrape_once()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - began)))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.scrape_once(all_sources=True)  # a last picture after every fault is gone
        self._client.close()
