"""run_batch(via="provider") against the simulator's own batch API (OpenAI protocol).

The runtime sends through the simulator's transport (no sockets), so the batch lines, the
realtime calls and the counters (``SimulatorApp.batch_stats``: creates per content, i.e.
duplicate paid jobs) are one app's. Real clock, short batch times; each test has a
trio.fail_after guard. The kill -9 tests with the real ``sluice batch`` process are in
tests/test_provider_batch_kill.py.
"""

from __future__ import annotations

import random
import subprocess

import orjson
import trio

from sluice import RuntimeConfig, open_runtime
from sluice._config import LedgerConfig, ProviderConfig
from sluice._jobs.batch import run_batch
from sluice._jobs.provider_batch.engine import LaneOptions
from sluice._serde import Secret
from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport

from .helpers import SLUICE, clean_env

LANE = LaneOptions(poll_interval=0.05)


def write_input(path, n, model="sim:sim-small"):
    with open(path, "wb") as f:
        for i in range(n):
            body = {
                "model": model,
                "messages": [{"role": "user", "content": f"line {i}"}],
                "max_tokens": 2,
                "seed": i,
            }
            line = {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions"}
            f.write(orjson.dumps({**line, "body": body}) + b"\n")


def bodies(path):
    """Each line's reply body less its id and timestamp, by custom_id."""
    found = {}
    with open(path, "rb") as f:
        for raw in f:
            line = orjson.loads(raw)
            body = line["response"]["body"] if line["error"] is None else line["error"]
            found[line["custom_id"]] = {k: v for k, v in body.items() if k not in ("id", "created")}
    return found


async def test_120000_lines_in_3_batches_answer_as_the_realtime_lane(tmp_path):
    n = 120_000
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(source, n)
    app = SimulatorApp(SimulatorConfig(batch_time=0.5))
    with trio.fail_after(240):
        async with open_runtime(RuntimeConfig(), transport=mock_transport(app)) as rt:
            summary = await run_batch(source, out, runtime=rt, via="provider", lane_options=LANE)
    stats = app.batch_stats
    assert stats.batches_created == 3 and summary.batches == 3
    assert sum(stats.creates_by_content.values()) == 3
    got = bodies(out)
    assert len(got) == n and out.read_bytes().count(b"\n") == n
    assert summary.ok == n and summary.batch_lines == n

    # The same seeded requests through the realtime lane: the same bodies.
    sample = sorted(random.Random(7).sample(range(n), 200))
    few = tmp_path / "few.jsonl"
    lines = source.read_bytes().splitlines(keepends=True)
    few.write_bytes(b"".join(lines[i] for i in sample))
    realtime = tmp_path / "realtime.jsonl"
    with trio.fail_after(60):
        async with open_runtime(RuntimeConfig(), transport=mock_transport(app)) as rt:
            await run_batch(few, realtime, runtime=rt)
    expected = bodies(realtime)
    assert len(expected) == 200
    for custom_id, body in expected.items():
        assert got[custom_id] == body, custom_id


async def test_expired_and_errored_lines(tmp_path):
    n = 2000
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(source, n)
    app = SimulatorApp(
        SimulatorConfig(batch_time=0.2, batch_expiry_rate=0.05, batch_error_rate=0.02)
    )
    with trio.fail_after(60):
        async with open_runtime(RuntimeConfig(), transport=mock_transport(app)) as rt:
            summary = await run_batch(source, out, runtime=rt, via="provider", lane_options=LANE)
    got = [orjson.loads(raw) for raw in out.read_bytes().splitlines()]
    assert sorted(o["custom_id"] for o in got) == sorted(f"r{i}" for i in range(n))
    failed = [o for o in got if o["error"] is not None]
    # About 2% errored in each round; expired lines were sent again until done.
    assert 0.01 * n < len(failed) < 0.035 * n
    assert {o["response"]["status_code"] for o in failed} == {500}
    assert summary.resubmitted > 0.03 * n
    assert summary.failed == len(failed) and summary.ok == n - len(failed)
    assert not any(o["error"]["code"] == "batch_expired" for o in failed)


async def test_ledger_books_batch_lines_at_half_price(tmp_path):
    source, _out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(source, 100)
    app = SimulatorApp(SimulatorConfig(batch_time=0.1))
    costs = {}
    for via in ("realtime", "provider"):
        config = RuntimeConfig(ledger=LedgerConfig(job=via))
        with trio.fail_after(60):
            async with open_runtime(config, transport=mock_transport(app)) as rt:
                await run_batch(
                    source, tmp_path / f"{via}.jsonl", runtime=rt, via=via, lane_options=LANE
                )
                (row,) = await rt.ledger.snapshot(by=("job",))
        costs[via] = row.totals
    realtime, batch = costs["realtime"], costs["provider"]
    assert (batch.input_tokens, batch.output_tokens) == (
        realtime.input_tokens,
        realtime.output_tokens,
    )
    assert abs(2 * batch.cost_micros - realtime.cost_micros) <= 100  # rounded per line


async def test_anthropic_message_batches_20000_lines_in_2_batches(tmp_path):
    n = 20_000
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(source, n, model="anthropic:claude-haiku-4-5")
    app = SimulatorApp(SimulatorConfig(batch_time=0.3, batch_max_requests=10_000))
    anthropic = ProviderConfig(base_url="http://sim.test/v1", api_key=Secret("sk-ant-test"))
    config = RuntimeConfig(providers={"anthropic": anthropic})
    with trio.fail_after(240):
        async with open_runtime(config, transport=mock_transport(app), environ={}) as rt:
            summary = await run_batch(source, out, runtime=rt, via="provider", lane_options=LANE)
    stats = app.batch_stats
    # The first create asked for all 20,000 and was refused (over the simulator's limit);
    # the lines went again as two batches of 10,000.
    assert stats.batches_created == 2 and summary.batches == 2
    got = bodies(out)
    assert len(got) == n and summary.ok == n
    assert got["r5"]["object"] == "chat.completion"

    sample = sorted(random.Random(3).sample(range(n), 50))
    few, realtime = tmp_path / "few.jsonl", tmp_path / "realtime.jsonl"
    lines = source.read_bytes().splitlines(keepends=True)
    few.write_bytes(b"".join(lines[i] for i in sample))
    with trio.fail_after(60):
        async with open_runtime(config, transport=mock_transport(app), environ={}) as rt:
            await run_batch(few, realtime, runtime=rt)
    for custom_id, body in bodies(realtime).items():
        assert got[custom_id] == body, custom_id


def test_sluice_ledger_by_job_shows_the_batch_lines_at_half_price(tmp_path):
    """The command line end to end: the same 60 lines run once per lane under two jobs, into
    one ledger file; ``sluice ledger --by job`` prices the provider lane's at half."""
    source = tmp_path / "in.jsonl"
    write_input(source, 60)
    env = clean_env(tmp_path, SLUICE_LEDGER_DB=str(tmp_path / "ledger.db"))
    for via in ("realtime", "provider"):
        run = [SLUICE, "batch", str(source), "-o", str(tmp_path / f"{via}.jsonl")]
        run += ["--via", via, "--job", via]
        if via == "provider":
            run += ["--poll-interval", "0.1"]
        done = subprocess.run(run, env=env, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode()
    shown = subprocess.run(
        [SLUICE, "ledger", "--by", "job", "--format", "json"],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr.decode()
    rows = {row["job"]: row for row in orjson.loads(shown.stdout)["rows"]}
    realtime, batch = rows["realtime"], rows["provider"]
    assert batch["input_tokens"] == realtime["input_tokens"]
    assert batch["output_tokens"] == realtime["output_tokens"]
    assert abs(2 * batch["cost_micros"] - realtime["cost_micros"]) <= 60  # rounded per line
