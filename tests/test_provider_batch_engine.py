"""The provider lane's engine (run_batch via="provider") against a batch API in memory.

The runtime is real (the in-process simulator serves the realtime lane's calls, the ledger
books); the batch API is tests/memory_batch_api.py, whose counters show what was created.
The end-to-end tests against the simulator's own batch endpoints, with real processes and
kill -9, are in tests/test_provider_batch_sim.py. Real clock, short poll interval; each test
has a trio.fail_after guard.
"""

from __future__ import annotations

import orjson
import pytest
import trio

from sluice import ConfigError, RuntimeConfig, open_runtime
from sluice._config import BudgetConfig, LedgerConfig
from sluice._jobs.batch import run_batch
from sluice._jobs.provider_batch.backend import BatchLimits
from sluice._jobs.provider_batch.engine import LaneOptions
from sluice._jobs.provider_batch.journal import Journal, journal_path

from .memory_batch_api import MemoryBatchAPI

GUARD = 30


def write_input(path, n, model="sim:sim-small", start=0):
    with open(path, "wb") as f:
        for i in range(start, start + n):
            f.write(
                orjson.dumps(
                    {
                        "custom_id": f"r{i}",
                        "method": "POST",
                        "url": "/v1/chat/completions",
                        "body": {
                            "model": model,
                            "messages": [{"role": "user", "content": f"line {i}"}],
                            "max_tokens": 50,
                        },
                    }
                )
                + b"\n"
            )


def read_output(path):
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def options(api, **more):
    return LaneOptions(
        poll_interval=0.01, backends=lambda rt, p: api if p == "sim" else None, **more
    )


def one_line_each(out, n):
    got = read_output(out)
    ids = [o["custom_id"] for o in got]
    assert len(ids) == len(set(ids)) == n
    assert set(ids) == {f"r{i}" for i in range(n)}
    return {o["custom_id"]: o for o in got}


async def test_lines_split_into_batches_and_merged_in_the_realtime_format(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(source, 250)
    api = MemoryBatchAPI(limits=BatchLimits(max_requests=100, max_bytes=1 << 20))
    with trio.fail_after(GUARD):
        summary = await run_batch(
            source, out, via="provider", lane_options=options(api), config=RuntimeConfig()
        )
    assert len(api.creates) == len(set(api.creates)) == 3
    by_id = one_line_each(out, 250)
    body = by_id["r7"]["response"]["body"]
    assert by_id["r7"]["error"] is None
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"] == "echo line 7"
    assert body["usage"]["prompt_tokens"] == 6
    assert (summary.ok, summary.failed, summary.batches, summary.batch_lines) == (250, 0, 3, 250)
    journal = Journal(journal_path(str(out)))
    assert journal.active() == [] and len(journal.submissions) == 3
    journal.close()


async def test_bytes_and_enqueued_tokens_cut_batches_and_pace_them(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(source, 60)
    api = MemoryBatchAPI(limits=BatchLimits(max_requests=1000, max_bytes=1000), polls=2)
    with trio.fail_after(GUARD):
        await run_batch(
            source,
            out,
            via="provider",
            lane_options=options(api, enqueued_tokens={"sim:sim-small": 300}),
            config=RuntimeConfig(),
        )
    one_line_each(out, 60)
    sizes = [sum(len(e.data) for e in b.entries) for b in api.batches.values()]
    tokens = [sum(e.tokens for e in b.entries) for b in api.batches.values()]
    assert max(sizes) <= 1000 and max(tokens) <= 300
    assert len(api.creates) > 2
    assert max(api.enqueued_at_create) <= 300


async def test_errored_lines_are_error_lines_and_expired_ones_are_sent_again(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(source, 100)

    def fate(wire_id, submission):
        n = int(wire_id[1:])
        if n % 10 == 3:
            return "error"
        if n % 10 == 5 and submission == 1:
            return "expired"
        if n == 9:
            return "expired"  # every time: after max_tries it gets an error line
        return "ok"

    api = MemoryBatchAPI(fate=fate)
    with trio.fail_after(GUARD):
        summary = await run_batch(
            source, out, via="provider", lane_options=options(api), config=RuntimeConfig()
        )
    by_id = one_line_each(out, 100)
    assert by_id["r13"]["error"]["code"] == "invalid_request_error"
    assert by_id["r13"]["response"]["status_code"] == 400
    assert by_id["r15"]["error"] is None
    assert by_id["r9"]["error"]["code"] == "batch_expired"
    assert api.seen["r9"] == 4 and api.seen["r15"] == 2
    assert summary.failed == 11 and summary.ok == 89
    assert summary.resubmitted == 10 + 3


async def test_a_failed_batch_is_sent_again(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(source, 150)
    api = MemoryBatchAPI(fail_batches={1})
    with trio.fail_after(GUARD):
        summary = await run_batch(
            source, out, via="provider", lane_options=options(api), config=RuntimeConfig()
        )
    one_line_each(out, 150)
    assert summary.ok == 150 and summary.resubmitted == 100


async def test_a_lost_create_answer_adopts_the_batch_made(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(source, 150)
    api = MemoryBatchAPI(lose_create_answer={1})
    with trio.fail_after(GUARD):
        await run_batch(
            source, out, via="provider", lane_options=options(api), config=RuntimeConfig()
        )
    one_line_each(out, 150)
    assert len(api.creates) == 2  # the first batch was found, not made again


async def test_resume_merges_the_batches_an_interrupted_run_left(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(source, 250)
    api = MemoryBatchAPI(polls=10**9)  # nothing ends in the first run
    from sluice._jobs.batch import BatchInterrupt

    interrupt = BatchInterrupt()
    api.on_create = lambda n: interrupt.drain() if n == 3 else None
    with trio.fail_after(GUARD):
        first = await run_batch(
            source,
            out,
            via="provider",
            lane_options=options(api),
            config=RuntimeConfig(),
            interrupt=interrupt,
        )
    assert first.interrupted == "drained" and out.read_bytes() == b""
    with pytest.raises(ConfigError, match="--resume merges them"):
        await run_batch(
            source, out, via="provider", lane_options=options(api), config=RuntimeConfig()
        )
    api.polls = 1
    with trio.fail_after(GUARD):
        summary = await run_batch(
            source,
            out,
            via="provider",
            lane_options=options(api),
            config=RuntimeConfig(),
            resume=True,
        )
    one_line_each(out, 250)
    assert len(api.creates) == 3 and summary.ok == 250 and summary.batches == 0


async def test_providers_without_a_batch_api_run_realtime(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(source, 20)
    lane = LaneOptions(poll_interval=0.01, backends=lambda rt, p: None)
    with trio.fail_after(GUARD):
        summary = await run_batch(source, out, via="provider", lane_options=lane)
    by_id = one_line_each(out, 20)
    assert by_id["r3"]["response"]["body"]["object"] == "chat.completion"
    assert summary.realtime_lines == 20 and summary.batches == 0
    assert summary.lane_note == "no batch API (sim): realtime lane"


async def test_batch_lines_are_booked_at_half_price(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(source, 10)
    api = MemoryBatchAPI()
    config = RuntimeConfig(ledger=LedgerConfig(job="half"))
    with trio.fail_after(GUARD):
        async with open_runtime(config) as rt:
            summary = await run_batch(
                source, out, via="provider", lane_options=options(api), runtime=rt
            )
            rows = await rt.ledger.snapshot(by=("job",))
    # sim:* costs $1 / $4 per million tokens; each line 6 in, 50 out: 206 micro-dollars
    # realtime, 103 at the batch price.
    assert [(r.job, r.totals.cost_micros, r.totals.calls) for r in rows] == [("half", 1030, 10)]
    assert summary.cost_micros == 1030


async def test_a_budget_for_half_the_lines_submits_half(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(source, 100)
    api = MemoryBatchAPI()
    # A line's worst case at half of $1 / $4 per million: its prompt estimate (9 tokens)
    # and 50 output tokens, 105 micro-dollars; the budget covers about half the lines.
    budget = BudgetConfig(scope="job", max_usd=0.0053)
    config = RuntimeConfig(ledger=LedgerConfig(budgets=(budget,)))
    with trio.fail_after(GUARD):
        summary = await run_batch(
            source, out, via="provider", lane_options=options(api), config=config
        )
    by_id = one_line_each(out, 100)
    sent = sum(len(b.entries) for b in api.batches.values())
    refused = [o for o in by_id.values() if o["error"]]
    assert 0 < sent < 100 and len(refused) == 100 - sent
    assert {o["error"]["code"] for o in refused} == {"BudgetExceeded"}
    assert 45 <= sent <= 55
    assert summary.cost_micros <= 5300


async def test_auto_moves_the_lines_left_to_realtime_when_the_deadline_nears(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(source, 150)
    api = MemoryBatchAPI(polls=10**9, cancel_keeps=10)  # batches end only when cancelled
    lane = options(api, realtime_share=0.5)
    with trio.fail_after(GUARD):
        summary = await run_batch(
            source, out, via="auto", deadline=6.0, lane_options=lane, config=RuntimeConfig()
        )
    by_id = one_line_each(out, 150)
    assert len(api.creates) == api.cancels == 2  # both submitted well before the switch at 3 s
    assert summary.batch_lines == 20 and summary.realtime_lines == 130
    assert summary.ok == 150
    assert by_id["r0"]["response"]["body"]["choices"][0]["message"]["content"] == "echo line 0"
    assert summary.elapsed >= 3.0  # the switch came at the deadline's mark, not before
