"""The one definition of a percentile that every sluice number uses. Pure.

Linear interpolation between the closest ranks (Hyndman and Fan's type 7, numpy's and
``statistics.quantiles(method="inclusive")``'s default): of ``n`` sorted values, the ``p``-th
percentile sits at the 0-based rank ``h = (n - 1) * p / 100``; between the values at
``floor(h)`` and ``floor(h) + 1`` it is interpolated linearly. So p0 is the minimum, p100 the
maximum, p50 of an even count the mean of the middle two, and one value is every percentile
of itself. ``sluice batch``'s summary (over its latency histogram), ``sluice loadtest`` and the
benchmarks that report percentiles all compute them here.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["interpolate", "percentile"]


def interpolate(count: int, pct: float, value_at: Callable[[int], float]) -> float:
    """The ``pct`` percentile (0-100) of ``count`` values, given ``value_at(k)``: the value of
    0-based rank ``k`` in sorted order (a histogram can answer it without keeping the values).
    ``value_at`` is asked for at most two ranks.

    Raises:
        ValueError: no values, or ``pct`` outside 0-100.
    """
    if count <= 0:
        raise ValueError("percentile of no samples")
    if not 0 <= pct <= 100:
        raise ValueError(f"a percentile is between 0 and 100, not {pct!r}")
    rank = (count - 1) * pct / 100
    low = math.floor(rank)
    below = value_at(low)
    if rank == low:
        return below
    return below + (value_at(low + 1) - below) * (rank - low)


def percentile(ordered: Sequence[float], pct: float) -> float:
    """The ``pct`` percentile (0-100) of ``ordered``, which must be sorted and non-empty."""
    return interpolate(len(ordered), pct, ordered.__getitem__)
