"""The TokenLedger: every attempt's usage and every call's end, per provider, model, tag, job
and UTC day, with its cost; written to a store in batches.

One actor owns the :class:`~sluice._ledger.book.LedgerBook`. Its mailbox loop only counts
(a dict update per record, no I/O), so a burst of usage records never waits on the disk. A
second task of the actor, the flusher, hands the increments gathered since the last flush to
the store every ``flush_interval`` seconds, on request (``FlushLedger``) and once more when the
actor stops; the store does its blocking work in a thread. A failed write is logged and its
increments go out with the next batch.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, TypeVar, assert_never

import attrs
import trio

from sluice._errors import RuntimeClosed
from sluice._ledger.book import Dimension, LedgerBook, LedgerKey, LedgerSummary, summarize
from sluice._ledger.budget import BudgetBook
from sluice._mail import (
    FlushLedger,
    GetLedgerRows,
    GetTotals,
    LedgerMsg,
    LedgerTotals,
    RecordCall,
    RecordUsage,
)
from sluice._record import Record

from ._tell import take, tell

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Callable, Sequence

    from sluice._ledger.budget import BudgetStatus
    from sluice._ledger.store import LedgerStore

__all__ = ["TokenLedgerHandle", "run_token_ledger"]

log = logging.getLogger("sluice._ledger")

T = TypeVar("T")

_LAST_FLUSH_TIMEOUT = 10.0


async def run_token_ledger(
    inbox: trio.MemoryReceiveChannel[LedgerMsg],
    book: LedgerBook,
    store: LedgerStore | None = None,
    flush_interval: float = 1.0,
    wall_clock: Callable[[], float] = time.time,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Keep the books until every sender of ``inbox`` is closed, then write what is left.

    ``book`` is owned by the caller, so a restarted ledger continues where the crashed one
    stopped (increments not yet written included). ``wall_clock`` gives the UTC day of each
    record. Answers (``GetTotals``, ``GetLedgerRows``) are copies, so the asker cannot change
    the books; ``FlushLedger`` is answered by closing its channel once the write is done.
    """
    flusher = _Flusher(book, store, flush_interval) if store is not None else None
    async with trio.open_nursery() as nursery:
        if flusher is not None:
            nursery.start_soon(flusher.run, name="token ledger flusher")
        task_status.started()
        try:
            await _serve(inbox, book, flusher, wall_clock)
        finally:
            if flusher is not None:
                flusher.stop()


async def _serve(
    inbox: trio.MemoryReceiveChannel[LedgerMsg],
    book: LedgerBook,
    flusher: _Flusher | None,
    wall_clock: Callable[[], float],
) -> None:
    while True:
        try:
            msg = await take(inbox)
        except trio.EndOfChannel:
            return
        match msg:
            case RecordUsage():
                book.record_usage(
                    msg.provider,
                    msg.model,
                    msg.usage,
                    wall=wall_clock(),
                    tag=msg.tag,
                    job=msg.job,
                    estimated=msg.estimated,
                )
            case RecordCall():
                book.record_call(
                    msg.provider,
                    msg.model,
                    msg.ok,
                    msg.attempts,
                    wall=wall_clock(),
                    tag=msg.tag,
                    job=msg.job,
                )
            case GetTotals(reply_to=reply_to):
                try:
                    reply_to.send_nowait(book.by_model())
                except (trio.BrokenResourceError, trio.WouldBlock):
                    pass
            case GetLedgerRows(reply_to=reply_to):
                try:
                    reply_to.send_nowait([(k, v.copy()) for k, v in book.rows.items()])
                except (trio.BrokenResourceError, trio.WouldBlock):
                    pass
            case FlushLedger(reply_to=reply_to):
                if flusher is None:
                    reply_to.close()
                else:
                    flusher.request(reply_to)
            case _:
                assert_never(msg)


class _Flusher:
    """Writes the book's increments to the store: periodically, on request and at the end."""

    def __init__(self, book: LedgerBook, store: LedgerStore, interval: float) -> None:
        self.book = book
        self.store = store
        self.interval = interval
        self.wake = trio.Event()
        self.stopping = False
        self.waiting: list[trio.MemorySendChannel[None]] = []

    def request(self, reply_to: trio.MemorySendChannel[None]) -> None:
        self.waiting.append(reply_to)
        self.wake.set()

    def stop(self) -> None:
        self.stopping = True
        self.wake.set()

    async def run(self) -> None:
        try:
            while not self.stopping:
                with trio.move_on_after(self.interval):
                    await self.wake.wait()
                self.wake = trio.Event()
                await self.flush()
        finally:
            # The last batch: also when cancelled (the runtime's block raised) or crashed.
            with trio.move_on_after(_LAST_FLUSH_TIMEOUT, shield=True):
                await self.flush()
            for reply_to in self.waiting:
                reply_to.close()

    async def flush(self) -> None:
        waiting, self.waiting = self.waiting, []
        batch = self.book.take_dirty()
        try:
            if batch:
                await self.store.add(batch)
        except OSError:
            log.exception("writing the ledger failed; its increments go out with the next batch")
            self.book.restore_dirty(batch)
        except BaseException:
            self.book.restore_dirty(batch)
            raise
        finally:
            for reply_to in waiting:
                reply_to.close()


@attrs.frozen(eq=False, repr=False)
class TokenLedgerHandle(Record):
    """What the other actors and the runtime hold to reach the TokenLedger (``rt.ledger``)."""

    _mailbox: trio.MemorySendChannel[LedgerMsg]
    job: str = ""
    """The runtime's job (run id), recorded with every call that names no other."""
    _budgets: BudgetBook | None = None

    async def record(self, msg: RecordUsage | RecordCall) -> None:
        """Record usage or a call's end; shielded, so a cancelled call still gets counted."""
        await tell(self._mailbox, msg)

    async def totals(self) -> dict[str, LedgerTotals]:
        """Totals per ``provider:model`` (rows loaded from the store included)."""
        reply_to, reply = trio.open_memory_channel[dict[str, LedgerTotals]](1)
        return await self._ask(GetTotals(reply_to), reply_to, reply)

    async def rows(self) -> list[tuple[LedgerKey, LedgerTotals]]:
        """A copy of every row: per UTC day, provider, model, tag and job."""
        reply_to, reply = trio.open_memory_channel[list[tuple[LedgerKey, LedgerTotals]]](1)
        return await self._ask(GetLedgerRows(reply_to), reply_to, reply)

    async def snapshot(
        self,
        by: Sequence[Dimension] = ("provider", "model"),
        *,
        since: str | dt.date | None = None,
        until: str | dt.date | None = None,
    ) -> list[LedgerSummary]:
        """Totals grouped by ``by`` (any of provider, model, tag, job, day) over the UTC days
        ``since`` to ``until`` inclusive; ``by=()`` gives one grand total.

        Raises:
            ValueError: an unknown dimension or a malformed date.
            RuntimeClosed: the ledger has stopped.
        """
        return summarize(await self.rows(), by, since=since, until=until)

    async def flush(self) -> None:
        """Return once everything recorded so far is in the store (at once without one)."""
        reply_to, reply = trio.open_memory_channel[None](0)
        with reply:
            try:
                await self._mailbox.send(FlushLedger(reply_to))
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise RuntimeClosed("the token ledger has stopped") from exc
            try:
                await reply.receive()
            except trio.EndOfChannel:
                pass

    @property
    def budget_book(self) -> BudgetBook | None:
        """The runtime's budget accounts (None when no budget was configured); only the
        gateway adds accounts to it (:meth:`BudgetBook.add`), everything else reads
        :meth:`budgets`."""
        return self._budgets

    def budgets(self) -> list[BudgetStatus]:
        """Each budget's limit, spending, reservations in flight and refusals, as of now."""
        return [] if self._budgets is None else self._budgets.status()

    async def _ask(
        self,
        msg: LedgerMsg,
        reply_to: trio.MemorySendChannel[T],
        reply: trio.MemoryReceiveChannel[T],
    ) -> T:
        with reply_to, reply:
            try:
                await self._mailbox.send(msg)
                return await reply.receive()
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.EndOfChannel) as exc:
                raise RuntimeClosed("the token ledger has stopped") from exc
