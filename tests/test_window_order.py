"""The sliding window's time order, kept as entries arrive: the same answers as sorting every
entry on each check (the model below, the obvious way), without the sort."""

from __future__ import annotations

import tracemalloc
from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from sluice._limits.window import Window


class ModelEntry:
    def __init__(self, at: float, amount: int) -> None:
        self.at = at
        self.amount = amount
        self.live = True


class Model:
    """The window's rules with the entries sorted by time on every check."""

    def __init__(self, limit: int, period: float) -> None:
        self.limit, self.period, self.used = limit, period, 0
        self.entries: deque[ModelEntry] = deque()

    def expire(self, now: float) -> None:
        while self.entries and self.entries[0].at <= now - self.period:
            entry = self.entries.popleft()
            entry.live = False
            self.used -= entry.amount

    def next_free(self, amount: int, now: float) -> float:
        self.expire(now)
        excess = self.used + amount - self.limit
        if excess <= 0:
            return now
        freed = 0
        for at, size in sorted((e.at, e.amount) for e in self.entries):
            freed += size
            if freed >= excess:
                return max(now, at + self.period)
        return now + self.period

    def add(self, amount: int, now: float) -> ModelEntry:
        self.expire(now)
        entry = ModelEntry(now, amount)
        self.entries.append(entry)
        self.used += amount
        return entry

    def add_expiring(self, amount: int, now: float, after: float) -> None:
        self.expire(now)
        entry = ModelEntry(now + after - self.period, amount)
        index = len(self.entries)
        while index > 0 and self.entries[index - 1].at > entry.at:
            index -= 1
        self.entries.insert(index, entry)
        self.used += amount

    def redate(self, entry: ModelEntry, at: float) -> None:
        if entry.live and at > entry.at:
            entry.at = at

    def settle(self, entry: ModelEntry, actual: int) -> None:
        if entry.live:
            self.used += actual - entry.amount
        entry.amount = actual


steps = st.lists(
    st.tuples(
        st.sampled_from(["add", "add", "add", "redate", "redate", "settle", "report", "check"]),
        st.integers(0, 16).map(lambda n: n / 8),  # time passing (dyadic, like trio's)
        st.integers(0, 12),  # an amount
        st.integers(0, 10_000),  # which entry
    ),
    max_size=400,
)


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 30), st.sampled_from([1.0, 2.5, 6.0]), steps)
def test_the_window_answers_as_sorting_would(limit, period, ops):
    window, model = Window(limit, period), Model(limit, period)
    pairs = []
    now = 0.0
    for op, step, amount, pick in ops:
        now += step
        if op == "add":
            pairs.append((window.add(amount, now), model.add(amount, now)))
        elif op == "redate" and pairs:
            entry, twin = pairs[pick % len(pairs)]
            window.redate(entry, now)
            model.redate(twin, now)
        elif op == "settle" and pairs:
            entry, twin = pairs[pick % len(pairs)]
            window.settle(entry, amount)
            model.settle(twin, amount)
        elif op == "report":
            after = period * (pick % 9) / 8
            window.add_expiring(amount + 1, now, after)
            model.add_expiring(amount + 1, now, after)
        for ask in (1, amount, limit):
            assert window.next_free(ask, now) == model.next_free(ask, now)
        assert window.used == model.used
        assert len(window) == len(model.entries)
    # Far ahead everything has left, in both.
    assert window.remaining(now + 2 * period) == limit


def test_a_check_on_a_full_window_does_not_copy_its_entries():
    # 100,000 admissions in a minute, each re-dated when the next one is admitted (its reply
    # arrived); the check that finds room only once the oldest leaves must not build (and
    # sort) a list of them all.
    n = 100_000
    window, model = Window(n, 60.0), Model(n, 60.0)
    previous = None
    for i in range(n):
        now = i / 2048  # about 49 s
        pair = (window.add(1, now), model.add(1, now))
        if previous is not None:
            window.redate(previous[0], now)
            model.redate(previous[1], now)
        previous = pair
    tracemalloc.start()
    try:
        free_at = window.next_free(1, now)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert free_at == model.next_free(1, now) == 60.0 + 1 / 2048
    assert peak < 10_000  # a sorted copy of 100,000 entries takes megabytes


def test_counted_lists_the_admissions_still_inside_the_window_oldest_first():
    from sluice._limits.window import Window

    window = Window(10, 5.0)
    first = window.add(1, 0.0)
    window.add(2, 1.0)
    refunded = window.add(3, 2.0)
    window.settle(refunded, 0)
    window.redate(first, 3.0)  # re-dated behind the others
    assert [(e.at, e.amount) for e in window.counted(4.0)] == [(1.0, 2), (3.0, 1)]
    assert [(e.at, e.amount) for e in window.counted(7.0)] == [(3.0, 1)]


@given(
    st.lists(
        st.tuples(st.sampled_from([0.0, 0.0, 0.5, 3.0, 10.0]), st.integers(0, 6)),
        max_size=40,
    )
)
def test_an_add_right_after_next_free_skips_the_expiry_and_counts_the_same(
    steps: list[tuple[float, int]],
) -> None:
    """The store admits by ``next_free`` then ``add(..., expired=True)`` at one ``now``: the
    window counts, keeps and frees exactly what an ``add`` that expires again does."""
    told, plain = Window(10, 5.0), Window(10, 5.0)
    now = 0.0
    for gap, amount in steps:
        now += gap
        ready = told.next_free(amount, now)
        assert ready == plain.next_free(amount, now)
        if ready > now or amount > 10:
            continue
        told.add(amount, now, expired=True)
        plain.add(amount, now)
        assert (told.used, len(told)) == (plain.used, len(plain))
        assert [e.at for e in told.counted(now)] == [e.at for e in plain.counted(now)]
