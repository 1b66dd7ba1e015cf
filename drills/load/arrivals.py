"""Open-loop arrival schedules: the gaps between requests for a rate and an arrival model.

Pure (no gevent, no I/O), so the Locust process, the runner and the tests share one definition.
The models are those of ``vllm bench serve`` and GuideLLM: ``constant`` gaps of ``1/rate``,
``poisson`` arrivals (exponential gaps) and ``gamma`` gaps of shape ``burstiness`` (1 is
poisson; below 1 burstier, above 1 more even), every one with mean ``1/rate``.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Literal

__all__ = ["Arrival", "dispersion", "expected_cv", "gaps", "weighted_cycle"]

Arrival = Literal["constant", "poisson", "gamma"]


def gaps(
    rate: float, arrival: Arrival, burstiness: float | None = None, rng: random.Random | None = None
) -> Iterator[float]:
    """Seconds between consecutive requests, endlessly; their mean is ``1/rate``."""
    if rate <= 0:
        raise ValueError(f"rate must be above 0 requests/s, not {rate!r}")
    rng = rng or random.Random()
    if arrival == "constant":
        while True:
            yield 1.0 / rate
    elif arrival == "poisson":
        while True:
            yield rng.expovariate(rate)
    elif arrival == "gamma":
        if burstiness is None or burstiness <= 0:
            raise ValueError(f"gamma arrivals need a burstiness above 0, not {burstiness!r}")
        scale = 1.0 / (rate * burstiness)
        while True:
            yield rng.gammavariate(burstiness, scale)
    else:
        raise ValueError(f"unknown arrival {arrival!r}; expected constant, poisson or gamma")


def expected_cv(arrival: Arrival, burstiness: float | None = None) -> float:
    """The coefficient of variation (standard deviation over mean) of the model's gaps."""
    if arrival == "constant":
        return 0.0
    if arrival == "poisson":
        return 1.0
    if burstiness is None or burstiness <= 0:
        raise ValueError(f"gamma arrivals need a burstiness above 0, not {burstiness!r}")
    return 1.0 / math.sqrt(burstiness)


def dispersion(starts: Sequence[float]) -> tuple[float, float] | None:
    """``(rate, cv)`` of the arrivals at ``starts`` (epoch seconds, any order): requests per
    second over the span, and the coefficient of variation of the gaps; ``None`` with fewer
    than three arrivals."""
    ordered = sorted(starts)
    if len(ordered) < 3:
        return None
    deltas = [b - a for a, b in itertools.pairwise(ordered)]
    span = ordered[-1] - ordered[0]
    if span <= 0:
        return None
    mean = span / len(deltas)
    var = sum((d - mean) ** 2 for d in deltas) / (len(deltas) - 1)
    return len(deltas) / span, math.sqrt(var) / mean


def weighted_cycle(weights: Mapping[str, float]) -> Iterator[str]:
    """Kinds in proportion to their weights, interleaved as evenly as the weights allow and the
    same every run (smooth weighted round robin, as nginx balances): ``{brief: 1, lookup: 1}``
    alternates. A random draw left a drill's sample to chance: six requests in a row of one
    kind came once in a CI run, and a check of the other kind had nothing to judge."""
    current = dict.fromkeys(weights, 0.0)
    total = float(sum(weights.values()))
    while True:
        for kind, weight in weights.items():
            current[kind] += weight
        pick = max(current, key=lambda kind: current[kind])
        current[pick] -= total
        yield pick
