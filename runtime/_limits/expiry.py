"""When queued asks give up: the RateLimiter's deadlines for the waiters it holds. Pure.

An ask may carry a ``give_up_at`` (a call's deadline, or its ``max_wait``). Most asks are
admitted in the burst of messages they came in, and those cost a list append here and nothing
else: only an ask still queued after its burst gets an entry in a heap ordered by when it gives
up. An entry whose ask was admitted or withdrawn meanwhile is let go lazily: when it comes due,
or when the heap has doubled since it was last compacted (every entry still queued is kept).
So the heap never holds more than twice what it kept at its last compaction (or 64), in
amortized constant time per entry.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Expiries"]

K = TypeVar("K")
W = TypeVar("W")

_COMPACT_FLOOR = 64


class Expiries(Generic[K, W]):
    """Queued asks by when they give up; ``queued(key, waiter)`` says whether one still is."""

    __slots__ = ("_arrived", "_compact_at", "_heap", "_ids", "_queued")

    def __init__(self, queued: Callable[[K, W], bool]) -> None:
        self._queued = queued
        self._arrived: list[tuple[float, K, W]] = []
        self._heap: list[tuple[float, int, K, W]] = []
        self._ids = itertools.count()
        self._compact_at = _COMPACT_FLOOR

    def arrived(self, at: float, key: K, waiter: W) -> None:
        """``waiter`` was queued on ``key`` in this burst and gives up at ``at``."""
        self._arrived.append((at, key, waiter))

    def burst_ended(self) -> None:
        """The burst's keys were looked at: keep the arrivals still queued."""
        arrived = self._arrived
        if not arrived:
            return
        heap, queued = self._heap, self._queued
        for at, key, waiter in arrived:
            if queued(key, waiter):
                heapq.heappush(heap, (at, next(self._ids), key, waiter))
        arrived.clear()
        if len(heap) >= self._compact_at:
            heap[:] = [entry for entry in heap if queued(entry[2], entry[3])]
            heapq.heapify(heap)
            self._compact_at = max(_COMPACT_FLOOR, 2 * len(heap))

    def next_at(self) -> float:
        """When the earliest entry comes due (``inf``: none)."""
        heap = self._heap
        return heap[0][0] if heap else math.inf

    def due(self, now: float) -> list[tuple[K, W]]:
        """The entries due at ``now``, taken out, earliest first, whether still queued or not
        (the caller takes each out of its queue, and answers those it found there)."""
        heap = self._heap
        out = []
        while heap and heap[0][0] <= now:
            _, _, key, waiter = heapq.heappop(heap)
            out.append((key, waiter))
        return out

    def __len__(self) -> int:
        return len(self._heap)
