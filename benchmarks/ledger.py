"""How many usage events per second does the TokenLedger record?

    python -m benchmarks.ledger                          # memory only, then SQLite (~10 s)
    python -m benchmarks.ledger --events 200000 --keys 50 --tasks 100

The TokenLedger actor runs on its own (real clock, no HTTP). ``--tasks`` tasks send
``--events`` usage events between them through the handle (``TokenLedgerHandle.record``: the
same shielded tell the ProviderActor uses), spread round-robin over ``--keys`` distinct
(model, tag) pairs, each followed by a call-end record every ``--calls-every`` events. The
phase ends when a ``GetTotals`` sent after the last event has been answered (the actor has
counted everything), and, with SQLite, when the final batch is on disk.

Phases: ``memory`` (no store), ``sqlite`` (a fresh WAL file in a temporary folder, or ``--db``,
batches every ``--flush-interval`` seconds and once at the end). Reports events per second of
wall time, client CPU microseconds per event (``time.process_time``: the senders, the actor,
and for SQLite the writer thread) and, for SQLite, the batches written and the rows in the file.

One JSON line on stdout. Exit status 1 when a phase's totals disagree with what was sent.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import orjson
import trio

from sluice._ledger.book import LedgerBook, LedgerTotals
from sluice._ledger.prices import PriceTable
from sluice._ledger.sqlite import SQLiteLedgerStore, read_ledger_file
from sluice._mail import LedgerMsg, RecordCall, RecordUsage
from sluice._messages import Usage
from sluice.actors._tell import MAILBOX_BUFFER
from sluice.actors._token_ledger import TokenLedgerHandle, run_token_ledger

from ._harness import versions

USAGE = Usage(1200, 300, 800, 0, 120)


class _CountingStore(SQLiteLedgerStore):
    batches = 0

    async def add(self, batch: Any) -> None:
        if batch:
            self.batches += 1
        await super().add(batch)


async def phase(
    events: int,
    keys: int,
    tasks: int,
    calls_every: int,
    store: _CountingStore | None,
    interval: float,
) -> dict[str, Any]:
    book = LedgerBook(PriceTable(), job="bench")
    send, inbox = trio.open_memory_channel[LedgerMsg](MAILBOX_BUFFER)
    handle = TokenLedgerHandle(send, "bench")
    messages: list[list[RecordUsage | RecordCall]] = [[] for _ in range(tasks)]
    models = ("gpt-4o", "gpt-4o-mini", "gpt-4.1", "o4-mini", "unpriced-model")
    for i in range(events):
        model = models[i % keys % len(models)]
        tag = f"tag-{i % keys}"
        batch = messages[i % tasks]
        batch.append(RecordUsage("openai", model, USAGE, tag))
        if i % calls_every == 0:
            batch.append(RecordCall("openai", model, True, 1, tag))
    cpu0, wall0 = time.process_time(), time.perf_counter()
    async with trio.open_nursery() as nursery:
        await nursery.start(run_token_ledger, inbox, book, store, interval)

        async def sender(mine: list[RecordUsage | RecordCall]) -> None:
            for msg in mine:
                await handle.record(msg)

        async with trio.open_nursery() as senders:
            for mine in messages:
                senders.start_soon(sender, mine)
        totals = await handle.totals()
        send.close()  # the actor writes its last batch and returns
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    got = sum(t.usage_records for t in totals.values())
    report: dict[str, Any] = {
        "events_per_s": round(events / wall),
        "cpu_us_per_event": round(cpu / events * 1e6, 2),
        "wall_s": round(wall, 3),
        "rows": len(book.rows),
        "ok": got == events,
    }
    if store is not None:
        on_disk = read_ledger_file(store.path)
        stored = LedgerTotals()
        for _key, row in on_disk:
            stored.add(row)
        report["batches"] = store.batches
        report["ok"] = report["ok"] and stored.usage_records == events
    return report


async def run(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "events": args.events,
        "keys": args.keys,
        "tasks": args.tasks,
        "calls_every": args.calls_every,
        "flush_interval": args.flush_interval,
    }
    out["memory"] = await phase(
        args.events, args.keys, args.tasks, args.calls_every, None, args.flush_interval
    )
    with tempfile.TemporaryDirectory() as folder:
        path = Path(args.db) if args.db else Path(folder) / "ledger.sqlite3"
        store = cast("_CountingStore", await _CountingStore.open(path))
        try:
            out["sqlite"] = await phase(
                args.events, args.keys, args.tasks, args.calls_every, store, args.flush_interval
            )
        finally:
            await store.aclose()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=20, help="distinct (model, tag) pairs")
    parser.add_argument("--tasks", type=int, default=64, help="concurrent senders")
    parser.add_argument("--calls-every", type=int, default=1, help="a call end every N events")
    parser.add_argument("--flush-interval", type=float, default=1.0)
    parser.add_argument("--db", help="SQLite file for the sqlite phase (default: a temp file)")
    args = parser.parse_args(argv)
    report = trio.run(run, args)
    report.update(versions())
    report["date"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    sys.stdout.write(orjson.dumps(report).decode() + "\n")
    return 0 if report["memory"]["ok"] and report["sqlite"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
