"""What admission does while the shared store does not answer: fail, or a local share.

:class:`FallbackQuotaStore` puts a :class:`~sluice._limits.redis_store.RedisQuotaStore` first.
When a call to it fails:

* ``on_store_error="fail"``: the admission is refused with
  :class:`~sluice._errors.StoreUnavailable` (the call is not sent). The RateLimiter keeps calls
  in ``wait`` mode (a batch's) queued instead, asking again with a backoff until Redis answers
  or their wait ends (then a batch writes an error line that ``--resume`` redoes). Settlements
  stay queued and are sent once Redis answers.
* ``on_store_error="local"``: the process admits against its own windows, each holding
  ``share`` of the configured limit (at least 1), until Redis answers again. It asks Redis again
  after a backoff (0.5 s doubling to 10 s). With N processes each holding a share ``s``, the
  provider sees at most ``limit * (1 + N * s)`` in a window that spans the outage: what Redis
  admitted, plus each process's local windows.

The local windows are this process's own: every admission it makes through Redis is mirrored
into them too, so going local counts what the process admitted in the last window before the
outage, not only what it admits during it.

A Redis that comes back empty (its run id changed: :mod:`sluice._limits.store_epoch`) has lost
what every process admitted in the last window. Each process tells it again what it admitted
itself (its local windows' entries), admits nothing for a short grace while the others do the
same, then each key admits at the local share of its own windows *and* through Redis, for one
full window of the key after the loss was found, before trusting Redis alone again. Once every
live process has told its part, Redis holds the whole history again; the shares bound what a
process that could not tell its part leaves out (a process admits at most the larger of what it
admitted before the loss and its share in any window).

Budgets (:mod:`sluice._limits.budget_share`): in ``local`` mode a process spends only ``share``
of what was left of each shared budget when Redis stopped answering (the budget less what
Redis last reported spent and reserved), and books what it spent meanwhile into Redis once it
answers again, exactly once. When Redis comes back without its history (restarted empty, or
the budget accounts gone), the budgets are rebuilt before anything more is admitted through
it: from the ledger's aggregates in Redis when they survived, what this process last knew of
Redis, and every process's own spend (see ``rebuild`` in :mod:`sluice._limits.redis_script`).
Until that has been done, a ``local`` process admits at its share and a ``fail`` one
refuses (a waiting call waits).

Every switch is logged (a warning going local, info coming back) and counted in
``switches``. A script that fails (:class:`~sluice._errors.InternalError`, a bug) is not an
outage: it passes through, refusing only the call it was serving.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, TypeAlias

import attrs

from .._errors import StoreUnavailable
from .budget_share import BudgetShares
from .cost import Cost
from .store import BudgetAsk, BudgetRefused, MemoryQuotaStore, Reservation, TooLarge, WindowSpec
from .store_epoch import SEED_GRACE, distrusted_until, new_run_id

if TYPE_CHECKING:
    from .._ledger.book import LedgerKey, LedgerTotals
    from .._ledger.redis import RedisLedgerStore
    from .headers import Learned
    from .redis_store import RedisQuotaStore, SeedWindow

__all__ = ["FallbackQuotaStore"]

log = logging.getLogger("sluice._limits")

_FIRST_RETRY = 0.5
_MAX_RETRY = 10.0
_NOTHING = Cost(0, 0, 0)
_UNBOUNDED = 2**62
"""The limit of a mirrored admission's windows: a mirror records, it never refuses."""


_Answer: TypeAlias = "Reservation | TooLarge | BudgetRefused | float"
"""What an admission answers: admitted, never (too large), refused by a budget, or seconds to
wait."""


@attrs.frozen
class _Ask:
    """One admission as :meth:`FallbackQuotaStore.reserve` was asked it, to try through Redis,
    locally or both."""

    key: str
    specs: Sequence[WindowSpec]
    cost: Cost
    caps: tuple[int | None, int | None]
    budget: BudgetAsk | None

    async def send(self, store: RedisQuotaStore, now: float) -> _Answer:
        """Admit through ``store`` (Redis)."""
        return await store.reserve(
            self.key, self.specs, self.cost, now, caps=self.caps, budget=self.budget
        )


@functools.lru_cache(maxsize=256)
def _unbounded(specs: tuple[WindowSpec, ...]) -> tuple[WindowSpec, ...]:
    return tuple(attrs.evolve(s, limit=_UNBOUNDED) for s in specs)


class FallbackQuotaStore:
    """A shared store with a policy for when it fails (see the module docstring)."""

    shared = True

    def __init__(
        self, primary: RedisQuotaStore, on_error: Literal["fail", "local"], share: float
    ) -> None:
        if not 0 < share <= 1:
            raise ValueError("the local share is a fraction in (0, 1]")
        self.primary = primary
        self.on_error = on_error
        self.share = share
        self.local = MemoryQuotaStore()
        """This process's own admissions of the last window (through Redis or not): its local
        share is taken from these windows."""
        self._mirrored: dict[tuple[str, str], Reservation] = {}
        """(key, Redis reservation id) to the same admission in ``local``, until it ends."""
        primary.run.history = self._history  # told to Redis when it loses its own
        self.switches = 0
        """Times admission moved to the local share or back."""
        self.budgets = BudgetShares(share)
        self.rebuilds = 0
        """Times the shared budgets were rebuilt after the store lost its history."""
        self._retry_at: float | None = None
        self._delay = _FIRST_RETRY
        self._rebuilt = primary.generation
        self._process = new_run_id()

    @property
    def is_local(self) -> bool:
        return self._retry_at is not None

    def _failed(self, exc: StoreUnavailable, now: float) -> None:
        if self.on_error == "fail":
            raise exc
        if self._retry_at is None:
            self.switches += 1
            log.warning(
                "quota store unavailable (%s); admitting with a local share of %g of each limit",
                exc,
                self.share,
            )
            self._delay = _FIRST_RETRY
            self.budgets.go_local(self.primary.balances)
        else:
            self._delay = min(_MAX_RETRY, self._delay * 2)
        self._retry_at = now + self._delay

    def _recovered(self) -> None:
        if self._retry_at is not None:
            self.switches += 1
            self._retry_at = None
            self.budgets.back()
            self._book()
            log.info("quota store answers again; admitting through it")

    def _book(self) -> None:
        """Queue the spend of attempts admitted without the store, to go with its next run
        (the store's task flushes it within its interval when nothing else is sent). Not
        while its history is lost: the rebuild counts that spend."""
        if self.primary.generation == self._rebuilt:
            booking = self.budgets.take_booking()
            if booking:
                self.primary.queue_booking(new_run_id(), booking)

    def _try_primary(self, now: float) -> bool:
        return self._retry_at is None or now >= self._retry_at

    def _local_specs(self, specs: Sequence[WindowSpec]) -> list[WindowSpec]:
        return [attrs.evolve(s, limit=max(1, math.floor(s.limit * self.share))) for s in specs]

    async def _reserve_local(self, ask: _Ask, now: float) -> _Answer:
        """Admit in this process's own windows at its share of each limit."""
        return await self.local.reserve(ask.key, self._local_specs(ask.specs), ask.cost, now)

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
        ask = _Ask(key, specs, cost, caps, budget)
        if self._try_primary(now):
            try:
                got = await self._reserve_shared(ask, now)
            except StoreUnavailable as exc:
                self._failed(exc, now)
            else:
                self._recovered()
                return got
        assert self._retry_at is not None
        if budget is not None and not self.budgets.fits_local(budget):
            return max(0.0, self._retry_at - now)  # the share is spent: wait for Redis
        got = await self._reserve_local(ask, now)
        if isinstance(got, Reservation) and budget is not None:
            self.budgets.admitted(budget, local=True)
        if isinstance(got, float):
            return min(got, max(0.0, self._retry_at - now))  # ask Redis again on time
        return got

    async def _reserve_shared(self, ask: _Ask, now: float) -> _Answer:
        """Reserve through Redis, first rebuilding the budgets if it lost its history and
        booking the spend of an outage.

        Raises:
            StoreUnavailable: Redis did not answer, or lost its history again meanwhile.
        """
        primary = self.primary
        for _ in range(2):
            if primary.generation != self._rebuilt:
                await self._rebuild(now)
            self._book()
            generation = primary.generation
            try:
                got = await self._through_primary(ask, now)
            except StoreUnavailable:
                if primary.generation == generation:
                    raise  # an outage (the booking stays queued)
                continue  # the history was lost: rebuild, then ask again
            self.budgets.booked()
            if isinstance(got, Reservation) and ask.budget is not None:
                self.budgets.admitted(ask.budget, local=False)
            return got
        raise StoreUnavailable("the quota store keeps losing its history")

    async def _rebuild(self, now: float) -> None:
        """Rebuild the shared budgets after the store lost its history (once per loss).

        Raises:
            StoreUnavailable: the store did not answer (the rebuild is done again later).
        """
        primary = self.primary
        generation = primary.generation
        accounts = self.budgets.contribution(generation, primary.balances)
        if accounts:
            try:
                rows = await primary.ledger_mirror().load()
            except OSError as exc:
                raise StoreUnavailable(f"the quota store does not answer: {exc}") from None
            floors = _ledger_floors(rows, [a[0] for a in accounts])
            accounts = [
                (name, max(fm, floors[name][0]), max(ft, floors[name][1]), om, ot)
                for name, fm, ft, om, ot in accounts
            ]
            primary.queue_rebuild(self._process, accounts)
            await primary.flush(now)
        if primary.generation == generation:
            self._rebuilt = generation
            self.rebuilds += 1
            if accounts:
                log.warning("quota store: shared budgets rebuilt (%d accounts)", len(accounts))

    async def _through_primary(self, ask: _Ask, now: float) -> _Answer:
        """Admit through Redis: alone while it is trusted (mirroring the admission into the
        local windows), else at the local share as well (see the module docstring).

        Raises:
            StoreUnavailable: Redis did not answer; HistoryLost: it lost its history (nothing
                was admitted).
        """
        if not ask.specs:  # no window to guard
            return await ask.send(self.primary, now)
        if self.lost_at is None or now >= self._distrusted_until(ask.specs):
            got = await ask.send(self.primary, now)
            if isinstance(got, Reservation):
                mine = await self.local.reserve(
                    ask.key, _unbounded(tuple(ask.specs)), ask.cost, now
                )
                assert isinstance(mine, Reservation)  # an unbounded window takes anything
                self._mirrored[ask.key, got.ref] = mine
            return got
        return await self._guarded(ask, now)

    async def _guarded(self, ask: _Ask, now: float) -> _Answer:
        """Admit at the local share of this process's own windows and through Redis (whose
        history is unknown) too; either one's wait is the answer. Nothing is admitted while
        the other processes may still be telling Redis their part of its history."""
        assert self.lost_at is not None
        told = self.lost_at + SEED_GRACE
        if now < told:
            return told - now
        until = self._distrusted_until(ask.specs)
        mine = await self._reserve_local(ask, now)
        if isinstance(mine, TooLarge):
            return until - now  # more than a share: it waits for Redis to be trusted again
        if not isinstance(mine, Reservation):
            return min(mine, until - now) if isinstance(mine, float) else mine
        try:
            got = await ask.send(self.primary, now)
        except BaseException:  # lost again too: the caller rebuilds and asks again
            await self.local.settle(mine, _NOTHING)
            raise
        if isinstance(got, Reservation):
            self._mirrored[ask.key, got.ref] = mine
        else:
            await self.local.settle(mine, _NOTHING)
        return got

    def _history(self, now: float) -> list[SeedWindow]:
        """This process's admissions still in their windows, each of an attempt not yet ended
        with its Redis reservation id (so its later re-dating and settlement reach the copy)."""
        refs = {
            id(entry): ref for (_, ref), mine in self._mirrored.items() for _, entry in mine.entries
        }
        return [
            (key, dimension, period, [(e.at, e.amount, refs.get(id(e), "")) for e in entries])
            for key, dimension, period, entries in self.local.history(now)
        ]

    @property
    def lost_at(self) -> float | None:
        """When Redis was last found to have lost its history (None: never)."""
        return self.primary.lost_at

    def _distrusted_until(self, specs: Sequence[WindowSpec]) -> float:
        if self.lost_at is None:
            return -math.inf
        return distrusted_until(self.lost_at, (s.period for s in specs))

    async def settle(self, reservation: Reservation, actual: Cost) -> None:
        if not reservation.ref:
            await self.local.settle(reservation, actual)
            return
        await self.primary.settle(reservation, actual)
        mine = self._mirrored.get((reservation.key, reservation.ref))
        if mine is not None:
            await self.local.settle(mine, actual)

    async def redate(self, reservation: Reservation, now: float) -> None:
        if not reservation.ref:
            await self.local.redate(reservation, now)
            return
        await self.primary.redate(reservation, now)
        mine = self._mirrored.get((reservation.key, reservation.ref))
        if mine is not None:
            await self.local.redate(mine, now)

    async def end(self, reservation: Reservation) -> None:
        if reservation.ref:
            self._mirrored.pop((reservation.key, reservation.ref), None)
            await self.primary.end(reservation)

    async def settle_budget(self, hold: str, micros: int | None, tokens: int) -> None:
        local = self.budgets.settled(hold, micros, tokens)
        if not local:
            await self.primary.settle_budget(hold, micros, tokens)
        elif not self.is_local:
            self._book()  # admitted during an outage, ended after it

    async def cooldown(self, key: str, seconds: float, now: float) -> float:
        local = await self.local.cooldown(key, seconds, now)
        if self._try_primary(now):
            try:
                left = await self.primary.cooldown(key, seconds, now)
            except StoreUnavailable as exc:
                if self.on_error == "local":
                    self._failed(exc, now)
                else:
                    log.warning("quota store: a cooldown was not shared (%s)", exc)
            else:
                self._recovered()
                return max(left, local)
        return local

    async def cooldown_left(self, key: str, now: float) -> float:
        return max(
            await self.primary.cooldown_left(key, now), await self.local.cooldown_left(key, now)
        )

    def cooling(self, key: str, now: float) -> float:
        """See :meth:`RedisQuotaStore.cooling` (this process's own 429s reach routing as
        errors, so the local share's cooldowns need not be added)."""
        return self.primary.cooling(key, now)

    def avoid(self, name: str, seconds: float, now: float) -> None:
        self.primary.avoid(name, seconds, now)

    def avoided(self, name: str, now: float) -> float:
        return self.primary.avoided(name, now)

    async def learn(
        self, key: str, specs: Sequence[WindowSpec], learned: Sequence[Learned], now: float
    ) -> None:
        if self._try_primary(now):
            try:
                await self.primary.learn(key, specs, learned, now)
            except StoreUnavailable as exc:
                log.debug("quota store: limits learned from headers not shared (%s)", exc)

    def ledger_mirror(self) -> RedisLedgerStore:
        return self.primary.ledger_mirror()

    def usage(self, key: str, now: float) -> dict[str, tuple[int, int]]:
        return self.local.usage(key, now) if self.is_local else self.primary.usage(key, now)

    def usage_age(self, key: str, now: float) -> float:
        return 0.0 if self.is_local else self.primary.usage_age(key, now)

    def forget(self, key: str, specs: Sequence[WindowSpec], now: float) -> bool:
        # The local share's windows are in its own specs (a share of each limit).
        if not self.local.forget(key, self._local_specs(specs), now):
            return False
        return self.primary.forget(key, specs, now)


def _ledger_floors(
    rows: Sequence[tuple[LedgerKey, LedgerTotals]], names: Sequence[str]
) -> dict[str, tuple[int, int]]:
    """(micro-dollars, input + output tokens) the ledger's rows hold for each shared budget
    account: ``global`` all of them, ``tag:<t>`` and ``job:<j>`` theirs."""
    floors = {}
    for name in names:
        kind, _, value = name.partition(":")
        micros = tokens = 0
        for key, totals in rows:
            if (kind == "tag" and key.tag != value) or (kind == "job" and key.job != value):
                continue
            micros += totals.cost_micros
            tokens += totals.input_tokens + totals.output_tokens
        floors[name] = (micros, tokens)
    return floors
