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

:class:`Samples` collects one metric's values as a run's records are read back, in memory
that stops growing: exact (and summarized exactly as :func:`summarize` does) up to
:data:`EXACT_LIMIT` values, then a logarithmic histogram whose ranks are within
:data:`RELATIVE_ERROR` of the true values.
"""

from __future__ import annotations

import bisect
import math
from array import array
from typing import TYPE_CHECKING, Any

from ..percentile import interpolate
from ..percentile import percentile as _percentile

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

__all__ = [
    "BOOTSTRAP_LIMIT",
    "EXACT_LIMIT",
    "PERCENTILES",
    "RELATIVE_ERROR",
    "Samples",
    "confidence_intervals",
    "percentile",
    "summarize",
]

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


EXACT_LIMIT = 20_000
"""Values a :class:`Samples` keeps exactly; past this it keeps a log-bucket histogram."""

RELATIVE_ERROR = 0.001
"""The bound on a :class:`Samples` percentile's relative error once it keeps a histogram."""

_GAMMA = (1 + RELATIVE_ERROR) / (1 - RELATIVE_ERROR)
_LOG_GAMMA = math.log(_GAMMA)
_TINY = 1e-12
"""Values at or below this (zero, or a negative rounding of zero) share one bucket."""


class Samples:
    """One metric's samples, fed one at a time in memory that stops growing.

    Up to ``limit`` values are kept exactly, in a flat array of doubles (8 bytes each, no
    object per value), and :meth:`summary` is exactly :func:`summarize` of them. The next
    value moves them into a histogram of logarithmic buckets (DDSketch's mapping): a value
    ``x`` counts in bucket ``floor(log(x) / log(gamma))``, and a rank is answered with its
    bucket's midpoint, within :data:`RELATIVE_ERROR` of the true value. Its size grows with
    the spread of the values (a few thousand buckets from a microsecond to an hour), never
    with their number, so a run of hours keeps its percentiles in fixed memory. Count, mean,
    minimum, maximum and standard deviation stay exact (running sums of the differences from
    the first value, so no cancellation shows at latency scales); percentiles
    and their confidence bounds carry the relative error; ``exact`` in the summary says which.
    """

    __slots__ = ("_buckets", "_exact", "_low", "_s1", "_s2", "_shift", "count", "limit",
                 "maximum", "minimum")  # fmt: skip

    def __init__(self, limit: int = EXACT_LIMIT) -> None:
        self.limit = limit
        self._exact: array[float] | None = array("d")
        self._buckets: dict[int, int] = {}
        self._low = 0
        """Values at or below :data:`_TINY` (the histogram's first bucket)."""
        self.count = 0
        self._shift = 0.0
        """The first value: sums of differences from it keep the variance accurate."""
        self._s1 = 0.0
        self._s2 = 0.0
        self.minimum = math.inf
        self.maximum = -math.inf

    def add(self, value: float) -> None:
        if not self.count:
            self._shift = value
        self.count += 1
        d = value - self._shift
        self._s1 += d
        self._s2 += d * d
        if value < self.minimum:
            self.minimum = value
        if value > self.maximum:
            self.maximum = value
        exact = self._exact
        if exact is None:
            self._count((value,))
            return
        exact.append(value)
        if len(exact) > self.limit:
            self._spill()

    def extend(self, values: Sequence[float]) -> None:
        """:meth:`add` each of ``values``, in one go."""
        if not values:
            return
        if not self.count:
            self._shift = values[0]
        shift = self._shift
        self.count += len(values)
        self._s1 += math.fsum([v - shift for v in values])
        self._s2 += math.fsum([(v - shift) * (v - shift) for v in values])
        self.minimum = min(self.minimum, min(values))
        self.maximum = max(self.maximum, max(values))
        exact = self._exact
        if exact is None:
            self._count(values)
            return
        exact.extend(values)
        if len(exact) > self.limit:
            self._spill()

    def _spill(self) -> None:
        """Past the limit: from exact values to the histogram."""
        assert self._exact is not None
        kept, self._exact = self._exact, None
        self._count(kept)

    def _count(self, values: Iterable[float]) -> None:
        buckets = self._buckets
        log, floor, scale = math.log, math.floor, 1 / _LOG_GAMMA
        for value in values:
            if value <= _TINY:
                self._low += 1
            else:
                key = floor(log(value) * scale)
                buckets[key] = buckets.get(key, 0) + 1

    @property
    def exact(self) -> bool:
        """Whether every value is still kept (percentiles exact)."""
        return self._exact is not None

    def values(self) -> list[float]:
        """The values, sorted (only while :attr:`exact`)."""
        assert self._exact is not None
        return sorted(self._exact)

    def percentile(self, pct: float) -> float | None:
        """The ``pct`` percentile (None for no samples)."""
        if not self.count:
            return None
        if self._exact is not None:
            return percentile(sorted(self._exact), pct)
        return interpolate(self.count, pct, self._ranks())

    def _ranks(self) -> Callable[[int], float]:
        """``value_at(rank)`` over the histogram: the bucket's midpoint, within the run's
        minimum and maximum (so rank 0 and the last rank are exact)."""
        keys = sorted(self._buckets)
        ends: list[int] = []
        total = self._low
        for key in keys:
            total += self._buckets[key]
            ends.append(total)
        low, high = self.minimum, self.maximum

        def value_at(rank: int) -> float:
            if rank < self._low:
                return min(max(0.0, low), high)
            key = keys[bisect.bisect_right(ends, rank)]
            middle = 2 * _GAMMA ** (key + 1) / (_GAMMA + 1)
            return min(max(middle, low), high)

        return value_at

    def summary(self, *, intervals: bool = False) -> dict[str, Any]:
        """What :func:`summarize` gives for these values (exactly, while :attr:`exact`), and
        ``exact``."""
        if self._exact is not None:
            return summarize(self._exact, intervals=intervals) | {"exact": True}
        n = self.count
        value_at = self._ranks()
        mean = self._shift + self._s1 / n
        m2 = max(0.0, self._s2 - self._s1 * self._s1 / n)  # n times the population variance
        out: dict[str, Any] = {
            "count": n,
            "mean": mean,
            "min": self.minimum,
            "max": self.maximum,
            "std": math.sqrt(m2 / n),
        }
        for name, pct in PERCENTILES:
            out[name] = interpolate(n, pct, value_at)
        if intervals:
            half = _Z95 * math.sqrt(m2 / (n - 1) / n)
            bounds = {"mean": [mean - half, mean + half]}
            for name, pct in PERCENTILES:
                p = pct / 100
                spread = _Z95 * math.sqrt(n * p * (1 - p))
                low = max(0, math.floor(n * p - spread) - 1)
                high = min(n - 1, math.ceil(n * p + spread) - 1)
                bounds[name] = [value_at(low), value_at(high)]
            out["ci95"] = bounds
        return out | {"exact": False}
