"""The one percentile definition (linear interpolation between the closest ranks, type 7)."""

from __future__ import annotations

import random
import statistics

import pytest

from sluice._jobs.batch_report import LatencyHistogram
from sluice._jobs.loadtest.stats import percentile as loadtest_percentile
from sluice._jobs.percentile import interpolate, percentile


def test_the_definition_on_small_cases() -> None:
    assert percentile([7.0], 0) == percentile([7.0], 99) == 7.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5  # the mean of the middle two
    assert percentile([1.0, 2.0, 3.0, 4.0], 0) == 1.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 100) == 4.0
    assert percentile([0.0, 10.0], 99) == pytest.approx(9.9)
    assert percentile(list(map(float, range(101))), 90) == 90.0


@pytest.mark.parametrize("seed", range(5))
def test_it_is_numpys_and_the_standard_librarys_inclusive_method(seed: int) -> None:
    rng = random.Random(seed)
    values = sorted(rng.expovariate(1.0) for _ in range(rng.randint(2, 500)))
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    for p in range(1, 100):
        assert percentile(values, p) == pytest.approx(cuts[p - 1], rel=1e-12)


def test_batch_and_loadtest_use_it() -> None:
    values = [0.5, 0.1, 0.3, 0.2]
    histogram = LatencyHistogram()
    for value in values:
        histogram.add(value)
    ordered = sorted(values)
    for p in (0, 50, 90, 99, 100):
        assert loadtest_percentile(ordered, p) == percentile(ordered, p)
        got = histogram.percentile(p)
        assert got == pytest.approx(percentile(ordered, p), rel=0.011)


def test_it_asks_for_at_most_two_ranks_and_refuses_nonsense() -> None:
    asked: list[int] = []

    def value_at(rank: int) -> float:
        asked.append(rank)
        return float(rank)

    assert interpolate(1_000_001, 99.9, value_at) == 999_000.0
    assert interpolate(11, 55, value_at) == 5.5
    assert asked == [999_000, 5, 6]
    with pytest.raises(ValueError, match="no samples"):
        percentile([], 50)
    with pytest.raises(ValueError, match="between 0 and 100"):
        percentile([1.0], 101)
