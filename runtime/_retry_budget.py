"""A process-wide retry budget: retries may be at most a fraction of recent first attempts.

When a provider fails everything, per-call retry policies alone multiply the load by the number
of attempts. The budget caps retries, over a sliding interval, at ``ratio`` times the first
attempts in that interval plus a small floor (``min_per_second``), so an outage degrades into
fast failures (or, for calls that may wait, into waiting) instead of a storm, while isolated
failures are always retried. However many calls wait, the backend sees at most that many
retries per interval.

Memory is bounded by ``interval`` times the call rate: each log is trimmed as it is appended
to, so no call does work proportional to history.
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

    def _allowed(self) -> float:
        return self.ratio * len(self._firsts) + self.min_per_second * self.interval

    def first_attempt(self, now: float) -> None:
        """Count a call's first attempt: it earns ``ratio`` of a retry."""
        firsts = self._firsts
        firsts.append(now)
        horizon = now - self.interval
        while firsts[0] <= horizon:
            firsts.popleft()

    def try_retry(self, now: float) -> bool:
        """Spend one retry if the budget allows it; False means: fail (or wait) instead."""
        self._expire(now)
        if len(self._retries) + 1 > self._allowed():
            return False
        self._retries.append(now)
        return True

    def free_in(self, now: float) -> float:
        """Seconds until a retry may be spent again, assuming no new first attempts: when the
        oldest spent retry leaves the interval (the whole interval when none was spent and
        the floor alone cannot pay for one). 0 when one may be spent now."""
        self._expire(now)
        if len(self._retries) + 1 <= self._allowed():
            return 0.0
        if self._retries:
            return self._retries[0] + self.interval - now
        return self.interval

    def available(self, now: float) -> float:
        self._expire(now)
        return max(0.0, self._allowed() - len(self._retries))

    def sizes(self) -> tuple[int, int]:
        """Lengths of the internal logs (first attempts, retries): for memory tests."""
        return len(self._firsts), len(self._retries)
