"""Small statistics the checks and the reports share."""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

__all__ = ["CONFIDENCE", "percentile", "wilson"]

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


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
