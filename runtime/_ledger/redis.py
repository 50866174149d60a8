"""The ledger's aggregates in Redis, so one command shows every process's spend.

Each process keeps writing its own ledger file; a runtime whose quota store is Redis also adds
every batch of increments to one Redis hash per deployment (``{prefix}:ledger``), one
``HINCRBY`` per counter in a ``MULTI``, so processes add to the same rows without overwriting
each other. ``sluice ledger --store redis://...`` reads that hash (its rows, one per day,
model, tag and job, are summed here: only that command reads them, never a runtime).

:class:`MirroredLedgerStore` puts the file first: a batch the file refused is not mirrored (the
TokenLedger sends it again), and a batch Redis refused is kept and added with the next one, so
neither side counts a batch twice. Questions go to the file (a runtime without a file keeps
what it wrote in memory to answer them), as they would without Redis.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from .book import COUNTERS, LedgerKey, LedgerTotals
from .store import MemoryLedgerStore
from .summary import summarize_rows

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .store import LedgerStore
    from .summary import LedgerQuery, LedgerSummary

__all__ = ["MirroredLedgerStore", "RedisLedgerStore"]

log = logging.getLogger("sluice._ledger")

_SEP = "\x1f"


class RedisLedgerStore:
    """A :class:`~sluice._ledger.store.LedgerStore` in one Redis hash (``client`` is coredis)."""

    def __init__(self, client: Any, prefix: str = "sluice", timeout: float = 5.0) -> None:
        self._client = client
        self.key = "{" + prefix + "}:ledger"
        self.timeout = timeout

    async def load(self) -> list[tuple[LedgerKey, LedgerTotals]]:
        from coredis.exceptions import RedisError

        try:
            with trio.fail_after(self.timeout):
                raw = await self._client.hgetall(self.key)
        except (RedisError, trio.TooSlowError) as exc:
            raise OSError(f"the ledger in Redis does not answer: {exc}") from None
        rows: dict[LedgerKey, LedgerTotals] = {}
        for field, value in raw.items():
            *parts, counter = str(field).split(_SEP)
            if len(parts) != 5 or counter not in COUNTERS:
                continue
            row = rows.setdefault(LedgerKey(*parts), LedgerTotals())
            setattr(row, counter, int(value))
        return list(rows.items())

    async def summarize(self, query: LedgerQuery) -> list[LedgerSummary]:
        return summarize_rows(await self.load(), query)

    async def add(self, batch: Mapping[LedgerKey, LedgerTotals]) -> None:
        from coredis.exceptions import RedisError

        if not batch:
            return
        try:
            with trio.fail_after(self.timeout):
                async with self._client.pipeline(transaction=True) as pipe:
                    for key, totals in batch.items():
                        row = _SEP.join(key)
                        for counter in COUNTERS:
                            amount = getattr(totals, counter)
                            if amount:
                                pipe.hincrby(self.key, f"{row}{_SEP}{counter}", amount)
        except (RedisError, trio.TooSlowError) as exc:
            raise OSError(f"the ledger in Redis does not answer: {exc}") from None

    async def aclose(self) -> None:
        pass  # the client belongs to the quota store


class MirroredLedgerStore:
    """``primary`` (the ledger file; None: a store in memory) with every batch also added to
    ``mirror``. Questions are answered by ``primary``."""

    def __init__(
        self, primary: LedgerStore | None, mirror: RedisLedgerStore, *, close_primary: bool
    ) -> None:
        self.primary: LedgerStore = MemoryLedgerStore() if primary is None else primary
        self.mirror = mirror
        self.close_primary = close_primary
        self._unsent: dict[LedgerKey, LedgerTotals] = {}

    async def summarize(self, query: LedgerQuery) -> list[LedgerSummary]:
        return await self.primary.summarize(query)

    async def add(self, batch: Mapping[LedgerKey, LedgerTotals]) -> None:
        await self.primary.add(batch)  # OSError: nothing stored anywhere, sent again later
        for key, totals in batch.items():
            found = self._unsent.get(key)
            if found is None:
                self._unsent[key] = totals.copy()
            else:
                found.add(totals)
        try:
            await self.mirror.add(self._unsent)
        except OSError as exc:
            log.warning("ledger: not added to Redis yet (%s); kept for the next batch", exc)
        else:
            self._unsent = {}

    async def aclose(self) -> None:
        if self._unsent:
            try:
                await self.mirror.add(self._unsent)
                self._unsent = {}
            except OSError as exc:
                log.warning("ledger: the last increments were not added to Redis (%s)", exc)
        if self.close_primary:
            await self.primary.aclose()
