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

Every switch is logged (a warning going local, info coming back) and counted in
``switches``. A script that fails (:class:`~sluice._errors.InternalError`, a bug) is not an
outage: it passes through, refusing only the call it was serving.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Literal

import attrs

from .._errors import StoreUnavailable
from .store import BudgetAsk, BudgetRefused, MemoryQuotaStore, Reservation, TooLarge, WindowSpec

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._ledger.redis import RedisLedgerStore
    from .cost import Cost
    from .headers import Learned
    from .redis_store import RedisQuotaStore

__all__ = ["FallbackQuotaStore"]

log = logging.getLogger("sluice._limits")

_FIRST_RETRY = 0.5
_MAX_RETRY = 10.0


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
        self.switches = 0
        """Times admission moved to the local share or back."""
        self._retry_at: float | None = None
        self._delay = _FIRST_RETRY

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
        else:
            self._delay = min(_MAX_RETRY, self._delay * 2)
        self._retry_at = now + self._delay

    def _recovered(self) -> None:
        if self._retry_at is not None:
            self.switches += 1
            self._retry_at = None
            log.info("quota store answers again; admitting through it")

    def _try_primary(self, now: float) -> bool:
        return self._retry_at is None or now >= self._retry_at

    def _local_specs(self, specs: Sequence[WindowSpec]) -> list[WindowSpec]:
        return [attrs.evolve(s, limit=max(1, math.floor(s.limit * self.share))) for s in specs]

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
        if self._try_primary(now):
            try:
                got = await self.primary.reserve(key, specs, cost, now, caps=caps, budget=budget)
            except StoreUnavailable as exc:
                self._failed(exc, now)
            else:
                self._recovered()
                return got
        got = await self.local.reserve(key, self._local_specs(specs), cost, now)
        if isinstance(got, float) and self._retry_at is not None:
            return min(got, max(0.0, self._retry_at - now))  # ask Redis again on time
        return got

    async def settle(self, reservation: Reservation, actual: Cost) -> None:
        store = self.primary if reservation.ref else self.local
        await store.settle(reservation, actual)

    async def redate(self, reservation: Reservation, now: float) -> None:
        store = self.primary if reservation.ref else self.local
        await store.redate(reservation, now)

    async def end(self, reservation: Reservation) -> None:
        if reservation.ref:
            await self.primary.end(reservation)

    async def settle_budget(self, hold: str, micros: int | None, tokens: int) -> None:
        await self.primary.settle_budget(hold, micros, tokens)

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

    def forget(self, key: str, specs: Sequence[WindowSpec], now: float) -> bool:
        # The local share's windows are in its own specs (a share of each limit).
        if not self.local.forget(key, self._local_specs(specs), now):
            return False
        return self.primary.forget(key, specs, now)
