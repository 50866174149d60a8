"""The ledger's SQLite file: batched writes, a process killed mid-run, ``sluice ledger``.

Real clock and real files (under ``tmp_path``); the simulator runs behind ``mock_transport``.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
import trio

import sluice
from sluice._cli import main
from sluice._config import LedgerConfig, RuntimeConfig
from sluice._ledger.book import COUNTERS, LedgerKey, LedgerTotals
from sluice._ledger.sqlite import SQLiteLedgerStore, read_ledger_file
from sluice._ledger.summary import summarize
from sluice.simulator import SimulatorConfig, mock_transport

SLUICE = str(Path(sys.executable).parent / "sluice")


def integrity(path: Path) -> str:
    db = sqlite3.connect(path)
    try:
        return str(db.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        db.close()


def grand_total(path: Path) -> LedgerTotals:
    rows = read_ledger_file(path)
    (total,) = summarize(rows, ()) or [None]  # type: ignore[list-item]
    return total.totals if total is not None else LedgerTotals()


async def test_batches_add_up_in_one_file_shared_by_two_stores(tmp_path):
    path = tmp_path / "sub" / "ledger.sqlite3"
    key = LedgerKey("2025-01-02", "sim", "m", "", "j")
    first = await SQLiteLedgerStore.open(path)
    second = await SQLiteLedgerStore.open(path)
    try:
        await first.add({key: LedgerTotals(calls=1, input_tokens=10, cost_micros=7)})
        await second.add({key: LedgerTotals(calls=2, input_tokens=1)})
        await first.add({})  # nothing to write
        rows = await second.load()
    finally:
        await first.aclose()
        await second.aclose()
    assert rows == [(key, LedgerTotals(calls=3, input_tokens=11, cost_micros=7))]
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        db.close()
    assert integrity(path) == "ok"


CHILD = """
import sys
import orjson
import trio
import sluice
from sluice._config import LedgerConfig, RuntimeConfig
from sluice._ledger.book import COUNTERS
from sluice._ledger.sqlite import SQLiteLedgerStore
from sluice.simulator import SimulatorConfig, mock_transport


class Logged(SQLiteLedgerStore):
    async def add(self, batch):
        sums = {n: sum(getattr(d, n) for d in batch.values()) for n in COUNTERS}
        print(orjson.dumps({"writing": sums}).decode(), flush=True)
        await super().add(batch)
        print(orjson.dumps({"written": sums}).decode(), flush=True)


async def run(path):
    store = await Logged.open(path)
    config = RuntimeConfig(ledger=LedgerConfig(persist=False, flush_interval=0.02))
    sim = mock_transport(SimulatorConfig(output_tokens=5))
    async with sluice.open_runtime(config, transport=sim, ledger_store=store) as rt:
        while True:
            await rt.chat("sim:sim-small", "hello there", tag="kill")


trio.run(run, sys.argv[1])
"""


def test_a_killed_process_keeps_every_flushed_batch_and_a_sound_file(tmp_path):
    """SIGKILL in the middle of a run with persistence on: the file holds exactly the batches
    that were committed (one being committed at the kill may or may not be in), passes
    ``PRAGMA integrity_check``, and a new runtime continues its totals."""
    path = tmp_path / "ledger.sqlite3"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True
    )
    lines: list[dict[str, dict[str, int]]] = []
    try:
        assert child.stdout is not None
        deadline = time.monotonic() + 30
        while sum("written" in line for line in lines) < 6 and time.monotonic() < deadline:
            text = child.stdout.readline()
            if not text:
                break
            lines.append(orjson.loads(text))
    finally:
        os.kill(child.pid, signal.SIGKILL)
        rest, _ = child.communicate(timeout=10)
    assert child.returncode == -signal.SIGKILL
    for text in rest.splitlines():
        if text.startswith("{") and text.endswith("}"):
            lines.append(orjson.loads(text))
    committed = {name: 0 for name in COUNTERS}
    for line in lines:
        for name, value in line.get("written", {}).items():
            committed[name] += value
    assert committed["calls"] > 0
    in_flight = lines[-1].get("writing") if lines and "writing" in lines[-1] else None

    assert integrity(path) == "ok"
    stored = grand_total(path)
    as_dict = {name: getattr(stored, name) for name in COUNTERS}
    if in_flight is None or as_dict == committed:
        assert as_dict == committed
    else:  # killed after the commit, before it said so
        assert as_dict == {name: committed[name] + in_flight[name] for name in COUNTERS}

    async def restart() -> tuple[LedgerTotals, LedgerTotals]:
        config = RuntimeConfig(ledger=LedgerConfig(path=str(path)))
        sim = mock_transport(SimulatorConfig(output_tokens=5))
        async with sluice.open_runtime(config, transport=sim) as rt:
            before = (await rt.ledger_totals())["sim:sim-small"]
            await rt.chat("sim:sim-small", "hello there")
            after = (await rt.ledger_totals())["sim:sim-small"]
        return before, after

    before, after = trio.run(restart)
    assert before == stored
    assert after.calls == stored.calls + 1
    assert grand_total(path) == after
    assert integrity(path) == "ok"


def test_the_ledger_command_prints_the_totals_the_program_saw(tmp_path, capsys):
    path = tmp_path / "ledger.sqlite3"

    async def run() -> list[dict[str, str | int]]:
        config = RuntimeConfig(ledger=LedgerConfig(path=str(path), job="cli-job"))
        sim = mock_transport(SimulatorConfig(output_tokens=7, script=("500",)))
        async with sluice.open_runtime(config, transport=sim) as rt:
            async with trio.open_nursery() as nursery:
                for i in range(12):
                    nursery.start_soon(
                        rt.chat, "sim:sim-large" if i % 3 else "sim:sim-small", f"q {i}"
                    )
            await rt.chat("sim:sim-small", "tagged", tag="blue")
            seen = await rt.ledger.snapshot(by=("model",))
        return [s.as_dict() for s in seen]

    seen = trio.run(run)
    assert [row["model"] for row in seen] == ["sim-large", "sim-small"]
    assert sum(int(row["retries"]) for row in seen) == 1  # the scripted 500 was retried

    result = subprocess.run(
        [SLUICE, "ledger", "--db", str(path), "--by", "model", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed["rows"] == seen
    assert printed["total"]["calls"] == 13

    assert main(["ledger", "--db", str(path), "--by", "tag,model", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("provider,model,tag,calls,failures,attempts")
    assert len(lines) == 4  # header, untagged large and small, blue small

    assert main(["ledger", "--db", str(path), "--by", "day", "--since", "2000-01-01"]) == 0
    table = capsys.readouterr().out
    assert "cost $" in table and "13" in table

    assert main(["ledger", "--db", str(path), "--until", "2000-01-01"]) == 0
    assert "no usage recorded" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--by", "colour"], "--by 'colour'"),
        (["--since", "last week"], "not a date"),
        (["--db", "/nonexistent/ledger.sqlite3"], "no ledger file"),
        ([], "persistence is off"),
    ],
)
def test_the_ledger_command_reports_bad_input(argv, message, capsys):
    assert main(["ledger", *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_batch_run_records_its_calls_under_its_job(tmp_path, capsys):
    path = tmp_path / "ledger.sqlite3"
    config = tmp_path / "config.json"
    config.write_bytes(orjson.dumps({"ledger": {"path": str(path)}}))
    lines = [
        {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": "sim:sim-small", "messages": [{"role": "user", "content": "hi"}]}}
        for i in range(3)
    ]  # fmt: skip
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    argv = ["batch", str(source), "-o", str(tmp_path / "out.jsonl"), "--config", str(config)]
    assert main([*argv, "--job", "nightly-7"]) == 0
    capsys.readouterr()
    (row,) = summarize(read_ledger_file(path), ("job",))
    assert (row.job, row.totals.calls) == ("nightly-7", 3)
