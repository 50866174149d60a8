"""The ledger's history answered with sums: a runtime opens without reading it, budgets still
count it to the micro-dollar, and every report equals the row-by-row sums of the old code.

The row-by-row reference is :func:`~sluice._ledger.summary.summarize` over every row
:func:`~sluice._ledger.sqlite.read_ledger_file` reads (what ``open_runtime`` and ``sluice
ledger`` did before). SQLite files are real; runtimes over them run on the real clock (the
store works in threads), the actor alone on virtual time.
"""

from __future__ import annotations

import datetime as dt
import gc
import itertools
import json
import random
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import pytest
import trio
import trio.testing

import sluice
from benchmarks.ledger import fill_job, fill_ledger, fill_spent
from sluice import BudgetExceeded, RuntimeConfig
from sluice._cli import main
from sluice._cli.ledger import render_json
from sluice._config import BudgetConfig, LedgerConfig
from sluice._ledger.book import COUNTERS, DIMENSIONS, LedgerBook, LedgerKey, LedgerTotals
from sluice._ledger.prices import PriceTable
from sluice._ledger.sqlite import SQLiteLedgerStore, read_ledger_file
from sluice._ledger.store import MemoryLedgerStore
from sluice._ledger.summary import LedgerQuery, summarize
from sluice._mail import LedgerMsg, RecordCall, RecordUsage
from sluice._messages import Usage
from sluice.actors._token_ledger import TokenLedgerHandle, run_token_ledger
from sluice.simulator import SimulatorConfig, mock_transport

from .helpers import virtual_deadline

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sluice._ledger.book import Dimension

ROOT = Path(__file__).resolve().parents[1]

# Every grouping: each subset of the five dimensions.
GROUPINGS: list[tuple[Dimension, ...]] = [
    combo for n in range(len(DIMENSIONS) + 1) for combo in itertools.combinations(DIMENSIONS, n)
]


def random_rows(seed: int, count: int) -> dict[LedgerKey, LedgerTotals]:
    """Rows over few enough values that groups collide: empty tags, odd text, big counts."""
    rng = random.Random(seed)
    days = [(dt.date(2025, 1, 30) + dt.timedelta(days=d)).isoformat() for d in range(5)]
    tags = ["", "blue", "Blue", "équipe", "a\x1fb", "z"]
    rows: dict[LedgerKey, LedgerTotals] = {}
    for _ in range(count):
        key = LedgerKey(
            rng.choice(days),
            rng.choice(["openai", "anthropic", "sim"]),
            rng.choice(["m1", "m2", "gpt-4o", "ü"]),
            rng.choice(tags),
            rng.choice(["", "job-1", "job-2"]),
        )
        totals = LedgerTotals(*(rng.randrange(0, 10 ** rng.randrange(1, 15)) for _ in COUNTERS))
        found = rows.get(key)
        if found is None:
            rows[key] = totals
        else:
            found.add(totals)
    return rows


def queries() -> list[LedgerQuery]:
    filters: list[dict[str, str | None]] = [
        {},
        {"since": "2025-02-01"},
        {"until": "2025-01-31"},
        {"since": "2025-01-31", "until": "2025-02-02"},
        {"since": "2030-01-01"},  # nothing matches
        {"job": "job-1"},
        {"job": ""},
        {"tag": ""},
        {"tag": "équipe", "since": "2025-02-01"},
        {"tag": "nobody"},
    ]
    return [LedgerQuery.of(by, **f) for by in GROUPINGS for f in filters]


def reference(rows: list[tuple[LedgerKey, LedgerTotals]], query: LedgerQuery) -> list[object]:
    """The old way: every row through Python."""
    return summarize(  # type: ignore[return-value]
        rows, query.by, since=query.since, until=query.until, job=query.job, tag=query.tag
    )


async def test_sqlite_and_memory_stores_sum_exactly_what_the_rows_sum(tmp_path):
    data = random_rows(seed=7, count=3000)
    keys = list(data)
    file = await SQLiteLedgerStore.open(tmp_path / "ledger.sqlite3")
    memory = MemoryLedgerStore()
    try:
        for start in range(0, len(keys), 400):  # in batches, some keys added twice
            batch = {k: data[k] for k in keys[start : start + 400]}
            await file.add(batch)
            await memory.add(batch)
        twice = {k: data[k] for k in keys[:50]}
        await file.add(twice)
        await memory.add(twice)
        rows = read_ledger_file(file.path)
        assert sorted(rows) == sorted(await memory.load())
        checked = 0
        for query in queries():
            expected = reference(rows, query)
            assert await file.summarize(query) == expected, query
            assert await memory.summarize(query) == expected, query
            checked += bool(expected)
        assert checked > 200  # most queries matched something
    finally:
        await file.aclose()


def test_the_ledger_command_prints_what_the_rows_sum(tmp_path, capsys):
    path = tmp_path / "ledger.sqlite3"

    async def write() -> None:
        store = await SQLiteLedgerStore.open(path)
        try:
            await store.add(random_rows(seed=11, count=2000))
        finally:
            await store.aclose()

    trio.run(write)
    rows = read_ledger_file(path)
    cases: list[tuple[tuple[Dimension, ...], str | None, str | None]] = [
        (("model",), None, None),
        (("provider", "tag"), None, None),
        (("day", "job"), "2025-01-31", None),
        (("day",), "2000-01-01", "2025-02-01"),
        (("provider", "model", "tag", "job", "day"), None, None),
    ]
    for by, since, until in cases:
        argv = ["ledger", "--db", str(path), "--format", "json"]
        for name in by:
            argv += ["--by", name]
        argv += ["--since", since] if since else []
        argv += ["--until", until] if until else []
        assert main(argv) == 0
        printed = json.loads(capsys.readouterr().out)
        groups = summarize(rows, by, since=since, until=until)
        (total,) = summarize(rows, (), since=since, until=until)
        expected = json.loads(render_json(groups, total, by=list(by), since=since, until=until))
        assert printed == expected
        assert printed["total"]["cost_usd"] == total.totals.cost_usd


def test_a_job_budget_counts_an_earlier_runs_spend_to_the_micro_dollar(tmp_path):
    """A ledger of other jobs' rows plus two calls of ``nightly`` from an earlier run: the
    next run of ``nightly`` starts its budget with exactly those two calls' cost."""
    path = tmp_path / "ledger.sqlite3"
    fill_ledger(path, 20_000)
    # 401 micro-dollars a call (1 prompt token at $1 / M, 100 output tokens at $4 / M).
    budget = BudgetConfig(scope="job", max_usd=0.001)
    cfg = RuntimeConfig(ledger=LedgerConfig(path=str(path), job="nightly", budgets=(budget,)))
    sim = SimulatorConfig(output_tokens=100)

    async def earlier() -> None:
        async with sluice.open_runtime(cfg, transport=mock_transport(sim)) as rt:
            await rt.chat("sim:sim-small", "hi", max_tokens=100)
            await rt.chat("sim:sim-small", "hi", max_tokens=100)
            (status,) = rt.ledger.budgets()
            assert status.spent_micros == 802

    async def later() -> tuple[int, int, str]:
        async with sluice.open_runtime(cfg, transport=mock_transport(sim)) as rt:
            (status,) = rt.ledger.budgets()
            with pytest.raises(BudgetExceeded) as refused:
                await rt.chat("sim:sim-small", "hi", max_tokens=100)
            return status.spent_micros, status.spent_tokens, str(refused.value)

    trio.run(earlier)
    micros, tokens, message = trio.run(later)
    assert (micros, tokens) == (802, 202)
    assert "$0.000198 left" in message
    (row,) = summarize(read_ledger_file(path), (), job="nightly")
    assert row.totals.cost_micros == 802 and row.totals.calls == 3  # the refusal counts

    # A job of the filled rows: its budget starts with exactly what they hold.
    job = 123
    cfg = RuntimeConfig(
        ledger=LedgerConfig(
            path=str(path), job=fill_job(job), budgets=(BudgetConfig(scope="job", max_usd=1e6),)
        )
    )

    async def filled() -> tuple[int, int]:
        async with sluice.open_runtime(cfg, transport=mock_transport(sim)) as rt:
            (status,) = rt.ledger.budgets()
            return status.spent_micros, status.spent_tokens

    assert trio.run(filled) == fill_spent(20_000, job) != (0, 0)


def test_opening_a_runtime_reads_none_of_the_history(tmp_path):
    """Python's allocations while a runtime opens and closes are the same over 50,000 rows
    as over none (the old code held every row: tens of megabytes here). Scales: the bound
    does not depend on the number of rows."""
    empty, full = tmp_path / "empty.sqlite3", tmp_path / "full.sqlite3"
    fill_ledger(empty, 0)
    fill_ledger(full, 50_000)
    budget = BudgetConfig(scope="job", max_usd=1.0)

    async def open_close(path: Path) -> int:
        cfg = RuntimeConfig(ledger=LedgerConfig(path=str(path), job=fill_job(7), budgets=(budget,)))
        gc.collect()
        tracemalloc.start()
        try:
            async with sluice.open_runtime(cfg) as rt:
                (status,) = rt.ledger.budgets()
                assert status.spent_micros == (fill_spent(50_000, 7)[0] if path == full else 0)
                await rt.ledger_totals()  # a question, answered with sums
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    trio.run(open_close, empty)  # imports and first-use caches
    base = trio.run(open_close, empty)
    peak = trio.run(open_close, full)
    assert peak - base < 2 * 2**20, (base, peak)


class GatedStore(MemoryLedgerStore):
    """A memory store whose writes wait until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = trio.Event()
        self.writing = False

    async def add(self, batch: Mapping[LedgerKey, LedgerTotals]) -> None:
        self.writing = True
        await self.gate.wait()
        await super().add(batch)
        self.writing = False


@virtual_deadline(60)
async def test_a_question_during_a_write_counts_every_increment_once(autojump_clock):
    store = GatedStore()
    store.gate.set()
    await store.add({LedgerKey("2025-01-01", "sim", "a", "", "old"): LedgerTotals(calls=5)})
    store.gate = trio.Event()
    book = LedgerBook(PriceTable(), job="now", keep_rows=False)
    send, inbox = trio.open_memory_channel[LedgerMsg](100)
    handle = TokenLedgerHandle(send, "now")
    answers: list[int] = []

    async def ask() -> None:
        (total,) = await handle.snapshot(by=())
        answers.append(total.totals.calls)

    async with trio.open_nursery() as nursery:
        await nursery.start(run_token_ledger, inbox, book, store, 1000.0)
        for _ in range(3):
            await handle.record(RecordCall("sim", "a", True, 1))
        assert (await handle.totals())["sim:a"].calls == 8  # 5 stored, 3 not yet written
        nursery.start_soon(handle.flush)
        await trio.testing.wait_all_tasks_blocked()
        assert store.writing  # the 3 are on their way to the store
        await handle.record(RecordCall("sim", "a", True, 1))
        await handle.record(RecordUsage("sim", "a", Usage(10, 2)))
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        assert answers == []  # asked between two writes, never during one
        store.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert answers == [9]
        (total,) = await handle.snapshot(by=(), job="now")
        assert (total.totals.calls, total.totals.input_tokens) == (4, 10)
        assert book.rows == {}  # the store has them; the book kept no copy
        send.close()
    (row,) = summarize(await store.load(), (), job="now")
    assert (row.totals.calls, row.totals.input_tokens) == (4, 10)


@virtual_deadline(60)
async def test_without_a_store_the_book_answers_alone(autojump_clock):
    book = LedgerBook(PriceTable(), job="j")
    send, inbox = trio.open_memory_channel[LedgerMsg](100)
    handle = TokenLedgerHandle(send, "j")
    async with trio.open_nursery() as nursery:
        await nursery.start(run_token_ledger, inbox, book, None, 1.0)
        await handle.record(RecordCall("sim", "a", True, 2, tag="t"))
        await handle.record(RecordCall("sim", "b", False, 1))
        by_tag = await handle.snapshot(by=("tag",))
        assert [(s.tag, s.totals.calls) for s in by_tag] == [("", 1), ("t", 1)]
        rows = await handle.rows()
        assert sorted(rows) == sorted(book.rows.items())
        assert book.dirty == {}  # nothing is flushed without a store: no second copy
        assert await handle.snapshot(by=(), tag="nobody") == []
        send.close()


def test_the_open_benchmark_runs_and_checks_the_spend(tmp_path):
    """``benchmarks/ledger.py --open-rows`` end to end on a small file (the million-row run
    is in benchmarks/README.md)."""
    command = [sys.executable, "-m", "benchmarks.ledger", "--open-rows", "3000", "--repeat", "1"]
    command += ["--old-way", "--max-open-ms", "10000"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    report = orjson.loads(done.stdout)
    assert report["spent_exact"] is True and report["ok"] is True
    assert report["job_spent"]["got"] == [report["job_spent"]["expected"]] != [[0, 0]]
    assert report["report_groups"] == report["old_way"]["groups"] == 5
