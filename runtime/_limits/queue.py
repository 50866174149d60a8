"""Waiting calls of one quota key, by priority, with ageing so nobody starves.

Within a priority the order is FIFO. Across priorities the head with the lowest score goes
first, where ``score = rank * aging - waited``: a call of a lower class overtakes a fresh call of
the class above after waiting ``aging`` seconds (ties go to the higher class).
"""

from __future__ import annotations

from collections import deque
from typing import Generic, Literal, Protocol, TypeAlias, TypeVar

__all__ = ["PRIORITIES", "Priority", "WaitQueues"]

Priority: TypeAlias = Literal["interactive", "batch", "background"]
PRIORITIES: tuple[Priority, ...] = ("interactive", "batch", "background")
_RANK = {name: rank for rank, name in enumerate(PRIORITIES)}


class _Waiting(Protocol):
    @property
    def priority(self) -> Priority: ...

    @property
    def enqueued_at(self) -> float: ...


W = TypeVar("W", bound=_Waiting)


class WaitQueues(Generic[W]):
    __slots__ = ("_queues", "aging")

    def __init__(self, aging: float) -> None:
        self.aging = aging
        self._queues: tuple[deque[W], ...] = tuple(deque() for _ in PRIORITIES)

    def push(self, waiter: W) -> None:
        self._queues[_RANK[waiter.priority]].append(waiter)

    def peek(self, now: float) -> W | None:
        """The waiter that should be admitted next, without removing it."""
        best: W | None = None
        best_score = 0.0
        for rank, queue in enumerate(self._queues):
            if queue:
                head = queue[0]
                score = rank * self.aging - (now - head.enqueued_at)
                if best is None or score < best_score:
                    best, best_score = head, score
        return best

    def pop(self, waiter: W) -> None:
        """Remove ``waiter``, which :meth:`peek` just returned."""
        self._queues[_RANK[waiter.priority]].popleft()

    def remove(self, waiter: W) -> bool:
        """Remove a waiter from anywhere in the queues (it gave up); False if absent."""
        queue = self._queues[_RANK[waiter.priority]]
        try:
            queue.remove(waiter)
        except ValueError:
            return False
        return True

    def depth(self) -> dict[Priority, int]:
        return {name: len(q) for name, q in zip(PRIORITIES, self._queues, strict=True)}

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues)

    def __bool__(self) -> bool:
        return any(self._queues)
