"""A first-in first-out queue in a list, for the many small queues sluice keeps per key.

A :class:`collections.deque` allocates a block of 64 slots however few items it holds; a
runtime keeps a few queues per quota key and per breaker, one of each per model a caller
names, and most of them hold an item or two. A list read from a start index holds what it
holds and little more.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["Fifo"]

T = TypeVar("T")

_SLACK = 16
"""Popped slots a :class:`Fifo` may hold before it is cut, beyond as many as it holds items."""


class Fifo(Generic[T]):
    """A queue in a list: appended at the end, popped from the front by moving ``start``.

    The popped front is cut off once it is most of the list, so each item is moved O(1)
    times (amortized) and the list stays within twice the items held, plus a small slack.
    Indexes (:meth:`at`, :meth:`insert`) count from the front.
    """

    __slots__ = ("items", "start")

    def __init__(self, items: list[T] | None = None) -> None:
        self.items: list[T] = [] if items is None else items
        self.start = 0

    def __len__(self) -> int:
        return len(self.items) - self.start

    def __bool__(self) -> bool:
        return len(self.items) > self.start

    def __iter__(self) -> Iterator[T]:
        return itertools.islice(self.items, self.start, None)

    def at(self, index: int) -> T:
        """The item ``index`` places from the front (0: the next to pop)."""
        return self.items[self.start + index]

    def last(self) -> T:
        return self.items[-1]

    def append(self, item: T) -> None:
        self.items.append(item)

    def insert(self, index: int, item: T) -> None:
        """Put ``item`` before the one ``index`` places from the front."""
        self.items.insert(self.start + index, item)

    def popleft(self) -> T:
        items, start = self.items, self.start
        item = items[start]
        start += 1
        if start == len(items):
            items.clear()
            start = 0
        elif start > _SLACK and 2 * start > len(items):
            del items[:start]
            start = 0
        self.start = start
        return item

    def clear(self) -> None:
        self.items.clear()
        self.start = 0
