"""What one process knows of the cooldowns and the names to avoid that every process shares
through the Redis quota store: :class:`SharedCooling`.

Routing asks for a key's cooldown on every call's path, so the answer comes from here, with no
round trip: from every admission the quota script answered with a cooldown, from every
cooldown this process set, and from a read of every key cooling down (and every name to avoid)
that :class:`~sluice._limits.redis_store.RedisQuotaStore`'s background task makes at most every
``interval`` seconds while someone keeps asking. Times from Redis are on the server's clock;
they are kept here on this process's trio clock (``caller_clock``: the caller's own times,
for tests). Pure: no I/O, no trio.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["SharedCooling"]


class SharedCooling:
    """The cooldowns and avoided names this process knows of, each as when it ends (trio
    time), and whether the background task should read them again from Redis."""

    def __init__(self, *, interval: float, caller_clock: bool) -> None:
        self.interval = interval
        """Seconds between two reads from Redis, at the most."""
        self.caller_clock = caller_clock
        self.cooldowns: dict[str, float] = {}
        """When each key's cooldown ends."""
        self.avoided: dict[str, float] = {}
        """When each name to avoid may be used again."""
        self.due = -math.inf
        """When the known cooldowns should next be read again from Redis."""
        self.wanted = False
        """Someone asked after ``due``: the background task reads them."""

    def local(self, now: float, server_now: float, until: float) -> float:
        """``until`` (the server's time, at its ``server_now``) on this process's clock."""
        return until if self.caller_clock else now + (until - server_now)

    def note(self, key: str, now: float, server_now: float, until: float) -> None:
        """Redis answered that ``key`` cools down until ``until``."""
        self.cooldowns[key] = self.local(now, server_now, until)

    def want(self, now: float) -> bool:
        """Someone asks: True when a read from Redis is newly wanted (wake the background
        task), at most once every ``interval``."""
        if now >= self.due and not self.wanted:
            self.wanted = True
            return True
        return False

    def left(self, key: str, now: float) -> float:
        """Seconds left of ``key``'s cooldown, as known."""
        return max(0.0, self.cooldowns.get(key, -math.inf) - now)

    def avoid(self, name: str, seconds: float, now: float) -> None:
        """Pass ``name`` over for ``seconds``, or until a later end already known."""
        self.avoided[name] = max(self.avoided.get(name, -math.inf), now + seconds)

    def avoided_for(self, name: str, now: float) -> float:
        """Seconds ``name`` is still to be avoided, as known."""
        return max(0.0, self.avoided.get(name, -math.inf) - now)

    def reading(self, now: float) -> None:
        """A read from Redis starts now: the next is due ``interval`` from now."""
        self.wanted = False
        self.due = now + self.interval

    def learn(self, reply: Sequence[Any], now: float) -> None:
        """Take in the quota script's answer to ``cooling``: ``[tag, server now, n, key,
        until, ... (n pairs), name, until, ...]``, the cooldowns first, then the names to
        avoid. What is over is forgotten (keys this process never uses included); a later end
        known here stays."""
        server_now, cooling = float(reply[1]), int(reply[2])
        for known in (self.cooldowns, self.avoided):
            for key in [key for key, until in known.items() if until <= now]:
                del known[key]
        for n, i in enumerate(range(3, len(reply) - 1, 2)):
            key, until = str(reply[i]), self.local(now, server_now, float(reply[i + 1]))
            known = self.cooldowns if n < cooling else self.avoided
            if until > known.get(key, -math.inf):
                known[key] = until

    def forget(self, key: str, now: float) -> bool:
        """Drop ``key``'s cooldown once it is over; False while it lasts."""
        if self.cooldowns.get(key, -math.inf) > now:
            return False
        self.cooldowns.pop(key, None)
        return True
