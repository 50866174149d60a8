"""A process-wide retry budget: retries may be at most a fraction of recent first attempts.

When a provider fails everything, per-call retry policies alone multiply the load by the number
of attempts. The budget caps retries, over a sliding interval, at ``ratio`` times the first
attempts in that interval plus a small floor (``min_per_second``), so an outage degrades into
fast failures instead of a storm, while isolated failures are always retried.
"""

from __future__ import annotations

from collections import deque

__all__ = ["RetryBudget"]


class RetryBudget:
    __slots__ = ("_firsts", "_retries", "interval", "min_per_second", "ratio")

    def __init__(self, ratio: float, min_per_second: float, interval: float = 10.0) -> None:
        if ratio < 0 or min_per_second < 0 or interval <= 0:
            raise ValueError("a retry budget needs ratio >= 0, min_per_second >= 0, interval > 0")
        self.ratio = ratio
        self.min_per_second = min_per_second
        self.interval = interval
        self._firsts: deque[float] = deque()
        self._retries: deque[float] = deque()

    def _expire(self, now: float) -> None:
        horizon = now - self.interval
        for times in (self._firsts, self._retries):
            while times and times[0] <= horizon:
                times.popleft()

    def first_attempt(self, now: float) -> None:
        """Count a call's first attempt: it earns ``ratio`` of a retry."""
        self._firsts.append(now)

    def try_retry(self, now: float) -> bool:
        """Spend one retry if the budget allows it; False means: fail instead of retrying."""
        self._expire(now)
        allowed = self.ratio * len(self._firsts) + self.min_per_second * self.interval
        if len(self._retries) + 1 > allowed:
            return False
        self._retries.append(now)
        return True

    def available(self, now: float) -> float:
        self._expire(now)
        allowed = self.ratio * len(self._firsts) + self.min_per_second * self.interval
        return max(0.0, allowed - len(self._retries))
