"""A bounded least-recently-used map with an optional time to live. Pure: time is passed in.

The response cache keeps its in-memory entries here. Every operation is O(1) (an
``OrderedDict`` moved and popped at its ends); expired entries are dropped when they are
looked up, and the least recently used one when a new entry would pass the bound.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

import attrs

from .._record import Record

__all__ = ["LruCache", "LruStatistics"]

V = TypeVar("V")


@attrs.frozen(repr=False)
class LruStatistics(Record):
    """What the map holds now, and what it has done since it was made."""

    entries: int
    max_entries: int
    hits: int
    misses: int
    evictions: int
    """Entries dropped to keep within ``max_entries``."""
    expirations: int
    """Entries found expired when looked up."""


class LruCache(Generic[V]):
    """At most ``max_entries`` values by key; with ``ttl``, each valid that many seconds.

    Values are stored as they are given: keep them immutable (the response cache stores
    frozen results), since a caller holding one shares it with every later hit.
    """

    def __init__(self, max_entries: int, ttl: float | None = None) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self.ttl = ttl
        self._entries: OrderedDict[str, tuple[float, V]] = OrderedDict()
        self._hits = self._misses = self._evictions = self._expirations = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def get(self, key: str, now: float) -> V | None:
        """The value stored under ``key`` (now the most recently used), or None when there is
        none or it has expired (it is then dropped)."""
        found = self._entries.get(key)
        if found is None:
            self._misses += 1
            return None
        stored_at, value = found
        if self.ttl is not None and now - stored_at >= self.ttl:
            del self._entries[key]
            self._expirations += 1
            self._misses += 1
            return None
        self._entries.move_to_end(key)
        self._hits += 1
        return value

    def put(self, key: str, value: V, now: float) -> None:
        """Store ``value`` under ``key`` as stored at ``now``, replacing what was there; drop
        the least recently used entry if the map is then over its bound."""
        entries = self._entries
        entries[key] = (now, value)
        entries.move_to_end(key)
        if len(entries) > self.max_entries:
            entries.popitem(last=False)
            self._evictions += 1

    def delete(self, key: str) -> bool:
        """Drop ``key``; whether it was there."""
        return self._entries.pop(key, None) is not None

    def clear(self) -> None:
        self._entries.clear()

    def statistics(self) -> LruStatistics:
        return LruStatistics(
            entries=len(self._entries),
            max_entries=self.max_entries,
            hits=self._hits,
            misses=self._misses,
            evictions=self._evictions,
            expirations=self._expirations,
        )
