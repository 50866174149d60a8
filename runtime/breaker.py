"""A circuit breaker per provider endpoint: stop sending to a backend that keeps failing.

Closed: calls flow. It opens when, over the last ``window`` seconds, at least ``min_failures``
attempts failed and failures make up at least ``failure_rate`` of the attempts STARTED in that
window. Counting against attempts started (not outcomes seen) matters under concurrency: fast
failures arrive before slow successes, so a streak of outcomes says little about the backend.
Open: calls fail fast (or fall back) for ``open_for`` seconds. Half-open: one probe attempt
goes through; its success closes the breaker, its failure opens it again.

Only failures that say something about the backend count (server errors, overloads, timeouts,
broken connections); a bad request or a 429 does not (the caller decides what to record).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Literal

__all__ = ["CircuitBreaker"]

State = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    __slots__ = (
        "_failures",
        "_opened_at",
        "_probing",
        "_started",
        "failure_rate",
        "min_failures",
        "open_for",
        "window",
    )

    def __init__(
        self,
        *,
        min_failures: int = 5,
        failure_rate: float = 0.5,
        window: float = 30.0,
        open_for: float = 10.0,
    ) -> None:
        self.min_failures = min_failures
        self.failure_rate = failure_rate
        self.window = window
        self.open_for = open_for
        self._started: deque[float] = deque()
        self._failures: deque[float] = deque()
        self._opened_at = -math.inf
        self._probing = False

    def state(self, now: float) -> State:
        if self._opened_at == -math.inf:
            return "closed"
        if now - self._opened_at < self.open_for:
            return "open"
        return "half_open"

    def allow(self, now: float) -> bool:
        """May an attempt start now? In half-open state only the first asker (the probe) may."""
        state = self.state(now)
        if state == "closed":
            self._started.append(now)
            return True
        if state == "open" or self._probing:
            return False
        self._probing = True
        return True

    def retry_in(self, now: float) -> float:
        """Seconds until the breaker lets a probe through (0 when it is not open)."""
        if self.state(now) != "open":
            return 0.0
        return self._opened_at + self.open_for - now

    def record(self, ok: bool, now: float) -> None:
        """The outcome of an attempt that :meth:`allow` let through."""
        if self._opened_at != -math.inf:
            if self._probing:  # outcomes of attempts let through before it opened are ignored
                self._probing = False
                if ok:
                    self._close()
                else:
                    self._opened_at = now
            return
        if ok:
            return
        self._failures.append(now)
        horizon = now - self.window
        for times in (self._started, self._failures):
            while times and times[0] <= horizon:
                times.popleft()
        failures = len(self._failures)
        if failures >= self.min_failures and failures >= self.failure_rate * len(self._started):
            self._opened_at = now

    def _close(self) -> None:
        self._opened_at = -math.inf
        self._started.clear()
        self._failures.clear()
