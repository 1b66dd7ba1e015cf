"""The engines' own account, read from their metrics: ``engine.waiting``, ``engine.running``,
``engine.kv_cache``, ``engine.preemptions`` and ``engine.requests.REASON``.

Where the harness can reach an engine's ``/metrics`` (the embedded stack's engines are scraped
by name; a stack of the user's lists them under ``stack.attach.metrics``), the engine is a
source of its own: neither the gateway's word nor the client's view. A queue that forms in the
engines rather than at the gateway, KV cache that fills, requests preempted, and work the
engine began and then dropped because its caller had gone (``finished_reason="abort"``: a
gateway timeout shorter than the work) are seen there and nowhere else.

Every engine the run scraped counts, unless ``source`` names one. A gauge is judged at its
worst engine and moment (the largest value any engine reported in the window); a counter by
its increase over the window summed over the engines, across restarts (a killed engine's
replacement starts its counters at zero, and that is a reset, not a negative count), as
Prometheus' ``increase`` reads one. Each metric has the names vLLM gave it across versions,
newest first.
"""

from __future__ import annotations

from dataclasses import dataclass

from drills.checks.base import (
    Evaluation,
    expected_text,
    formatted,
    increase_of,
    result,
    within_bounds,
)
from drills.model.expect import Check
from drills.model.journal import CheckResult

__all__ = ["ENGINE_METRICS", "check_engine", "engine_sources"]


@dataclass(frozen=True)
class EngineMetric:
    names: tuple[str, ...]
    """The metric's names, newest vLLM first (the first one a scrape has is read)."""
    counter: bool
    what: str


ENGINE_METRICS: dict[str, EngineMetric] = {
    "waiting": EngineMetric(("vllm:num_requests_waiting",), False, "requests queued"),
    "running": EngineMetric(("vllm:num_requests_running",), False, "requests running"),
    "kv_cache": EngineMetric(
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), False, "KV cache in use"
    ),
    "preemptions": EngineMetric(("vllm:num_preemptions_total",), True, "preemptions"),
    "requests": EngineMetric(("vllm:request_success_total",), True, "requests finished"),
}
"""``engine.NAME``: what each reads from a vLLM engine's ``/metrics``."""

ENGINE_PREFIX = "vllm:"


def engine_sources(ev: Evaluation) -> list[str]:
    """The probe sources that are engines: their scrapes carry vLLM's metrics."""
    return sorted(
        {p.source for p in ev.probes if any(s.name.startswith(ENGINE_PREFIX) for s in p.samples)}
    )


def _points(
    ev: Evaluation,
    source: str,
    metric: EngineMetric,
    labels: dict[str, str],
    start: float,
    end: float,
) -> tuple[str | None, list[tuple[float, float]]]:
    """The engine's values of ``metric`` in ``[start, end]`` (a counter also keeps the last
    scrape before ``start``, its starting point), and which of its names it had."""
    scrapes = sorted((p for p in ev.probes if p.source == source), key=lambda p: p.time)
    points: list[tuple[float, float]] = []
    found: str | None = None
    for probe in scrapes:
        if probe.time > end:
            break
        values: dict[str, float] = {}
        for sample in probe.samples:
            if sample.name in metric.names and all(
                sample.labels.get(k) == v for k, v in labels.items()
            ):
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
        name = next((n for n in metric.names if n in values), None)
        if name is None:
            continue
        found = found or name
        if probe.time < start:
            if metric.counter:
                points = [(probe.time, values[name])]
            continue
        points.append((probe.time, values[name]))
    return found, points


def check_engine(check: Check, ev: Evaluation) -> CheckResult:
    """``engine.NAME`` (module docstring)."""
    start, end = ev.window(check.during)
    _, _, rest = check.check.partition(".")
    key, _, reason = rest.partition(".")
    metric = ENGINE_METRICS[key]
    labels = {"finished_reason": reason} if reason else {}
    sources = [check.source] if check.source else engine_sources(ev)
    if not sources:
        return result(
            check,
            "engine",
            None,
            0,
            "no engine's metrics were scraped in this run: the embedded stack's engines are "
            "scraped by name; on your own stack list each under stack.attach.metrics "
            "(e.g. vllm-0: http://host:8000/metrics)",
        )
    per: dict[str, float] = {}
    samples, names = 0, set()
    for source in sources:
        name, points = _points(ev, source, metric, labels, start, end)
        if not points or (metric.counter and len(points) < 2):
            continue
        names.add(name)
        samples += len(points)
        values = [v for _, v in points]
        per[source] = increase_of(points) if metric.counter else max(values)
    family = "engine_kv_cache" if key == "kv_cache" else "engine"
    what = f"{metric.what}{f' ({reason})' if reason else ''}"
    if not per:
        return result(
            check,
            family,
            None,
            0,
            f"no scrape of {', '.join(sources)} in the window had {metric.names[0]}"
            f"{f' {labels}' if labels else ''}",
        )
    observed = sum(per.values()) if metric.counter else max(per.values())
    how = "increase, summed" if metric.counter else "largest"
    account = ", ".join(f"{s} {formatted(v, family)}" for s, v in per.items())
    said = f"the engines' own {', '.join(sorted(n for n in names if n))}: {how}; {account}"
    verdict = (
        "within bounds"
        if within_bounds(check, observed)
        else f"{what}: observed {formatted(observed, family)}, expected {expected_text(check, '')}"
    )
    return result(check, family, observed, samples, f"{verdict} ({said})")
