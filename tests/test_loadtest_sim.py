"""The load-test harness against the simulator's latency model, under trio's autojump clock
over in-memory HTTP: what the harness measures is what the simulator was told to do.

Tolerances: with N samples from a distribution of standard deviation s, the sample mean is
within 4 s / sqrt(N) of the true mean with overwhelming probability, and runs are seeded, so
each assertion states its bound from that and the counts involved.
"""

from __future__ import annotations

import math
import time

import attrs
import pytest
import trio

import sluice
from sluice._config import RuntimeConfig
from sluice._errors import ConfigError
from sluice._jobs.loadtest import (
    ClosedLoop,
    Lengths,
    LoadTest,
    OpenLoop,
    SweepPlan,
    Workload,
    loadtest_config,
    parse_slo,
    run_load,
    run_sweep,
)
from sluice._jobs.loadtest.results import results_document
from sluice.simulator import SimulatorApp, SimulatorConfig

from .helpers import memory_transport, virtual_deadline

MODEL = "sim:sim-small"


def workload(output: int, prompt: int = 8) -> Workload:
    return Workload(input_tokens=Lengths("fixed", prompt), output_tokens=Lengths("fixed", output))


async def run_against(app, nursery, test):
    transport = memory_transport(app, nursery)
    config = loadtest_config(RuntimeConfig(), "sim", respect_limits=False)
    try:
        async with sluice.open_runtime(config, transport=transport) as rt:
            return await run_load(rt, test)
    finally:
        await transport.aclose()


@virtual_deadline(600)
async def test_measured_ttft_and_itl_match_the_configured_distributions(autojump_clock, nursery):
    ttft, ttft_sd, tps, itl_sd = 0.3, 0.08, 40.0, 0.006
    app = SimulatorApp(
        SimulatorConfig(
            ttft=ttft,
            ttft_jitter=ttft_sd,
            tokens_per_second=tps,
            itl_jitter=itl_sd,
            tokens_per_chunk=3,
            output_tokens=1000,
        )
    )
    test = LoadTest(model=MODEL, shape=OpenLoop.at_rate(10), requests=200, workload=workload(31))
    run = await run_against(app, nursery, test)
    agg = run.aggregates
    assert agg["requests"]["ok"] == 200 and agg["requests"]["failed"] == 0
    # TTFT: 200 gamma draws, mean 0.3, sd 0.08 -> the sample mean is within 4*0.08/sqrt(200)
    # = 0.023 s, the sample sd within ~20 %.
    assert agg["ttft_s"]["mean"] == pytest.approx(ttft, abs=4 * ttft_sd / math.sqrt(200))
    assert agg["ttft_s"]["std"] == pytest.approx(ttft_sd, rel=0.2)
    # ITL per token: 31 tokens in chunks of 3 -> 10 gaps after the first chunk, each spread
    # over its 3 tokens, so 200 * 30 samples taking 2000 independent draws of mean 1/40 s.
    itl = agg["itl_s"]
    assert itl["count"] == 200 * (31 - 3)  # the last chunk carries one token
    assert itl["mean"] == pytest.approx(1 / tps, abs=4 * itl_sd / math.sqrt(2000))
    assert itl["std"] == pytest.approx(itl_sd, rel=0.2)
    # Never one chunk = one token: a chunk-counting harness would report 3x the ITL.
    assert agg["throughput"]["output_tokens"] == 200 * 31
    assert all(r.output_tokens_reported for r in run.records)
    # TPOT is the mean of a request's ITL samples; e2e is TTFT plus its gaps.
    for r in run.records[:20]:
        assert r.tpot == pytest.approx(sum(r.itls) / len(r.itls))
        assert r.e2e == pytest.approx(r.ttft + sum(r.itls), abs=1e-9)
    # Under the autojump clock an uncapped open loop sends every request on time (to the
    # rounding of the mock clock's arithmetic).
    assert agg["client_lag_s"]["max"] < 1e-9 and agg["valid"] is True


@virtual_deadline(600)
async def test_a_capped_client_falls_behind_and_the_run_is_marked_invalid(autojump_clock, nursery):
    # Two requests in flight at most, each taking 1 s, offered 5/s: the client cannot keep
    # its schedule and every request after the first two waits for a slot.
    app = SimulatorApp(SimulatorConfig(ttft=1.0, output_tokens=1000))
    test = LoadTest(
        model=MODEL,
        shape=OpenLoop.at_rate(5, max_in_flight=2),
        requests=40,
        workload=workload(4),
        max_lag=0.010,
    )
    run = await run_against(app, nursery, test)
    agg = run.aggregates
    assert agg["requests"]["ok"] == 40
    assert agg["client_lag_s"]["p99"] > 1.0
    assert agg["valid"] is False
    assert "fell behind its own schedule" in agg["invalid_reason"]
    assert "send lag p99" in agg["invalid_reason"]
    # The same schedule without the cap keeps time exactly.
    free = attrs.evolve(test, shape=OpenLoop.at_rate(5))
    again = await run_against(SimulatorApp(app.config), nursery, free)
    assert again.aggregates["client_lag_s"]["max"] < 1e-9 and again.aggregates["valid"] is True


async def test_a_cpu_starved_client_is_caught_by_its_lag(nursery):
    # Real clock (no sockets: in-memory HTTP). Each send blocks the whole event loop for
    # 30 ms, a CPU-bound client in miniature, while requests are due every 20 ms on average:
    # the client cannot keep its schedule, and the run says so.
    app = SimulatorApp(SimulatorConfig(output_tokens=1000))
    test = LoadTest(model=MODEL, shape=OpenLoop.at_rate(50), requests=20, workload=workload(2))
    transport = memory_transport(app, nursery)
    config = loadtest_config(RuntimeConfig(), "sim", respect_limits=False)
    with trio.fail_after(30):
        async with sluice.open_runtime(config, transport=transport) as rt:
            run = await run_load(rt, test, on_send=lambda: time.sleep(0.03))
    await transport.aclose()
    agg = run.aggregates
    assert agg["requests"]["ok"] == 20
    # 20 x 30 ms of work against ~0.4 s of schedule: requests fall due while a send's work
    # holds the loop, and at least that long a wait shows in the lag (how much more depends
    # on when the hand-over hook can submit between steps, not on the bound).
    assert agg["client_lag_s"]["p99"] > 0.03
    assert agg["valid"] is False and "fell behind" in agg["invalid_reason"]


@virtual_deadline(3600)
async def test_a_sweep_finds_the_configured_saturation_rate(autojump_clock, nursery):
    # 4 generation slots, each request 0.1 s to first token + 7 gaps of 0.05 s = 0.45 s:
    # the simulator completes at most 4 / 0.45 = 8.9 requests per second.
    app = SimulatorApp(
        SimulatorConfig(ttft=0.1, tokens_per_second=20, output_tokens=1000, capacity=4)
    )
    expected = 4 / (0.1 + 7 * 0.05)
    template = LoadTest(model=MODEL, shape=OpenLoop.at_rate(1), duration=20, workload=workload(8))
    transport = memory_transport(app, nursery)
    config = loadtest_config(RuntimeConfig(), "sim", respect_limits=False)
    async with sluice.open_runtime(config, transport=transport) as rt:
        result = await run_sweep(rt, template, SweepPlan(start=2.0, refine=3))
    await transport.aclose()
    rates = [p.rate for p in result.points]
    assert rates[:4] == [2.0, 4.0, 8.0, 16.0]  # doubling until a point saturates
    assert result.points[3].verdict.saturated
    # Within 15 % below the true rate (bisection precision 1/8 of the 8..16 bracket, plus the
    # queueing that shows just below saturation with Poisson arrivals), never above it.
    found = result.saturation_rate
    assert found is not None
    assert expected * 0.85 <= found <= expected
    document = results_document(result.best.run, sweep=result)
    assert document["sweep"]["saturation_rate"] == found
    assert len(document["sweep"]["points"]) == len(rates)


@virtual_deadline(600)
async def test_results_document_has_every_key(autojump_clock, nursery):
    app = SimulatorApp(SimulatorConfig(ttft=0.2, tokens_per_second=50, output_tokens=1000))
    test = LoadTest(
        model=MODEL,
        shape=OpenLoop.at_rate(4),
        duration=5,
        workload=workload(10),
        slos=(parse_slo("ttft_p99=250ms"), parse_slo("itl_p50=10ms")),
    )
    run = await run_against(app, nursery, test)
    doc = results_document(run, settings={"base_url": None})
    agg = doc["aggregates"]
    assert agg["ttft_s"]["p99"] == pytest.approx(0.2)
    assert agg["itl_s"]["p50"] == pytest.approx(0.02)
    assert agg["e2e_s"]["p95"] == pytest.approx(0.2 + 9 * 0.02)
    assert agg["requests"]["ok"] == len(doc["requests"]) > 0 and agg["requests"]["failed"] == 0
    assert agg["throughput"]["output_tokens_per_s"] > 0
    assert agg["client_lag_s"]["p99"] < 1e-9
    assert {"sluice", "trio", "python"} <= set(doc["versions"])
    assert doc["config"]["model"] == MODEL and doc["config"]["rate"] == 4
    assert set(doc["requests"][0]) >= {
        "scheduled_s", "sent_s", "lag_s", "queue_wait_s", "ttft_s", "itls_s", "tpot_s", "e2e_s",
        "input_tokens", "output_tokens", "ok", "status", "error_type",
    }  # fmt: skip
    # ttft_p99 = 200 ms is met; itl_p50 = 20 ms misses 10 ms, so no request is good.
    slos = {c["slo"]: c["met"] for c in agg["goodput"]["slos"]}
    assert slos == {"ttft_p99": True, "itl_p50": False}
    assert agg["goodput"]["good"] == 0 and agg["goodput"]["met"] is False
    assert doc["sweep"] is None


@virtual_deadline(600)
async def test_server_errors_are_counted_by_type_not_retried(autojump_clock, nursery):
    # The first request is the warm-up, sent before the clock starts and not recorded.
    script = ("500", "ok", "500", "429", "ok")
    app = SimulatorApp(SimulatorConfig(output_tokens=1000, script=script))
    test = LoadTest(model=MODEL, shape=ClosedLoop(1), requests=4, workload=workload(3))
    run = await run_against(app, nursery, test)
    agg = run.aggregates
    assert agg["requests"]["ok"] == 2 and agg["requests"]["failed"] == 2
    assert agg["requests"]["statuses"] == {"500": 1, "429": 1}
    assert agg["requests"]["error_rate"] == 0.5
    assert app.chat_requests_seen == 5  # no retries, the warm-up's failure included


@virtual_deadline(60)
async def test_an_unknown_provider_stops_the_run(autojump_clock, nursery):
    app = SimulatorApp(SimulatorConfig())
    test = LoadTest(model="nope:x", shape=OpenLoop.at_rate(5), requests=5, workload=workload(3))
    with pytest.raises(ConfigError):
        await run_against(app, nursery, test)


@virtual_deadline(600)
async def test_respect_limits_keeps_the_quota_and_queue_wait_shows_it(autojump_clock, nursery):
    from sluice._config import ProviderConfig, RateLimitConfig

    # One open stream at a time, calls of 0.5 s, three users at once.
    limited = RuntimeConfig(
        providers={"sim": ProviderConfig(rate_limit=RateLimitConfig(max_open_streams=1))}
    )
    test = LoadTest(model=MODEL, shape=ClosedLoop(3), requests=3, workload=workload(2))
    waits = {}
    for respect in (True, False):
        app = SimulatorApp(SimulatorConfig(ttft=0.5, output_tokens=1000))
        transport = memory_transport(app, nursery)
        config = loadtest_config(limited, "sim", respect_limits=respect)
        async with sluice.open_runtime(config, transport=transport) as rt:
            run = await run_load(rt, test)
        await transport.aclose()
        waits[respect] = sorted(r.queue_wait for r in run.records)
    assert waits[True] == pytest.approx([0.0, 0.5, 1.0])
    assert waits[False] == [0.0, 0.0, 0.0]


@virtual_deadline(600)
async def test_a_trace_is_replayed_on_its_timestamps(autojump_clock, nursery):
    app = SimulatorApp(SimulatorConfig(ttft=0.1, output_tokens=1000))
    offsets = (0.0, 0.25, 0.25, 3.0, 7.5)
    test = LoadTest(
        model=MODEL, shape=OpenLoop.replay(offsets), requests=len(offsets), workload=workload(2)
    )
    run = await run_against(app, nursery, test)
    assert [r.scheduled for r in run.records] == pytest.approx(offsets)
    assert [r.lag for r in run.records] == pytest.approx([0.0] * 5, abs=1e-9)
    assert [r.ttft for r in run.records] == pytest.approx([0.1] * 5)
