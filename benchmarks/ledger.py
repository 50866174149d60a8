"""How many usage events per second does the TokenLedger record? How fast does a runtime open
over a big ledger file?

    python -m benchmarks.ledger                          # memory only, then SQLite (~10 s)
    python -m benchmarks.ledger --events 200000 --keys 50 --tasks 100
    python -m benchmarks.ledger --open-rows 1000000      # opening over a million rows

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

``--open-rows N`` measures instead what opening a runtime costs over a ledger of N rows (made
with :func:`fill_ledger`: one row per day, model, tag and job, as a long-lived deployment
accumulates them) against an empty ledger. Each target is opened ``--repeat`` times, each time
in a fresh process (``--open-child``) that first opens and closes a runtime over a throwaway
ledger, so imports and first-use costs are paid before the clock starts; it reports the wall
time of ``open_runtime``'s entry and exit with a ``job`` budget configured (so the job's
earlier spend is read) and the process's peak RSS. Reported: medians per target, their
differences, the job budget's starting spend (checked against the rows written), the time of a
``sluice ledger --by model`` report over the file, and ``ok`` (opening within ``--max-open-ms``
and ``--max-rss-mb`` more than the empty ledger, and the spend exact). ``--old-way`` adds, in
one more process, what reading every row into Python and summing it there costs over the same
file (how both opening and the report worked before the store summed its rows): its wall time
and peak RSS.

One JSON line on stdout. Exit status 1 when a phase's totals disagree with what was sent, or
an ``--open-rows`` run is not ``ok``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import orjson
import trio

import sluice
from sluice._config import BudgetConfig, LedgerConfig, RuntimeConfig
from sluice._ledger.book import COUNTERS, LedgerBook, LedgerTotals
from sluice._ledger.prices import PriceTable
from sluice._ledger.sqlite import (
    SQLiteLedgerStore,
    connect,
    read_ledger_file,
    summarize_ledger_file,
)
from sluice._ledger.summary import LedgerQuery, summarize
from sluice._mail import LedgerMsg, RecordCall, RecordUsage
from sluice._messages import Usage
from sluice.actors._tell import MAILBOX_BUFFER
from sluice.actors._token_ledger import TokenLedgerHandle, run_token_ledger

from ._harness import versions

if TYPE_CHECKING:
    from collections.abc import Iterator

USAGE = Usage(1200, 300, 800, 0, 120)

_FILL_MODELS = ("gpt-4o", "gpt-4o-mini", "gpt-4.1", "o4-mini", "claude-sonnet-4")
_FILL_TAGS = 10
_ROWS_PER_JOB = len(_FILL_MODELS) * _FILL_TAGS
_FILL_DAY0 = datetime.date(2024, 1, 1)


def fill_job(index: int) -> str:
    """The name :func:`fill_ledger` gives its ``index``-th job."""
    return f"job-{index:07d}"


def _fill_rows(rows: int) -> Iterator[tuple[str | int, ...]]:
    for i in range(rows):
        job = i // _ROWS_PER_JOB
        model = _FILL_MODELS[i % len(_FILL_MODELS)]
        tag = f"team-{i // len(_FILL_MODELS) % _FILL_TAGS}"
        day = (_FILL_DAY0 + datetime.timedelta(days=job % 730)).isoformat()
        n = i % 97 + 1
        counters = {
            "calls": n,
            "attempts": n,
            "input_tokens": 1000 * n,
            "output_tokens": 200 * n,
            "usage_records": n,
            "cost_micros": 3000 * n,
        }
        yield (day, "openai", model, tag, fill_job(job), *(counters.get(c, 0) for c in COUNTERS))


def fill_spent(rows: int, job: int) -> tuple[int, int]:
    """(micro-dollars, input + output tokens) :func:`fill_ledger` wrote for its ``job``-th
    job: what a ``job`` budget of that job must start with."""
    micros = tokens = 0
    for i in range(job * _ROWS_PER_JOB, min(rows, (job + 1) * _ROWS_PER_JOB)):
        n = i % 97 + 1
        micros += 3000 * n
        tokens += 1200 * n
    return micros, tokens


def fill_ledger(path: str | os.PathLike[str], rows: int) -> None:
    """Write a ledger file of ``rows`` rows quickly (one ``executemany``, one transaction):
    one row per UTC day, model, tag and job, 50 rows a job, jobs spread over two years.
    The file is made as the store makes it (schema and indexes), so a runtime opens it as
    it would open its own."""
    _path, db = connect(path)
    try:
        marks = ", ".join("?" * (5 + len(COUNTERS)))
        db.execute("BEGIN IMMEDIATE")
        db.executemany(f"INSERT INTO ledger VALUES ({marks})", _fill_rows(rows))
        db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()


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


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _open_config(path: str, job: str) -> RuntimeConfig:
    budget = BudgetConfig(scope="job", max_usd=1e9)
    return RuntimeConfig(ledger=LedgerConfig(path=path, job=job, budgets=(budget,)))


async def _open_once(path: str, job: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    async with sluice.open_runtime(_open_config(path, job)) as rt:
        opened = time.perf_counter()
        rss = _rss_mb()
        (status,) = rt.ledger.budgets()
        t1 = time.perf_counter()
    closed = time.perf_counter()
    return {
        "open_ms": (opened - t0) * 1e3,
        "close_ms": (closed - t1) * 1e3,
        "rss_open_mb": rss,
        "spent_micros": status.spent_micros,
        "spent_tokens": status.spent_tokens,
    }


def open_child(path: str, job: str) -> dict[str, Any]:
    """One measured open of a runtime over ``path``, after a warm-up open elsewhere."""
    with tempfile.TemporaryDirectory() as folder:
        trio.run(_open_once, str(Path(folder) / "warm.sqlite3"), job)
    report = trio.run(_open_once, path, job)
    report["peak_rss_mb"] = _peak_rss_mb()
    return report


def old_way_child(path: str) -> dict[str, Any]:
    """Every row read into Python and summed by model there (the code before sums)."""
    t0 = time.perf_counter()
    groups = summarize(read_ledger_file(path), ("model",))
    return {
        "wall_s": round(time.perf_counter() - t0, 3),
        "peak_rss_mb": round(_peak_rss_mb(), 1),
        "groups": len(groups),
    }


def _in_child(path: Path, job: str, *, old_way: bool = False) -> dict[str, Any]:
    argv = [sys.executable, "-m", "benchmarks.ledger", "--open-child", str(path), "--job", job]
    if old_way:
        argv.append("--old-way")
    done = subprocess.run(argv, capture_output=True, check=True, timeout=600)
    found: dict[str, Any] = orjson.loads(done.stdout)
    return found


def open_phase(rows: int, repeat: int, folder: Path, *, old_way: bool = False) -> dict[str, Any]:
    """Opening a runtime over an empty ledger and over one of ``rows`` rows (see the module
    docstring); the targets alternate, so a machine busy for a while slows both alike."""
    empty, full = folder / "empty.sqlite3", folder / "full.sqlite3"
    fill_ledger(empty, 0)
    t0 = time.perf_counter()
    fill_ledger(full, rows)
    fill_s = time.perf_counter() - t0
    job_index = max(0, (rows - 1) // _ROWS_PER_JOB // 2)
    job = fill_job(job_index)
    runs: dict[str, list[dict[str, Any]]] = {"empty": [], "full": []}
    for _ in range(repeat):
        runs["empty"].append(_in_child(empty, job))
        runs["full"].append(_in_child(full, job))

    def med(target: str, name: str) -> float:
        return round(float(statistics.median(r[name] for r in runs[target])), 2)

    out: dict[str, Any] = {"rows": rows, "fill_s": round(fill_s, 2), "repeat": repeat}
    for target in runs:
        out[target] = {
            name: med(target, name)
            for name in ("open_ms", "close_ms", "rss_open_mb", "peak_rss_mb")
        }
    out["open_ms_more"] = round(out["full"]["open_ms"] - out["empty"]["open_ms"], 2)
    out["peak_rss_mb_more"] = round(out["full"]["peak_rss_mb"] - out["empty"]["peak_rss_mb"], 2)
    expected = fill_spent(rows, job_index) if rows else (0, 0)
    got = {(r["spent_micros"], r["spent_tokens"]) for r in runs["full"]}
    out["job_spent"] = {"expected": list(expected), "got": sorted(got)}
    t0 = time.perf_counter()
    groups = summarize_ledger_file(full, LedgerQuery(by=("model",)))
    out["report_by_model_s"] = round(time.perf_counter() - t0, 3)
    out["report_groups"] = len(groups)
    out["spent_exact"] = got == {expected}
    if old_way:
        out["old_way"] = _in_child(full, job, old_way=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=20, help="distinct (model, tag) pairs")
    parser.add_argument("--tasks", type=int, default=64, help="concurrent senders")
    parser.add_argument("--calls-every", type=int, default=1, help="a call end every N events")
    parser.add_argument("--flush-interval", type=float, default=1.0)
    parser.add_argument("--db", help="SQLite file for the sqlite phase (default: a temp file)")
    parser.add_argument("--open-rows", type=int, help="measure opening over this many rows")
    parser.add_argument("--repeat", type=int, default=5, help="opens per target (--open-rows)")
    parser.add_argument("--max-open-ms", type=float, default=100.0)
    parser.add_argument("--max-rss-mb", type=float, default=50.0)
    parser.add_argument("--old-way", action="store_true", help="also time reading every row")
    parser.add_argument("--open-child", help=argparse.SUPPRESS)
    parser.add_argument("--job", default="bench", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.open_child:
        child = old_way_child if args.old_way else partial(open_child, job=args.job)
        sys.stdout.write(orjson.dumps(child(args.open_child)).decode() + "\n")
        return 0
    if args.open_rows is not None:
        with tempfile.TemporaryDirectory() as folder:
            opened = open_phase(args.open_rows, args.repeat, Path(folder), old_way=args.old_way)
        opened["ok"] = (
            opened["spent_exact"]
            and opened["full"]["open_ms"] < args.max_open_ms
            and opened["peak_rss_mb_more"] < args.max_rss_mb
        )
        opened.update(versions())
        opened["date"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        sys.stdout.write(orjson.dumps(opened).decode() + "\n")
        return 0 if opened["ok"] else 1
    report = trio.run(run, args)
    report.update(versions())
    report["date"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    sys.stdout.write(orjson.dumps(report).decode() + "\n")
    return 0 if report["memory"]["ok"] and report["sqlite"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
