"""Percentiles, summaries and confidence intervals of samples. Pure.

Percentiles interpolate linearly between the closest ranks (numpy's default, "type 7"), so
p50 of an even count is the mean of the middle two and p100 is the maximum. This is the one
definition every load-test number uses.

Confidence intervals (:func:`confidence_intervals`) are 95 % percentile-bootstrap intervals
of the mean and of each percentile: 200 resamples drawn with a fixed seed, so the same samples
always give the same interval. Past :data:`BOOTSTRAP_LIMIT` samples the bootstrap's cost
(a sort per resample) is not worth it and its large-sample limits are used instead: the
normal interval of the mean, and the distribution-free order-statistic interval of each
percentile (ranks ``n p +- 1.96 sqrt(n p (1 - p))``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..percentile import percentile as _percentile

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["BOOTSTRAP_LIMIT", "PERCENTILES", "confidence_intervals", "percentile", "summarize"]

BOOTSTRAP_LIMIT = 5000
"""Samples beyond which confidence intervals use large-sample limits, not resampling."""
_RESAMPLES = 200
_Z95 = 1.959963984540054

PERCENTILES: tuple[tuple[str, float], ...] = (
    ("p50", 50.0),
    ("p90", 90.0),
    ("p95", 95.0),
    ("p99", 99.0),
    ("p99.9", 99.9),
)


def percentile(ordered: Sequence[float], pct: float) -> float:
    """The ``pct`` percentile (0-100) of ``ordered``, which must be sorted and non-empty: the
    one definition, :func:`sluice._jobs.percentile.percentile`."""
    return _percentile(ordered, pct)


def confidence_intervals(ordered: Sequence[float]) -> dict[str, list[float]]:
    """95 % intervals ``[low, high]`` of the mean and of each percentile of
    :data:`PERCENTILES`, from sorted ``ordered`` (see the module docstring); empty for fewer
    than two samples."""
    n = len(ordered)
    if n < 2:
        return {}
    names = [("mean", None), *PERCENTILES]
    if n > BOOTSTRAP_LIMIT:
        mean = math.fsum(ordered) / n
        var = math.fsum((x - mean) ** 2 for x in ordered) / (n - 1)
        half = _Z95 * math.sqrt(var / n)
        out = {"mean": [mean - half, mean + half]}
        for name, pct in PERCENTILES:
            p = pct / 100
            spread = _Z95 * math.sqrt(n * p * (1 - p))
            low = max(0, math.floor(n * p - spread) - 1)
            high = min(n - 1, math.ceil(n * p + spread) - 1)
            out[name] = [ordered[low], ordered[high]]
        return out
    import random

    rng = random.Random(n)
    estimates: dict[str, list[float]] = {name: [] for name, _ in names}
    for _ in range(_RESAMPLES):
        resample = sorted(rng.choices(ordered, k=n))
        estimates["mean"].append(math.fsum(resample) / n)
        for name, pct in PERCENTILES:
            estimates[name].append(percentile(resample, pct))
    out = {}
    for name, values in estimates.items():
        values.sort()
        out[name] = [percentile(values, 2.5), percentile(values, 97.5)]
    return out


def summarize(
    samples: Sequence[float], *, intervals: bool = False
) -> dict[str, float | int | dict[str, list[float]] | None]:
    """``count``, ``mean``, ``min``, ``max``, ``std`` and every percentile of
    :data:`PERCENTILES` (all None but ``count`` for no samples); with ``intervals``, also
    ``ci95``: :func:`confidence_intervals`."""
    if not samples:
        empty: dict[str, float | int | dict[str, list[float]] | None] = {"count": 0}
        for name in ("mean", "min", "max", "std", *(name for name, _ in PERCENTILES)):
            empty[name] = None
        return empty
    ordered = sorted(samples)
    mean = math.fsum(ordered) / len(ordered)
    var = math.fsum((x - mean) ** 2 for x in ordered) / len(ordered)
    out: dict[str, float | int | dict[str, list[float]] | None] = {
        "count": len(ordered),
        "mean": mean,
        "min": ordered[0],
        "max": ordered[-1],
        "std": math.sqrt(var),
    }
    for name, pct in PERCENTILES:
        out[name] = percentile(ordered, pct)
    if intervals:
        out["ci95"] = confidence_intervals(ordered)
    return out
