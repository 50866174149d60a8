"""Sliding-window counting for admission limits: pure, time passed in as ``now``."""

from __future__ import annotations

from collections import deque

__all__ = ["SlidingWindow"]


class SlidingWindow:
    """At most ``limit`` events in any interval of ``period`` seconds.

    It keeps the times of the admissions still inside the window, so it is exact (not an
    approximation by buckets) and costs memory proportional to ``limit``, which is fine for
    request counts.
    """

    __slots__ = ("_times", "limit", "period")

    def __init__(self, limit: int, period: float) -> None:
        if limit < 1 or period <= 0:
            raise ValueError("a window needs limit >= 1 and period > 0")
        self.limit = limit
        self.period = period
        self._times: deque[float] = deque()

    def _expire(self, now: float) -> None:
        times = self._times
        while times and times[0] <= now - self.period:
            times.popleft()

    def next_free(self, now: float) -> float:
        """The earliest time >= ``now`` at which one more event fits."""
        self._expire(now)
        if len(self._times) < self.limit:
            return now
        return self._times[len(self._times) - self.limit] + self.period

    def record(self, now: float) -> None:
        """Count one event at ``now`` (the caller checked :meth:`next_free` first)."""
        self._times.append(now)

    def __len__(self) -> int:
        return len(self._times)
