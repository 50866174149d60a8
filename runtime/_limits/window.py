"""An exact sliding window over weighted admissions, with settlement.

Each admission is kept with its time and amount until it leaves the window, so "at most
``limit`` units in any interval of ``period`` seconds" holds exactly, not by buckets. An
admission's amount can be settled later (a token estimate replaced by the real count): the
difference is refunded to (or charged against) the window while the admission is still inside
it. Memory is one small object per admission still in the window: every append first drops
the admissions that left it, so the size is bounded by the admission rate times ``period``.

Two orders are kept. Expiry follows admission order (a re-dated admission holds up those
behind it, which only overcounts); :meth:`Window.next_free` walks time order, kept as entries
arrive rather than sorted on each check: every time written is the caller's current time,
so an append is almost always at the end.

Both orders are :class:`~sluice._fifo.Fifo` lists rather than deques: a deque allocates a
block of 64 slots however few it holds, and a runtime keeps a window per quota key, one per
model a caller names, most of which hold an admission or two.
"""

from __future__ import annotations

from .._fifo import Fifo

__all__ = ["Window", "WindowEntry"]

_SLACK = 16
"""Outdated places the time order may hold beyond one per entry before it is compacted."""


class WindowEntry:
    """One admission in a window: when, how much, and whether it is still counted."""

    __slots__ = ("amount", "at", "live")

    def __init__(self, at: float, amount: int) -> None:
        self.at = at
        self.amount = amount
        self.live = True


class Window:
    """At most ``limit`` units admitted in any interval of ``period`` seconds."""

    __slots__ = ("_by_time", "_entries", "limit", "period", "used")

    def __init__(self, limit: int, period: float) -> None:
        if limit < 1 or period <= 0:
            raise ValueError("a window needs limit >= 1 and period > 0")
        self.limit = limit
        self.period = period
        self.used = 0
        """Units counted in the window as of the last call that passed ``now``."""
        self._entries: Fifo[WindowEntry] = Fifo()
        """Every counted entry, in admission order (see :meth:`add_expiring`)."""
        self._by_time: Fifo[tuple[float, WindowEntry]] = Fifo()
        """``(at, entry)`` in order of ``at``: each counted entry once at its current time,
        plus outdated places (an entry re-dated since, or expired) skipped when read."""

    def expire(self, now: float) -> None:
        """Forget admissions that left the window by ``now``.

        On every admission's path, so the fronts are read from the lists directly (the
        common case, nothing to expire, costs no call)."""
        entries = self._entries
        horizon = now - self.period
        items = entries.items
        while len(items) > entries.start and items[entries.start].at <= horizon:
            entry = entries.popleft()
            items = entries.items  # popleft may cut the list
            entry.live = False
            self.used -= entry.amount
        by_time = self._by_time
        places = by_time.items
        while len(places) > by_time.start:
            at, entry = places[by_time.start]
            if entry.at == at and entry.live:
                break
            by_time.popleft()
            places = by_time.items

    def fits_ever(self, amount: int) -> bool:
        """False when ``amount`` exceeds the whole window: waiting would never help."""
        return amount <= self.limit

    def next_free(self, amount: int, now: float) -> float:
        """The earliest time >= ``now`` at which ``amount`` more units fit.

        Assumes nothing else is admitted meanwhile. The caller checks :meth:`fits_ever` first.
        Walks the entries in time order, and only as far as the answer.
        """
        self.expire(now)
        excess = self.used + amount - self.limit
        if excess <= 0:
            return now
        freed = 0
        for at, entry in self._by_time:
            if entry.at != at or not entry.live:
                continue  # an outdated place
            freed += entry.amount
            if freed >= excess:
                return max(now, at + self.period)
        return now + self.period  # only reachable if amount > limit

    def add(self, amount: int, now: float, *, expired: bool = False) -> WindowEntry:
        """Count ``amount`` units admitted at ``now``; keep the entry to settle it later.
        ``expired``: the caller has just expired the window at this ``now`` (by
        :meth:`next_free`, with nothing admitted since), so it is not done again."""
        if not expired:
            self.expire(now)  # trimmed as it grows: memory stays within the window's rate
        entry = WindowEntry(now, amount)
        self._entries.items.append(entry)
        self._place(entry)
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
        while index > 0 and entries.at(index - 1).at > entry.at:
            index -= 1
        entries.insert(index, entry)
        self._place(entry)
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
            self._place(entry)  # its old place is now outdated

    def settle(self, entry: WindowEntry, actual: int) -> None:
        """Replace an admission's amount by what it really used.

        Inside the window the difference is refunded or charged at once; an admission that
        has already left the window changes nothing.
        """
        if entry.live:
            self.used += actual - entry.amount
        entry.amount = actual

    def counted(self, now: float) -> list[WindowEntry]:
        """Every admission still counted inside the window at ``now``, oldest first: what
        this window would tell another store of its history."""
        self.expire(now)
        horizon = now - self.period
        kept = [e for e in self._entries if e.at > horizon and e.amount]
        return sorted(kept, key=lambda e: e.at)

    def remaining(self, now: float) -> int:
        self.expire(now)
        return max(0, self.limit - self.used)

    def _place(self, entry: WindowEntry) -> None:
        """Put ``entry`` at its time in the time order: at the end unless a caller's clock
        went back or the entry is reported usage placed in the past (a short walk back)."""
        by_time, at = self._by_time, entry.at
        places = by_time.items
        if len(places) == by_time.start or places[-1][0] <= at:
            places.append((at, entry))
        else:
            index = len(by_time)
            while index > 0 and by_time.at(index - 1)[0] > at:
                index -= 1
            by_time.insert(index, (at, entry))
        entries = self._entries
        if len(places) - by_time.start > 2 * (len(entries.items) - entries.start) + _SLACK:
            # Outdated places pile up when re-dated entries hold up expiry; dropping them is
            # linear, once per as many re-dates as there are entries.
            self._by_time = Fifo([place for place in by_time if not _outdated(*place)])

    def __len__(self) -> int:
        return len(self._entries)


def _outdated(at: float, entry: WindowEntry) -> bool:
    return entry.at != at or not entry.live
