"""Small statistics the checks and the reports share."""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

__all__ = ["CONFIDENCE", "percentile", "quantile_interval", "wilson"]

CONFIDENCE = 0.95
"""The confidence of the intervals the checks report."""


def wilson(hits: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval of the share ``hits / n`` at ``confidence``: where the true
    share lies, given ``n`` requests. Unlike the normal approximation it stays inside [0, 1]
    and means something at 0 of 25 or 25 of 25 (24 of 25: 0.805 to 0.993)."""
    if n <= 0 or not 0 <= hits <= n:
        raise ValueError(f"a share needs 0 <= hits <= n and n > 0 (got {hits} of {n})")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = hits / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    # Exactly 0 (1) at 0 (n) hits, where the formula's rounding would leave 1e-17.
    low = 0.0 if hits == 0 else max(0.0, centre - half)
    high = 1.0 if hits == n else min(1.0, centre + half)
    return low, high


def _binomial_cdf(n: int, p: float) -> list[float]:
    """``P(B <= k)`` for ``k`` in ``0..n``, ``B ~ Binomial(n, p)``, ``0 < p < 1`` (in log space:
    ``p ** n`` underflows long before ``n`` is large)."""
    logs = [
        math.lgamma(n + 1)
        - math.lgamma(k + 1)
        - math.lgamma(n - k + 1)
        + k * math.log(p)
        + (n - k) * math.log1p(-p)
        for k in range(n + 1)
    ]
    top = max(logs)
    weights = [math.exp(x - top) for x in logs]
    total = sum(weights)
    cdf, running = [], 0.0
    for w in weights:
        running += w
        cdf.append(running / total)
    return cdf


def quantile_interval(
    values: Sequence[float], q: float, confidence: float = CONFIDENCE
) -> tuple[float | None, float | None]:
    """A distribution-free interval for the ``q`` quantile (``0 < q < 1``) of what ``values``
    are independent samples of: the order statistics whose ranks the binomial count of samples
    below the quantile puts around it. ``None`` on a side the samples cannot bound: a p99 from
    40 requests has no upper bound at 95% (every one of them is below the true p99 two times
    in three), so no "p99 below X" from so few is conclusive."""
    xs = sorted(values)
    n = len(xs)
    if n == 0 or not 0 < q < 1:
        raise ValueError(f"a quantile interval needs samples and 0 < q < 1 (got {n}, {q})")
    alpha = (1 - confidence) / 2
    cdf = _binomial_cdf(n, q)
    # X_(l) > the quantile when fewer than l samples fall below it: P = cdf[l - 1].
    low = max((k for k in range(1, n + 1) if cdf[k - 1] <= alpha), default=None)
    # X_(u) < the quantile when u or more samples fall below it: P = 1 - cdf[u - 1].
    high = min((k for k in range(1, n + 1) if 1 - cdf[k - 1] <= alpha), default=None)
    return (xs[low - 1] if low else None, xs[high - 1] if high else None)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
