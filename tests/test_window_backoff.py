"""Pure arithmetic: the sliding window and the retry backoff."""

import random

import pytest

from sluice.backoff import retry_delay
from sluice.config import RetryConfig
from sluice.window import SlidingWindow


def test_window_admits_up_to_the_limit_then_waits_for_the_oldest_to_expire():
    w = SlidingWindow(3, 60.0)
    for t in (0.0, 1.0, 2.0):
        assert w.next_free(t) == t
        w.record(t)
    assert w.next_free(2.0) == 60.0
    assert w.next_free(59.999) == 60.0
    assert w.next_free(60.0) == 60.0
    w.record(60.0)
    assert w.next_free(60.0) == 61.0


def test_window_never_exceeds_the_limit_in_any_interval():
    rng = random.Random(7)
    w = SlidingWindow(5, 10.0)
    admitted: list[float] = []
    t = 0.0
    for _ in range(200):
        t += rng.random() * 3
        t = w.next_free(t)
        w.record(t)
        admitted.append(t)
    for i, start in enumerate(admitted):
        inside = [x for x in admitted[i:] if x < start + 10.0]
        assert len(inside) <= 5


def test_window_rejects_nonsense():
    with pytest.raises(ValueError, match="limit"):
        SlidingWindow(0, 1.0)


def test_backoff_doubles_and_caps_without_jitter():
    policy = RetryConfig(base_delay=0.5, max_delay=3.0, jitter=0.0)
    rng = random.Random(0)
    assert [retry_delay(n, policy, rng) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_backoff_jitter_only_shortens_within_the_fraction():
    policy = RetryConfig(base_delay=1.0, max_delay=8.0, jitter=0.25)
    rng = random.Random(1)
    delays = [retry_delay(1, policy, rng) for _ in range(500)]
    assert all(0.75 <= d <= 1.0 for d in delays)
    assert len(set(delays)) > 100


def test_retry_after_is_a_floor():
    policy = RetryConfig(base_delay=0.5, jitter=0.0)
    rng = random.Random(0)
    assert retry_delay(1, policy, rng, retry_after=2.0) == 2.0
    assert retry_delay(5, policy, rng, retry_after=0.1) == 8.0
