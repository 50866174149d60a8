"""Percentiles and summaries of samples. Pure.

Percentiles interpolate linearly between the closest ranks (numpy's default, "type 7"), so
p50 of an even count is the mean of the middle two and p100 is the maximum.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["PERCENTILES", "percentile", "summarize"]

PERCENTILES: tuple[tuple[str, float], ...] = (
    ("p50", 50.0),
    ("p90", 90.0),
    ("p95", 95.0),
    ("p99", 99.0),
    ("p99.9", 99.9),
)


def percentile(ordered: Sequence[float], pct: float) -> float:
    """The ``pct`` percentile (0-100) of ``ordered``, which must be sorted and non-empty."""
    if not ordered:
        raise ValueError("percentile of no samples")
    rank = (len(ordered) - 1) * pct / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(samples: Sequence[float]) -> dict[str, float | int | None]:
    """``count``, ``mean``, ``min``, ``max``, ``std`` and every percentile of
    :data:`PERCENTILES` (all None but ``count`` for no samples)."""
    if not samples:
        empty: dict[str, float | int | None] = {"count": 0}
        for name in ("mean", "min", "max", "std", *(name for name, _ in PERCENTILES)):
            empty[name] = None
        return empty
    ordered = sorted(samples)
    mean = math.fsum(ordered) / len(ordered)
    var = math.fsum((x - mean) ** 2 for x in ordered) / len(ordered)
    out: dict[str, float | int | None] = {
        "count": len(ordered),
        "mean": mean,
        "min": ordered[0],
        "max": ordered[-1],
        "std": math.sqrt(var),
    }
    for name, pct in PERCENTILES:
        out[name] = percentile(ordered, pct)
    return out
