"""Adaptive concurrency for a key's pending slots: additive increase, multiplicative decrease.

Like TCP congestion control: each success raises the limit (by one while below the slow-start
threshold, by ``1/limit`` above it); a 429 or an overload halves it, at most once per round
(signals from attempts admitted before the last decrease describe the old limit and are
ignored); a cooldown restarts from one slot. The limit never exceeds the configured cap.
"""

from __future__ import annotations

import math

__all__ = ["AdaptiveLimit"]


class AdaptiveLimit:
    __slots__ = ("_last_decrease", "cap", "limit", "threshold")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.limit = float(cap)
        self.threshold = float(cap)
        self._last_decrease = -math.inf

    @property
    def current(self) -> int:
        """Pending slots allowed now (at least one)."""
        return max(1, math.floor(self.limit))

    def on_success(self) -> None:
        if self.limit < self.threshold:
            self.limit = min(self.cap, self.limit + 1.0)
        else:
            self.limit = min(self.cap, self.limit + 1.0 / self.limit)

    def on_congestion(self, admitted_at: float, now: float) -> None:
        """A 429 or overload for an attempt admitted at ``admitted_at``."""
        if admitted_at <= self._last_decrease:
            return
        self.threshold = max(1.0, self.limit / 2.0)
        self.limit = self.threshold
        self._last_decrease = now

    def on_cooldown(self) -> None:
        """Admissions were paused: start again slowly, up to the threshold."""
        self.limit = 1.0
