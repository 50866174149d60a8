"""Window gauges and the batch progress line with the Redis store, and scrapes that never wait
for it.

Real ``redis-server``, real metrics endpoints scraped over loopback (the provider behind each
runtime is the simulator over ``mock_transport``). Real clock: the assertions are on values,
and on one stated bound (a scrape while Redis is paused answers within half a second).
"""

from __future__ import annotations

import re
import signal
import time
import uuid

import httpx
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

import sluice
from sluice import MetricsConfig, RetryConfig, RuntimeConfig
from sluice._cli import main
from sluice._config import LedgerConfig, ProviderConfig, RateLimitConfig, WindowLimit
from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport

MODEL = "sim:sim-small"
KEY = {"key": "sim", "window": "requests/60s"}


def gauges_config(url: str, prefix: str) -> RuntimeConfig:
    quota = RateLimitConfig(windows=(WindowLimit(dimension="requests", limit=10, per=60.0),))
    return RuntimeConfig(
        retry=RetryConfig(jitter=0.0),
        ledger=LedgerConfig(persist=False),
        store=url,
        store_prefix=prefix,
        metrics=MetricsConfig(port=0),
        providers={"sim": ProviderConfig(rate_limit=quota)},
    )


def gauge(text: str, name: str, **labels: str) -> float:
    """The one sample of ``name`` with exactly ``labels`` (a missing one fails the test)."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return float(s.value)
    raise AssertionError(f"no {name}{labels} in the scrape:\n{text}")


async def scrape(client: httpx.AsyncClient, rt: sluice.Runtime) -> str:
    reply = await client.get(f"http://127.0.0.1:{rt.metrics_port}/metrics")
    assert reply.status_code == 200
    return reply.text


async def test_window_gauges_show_the_shared_window_in_every_process(redis_url):
    """The process that admits sees its answers; another one sees them after its refresh."""
    config = gauges_config(redis_url, f"gauges-{uuid.uuid4().hex}")
    sims = [SimulatorApp(SimulatorConfig(ttft=0.0)), SimulatorApp(SimulatorConfig(ttft=0.0))]
    with trio.fail_after(30):
        async with (
            sluice.open_runtime(config, transport=mock_transport(sims[0])) as a,
            sluice.open_runtime(config, transport=mock_transport(sims[1])) as b,
            httpx.AsyncClient() as client,
        ):
            for _ in range(3):
                await a.chat(MODEL, "hi")
            seen = await scrape(client, a)
            assert gauge(seen, "sluice_window_used", **KEY) == 3
            assert gauge(seen, "sluice_window_limit", **KEY) == 10
            assert gauge(seen, "sluice_window_age_seconds", key="sim") < 1.0
            await b.chat(MODEL, "hi")  # b's admission answer carries the shared window
            assert gauge(await scrape(client, b), "sluice_window_used", **KEY) == 4
            for _ in range(2):
                await a.chat(MODEL, "hi")
            assert gauge(await scrape(client, a), "sluice_window_used", **KEY) == 6
            # b sends nothing more: its background refresh reads a's two calls.
            used = 4.0
            while used != 6:
                await trio.sleep(0.1)
                seen = await scrape(client, b)
                used = gauge(seen, "sluice_window_used", **KEY)
                assert used in (4, 6)
            assert gauge(seen, "sluice_window_limit", **KEY) == 10
            assert gauge(seen, "sluice_window_age_seconds", key="sim") < 2.0


async def test_a_scrape_while_redis_is_paused_answers_at_once_with_the_last_values(redis_server):
    """Redis stopped with SIGSTOP (it accepts, never answers) while a call waits on it: every
    scrape still answers within half a second, with the last known windows, older each time."""
    config = gauges_config(redis_server.url, f"paused-{uuid.uuid4().hex}")
    assert redis_server.process is not None
    with trio.fail_after(60):
        async with (
            sluice.open_runtime(config, transport=mock_transport()) as rt,
            httpx.AsyncClient(timeout=5) as client,
        ):
            for _ in range(3):
                await rt.chat(MODEL, "hi")
            ages = [gauge(await scrape(client, rt), "sluice_window_age_seconds", key="sim")]
            redis_server.process.send_signal(signal.SIGSTOP)
            try:
                async with trio.open_nursery() as nursery:

                    async def blocked_call() -> None:
                        try:
                            await rt.chat(MODEL, "waits on the paused store")
                        except sluice.SluiceError:
                            pass  # how the call ends is not this test's business

                    nursery.start_soon(blocked_call)
                    await trio.sleep(0.2)  # the RateLimiter now waits on Redis
                    for _ in range(4):
                        started = time.monotonic()
                        seen = await scrape(client, rt)
                        took = time.monotonic() - started
                        assert took < 0.5, f"the scrape took {took:.2f} s"
                        assert gauge(seen, "sluice_window_used", **KEY) == 3
                        assert gauge(seen, "sluice_window_limit", **KEY) == 10
                        ages.append(gauge(seen, "sluice_window_age_seconds", key="sim"))
                        # A scrape that gave up waiting crashes nothing (the limiter's keys
                        # would go with it).
                        assert not re.search("^sluice_actor_restarts_total", seen, re.M)
                        await trio.sleep(0.3)
                    nursery.cancel_scope.cancel()
            finally:
                redis_server.process.send_signal(signal.SIGCONT)
    assert ages == sorted(ages) and ages[-1] >= ages[0] + 1.2, ages


@pytest.fixture
def no_ambient_config(monkeypatch):
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)
    monkeypatch.delenv("SLUICE_STORE", raising=False)


def test_the_batch_progress_line_shows_the_windows_of_a_redis_store(
    redis_url, tmp_path, capsys, no_ambient_config
):
    """``sluice batch --store redis://...``: the progress lines show each window, as with the
    in-memory store."""
    source = tmp_path / "in.jsonl"
    source.write_text(
        "".join(
            f'{{"custom_id": "r{i}", "body": {{"model": "{MODEL}",'
            f' "messages": [{{"role": "user", "content": "hi"}}], "max_tokens": 4}}}}\n'
            for i in range(30)
        )
    )
    config = tmp_path / "store.toml"
    config.write_text(f'store_prefix = "batch-{uuid.uuid4().hex}"\n')
    argv = ["batch", str(source), "-o", str(tmp_path / "out.jsonl"), "--rpm", "1200"]
    argv += ["--store", redis_url, "--config", str(config), "--log-interval", "0.2"]
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    logs = [entry for entry in captured.err.splitlines() if entry.startswith("sluice batch: ")]
    windows = re.compile(r".*, limit sim requests/60s (\d+)/1200, sim requests/1s \d+/20$")
    shown = [m for entry in logs if (m := windows.fullmatch(entry))]
    assert shown, captured.err
    assert logs[-1].startswith("sluice batch: 30/30 lines, ok 30, failed 0, in flight 0")
    assert windows.fullmatch(logs[-1]) and shown[-1].group(1) == "30", logs[-1]
