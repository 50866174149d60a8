"""The TokenLedger: every attempt's usage and every call's end, per provider, model, tag, job
and UTC day, with its cost; written to a store in batches.

One actor owns the :class:`~sluice._ledger.book.LedgerBook`. Its mailbox loop only counts
(a dict update per record, no I/O), so a burst of usage records never waits on the disk. A
second task of the actor, the flusher, hands the increments gathered since the last flush to
the store every ``flush_interval`` seconds, on request (``FlushLedger``) and once more when the
actor stops; the store does its blocking work in a thread. A failed write is logged and its
increments go out with the next batch.

Records need no answer and no haste: their only readers are the flusher and the questions.
So the runtime's handle lays them in a tray (:class:`LedgerTray`, stamped with the wall time
they were told) instead of the mailbox, and the actor takes the tray's records whenever it
wakes anyway: for a message, before each write and each answer, and at its end. A record wakes
it only when the tray is full. A call made alone then costs the ledger no trip through the
scheduler, and a burst of records is counted in one run.

Questions (``QueryLedger``: totals, a report, a job's spend) are answered by the store, which
sums what it holds (the book never loads the store's history), plus the increments the book
has not yet handed over. The flusher asks the store, between two writes: so no batch is on its
way to the store while it answers, and every increment is counted exactly once, either in the
store's sums or in the book's. Without a store, the book's own rows answer at once.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, TypeAlias, TypeVar, assert_never

import attrs
import trio

from sluice._errors import RuntimeClosed
from sluice._ledger.book import DIMENSIONS, Dimension, LedgerBook, LedgerKey
from sluice._mail import LedgerMsg, LedgerTotals, RecordCall, RecordUsage
from sluice._record import Record

from ._tell import take, tell

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Callable, Sequence

    from sluice._ledger.budget import BudgetBook, BudgetStatus  # noqa: TC004 (types only)
    from sluice._ledger.store import LedgerStore
    from sluice._ledger.summary import LedgerQuery, LedgerSummary
    from sluice._mail_rare import FlushLedger, QueryLedger

__all__ = ["LedgerTray", "TokenLedgerHandle", "run_token_ledger"]

log = logging.getLogger("sluice._ledger")

T = TypeVar("T")

_LAST_FLUSH_TIMEOUT = 10.0
TRAY_SIZE = 256
"""Records a tray holds before the next one goes through the mailbox (which wakes the actor,
and it takes the tray's records first): a bound on the memory, and on how many records wait
for a ledger without a store that nobody asks."""

Recorded: TypeAlias = "tuple[RecordUsage | RecordCall, float]"
"""A record and the wall time (``time.time``) it was told at."""


class LedgerTray:
    """Records told to the TokenLedger that have not woken it (see the module's docstring).
    Senders only append (:meth:`TokenLedgerHandle.record`); the actor's tasks take them all
    (:meth:`take`). It outlives the actor's restarts, as the book does."""

    __slots__ = ("items", "wall_clock")

    def __init__(self, wall_clock: Callable[[], float] = time.time) -> None:
        self.items: list[Recorded] = []
        self.wall_clock = wall_clock
        """Stamps each record as it is laid in: its UTC day is the day it was told, however
        long it waits."""

    def take(self) -> list[Recorded]:
        """Every record laid in so far, in order; the tray is empty afterwards."""
        items, self.items = self.items, []
        return items


def _take_tray(tray: LedgerTray | None, book: LedgerBook) -> None:
    """Count the records waiting in ``tray`` (if any) into ``book``."""
    if tray is not None and tray.items:
        for msg, wall in tray.take():
            _record(book, msg, wall)


def _record(book: LedgerBook, msg: RecordUsage | RecordCall, wall: float) -> None:
    if isinstance(msg, RecordUsage):
        book.record_usage(
            msg.provider,
            msg.model,
            msg.usage,
            wall=wall,
            tag=msg.tag,
            job=msg.job,
            estimated=msg.estimated,
            batch=msg.batch,
        )
    else:
        book.record_call(
            msg.provider, msg.model, msg.ok, msg.attempts, wall=wall, tag=msg.tag, job=msg.job
        )


async def run_token_ledger(
    inbox: trio.MemoryReceiveChannel[LedgerMsg],
    book: LedgerBook,
    store: LedgerStore | None = None,
    flush_interval: float = 1.0,
    wall_clock: Callable[[], float] = time.time,
    *,
    tray: LedgerTray | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Keep the books until every sender of ``inbox`` is closed, then write what is left.

    ``book`` is owned by the caller, so a restarted ledger continues where the crashed one
    stopped (increments not yet written included). ``wall_clock`` gives the UTC day of each
    record. Answers to ``QueryLedger`` are new summaries, so the asker cannot change the books;
    ``FlushLedger`` is answered by closing its channel once the write is done. ``tray``: where
    the handle lays records without waking the actor (see :class:`LedgerTray`); each one is
    counted before anything that comes after it is answered or written.
    """
    flusher = _Flusher(book, store, flush_interval, tray) if store is not None else None
    async with trio.open_nursery() as nursery:
        if flusher is not None:
            nursery.start_soon(flusher.run, name="token ledger flusher")
        task_status.started()
        try:
            await _serve(inbox, book, flusher, wall_clock, tray)
        finally:
            if flusher is not None:
                flusher.stop()


async def _serve(
    inbox: trio.MemoryReceiveChannel[LedgerMsg],
    book: LedgerBook,
    flusher: _Flusher | None,
    wall_clock: Callable[[], float],
    tray: LedgerTray | None,
) -> None:
    while True:
        try:
            msg = await take(inbox)
        except trio.EndOfChannel:
            _take_tray(tray, book)  # the last records, for the flusher's last write
            return
        _take_tray(tray, book)  # told before this message: counted before it
        match msg:
            case RecordUsage() | RecordCall():
                _record(book, msg, wall_clock())
            case _:
                _question(msg, book, flusher)


def _question(msg: QueryLedger | FlushLedger, book: LedgerBook, flusher: _Flusher | None) -> None:
    """A question or a flush, the messages no call sends (their classes load with the first)."""
    from sluice._ledger.summary import summarize_rows
    from sluice._mail_rare import FlushLedger, QueryLedger

    match msg:
        case QueryLedger():
            if flusher is None:
                _answer(msg, summarize_rows(book.rows.items(), msg.query))
            else:
                flusher.ask(msg)
        case FlushLedger(reply_to=reply_to):
            if flusher is None:
                reply_to.close()
            else:
                flusher.request(reply_to)
        case _:
            assert_never(msg)


def _answer(msg: QueryLedger, answer: list[LedgerSummary] | OSError) -> None:
    try:
        msg.reply_to.send_nowait(answer)
    except (trio.BrokenResourceError, trio.ClosedResourceError, trio.WouldBlock):
        pass  # the asker left


class _Flusher:
    """Writes the book's increments to the store (periodically, on request and at the end)
    and, between writes, answers questions from the store's sums and the book's increments."""

    def __init__(
        self, book: LedgerBook, store: LedgerStore, interval: float, tray: LedgerTray | None
    ) -> None:
        self.book = book
        self.tray = tray
        self.store = store
        self.interval = interval
        self.wake = trio.Event()
        self.stopping = False
        self.waiting: list[trio.MemorySendChannel[None]] = []
        self.questions: list[QueryLedger] = []

    def request(self, reply_to: trio.MemorySendChannel[None]) -> None:
        self.waiting.append(reply_to)
        self.wake.set()

    def ask(self, msg: QueryLedger) -> None:
        self.questions.append(msg)
        self.wake.set()

    def stop(self) -> None:
        self.stopping = True
        self.wake.set()

    async def run(self) -> None:
        try:
            due = trio.current_time() + self.interval
            while not self.stopping:
                with trio.move_on_at(due):
                    await self.wake.wait()
                self.wake = trio.Event()
                # A question alone does not write early: batches keep their interval.
                if self.waiting or self.stopping or trio.current_time() >= due:
                    await self.flush()
                    due = trio.current_time() + self.interval
                await self.answer()
        finally:
            # The last batch: also when cancelled (the runtime's block raised) or crashed;
            # then the questions asked before the mailbox closed.
            with trio.move_on_after(_LAST_FLUSH_TIMEOUT, shield=True):
                await self.flush()
                await self.answer()
            for reply_to in self.waiting:
                reply_to.close()
            for msg in self.questions:
                msg.reply_to.close()

    async def answer(self) -> None:
        """Answer the questions asked so far. No write runs meanwhile (this task does them),
        so an increment is either in the store's sums or still in ``book.dirty``, never in
        both nor in neither; ``dirty`` is read after the store answered, with no await in
        between, so records that arrived during the question are counted too."""
        while self.questions:
            msg = self.questions.pop(0)
            try:
                stored = await self.store.summarize(msg.query)
            except OSError as exc:
                _answer(msg, exc)
                continue
            except BaseException:
                msg.reply_to.close()
                raise
            from sluice._ledger.summary import merge_summaries, summarize_rows

            _take_tray(self.tray, self.book)  # the records told during the question too
            pending = summarize_rows(self.book.dirty.items(), msg.query)
            _answer(msg, merge_summaries(stored, pending) if pending else stored)

    async def flush(self) -> None:
        waiting, self.waiting = self.waiting, []
        _take_tray(self.tray, self.book)
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
    tray: LedgerTray | None = None
    """Where records go without waking the actor (the runtime's handle has one; see
    :class:`LedgerTray`). None: every record goes through the mailbox."""

    async def record(self, msg: RecordUsage | RecordCall) -> None:
        """Record usage or a call's end; never waits while the tray or the mailbox has room,
        and shielded otherwise, so a cancelled call still gets counted."""
        tray = self.tray
        if tray is not None and len(tray.items) < TRAY_SIZE:
            tray.items.append((msg, tray.wall_clock()))
            return
        await tell(self._mailbox, msg)

    async def totals(self) -> dict[str, LedgerTotals]:
        """Totals per ``provider:model``: everything the store holds (earlier runs and other
        processes sharing it included) and what this runtime has not written yet.

        Raises:
            OSError: the store cannot be read.
            RuntimeClosed: the ledger has stopped.
        """
        from sluice._ledger.summary import LedgerQuery  # loaded by the first question

        found = await self.query(LedgerQuery(by=("provider", "model")))
        return {f"{s.provider}:{s.model}": s.totals for s in found}

    async def rows(self) -> list[tuple[LedgerKey, LedgerTotals]]:
        """Every row: per UTC day, provider, model, tag and job. This reads the whole
        ledger; ask :meth:`snapshot` for sums instead.

        Raises:
            OSError: the store cannot be read.
            RuntimeClosed: the ledger has stopped.
        """
        from sluice._ledger.summary import LedgerQuery  # loaded by the first question

        found = await self.query(LedgerQuery(by=DIMENSIONS))
        return [
            (LedgerKey(*(str(getattr(s, name)) for name in LedgerKey._fields)), s.totals)
            for s in found
        ]

    async def snapshot(
        self,
        by: Sequence[Dimension] = ("provider", "model"),
        *,
        since: str | dt.date | None = None,
        until: str | dt.date | None = None,
        job: str | None = None,
        tag: str | None = None,
    ) -> list[LedgerSummary]:
        """Totals grouped by ``by`` (any of provider, model, tag, job, day) over the UTC days
        ``since`` to ``until`` inclusive, only ``job``'s or ``tag``'s rows when given (``tag``
        ``""``: untagged); ``by=()`` gives one grand total. The store sums what it holds.

        Raises:
            ValueError: an unknown dimension or a malformed date.
            OSError: the store cannot be read.
            RuntimeClosed: the ledger has stopped.
        """
        from sluice._ledger.summary import LedgerQuery  # loaded by the first question

        return await self.query(LedgerQuery.of(by, since=since, until=until, job=job, tag=tag))

    async def query(self, query: LedgerQuery) -> list[LedgerSummary]:
        """The ledger summed as ``query`` asks (see :meth:`snapshot`).

        Raises:
            OSError: the store cannot be read.
            RuntimeClosed: the ledger has stopped.
        """
        from sluice._ledger.summary import LedgerSummary
        from sluice._mail_rare import QueryLedger  # loaded by the first question

        reply_to, reply = trio.open_memory_channel[list[LedgerSummary] | OSError](1)
        found = await self._ask(QueryLedger(query, reply_to), reply_to, reply)
        if isinstance(found, OSError):
            raise found
        return found

    async def flush(self) -> None:
        """Return once everything recorded so far is in the store (at once without one)."""
        reply_to, reply = trio.open_memory_channel[None](0)
        with reply:
            try:
                from sluice._mail_rare import FlushLedger  # loaded by the first flush

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
