"""Several processes sharing one Redis: budgets, cooldowns, and what happens when Redis stops.

These run on the real clock (Redis is a real socket) and assert behaviour, not timing.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import orjson
import pytest
import trio

import sluice
from sluice import RetryConfig, RuntimeConfig, StoreUnavailable
from sluice._config import LedgerConfig, ProviderConfig, RateLimitConfig, WindowLimit
from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport

ROOT = Path(__file__).resolve().parents[1]


def shared_config(url: str, prefix: str, **fields: object) -> RuntimeConfig:
    return RuntimeConfig(
        retry=RetryConfig(jitter=0.0),
        ledger=LedgerConfig(persist=False),
        store=url,
        store_prefix=prefix,
        **fields,  # type: ignore[arg-type]
    )


def test_four_processes_with_one_dollar_budget_never_spend_more_than_it(redis_url):
    """1,000 concurrent calls over 4 processes; the budget fits about 100 of them.

    Each call reserves 8 prompt tokens ($1 / M) + 100 output tokens ($4 / M) = 408 micro-dollars
    and spends 401 (the simulator counts 1 prompt token).
    """
    budget = 100 * 408
    prefix = f"budget-{uuid.uuid4().hex}"
    worker = str(ROOT / "tests" / "redis_worker.py")
    procs = [
        subprocess.Popen(
            [sys.executable, worker, redis_url, prefix, "250", str(budget)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
        )
        for _ in range(4)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()[-3000:]
        results.append(orjson.loads(out.splitlines()[-1]))
    spent = sum(r["micros"] for r in results)
    done = sum(r["done"] for r in results)
    assert all(r["done"] + r["refused"] == 250 for r in results), results
    assert all(r["sent"] == r["done"] for r in results), results  # refused: never sent
    assert spent <= budget, results
    assert 100 <= done <= 102, results  # the budget was used, not left idle


async def test_a_429_in_one_process_delays_the_next_call_in_another(redis_url):
    prefix = f"cooldown-{uuid.uuid4().hex}"
    first = SimulatorApp(SimulatorConfig(script=("429:retry_after=2",)))
    second = SimulatorApp(SimulatorConfig())
    config = shared_config(redis_url, prefix)
    with trio.fail_after(30):
        async with (
            sluice.open_runtime(config, transport=mock_transport(first)) as a,
            sluice.open_runtime(config, transport=mock_transport(second)) as b,
        ):
            await b.chat("sim:sim-small", "warm up")  # the second runtime is ready
            async with trio.open_nursery() as nursery:
                nursery.start_soon(a.chat, "sim:sim-small", "gets a 429, then waits")
                await trio.sleep(0.3)  # a's call gets its 429, a's limiter shares the pause
                assert first.chat_requests_seen == 1
                started = trio.current_time()
                await b.chat("sim:sim-small", "must wait for the other process's cooldown")
                waited = trio.current_time() - started
    assert waited >= 1.5  # the pause was 2 s from the 429
    assert second.chat_requests_seen == 2


def _limited(url: str, prefix: str, limit: int, per: float, **store: object) -> RuntimeConfig:
    quota = RateLimitConfig(windows=(WindowLimit(dimension="requests", limit=limit, per=per),))
    return shared_config(
        url,
        prefix,
        providers={"sim": ProviderConfig(rate_limit=quota)},
        **store,
    )


async def test_with_on_store_error_local_a_stopped_redis_leaves_each_process_its_share(
    redis_server, caplog
):
    """Two runtimes, 8 requests per 2 s shared, local shares of 1/4: while Redis is stopped
    each admits at most 2 per 2 s; the calls all finish."""
    prefix = f"local-{uuid.uuid4().hex}"
    config = _limited(redis_server.url, prefix, 8, 2.0, on_store_error="local")
    sims = [SimulatorApp(SimulatorConfig(ttft=0.0)), SimulatorApp(SimulatorConfig(ttft=0.0))]
    arrivals: list[float] = []
    with trio.fail_after(60):
        async with (
            sluice.open_runtime(config, transport=mock_transport(sims[0])) as a,
            sluice.open_runtime(config, transport=mock_transport(sims[1])) as b,
        ):

            async def calls(rt: sluice.Runtime, n: int) -> None:
                for _ in range(n):
                    await rt.chat("sim:sim-small", "hi")
                    arrivals.append(trio.current_time())

            await calls(a, 8)  # the shared window is full now
            redis_server.stop()
            started = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(calls, a, 4)
                nursery.start_soon(calls, b, 4)
            during = [t for t in arrivals if t >= started]
    assert len(during) == 8
    # Never more than the limit (8) plus both local shares (2 each) in any 2 s.
    times = sorted(arrivals)
    assert max(sum(1 for u in times if t <= u < t + 2.0) for t in times) <= 8 + 2 * 2
    assert caplog.text.count("admitting with a local share of 0.25") == 2  # one per process
    # 2 per process per 2 s while Redis is down: 8 calls take at least two more windows.
    first_window = [t for t in during if t < started + 1.9]
    assert len(first_window) <= 4


async def test_with_on_store_error_fail_calls_fail_with_a_clear_store_error(redis_server):
    prefix = f"fail-{uuid.uuid4().hex}"
    config = _limited(redis_server.url, prefix, 100, 60.0)
    sim = SimulatorApp(SimulatorConfig(ttft=0.0))
    with trio.fail_after(30):
        async with sluice.open_runtime(config, transport=mock_transport(sim)) as rt:
            await rt.chat("sim:sim-small", "hi")
            redis_server.stop()
            with pytest.raises(StoreUnavailable, match="quota store does not answer"):
                await rt.chat("sim:sim-small", "hi")
            redis_server.start()
            await rt.chat("sim:sim-small", "Redis answers again")
    assert sim.chat_requests_seen == 2


async def test_a_store_that_does_not_answer_at_start_is_a_config_error(tmp_path):
    from tests.redis_server import _free_port

    config = shared_config(f"redis://127.0.0.1:{_free_port()}/0", "none")
    with pytest.raises(sluice.ConfigError, match="cannot reach the quota store"):
        async with sluice.open_runtime(config):
            pass


async def test_a_store_url_that_is_not_redis_is_a_config_error():
    with pytest.raises(sluice.ConfigError, match="give a redis://host:port/db URL"):
        async with sluice.open_runtime(shared_config("http://localhost", "x")):
            pass


async def test_sluice_ledger_store_shows_every_process_spend(redis_url, tmp_path, capsys):
    """Two runtimes (two processes' worth) record into one Redis; ``sluice ledger --store``
    sums both, while each runtime's own ledger holds only its own calls."""
    from sluice._cli.ledger import ledger

    prefix = f"ledger-{uuid.uuid4().hex}"
    config = shared_config(redis_url, prefix)
    sim = SimulatorApp(SimulatorConfig(output_tokens=5))
    with trio.fail_after(30):
        async with sluice.open_runtime(config, transport=mock_transport(sim)) as a:
            await a.chat("sim:sim-small", "one")
            await a.chat("sim:sim-small", "two")
        async with sluice.open_runtime(config, transport=mock_transport(sim)) as b:
            await b.chat("sim:sim-small", "three")
            (own,) = await b.ledger.snapshot(by=())
    assert own.totals.calls == 1
    (tmp_path / "c.toml").write_text(f'store_prefix = "{prefix}"\n')
    code = await ledger(
        by=["model"], format="json", store=redis_url, config_file=tmp_path / "c.toml"
    )
    assert code == 0
    report = orjson.loads(capsys.readouterr().out)
    assert report["total"]["calls"] == 3
    assert report["total"]["output_tokens"] == 15


async def test_a_ledger_mirrored_to_redis_keeps_nothing_in_its_book(redis_url):
    """With the Redis quota store and no ledger file, the book is made knowing the mirror
    drains it: after a flush it holds neither rows nor increments, however many models were
    named, while both the runtime's own ledger and Redis hold every call."""
    from sluice._ledger.setup import open_ledger
    from sluice._ledger.summary import LedgerQuery
    from sluice._limits.shared import open_quota_store
    from sluice._mail import LedgerMsg, RecordCall
    from sluice.actors._token_ledger import TokenLedgerHandle, run_token_ledger

    config = shared_config(redis_url, f"mirror-{uuid.uuid4().hex}")
    with trio.fail_after(30):
        async with open_quota_store(config) as quota:
            mirror = quota.ledger_mirror()  # type: ignore[union-attr]
            parts = await open_ledger(config.ledger, mirror=mirror)
            assert not parts.book.keep_rows  # a store flushes it
            send, inbox = trio.open_memory_channel[LedgerMsg](100)
            handle = TokenLedgerHandle(send, parts.book.job)
            async with trio.open_nursery() as nursery:
                await nursery.start(run_token_ledger, inbox, parts.book, parts.store, 3600.0)
                for i in range(50):
                    await handle.record(RecordCall("sim", f"m-{i}", True, 1))
                await handle.flush()
                assert parts.book.dirty == {} and parts.book.rows == {}
                (own,) = await handle.snapshot(by=())
                assert own.totals.calls == 50
                send.close()
            await parts.aclose()
            (shared,) = await mirror.summarize(LedgerQuery(by=()))
            assert shared.totals.calls == 50


async def test_simulators_sharing_a_redis_quota_behave_as_one_account(redis_url):
    """Two simulator processes' worth of apps with --rpm 3 on one Redis: the fourth request,
    whichever app gets it, is refused with 429 and a Retry-After."""
    import httpx

    from sluice._limits.redis_store import open_redis_store
    from sluice.simulator._shared_quota import SharedServerQuota

    body = {"model": "sim-small", "messages": [{"role": "user", "content": "hi"}]}
    statuses = []
    with trio.fail_after(30):
        async with open_redis_store(redis_url, prefix=f"sim-{uuid.uuid4().hex}") as store:
            apps = [
                SimulatorApp(
                    SimulatorConfig(rpm=3),
                    shared_quota=SharedServerQuota(store, rpm=3, tpm=None),
                )
                for _ in range(2)
            ]
            for i in range(5):
                async with httpx.AsyncClient(transport=mock_transport(apps[i % 2])) as client:
                    reply = await client.post("http://sim/v1/chat/completions", json=body)
                    statuses.append((reply.status_code, reply.headers.get("retry-after")))
    assert [s for s, _ in statuses] == [200, 200, 200, 429, 429]
    assert all(int(after) > 50 for s, after in statuses if s == 429)


async def test_batch_lines_refused_by_a_stopped_store_are_redone_by_resume(redis_server, tmp_path):
    """With on_store_error="fail", a line whose wait (max_wait) ends while Redis is down gets a
    StoreUnavailable error line (nothing sent); --resume drops those lines and does the calls,
    so the output ends with exactly one successful line per input line."""
    from sluice import run_batch

    lines = [
        orjson.dumps(
            {
                "custom_id": f"req-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "sim:sim-small", "messages": [{"role": "user", "content": "x"}]},
            }
        )
        for i in range(6)
    ]
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    config = shared_config(redis_server.url, f"redo-{uuid.uuid4().hex}")
    sim = SimulatorApp(SimulatorConfig())
    with trio.fail_after(60):
        async with sluice.open_runtime(config, transport=mock_transport(sim)) as rt:
            redis_server.stop()
            first = await run_batch(source, output, runtime=rt, write_summary=False, max_wait=1.0)
        refused = [orjson.loads(x) for x in output.read_bytes().splitlines()]
        assert first.failed == 6 and sim.chat_requests_seen == 0
        assert {x["error"]["code"] for x in refused} == {"StoreUnavailable"}
        assert "quota store does not answer" in refused[0]["error"]["message"]
        redis_server.start()
        async with sluice.open_runtime(config, transport=mock_transport(sim)) as rt:
            second = await run_batch(source, output, runtime=rt, resume=True, write_summary=False)
    done = [orjson.loads(x) for x in output.read_bytes().splitlines()]
    assert second.failed == 0 and sim.chat_requests_seen == 6
    assert sorted(x["custom_id"] for x in done) == [f"req-{i}" for i in range(6)]
    assert all(x["error"] is None for x in done)
