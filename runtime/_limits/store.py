"""Where a quota's shared state lives: its windows and its cooldown.

The RateLimiter keeps what is local to one process (queues, pending slots, open streams,
adaptive limits) and asks a :class:`QuotaStore` for what several processes sharing one
provider account must agree on. :class:`MemoryQuotaStore`, the one store here, serves one
process. A store that several processes share (on a Redis server, say) would implement the
same protocol, atomically per call and on its server's clock: which is why the protocol speaks
in waits, not absolute times.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import attrs

from .._record import Record
from .cost import Cost
from .headers import Dimension, Learned

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .store_rare import BudgetAsk as BudgetAsk
    from .store_rare import BudgetRefused as BudgetRefused
    from .store_rare import TooLarge as TooLarge
    from .store_rare import WindowSpec as WindowSpec
    from .window import Window, WindowEntry  # noqa: TC004 (only types: windows load with a limit)

__all__ = [
    "BudgetAsk",
    "BudgetRefused",
    "MemoryQuotaStore",
    "QuotaStore",
    "Reservation",
    "TooLarge",
    "WindowSpec",
    "sent_slots",
]


def __getattr__(name: str) -> Any:
    # A store's rarer terms load when first met (sluice._limits.store_rare).
    if name in ("BudgetAsk", "BudgetRefused", "TooLarge", "WindowSpec"):
        from . import store_rare

        return getattr(store_rare, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@attrs.frozen(eq=False, repr=False)
class Reservation(Record):
    """Units taken from a key's windows for one attempt, to settle when it ends."""

    key: str
    cost: Cost
    entries: tuple[tuple[tuple[Dimension, float], WindowEntry], ...]
    ref: str = ""
    """A shared store's id for the reservation ("" for the in-memory store)."""
    slots: tuple[tuple[str, str], ...] = ()
    """A shared store's windows the reservation was taken from: (dimension, period)."""
    sent: frozenset[tuple[str, float]] = frozenset()
    """The windows (dimension, period) that count the reservation from its admission:
    :meth:`QuotaStore.redate` leaves them (see :func:`sent_slots`)."""


class QuotaStore(Protocol):
    shared: bool
    """True for a store several processes share: it also enforces the pending and
    open-stream caps (``caps``) and the budgets (``budget``) across them."""

    async def reserve(
        self,
        key: str,
        specs: Sequence[WindowSpec],
        cost: Cost,
        now: float,
        *,
        caps: tuple[int | None, int | None] = (None, None),
        budget: BudgetAsk | None = None,
    ) -> Reservation | TooLarge | BudgetRefused | float:
        """Take ``cost`` from every window of ``key`` if all have room.

        Returns the reservation; or the seconds to wait before it could fit; or TooLarge.
        Nothing is taken unless everything fits (all or nothing). A shared store also checks
        the cooldown, the (pending, open-stream) ``caps`` and the ``budget`` in the same step
        (BudgetRefused: the budget can never cover it); an unshared one ignores both, the
        RateLimiter enforcing them in its process.

        Raises:
            StoreUnavailable: a shared store did not answer.
            InternalError: a shared store failed in a way asking again cannot fix (a bug).
        """
        ...

    async def end(self, reservation: Reservation) -> None:
        """The reservation's attempt is over (after its settle, if any): free what it held
        beyond the windows (a shared store's pending and open-stream slots)."""
        ...

    async def settle_budget(self, hold: str, micros: int | None, tokens: int) -> None:
        """Charge a shared budget reservation what its attempt spent (``micros`` None: all
        it reserved). Only a shared store takes budget reservations."""
        ...

    async def settle(self, reservation: Reservation, actual: Cost) -> None:
        """Replace the reserved amounts by what the attempt really used."""
        ...

    async def redate(self, reservation: Reservation, now: float) -> None:
        """Count the reservation from ``now``: its request has reached the provider. Windows
        that count from the send (``reservation.sent``) keep their admission time."""
        ...

    async def cooldown(self, key: str, seconds: float, now: float) -> float:
        """Pause ``key`` for at least ``seconds``; return the seconds left of the pause."""
        ...

    async def cooldown_left(self, key: str, now: float) -> float:
        """Seconds left of ``key``'s pause (0 when there is none)."""
        ...

    async def learn(
        self, key: str, specs: Sequence[WindowSpec], learned: Sequence[Learned], now: float
    ) -> None:
        """Note the limits the provider reported (each holds for :data:`LEARNED_FOR` seconds
        after its last report, under the configured limit) and count the usage it reports
        beyond ours."""
        ...

    def usage(self, key: str, now: float) -> dict[str, tuple[int, int]]:
        """``{"dimension/period": (used, limit)}`` per window of ``key``, for statistics.
        Never waits: a shared store answers with what its server last reported."""
        ...

    def usage_age(self, key: str, now: float) -> float:
        """Seconds since the values ``usage`` gives were current (0 for a store that holds
        the windows itself)."""
        ...

    def forget(self, key: str, specs: Sequence[WindowSpec], now: float) -> bool:
        """Drop what this process keeps for ``key`` if it carries nothing: every window empty,
        no limit learned (beyond ``specs``), no cooldown left. True when dropped (the next
        reserve starts it afresh, exactly as before); False when something had to stay.
        A shared store only drops its local notes: its server expires its own keys."""
        ...


LEARNED_PERIOD = 60.0
"""The window of a limit learned from headers: providers report per-minute limits."""

_NO_SLOTS: frozenset[tuple[str, float]] = frozenset()


def sent_slots(specs: Sequence[WindowSpec]) -> frozenset[tuple[str, float]]:
    """The windows of ``specs`` that count an admission from its send, not its reply.

    Re-dating an admission to its reply (:meth:`QuotaStore.redate`) is right for a provider's
    window: the provider counts a request from its arrival, and counting ours from later keeps
    our window behind its own. A spread of our own (the ``--rpm`` pacing window) is about
    sends: re-dated, each of its steps would last its period plus the time to first token,
    and it would send well below its rate whenever that time is not small beside the
    period. So a
    window counts from the send only when every spec naming it says ``from_send``: a
    provider's window of the same dimension and length shares its admissions and must keep
    them re-dated. The per-minute window (:data:`LEARNED_PERIOD`) is never one of them: a
    limit the provider reports in its headers lands there, and both stores must agree on it
    without asking which limits were learned.
    """
    sent = _NO_SLOTS
    for s in specs:
        if s.from_send and s.period != LEARNED_PERIOD:
            sent = sent | {(s.dimension, s.period)}
    if sent:
        for s in specs:
            if not s.from_send:
                sent = sent - {(s.dimension, s.period)}
    return sent


def kept_for(period: float) -> float:
    """Seconds a window's state is kept after its last use: well past the window itself, so a
    key that goes idle loses nothing it still needs (a shared store's keys expire after it)."""
    return 2 * period + 600.0


LEARNED_FOR = kept_for(LEARNED_PERIOD)
"""Seconds a limit learned from headers holds after the last reply that reported it."""

Slot: TypeAlias = tuple[Dimension, float]


class MemoryQuotaStore:
    """The quota state of one process. Not shared: each runtime has its own.

    A key's limits are worked out on every reserve: each configured limit, lowered by a limit
    the provider reported (in its headers) for the same window while that report is fresh; a
    reported limit for a window nobody configured adds that window. So a reload takes effect
    at the next admission, a reported limit can rise again, and one not reported for
    :data:`LEARNED_FOR` seconds lapses. A window keeps its admissions whatever its limit.
    """

    shared = False

    def __init__(self) -> None:
        self._windows: dict[str, dict[Slot, Window]] = {}
        self._learned: dict[str, dict[Slot, tuple[int, float]]] = {}
        """Per key, the limits learned from headers: (limit, when it lapses)."""
        self._cooldowns: dict[str, float] = {}
        self._bound: dict[str, tuple[Sequence[WindowSpec], list[tuple[Slot, Window]], float]] = {}
        """Per key, the windows :meth:`_key_windows` last returned, the specs they were for
        and until when they hold: until the first learned limit lapses (``inf`` with none),
        while the key has no window beyond its limits' (a reload changes the specs; ``learn``
        and ``forget`` drop the entry)."""

    def _limits(self, key: str, specs: Sequence[WindowSpec], now: float) -> dict[Slot, int]:
        """The key's limits at ``now``: configured windows in their order, then windows only
        learned (in a fixed order); lapsed learned limits are dropped on the way."""
        limits: dict[Slot, int] = {}
        for s in specs:
            slot = (s.dimension, s.period)
            limits[slot] = min(s.limit, limits.get(slot, s.limit))
        learned = self._learned.get(key)
        if learned:
            only_learned: dict[Slot, int] = {}
            for slot, (limit, until) in list(learned.items()):
                if until <= now:
                    del learned[slot]
                elif slot in limits:
                    limits[slot] = min(limits[slot], limit)
                else:
                    only_learned[slot] = limit
            if not learned:
                del self._learned[key]
            for slot in sorted(only_learned):
                limits[slot] = only_learned[slot]
        return limits

    def _key_windows(
        self, key: str, specs: Sequence[WindowSpec], now: float
    ) -> list[tuple[Slot, Window]]:
        """The windows that bind ``key`` now, each set to its current limit. A window no limit
        names any more is dropped once empty (while it holds admissions it is kept, so a limit
        that comes back finds them counted)."""
        bound = self._bound.get(key)
        if bound is not None and bound[0] is specs and now < bound[2]:
            return bound[1]  # every admission's path: nothing changed since
        limits = self._limits(key, specs, now)
        windows = self._windows.setdefault(key, {})
        for slot in [slot for slot in windows if slot not in limits]:
            idle = windows[slot]
            idle.expire(now)
            if not len(idle):
                del windows[slot]
        out = []
        for slot, limit in limits.items():
            window = windows.get(slot)
            if window is None:
                from .window import Window  # loaded by the first window a limit asks for

                window = windows[slot] = Window(limit, slot[1])
            else:
                window.limit = limit
            out.append((slot, window))
        if len(windows) == len(out):
            learned = self._learned.get(key)
            lapses = min(until for _, until in learned.values()) if learned else math.inf
            self._bound[key] = (specs, out, lapses)
        else:
            self._bound.pop(key, None)
        return out

    async def reserve(
        self,
        key: str,
        specs: Sequence[WindowSpec],
        cost: Cost,
        now: float,
        *,
        caps: tuple[int | None, int | None] = (None, None),
        budget: BudgetAsk | None = None,
    ) -> Reservation | TooLarge | BudgetRefused | float:
        windows = self._key_windows(key, specs, now)
        ready_at = now
        for (dimension, _), window in windows:
            amount = cost.amount(dimension)
            if not window.fits_ever(amount):
                from .store_rare import TooLarge  # a cost beyond a whole window

                return TooLarge(dimension, amount, window.limit, window.period)
            ready_at = max(ready_at, window.next_free(amount, now))
        if ready_at > now:
            return ready_at - now
        entries = []  # a loop, not a generator: no frame resumed per window
        for slot, window in windows:
            # next_free expired each window at this now just above
            entries.append((slot, window.add(cost.amount(slot[0]), now, expired=True)))
        return Reservation(key, cost, tuple(entries), sent=sent_slots(specs))

    async def end(self, reservation: Reservation) -> None:
        pass  # slots are the RateLimiter's in one process

    async def settle_budget(self, hold: str, micros: int | None, tokens: int) -> None:
        pass  # budgets are the RateLimiter's BudgetBook in one process

    async def settle(self, reservation: Reservation, actual: Cost) -> None:
        windows = self._windows.get(reservation.key, {})
        for slot, entry in reservation.entries:
            window = windows.get(slot)
            if window is not None:
                window.settle(entry, actual.amount(slot[0]))

    async def redate(self, reservation: Reservation, now: float) -> None:
        windows = self._windows.get(reservation.key, {})
        sent = reservation.sent
        for slot, entry in reservation.entries:
            window = windows.get(slot)
            if window is not None and slot not in sent:
                window.redate(entry, now)

    async def cooldown(self, key: str, seconds: float, now: float) -> float:
        until = max(self._cooldowns.get(key, -math.inf), now + seconds)
        self._cooldowns[key] = until
        return until - now

    async def cooldown_left(self, key: str, now: float) -> float:
        return max(0.0, self._cooldowns.get(key, -math.inf) - now)

    async def learn(
        self, key: str, specs: Sequence[WindowSpec], learned: Sequence[Learned], now: float
    ) -> None:
        self._bound.pop(key, None)
        for item in learned:
            slot = (item.dimension, LEARNED_PERIOD)
            if item.limit is not None and item.limit >= 1:
                # The latest report wins, higher or lower; the configured limit still caps it.
                self._learned.setdefault(key, {})[slot] = (item.limit, now + LEARNED_FOR)
            if item.remaining is None:
                continue
            window = dict(self._key_windows(key, specs, now)).get(slot)
            if window is None:
                continue  # no limit for this window: nothing to count against
            extra = window.remaining(now) - item.remaining
            if extra > 0:
                # The provider counts more than we did (other clients of the account, or
                # requests it saw before we started). Count the difference until its reset.
                reset = item.reset if item.reset is not None else window.period
                window.add_expiring(extra, now, min(reset, window.period))

    def forget(self, key: str, specs: Sequence[WindowSpec], now: float) -> bool:
        if self._cooldowns.get(key, -math.inf) > now:
            return False
        learned = self._learned.get(key)
        if learned and any(until > now for _, until in learned.values()):
            return False  # a limit learned from headers still holds
        for window in self._windows.get(key, {}).values():
            window.expire(now)
            if len(window):
                return False  # admissions still counted
        self._windows.pop(key, None)
        self._learned.pop(key, None)
        self._cooldowns.pop(key, None)
        self._bound.pop(key, None)
        return True

    def history(self, now: float) -> list[tuple[str, Dimension, float, list[WindowEntry]]]:
        """``(key, dimension, period, entries oldest first)`` of every window that still counts
        admissions at ``now``: what a shared store that lost its history is told again."""
        out = []
        for key, windows in self._windows.items():
            for (dimension, period), window in windows.items():
                counted = window.counted(now)
                if counted:
                    out.append((key, dimension, period, counted))
        return out

    def usage(self, key: str, now: float) -> dict[str, tuple[int, int]]:
        windows = self._windows.get(key, {})
        out: dict[str, tuple[int, int]] = {}
        for (dimension, period), window in windows.items():
            window.expire(now)
            out[f"{dimension}/{period:g}s"] = (window.used, window.limit)
        return out

    def usage_age(self, key: str, now: float) -> float:
        return 0.0  # the windows are here: always current
