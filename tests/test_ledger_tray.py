"""The TokenLedger's tray: records told through the runtime's handle do not wake the actor, and
still every one is counted, on the UTC day it was told, before any later question is answered
or any write goes to the store. The actor runs alone on virtual time."""

from __future__ import annotations

import datetime as dt
import functools

import trio
import trio.testing

from sluice._ledger.book import LedgerBook
from sluice._ledger.prices import PriceTable
from sluice._ledger.store import MemoryLedgerStore
from sluice._ledger.summary import LedgerQuery
from sluice._mail import LedgerMsg, RecordCall, RecordUsage
from sluice._messages import Usage
from sluice.actors._token_ledger import TRAY_SIZE, LedgerTray, TokenLedgerHandle, run_token_ledger

from .helpers import virtual_deadline

BEFORE_MIDNIGHT = dt.datetime(2025, 3, 1, 23, 59, 59, tzinfo=dt.UTC).timestamp()
AFTER_MIDNIGHT = BEFORE_MIDNIGHT + 2.0
EVERYTHING = LedgerQuery(by=())


class Steps(trio.abc.Instrument):
    """Steps of the ledger's mailbox loop."""

    def __init__(self) -> None:
        self.count = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name == "ledger":
            self.count += 1


@virtual_deadline(60)
async def test_a_record_waits_in_the_tray_and_counts_on_the_day_it_was_told(autojump_clock):
    book = LedgerBook(PriceTable(), job="j")
    send, inbox = trio.open_memory_channel[LedgerMsg](100)
    tray = LedgerTray(wall_clock=lambda: BEFORE_MIDNIGHT)
    handle = TokenLedgerHandle(send, "j", tray=tray)
    steps = Steps()
    ledger = functools.partial(run_token_ledger, tray=tray)
    async with trio.open_nursery() as nursery:
        # Taken at the actor's own clock, the records would land on 2 March.
        await nursery.start(ledger, inbox, book, None, 1.0, lambda: AFTER_MIDNIGHT, name="ledger")
        await trio.testing.wait_all_tasks_blocked()
        trio.lowlevel.add_instrument(steps)
        await handle.record(RecordCall("sim", "a", True, 1))
        await handle.record(RecordUsage("sim", "a", Usage(10, 2)))
        await trio.sleep(5)
        trio.lowlevel.remove_instrument(steps)
        assert steps.count == 0  # nothing woke the actor
        assert book.rows == {} and len(tray.items) == 2
        (row,) = await handle.snapshot(by=("day",))  # a question takes the tray first
        assert (row.day, row.totals.calls, row.totals.input_tokens) == ("2025-03-01", 1, 10)
        assert tray.items == []

        # A full tray: the next record goes through the mailbox, and the actor takes all.
        for _ in range(TRAY_SIZE + 1):
            await handle.record(RecordCall("sim", "a", True, 1))
        await trio.testing.wait_all_tasks_blocked()
        assert tray.items == []
        assert sum(t.calls for t in book.rows.values()) == 2 + TRAY_SIZE
        send.close()


@virtual_deadline(60)
async def test_the_flusher_writes_what_waits_in_the_tray(autojump_clock):
    store = MemoryLedgerStore()
    book = LedgerBook(PriceTable(), job="j", keep_rows=False)
    send, inbox = trio.open_memory_channel[LedgerMsg](100)
    tray = LedgerTray()
    handle = TokenLedgerHandle(send, "j", tray=tray)
    ledger = functools.partial(run_token_ledger, tray=tray)
    async with trio.open_nursery() as nursery:
        await nursery.start(ledger, inbox, book, store, 1.0)
        await handle.record(RecordCall("sim", "a", True, 3))
        await trio.sleep(1.5)  # one flush interval: the flusher takes the tray and writes it
        assert tray.items == []
        (row,) = await store.summarize(EVERYTHING)
        assert row.totals.calls == 1
        await handle.record(RecordCall("sim", "a", False, 1))  # the last write takes it
        send.close()
    (row,) = await store.summarize(EVERYTHING)
    assert row.totals.calls == 2
