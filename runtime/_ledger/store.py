"""Where the ledger's rows are kept between runs: the store interface and an in-memory store.

A store only ever *adds* increments (``add``) and answers questions about what it holds with
sums (``summarize``). Adding rather than overwriting is what lets several processes (a daemon
and a batch job, or many workers) share one store without losing each other's counts, and
lets a batch whose write failed be retried later. Answering with sums rather than handing
over its rows is what lets a runtime open in the same time over a ledger of a million rows as
over an empty one: it asks only for what its budgets need (a job's spend), and a report asks
for its groups, which the store computes where the rows are (``GROUP BY`` in SQLite).
:class:`~sluice._ledger.sqlite.SQLiteLedgerStore` keeps rows in a local file, which the
processes of one machine can share; :class:`MemoryLedgerStore` keeps them for one process. A
store on a server that several machines share would implement the same protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .book import LedgerKey, LedgerTotals
    from .summary import LedgerQuery, LedgerSummary

__all__ = ["LedgerStore", "MemoryLedgerStore"]


class LedgerStore(Protocol):
    """Durable ledger rows. Methods are async and run under trio; a store that blocks does
    its work in a thread (``trio.to_thread.run_sync``)."""

    async def summarize(self, query: LedgerQuery) -> list[LedgerSummary]:
        """The stored rows ``query`` counts, summed per group: exactly what
        :func:`~sluice._ledger.summary.summarize_rows` gives over every stored row.

        Raises:
            OSError: the store cannot be read.
        """
        ...

    async def add(self, batch: Mapping[LedgerKey, LedgerTotals]) -> None:
        """Add ``batch``'s counters to the stored rows, all of them or none (atomically).

        Raises:
            OSError: the write failed; nothing of ``batch`` was stored.
        """
        ...

    async def aclose(self) -> None:
        """Release the store's resources; rows already added stay."""
        ...


class MemoryLedgerStore:
    """A store in this process's memory: for tests, and for runs that want nothing on disk."""

    def __init__(self) -> None:
        self.rows: dict[LedgerKey, LedgerTotals] = {}
        self.batches = 0
        """Batches added so far."""

    async def load(self) -> list[tuple[LedgerKey, LedgerTotals]]:
        """A copy of every row."""
        return [(key, row.copy()) for key, row in self.rows.items()]

    async def summarize(self, query: LedgerQuery) -> list[LedgerSummary]:
        from .summary import summarize_rows  # loaded by the first question

        return summarize_rows(self.rows.items(), query)

    async def add(self, batch: Mapping[LedgerKey, LedgerTotals]) -> None:
        for key, delta in batch.items():
            found = self.rows.get(key)
            if found is None:
                self.rows[key] = delta.copy()
            else:
                found.add(delta)
        self.batches += 1

    async def aclose(self) -> None:
        pass
