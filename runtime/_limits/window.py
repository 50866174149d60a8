"""An exact sliding window over weighted admissions, with settlement.

Each admission is kept with its time and amount until it leaves the window, so "at most
``limit`` units in any interval of ``period`` seconds" holds exactly, not by buckets. An
admission's amount can be settled later (a token estimate replaced by the real count): the
difference is refunded to (or charged against) the window while the admission is still inside
it. Memory is one small object per admission still in the window: every append first drops
the admissions that left it, so the size is bounded by the admission rate times ``period``.
"""

from __future__ import annotations

from collections import deque

__all__ = ["Window", "WindowEntry"]


class WindowEntry:
    """One admission in a window: when, how much, and whether it is still counted."""

    __slots__ = ("amount", "at", "live")

    def __init__(self, at: float, amount: int) -> None:
        self.at = at
        self.amount = amount
        self.live = True


class Window:
    """At most ``limit`` units admitted in any interval of ``period`` seconds."""

    __slots__ = ("_entries", "limit", "period", "used")

    def __init__(self, limit: int, period: float) -> None:
        if limit < 1 or period <= 0:
            raise ValueError("a window needs limit >= 1 and period > 0")
        self.limit = limit
        self.period = period
        self.used = 0
        """Units counted in the window as of the last call that passed ``now``."""
        self._entries: deque[WindowEntry] = deque()

    def expire(self, now: float) -> None:
        """Forget admissions that left the window by ``now``."""
        entries = self._entries
        horizon = now - self.period
        while entries and entries[0].at <= horizon:
            entry = entries.popleft()
            entry.live = False
            self.used -= entry.amount

    def fits_ever(self, amount: int) -> bool:
        """False when ``amount`` exceeds the whole window: waiting would never help."""
        return amount <= self.limit

    def next_free(self, amount: int, now: float) -> float:
        """The earliest time >= ``now`` at which ``amount`` more units fit.

        Assumes nothing else is admitted meanwhile. The caller checks :meth:`fits_ever` first.
        """
        self.expire(now)
        excess = self.used + amount - self.limit
        if excess <= 0:
            return now
        # Entries are in admission order, but a re-dated one (see redate) may now be later
        # than those after it: walk them in time order (nearly sorted, so the sort is cheap).
        freed = 0
        for at, size in sorted((e.at, e.amount) for e in self._entries):
            freed += size
            if freed >= excess:
                return max(now, at + self.period)
        return now + self.period  # only reachable if amount > limit

    def add(self, amount: int, now: float) -> WindowEntry:
        """Count ``amount`` units admitted at ``now``; keep the entry to settle it later."""
        self.expire(now)  # trimmed as it grows: memory stays within the window's rate
        entry = WindowEntry(now, amount)
        self._entries.append(entry)
        self.used += amount
        return entry

    def add_expiring(self, amount: int, now: float, after: float) -> None:
        """Count ``amount`` units that leave the window ``after`` seconds from ``now``.

        Used for usage a provider reports that we did not admit ourselves; the entry is placed
        in time order so expiry stays a pop from the left.
        """
        self.expire(now)
        entry = WindowEntry(now + after - self.period, amount)
        entries = self._entries
        index = len(entries)
        while index > 0 and entries[index - 1].at > entry.at:
            index -= 1
        entries.insert(index, entry)
        self.used += amount

    def redate(self, entry: WindowEntry, at: float) -> None:
        """Count an admission from ``at`` (later than its admission) on.

        The provider counts a request from when it arrived, which is after we admitted it; a
        reply proves it has arrived. Counting from the reply keeps our window behind the
        provider's at every boundary, so the burst we release when old entries expire never
        reaches it early. An entry moved later can hold up the expiry of those behind it:
        that only ever overcounts, and :meth:`next_free` walks the entries in time order.
        """
        if entry.live and at > entry.at:
            entry.at = at

    def settle(self, entry: WindowEntry, actual: int) -> None:
        """Replace an admission's amount by what it really used.

        Inside the window the difference is refunded or charged at once; an admission that
        has already left the window changes nothing.
        """
        if entry.live:
            self.used += actual - entry.amount
        entry.amount = actual

    def remaining(self, now: float) -> int:
        self.expire(now)
        return max(0, self.limit - self.used)

    def __len__(self) -> int:
        return len(self._entries)
