"""Waiting calls of one quota key, by priority, with ageing so nobody starves.

Within a priority the order is FIFO. Across priorities the head with the lowest score goes
first, where ``score = rank * aging - waited``: a call of a lower class overtakes a fresh call of
the class above after waiting ``aging`` seconds (ties go to the higher class).

:class:`Expiries` keeps, across keys, when the asks queued there give up (an ask's
``give_up_at``): the RateLimiter takes each out of its queue then.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from typing import TYPE_CHECKING, Generic, Literal, Protocol, TypeAlias, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["PRIORITIES", "Expiries", "Priority", "WaitQueues"]

Priority: TypeAlias = Literal["interactive", "batch", "background"]
PRIORITIES: tuple[Priority, ...] = ("interactive", "batch", "background")
_RANK = {name: rank for rank, name in enumerate(PRIORITIES)}


class _Waiting(Protocol):
    @property
    def priority(self) -> Priority: ...

    @property
    def enqueued_at(self) -> float: ...


W = TypeVar("W", bound=_Waiting)

_SLACK = 16
"""Removed waiters a deque may hold beyond its live ones before it is compacted."""


class WaitQueues(Generic[W]):
    """The waiters of one quota key: push, peek at the next, pop it, or remove any, each in
    amortized O(1).

    A removed waiter is only marked gone (its id leaves the live set) and stays in its deque
    until it reaches the head, where it is dropped; a deque holding more gone waiters than
    live ones is compacted, so memory stays within twice the live waiters (plus a small
    slack). Each waiter must be queued at most once at a time; waiters are told apart by
    identity, never by ``==``.

    Empty queues hold no deque and no set: a deque is made by the push that needs it and let
    go once it holds nobody live. A runtime keeps a key per model a caller names, most of
    them with nobody waiting, so an idle key costs a few words, not three deques.
    """

    __slots__ = ("_live", "_queues", "_sizes", "aging")

    def __init__(self, aging: float) -> None:
        self.aging = aging
        self._queues: list[deque[W] | None] = [None] * len(PRIORITIES)
        """One deque per priority while it holds a live waiter (a deque may also hold
        removed ones, never at its head); None otherwise."""
        self._sizes = [0] * len(PRIORITIES)
        """Live waiters per priority."""
        self._live: set[int] | None = None
        """``id`` of every live waiter: each is held by its deque, so no id is reused
        meanwhile. None while there is none."""

    def push(self, waiter: W) -> None:
        rank = _RANK[waiter.priority]
        queue = self._queues[rank]
        if queue is None:
            queue = self._queues[rank] = deque()
        queue.append(waiter)
        self._sizes[rank] += 1
        if self._live is None:
            self._live = set()
        self._live.add(id(waiter))

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
        rank = _RANK[waiter.priority]
        queue = self._queues[rank]
        assert queue is not None and self._live is not None  # peek returned its head
        queue.popleft()
        self._sizes[rank] -= 1
        self._forget(id(waiter))
        self._drop_gone_heads(rank)

    def remove(self, waiter: W) -> bool:
        """Remove a waiter from anywhere in the queues (it gave up); False if absent."""
        live = self._live
        if live is None or id(waiter) not in live:
            return False
        self._forget(id(waiter))
        rank = _RANK[waiter.priority]
        self._sizes[rank] -= 1
        queue = self._queues[rank]
        assert queue is not None  # it holds the waiter
        if queue[0] is waiter:
            self._drop_gone_heads(rank)
        elif len(queue) > 2 * self._sizes[rank] + _SLACK:
            kept = [w for w in queue if id(w) in live]  # O(n) once per n removals
            queue.clear()
            queue.extend(kept)
        return True

    def __contains__(self, waiter: object) -> bool:
        """Whether ``waiter`` is queued now (told apart by identity)."""
        live = self._live
        return live is not None and id(waiter) in live

    def live(self) -> list[W]:
        """Every waiter queued now, highest priority class first (O(n): for the rare moment
        all of them must be looked at, never per admission)."""
        live = self._live
        if not live:
            return []
        return [w for queue in self._queues if queue for w in queue if id(w) in live]

    def _forget(self, ident: int) -> None:
        live = self._live
        assert live is not None
        live.remove(ident)
        if not live:
            self._live = None

    def drop(self, unwanted: Callable[[W], bool]) -> list[W]:
        """Remove every live waiter for which ``unwanted`` is true and return them, in queue
        order per priority. O(n): for rare sweeps (a store outage), not per admission."""
        live = self._live
        dropped: list[W] = []
        if live is None:
            return dropped
        for rank, queue in enumerate(self._queues):
            if queue is None:
                continue
            kept = []
            for waiter in queue:
                if id(waiter) not in live:
                    continue
                if unwanted(waiter):
                    live.remove(id(waiter))
                    self._sizes[rank] -= 1
                    dropped.append(waiter)
                else:
                    kept.append(waiter)
            queue.clear()
            queue.extend(kept)
            if not kept:
                self._queues[rank] = None
        if not live:
            self._live = None
        return dropped

    def _drop_gone_heads(self, rank: int) -> None:
        """Keep the invariants that every deque's head is live and that a deque with no live
        waiter is let go."""
        if not self._sizes[rank]:
            self._queues[rank] = None  # whatever it still holds was removed
            return
        queue, live = self._queues[rank], self._live
        assert queue is not None and live is not None
        while id(queue[0]) not in live:
            queue.popleft()

    def depth(self) -> dict[Priority, int]:
        return dict(zip(PRIORITIES, self._sizes, strict=True))

    def __len__(self) -> int:
        return 0 if self._live is None else len(self._live)

    def __bool__(self) -> bool:
        return self._live is not None


K = TypeVar("K")
A = TypeVar("A")

_COMPACT_FLOOR = 64


class Expiries(Generic[K, A]):
    """Queued asks by when they give up; ``queued(key, waiter)`` says whether one still is.

    Most asks are admitted in the burst of messages they came in, and those cost a list
    append here and nothing else: only an ask still queued after its burst gets an entry in a
    heap ordered by when it gives up. An entry whose ask was admitted or withdrawn meanwhile
    is let go lazily: when it comes due, or when the heap has doubled since it was last
    compacted (every entry still queued is kept). So the heap never holds more than twice what
    it kept at its last compaction (or 64), in amortized constant time per entry.
    """

    __slots__ = ("_arrived", "_compact_at", "_heap", "_ids", "_queued")

    def __init__(self, queued: Callable[[K, A], bool]) -> None:
        self._queued = queued
        self._arrived: list[tuple[float, K, A]] = []
        self._heap: list[tuple[float, int, K, A]] = []
        self._ids = itertools.count()
        self._compact_at = _COMPACT_FLOOR

    def arrived(self, at: float, key: K, waiter: A) -> None:
        """``waiter`` was queued on ``key`` in this burst and gives up at ``at``."""
        self._arrived.append((at, key, waiter))

    def burst_ended(self) -> None:
        """The burst's keys were looked at: keep the arrivals still queued."""
        arrived = self._arrived
        if not arrived:
            return
        heap, queued = self._heap, self._queued
        for at, key, waiter in arrived:
            if queued(key, waiter):
                heapq.heappush(heap, (at, next(self._ids), key, waiter))
        arrived.clear()
        if len(heap) >= self._compact_at:
            heap[:] = [entry for entry in heap if queued(entry[2], entry[3])]
            heapq.heapify(heap)
            self._compact_at = max(_COMPACT_FLOOR, 2 * len(heap))

    def next_at(self) -> float:
        """When the earliest entry comes due (``inf``: none)."""
        heap = self._heap
        return heap[0][0] if heap else math.inf

    def due(self, now: float) -> list[tuple[K, A]]:
        """The entries due at ``now``, taken out, earliest first, whether still queued or not
        (the caller takes each out of its queue, and answers those it found there)."""
        heap = self._heap
        out = []
        while heap and heap[0][0] <= now:
            _, _, key, waiter = heapq.heappop(heap)
            out.append((key, waiter))
        return out

    def __len__(self) -> int:
        return len(self._heap)
