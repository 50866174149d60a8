"""Pure arithmetic: the sliding window and the retry backoff."""

import random

import pytest

from sluice._backoff import retry_delay
from sluice._config import RetryConfig
from sluice._limits.window import Window


def test_window_admits_up_to_the_limit_then_waits_for_the_oldest_to_expire():
    w = Window(3, 60.0)
    for t in (0.0, 1.0, 2.0):
        assert w.next_free(1, t) == t
        w.add(1, t)
    assert w.next_free(1, 2.0) == 60.0
    assert w.next_free(1, 59.999) == 60.0
    assert w.next_free(1, 60.0) == 60.0
    w.add(1, 60.0)
    assert w.next_free(1, 60.0) == 61.0


def test_weighted_window_waits_until_enough_has_expired():
    w = Window(100, 10.0)
    w.add(30, 0.0)
    w.add(50, 1.0)
    w.add(20, 2.0)
    assert w.next_free(25, 3.0) == 10.0  # the 30 admitted at 0 must leave
    assert w.next_free(40, 3.0) == 11.0  # ... and the 50 admitted at 1
    assert w.next_free(81, 3.0) == 12.0  # all three
    assert not w.fits_ever(101)


def test_settling_refunds_only_while_inside_the_window():
    w = Window(100, 10.0)
    big = w.add(90, 0.0)
    w.settle(big, 10)
    assert w.remaining(1.0) == 90
    old = w.add(50, 5.0)
    assert w.remaining(11.5) == 50  # the first entry has left
    w.settle(old, 5)
    assert w.remaining(11.5) == 95
    assert w.remaining(15.0) == 100
    w.settle(old, 0)  # left the window already: changes nothing
    assert w.remaining(15.0) == 100


def test_window_never_exceeds_the_limit_in_any_interval():
    rng = random.Random(7)
    w = Window(50, 10.0)
    admitted: list[tuple[float, int]] = []
    t = 0.0
    for _ in range(300):
        t += rng.random() * 3
        amount = rng.randint(1, 50)
        t = w.next_free(amount, t)
        w.add(amount, t)
        admitted.append((t, amount))
    for start, _ in admitted:
        assert sum(a for x, a in admitted if start <= x < start + 10.0) <= 50


def test_provider_reported_usage_expires_at_its_reset():
    w = Window(10, 60.0)
    w.add_expiring(8, now=5.0, after=20.0)
    assert w.remaining(5.0) == 2
    assert w.next_free(3, 5.0) == 25.0


def test_window_rejects_nonsense():
    with pytest.raises(ValueError, match="limit"):
        Window(0, 1.0)


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


@pytest.mark.parametrize("attempt", [1025, 1026, 1027, 10**6, 10**18])
def test_backoff_past_a_floats_exponent_stays_at_the_cap(attempt):
    # A call that waits out an outage has no attempt limit: 2.0**1025 would overflow.
    policy = RetryConfig(base_delay=0.5, max_delay=30.0, jitter=0.25)
    rng = random.Random(attempt)
    delay = retry_delay(attempt, policy, rng)
    assert 22.5 <= delay <= 30.0
    assert (
        retry_delay(attempt, RetryConfig(base_delay=0.5, max_delay=30.0, jitter=0.0), rng) == 30.0
    )
    assert retry_delay(attempt, policy, rng, retry_after=120.0) == 120.0


def test_retry_after_is_a_floor():
    policy = RetryConfig(base_delay=0.5, jitter=0.0)
    rng = random.Random(0)
    assert retry_delay(1, policy, rng, retry_after=2.0) == 2.0
    assert retry_delay(5, policy, rng, retry_after=0.1) == 8.0


def test_redated_entries_count_from_the_reply_and_never_undercount():
    w = Window(2, 10.0)
    first = w.add(1, 0.0)
    second = w.add(1, 0.5)
    w.redate(first, 3.0)  # its reply came at 3.0: the provider counted it from then at least
    assert w.next_free(1, 4.0) == 10.5  # the second (not re-dated) leaves first
    w.redate(second, 2.0)
    assert w.next_free(1, 4.0) == 12.0
    assert w.next_free(2, 4.0) == 13.0
    w.redate(first, 1.0)  # never earlier than it already counts
    assert w.next_free(2, 4.0) == 13.0
