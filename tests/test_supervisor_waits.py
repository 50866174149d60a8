"""The breaker through the whole runtime on virtual time: every exit of a probe frees it, the
breaker is per model, interactive calls fail fast while waiting calls wait, errors name the
real cause, the retry budget caps an outage, and the logs stay bounded over a run longer than
their windows."""

from __future__ import annotations

import math

import httpx
import pytest
import trio
import trio.testing

import sluice
from sluice import ChatRequest, Deadlines, RateLimitConfig, RetryConfig, RuntimeConfig
from sluice._config import BreakerConfig, ProviderConfig
from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport

from .helpers import Recorder, virtual_deadline


class CrashingTransport(httpx.AsyncBaseTransport):
    """Raises a bug-like exception on chosen requests: a crash injected through a parameter."""

    def __init__(self, inner: httpx.AsyncBaseTransport, crash_on: set[int]) -> None:
        self.inner = inner
        self.crash_on = crash_on
        self.seen = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.seen += 1
        if self.seen in self.crash_on:
            raise RuntimeError(f"injected crash on request {self.seen}")
        return await self.inner.handle_async_request(request)


BREAKER = BreakerConfig(min_failures=5, open_for=10.0)
ONE_ATTEMPT = RetryConfig(max_attempts=1, wait_max_attempts=1, jitter=0.0)
PATIENT = RetryConfig(max_attempts=1, wait_max_attempts=50, jitter=0.0)


def config(
    *,
    retry: RetryConfig = ONE_ATTEMPT,
    breaker: BreakerConfig | None = BREAKER,
    rate_limit: RateLimitConfig | None = None,
) -> RuntimeConfig:
    sim = ProviderConfig(breaker=breaker, rate_limit=rate_limit or RateLimitConfig())
    return RuntimeConfig(providers={"sim": sim}, retry=retry)


async def open_breaker(rt: sluice.Runtime, model: str = "sim:sim-small") -> None:
    for _ in range(5):
        with pytest.raises(sluice.ServerError):
            await rt.chat(model, "hi")
    assert (await rt.statistics()).breakers[model] == "open"


async def probe_then_recover(rt: sluice.Runtime, app: SimulatorApp, sent_before: int) -> None:
    """The next call after a probe that ended without a verdict probes again, and closes it
    (once the probe's call has wound down: a few scheduler ticks after its consumer left)."""
    await trio.testing.wait_all_tasks_blocked()
    result = await rt.chat("sim:sim-small", "hi")
    assert result.finish_reason == "stop"
    assert (await rt.statistics()).breakers == {"sim:sim-small": "closed"}
    assert app.chat_requests_seen == sent_before + 1


@pytest.mark.parametrize(
    ("directive", "error"),
    [
        ("429:retry_after=1", sluice.RateLimited),
        ("400", sluice.BadRequest),
    ],
)
@virtual_deadline(120)
async def test_a_probe_answered_without_a_verdict_frees_the_breaker(
    autojump_clock, directive, error
):
    app = SimulatorApp(SimulatorConfig(script=("500",) * 5 + (directive,)))
    async with sluice.open_runtime(config(), transport=mock_transport(app)) as rt:
        await open_breaker(rt)
        await trio.sleep(10)
        request = ChatRequest(model="sim:sim-small", messages="hi")
        with pytest.raises(error):
            await rt.chat(request)
        assert (await rt.statistics()).breakers == {"sim:sim-small": "half_open"}
        await probe_then_recover(rt, app, 6)


@virtual_deadline(120)
async def test_a_probe_whose_consumer_leaves_frees_the_breaker(autojump_clock):
    app = SimulatorApp(SimulatorConfig(script=("500",) * 5, tokens_per_second=1, output_tokens=10))
    async with sluice.open_runtime(config(), transport=mock_transport(app)) as rt:
        await open_breaker(rt)
        await trio.sleep(10)
        async with rt.stream("sim:sim-small", "hi") as call:
            async for event in call:
                if isinstance(event, sluice.TextDelta):
                    break  # the consumer leaves mid-stream
        await probe_then_recover(rt, app, 6)


@virtual_deadline(120)
async def test_a_cancelled_probe_frees_the_breaker(autojump_clock):
    app = SimulatorApp(SimulatorConfig(script=("500",) * 5 + ("stall:30",)))
    async with sluice.open_runtime(config(), transport=mock_transport(app)) as rt:
        await open_breaker(rt)
        await trio.sleep(10)
        with trio.move_on_after(1.0) as gave_up:
            await rt.chat("sim:sim-small", "hi")
        assert gave_up.cancelled_caught
        await probe_then_recover(rt, app, 6)


@virtual_deadline(300)
async def test_a_probe_that_times_out_in_admission_frees_the_breaker(autojump_clock):
    app = SimulatorApp(SimulatorConfig(script=("500",) * 5))
    cfg = config(rate_limit=RateLimitConfig(requests_per_minute=5))
    async with sluice.open_runtime(cfg, transport=mock_transport(app)) as rt:
        await open_breaker(rt)
        await trio.sleep(10)
        late = ChatRequest(model="sim:sim-small", messages="hi", deadlines=Deadlines(total=1.0))
        with pytest.raises(sluice.CallTimeout, match="waited for admission"):
            await rt.chat(late)
        await probe_then_recover(rt, app, 5)


@virtual_deadline(120)
async def test_a_probe_lost_with_its_crashed_actor_frees_the_breaker(autojump_clock):
    app = SimulatorApp(SimulatorConfig(script=("500",) * 5))
    transport = CrashingTransport(mock_transport(app), crash_on={6})
    async with sluice.open_runtime(config(), transport=transport) as rt:
        await open_breaker(rt)
        await trio.sleep(10)
        result = await rt.chat("sim:sim-small", "hi")  # lost once, resubmitted as a new probe
        assert result.finish_reason == "stop" and result.attempts == 2
        assert (await rt.statistics()).breakers == {"sim:sim-small": "closed"}


@virtual_deadline(120)
async def test_the_breaker_is_per_model_unless_scoped_to_the_provider(autojump_clock):
    app = SimulatorApp(SimulatorConfig(script=("500",) * 5))
    async with sluice.open_runtime(config(), transport=mock_transport(app)) as rt:
        await open_breaker(rt)
        assert (await rt.chat("sim:sim-large", "hi")).finish_reason == "stop"
    app = SimulatorApp(SimulatorConfig(script=("500",) * 5))
    whole = BreakerConfig(min_failures=5, open_for=10.0, scope="provider")
    async with sluice.open_runtime(config(breaker=whole), transport=mock_transport(app)) as rt:
        for _ in range(5):
            with pytest.raises(sluice.ServerError):
                await rt.chat("sim:sim-small", "hi")
        with pytest.raises(sluice.CircuitOpen):
            await rt.chat("sim:sim-large", "hi")
        assert (await rt.statistics()).breakers == {"sim": "open"}


def bad_gateway(request: httpx.Request) -> httpx.Response:
    html = "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
    return httpx.Response(502, text=html, headers={"content-type": "text/html"})


@virtual_deadline(120)
async def test_interactive_calls_fail_fast_naming_the_cause_while_waiting_calls_wait(
    autojump_clock,
):
    down = True
    healthy = mock_transport(SimulatorConfig())

    class Flaky(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            if down:
                return bad_gateway(request)
            return await healthy.handle_async_request(request)

    async with sluice.open_runtime(config(retry=PATIENT), transport=Flaky()) as rt:
        await open_breaker(rt)
        started = trio.current_time()
        with pytest.raises(sluice.CircuitOpen) as fast:
            await rt.chat("sim:sim-small", "hi")
        assert trio.current_time() == started  # failed at once
        assert "HTTP 502: <html><head><title>502 Bad Gateway" in fast.value.message
        assert "open for another 10.0 s" in fast.value.message
        results = []

        async def batch_call() -> None:
            request = ChatRequest(model="sim:sim-small", messages="hi", priority="batch")
            results.append(await rt.chat(request))

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(batch_call)
            await trio.sleep(25)  # probes at 10 and 20 fail; the calls keep waiting
            assert results == []
            down = False
        assert [r.finish_reason for r in results] == ["stop"] * 3
        assert trio.current_time() - started >= 25


@virtual_deadline(300)
async def test_a_waiting_call_ends_at_max_wait_with_the_real_cause(autojump_clock):
    transport = httpx.MockTransport(bad_gateway)
    async with sluice.open_runtime(config(retry=PATIENT), transport=transport) as rt:
        await open_breaker(rt)
        started = trio.current_time()
        request = ChatRequest(
            model="sim:sim-small", messages="hi", failure_mode="wait", max_wait=30
        )
        with pytest.raises(sluice.CircuitOpen) as caught:
            await rt.chat(request)
    assert trio.current_time() - started == 30.0
    assert "HTTP 502: <html><head><title>502 Bad Gateway" in caught.value.message


@virtual_deadline(600)
async def test_waiting_calls_retry_at_the_budget_rate_during_a_total_outage(autojump_clock):
    """No breaker: 50 waiting calls against a backend failing everything for 120 s. The
    backend sees the 50 first attempts plus at most the budget's allowance: ratio x firsts in
    an interval + min_per_second x (120 s + one interval) = 0.2 x 50 + 0.5 x 130 = 75."""
    app = SimulatorApp(SimulatorConfig(rate_500=1.0))
    policy = RetryConfig(  # no attempt limit: a waiting call has none by default
        base_delay=0.1,
        max_delay=1.0,
        budget_ratio=0.2,
        budget_min_per_second=0.5,
        budget_interval=10.0,
    )
    async with sluice.open_runtime(
        config(retry=policy, breaker=None), transport=mock_transport(app)
    ) as rt:
        requests = [
            ChatRequest(model="sim:sim-small", messages=f"q{i}", failure_mode="wait", max_wait=120)
            for i in range(50)
        ]
        async with rt.map(requests, max_in_flight=50) as outcomes:
            errors = [o.error async for o in outcomes]
    assert all(isinstance(e, sluice.ServerError) for e in errors), {type(e) for e in errors}
    retries = app.chat_requests_seen - 50
    assert 0.5 * 120 <= retries <= 0.2 * 50 + 0.5 * 130  # the refill rate, not 50 x attempts


COMPLETION = {
    "id": "r1",
    "object": "chat.completion",
    "model": "sim-small",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


async def answer_after_08s(request: httpx.Request) -> httpx.Response:
    await trio.sleep(0.8)
    return httpx.Response(200, json=COMPLETION)


@virtual_deadline(1_000)
async def test_breaker_and_budget_logs_stay_within_window_times_rate(autojump_clock):
    """5,000 successful calls at 125 calls/s of virtual time (100 in flight, 0.8 s each): 40 s,
    past the breaker's 30 s window, so logs kept whole would hold all 5,000 entries, above the
    bound. No ``statistics()`` call at all (reads used to be what trimmed the logs).
    test_breaker.py checks the same bound on the pure classes over 100,000 calls; this checks
    that the runtime's own use of them keeps it."""
    calls = 5_000
    rate = 125.0
    breaker = BreakerConfig(window=30.0)
    policy = RetryConfig(budget_interval=10.0)
    cfg = config(retry=policy, breaker=breaker)
    largest = [0, 0]
    async with sluice.open_runtime(cfg, transport=httpx.MockTransport(answer_after_08s)) as rt:
        peers = rt._peers
        assert peers is not None

        def measure() -> None:
            for b in peers.breakers.values():
                largest[0] = max(largest[0], b.sizes()[0])
            largest[1] = max(largest[1], peers.budget.sizes()[0])

        requests = (
            ChatRequest(model="sim:sim-small", messages="hi", stream=False) for _ in range(calls)
        )
        done = 0
        async with rt.map(requests, max_in_flight=100) as outcomes:
            async for outcome in outcomes:
                assert outcome.result is not None, outcome.error
                done += 1
                if done % 1000 == 0:
                    measure()
        measure()
    assert done == calls
    assert calls > breaker.window * rate + 100  # untrimmed logs would break the bounds below
    assert 0 < largest[0] <= breaker.window * rate + 100  # + the calls in flight
    assert 0 < largest[1] <= policy.budget_interval * rate + 100


@virtual_deadline(60)
async def test_an_abandoned_stream_appears_in_the_ledger(autojump_clock):
    sim = SimulatorConfig(tokens_per_second=10, output_tokens=20)
    async with sluice.open_runtime(config(), transport=mock_transport(sim)) as rt:
        async with rt.stream("sim:sim-small", "hi") as call:
            async for event in call:
                if isinstance(event, sluice.TextDelta):
                    break  # the consumer leaves after the first delta
        await trio.testing.wait_all_tasks_blocked()
        totals = (await rt.ledger_totals())["sim:sim-small"]
    assert totals.calls == 0  # not a call that ended (see test_runtime), but billed:
    assert (totals.usage_records, totals.estimated) == (1, 1)  # what it generated, estimated
    assert totals.input_tokens > 0 and totals.output_tokens >= 1


@virtual_deadline(120)
async def test_a_waiting_call_whose_consumer_leaves_ends_at_once(autojump_clock):
    app = SimulatorApp(SimulatorConfig(script=("500",) * 5))
    async with sluice.open_runtime(config(retry=PATIENT), transport=mock_transport(app)) as rt:
        await open_breaker(rt)
        request = ChatRequest(model="sim:sim-small", messages="hi", priority="batch")
        with trio.move_on_after(2.0):
            await rt.chat(request)  # waits for the breaker; its caller gives up at 2 s
        await trio.testing.wait_all_tasks_blocked()
        assert (await rt.statistics()).calls_in_flight == 0  # not lingering until the probe


def outage(until: float, resets_from: float) -> httpx.MockTransport:
    """A backend that answers nginx's 502 page, then resets every connection from
    ``resets_from``, and answers normally from ``until`` (seconds from now, trio time)."""
    healthy = mock_transport(SimulatorConfig())
    start = trio.current_time()

    async def handler(request: httpx.Request) -> httpx.Response:
        now = trio.current_time() - start
        if now < resets_from:
            return bad_gateway(request)
        if now < until:
            raise httpx.ReadError("[Errno 104] Connection reset by peer")
        return await healthy.handle_async_request(request)

    return httpx.MockTransport(handler)


@virtual_deadline(600)
async def test_a_waiting_call_retries_through_an_outage_past_any_attempt_count(autojump_clock):
    """The default policy (no jitter, no breaker): a batch call retries a 60 s outage of 502
    pages and resets at the capped backoff and succeeds on the first attempt after it, while
    an interactive call still stops at max_attempts."""
    recorder = Recorder(outage(until=60.0, resets_from=30.0))
    async with sluice.open_runtime(
        config(retry=RetryConfig(jitter=0.0), breaker=None), transport=recorder
    ) as rt:
        request = ChatRequest(model="sim:sim-small", messages="hi", priority="batch")
        result = await rt.chat(request)
        assert result.attempts == 12
        # 0.5, 1, 2, 4, then capped at 8: the attempt limit (4) no longer ends the call.
        assert recorder.sent_at == [
            0.0,
            0.5,
            1.5,
            3.5,
            7.5,
            15.5,
            23.5,
            31.5,
            39.5,
            47.5,
            55.5,
            63.5,
        ]
        assert trio.current_time() == 63.5
    recorder = Recorder(outage(until=60.0, resets_from=30.0))
    async with sluice.open_runtime(
        config(retry=RetryConfig(jitter=0.0), breaker=None), transport=recorder
    ) as rt:
        start = trio.current_time()
        with pytest.raises(sluice.ServerError) as caught:
            await rt.chat("sim:sim-small", "hi")
    assert caught.value.attempt == 4 and caught.value.status == 502
    assert [t - start for t in recorder.sent_at] == [0.0, 0.5, 1.5, 3.5]


@virtual_deadline(900)
async def test_a_waiting_call_ends_at_max_wait_with_the_last_retriable_error(autojump_clock):
    recorder = Recorder(outage(until=math.inf, resets_from=30.0))
    async with sluice.open_runtime(
        config(retry=RetryConfig(jitter=0.0), breaker=None), transport=recorder
    ) as rt:
        request = ChatRequest(model="sim:sim-small", messages="hi", priority="batch", max_wait=100)
        with pytest.raises(sluice.ConnectionFailed) as caught:
            await rt.chat(request)
    # Attempts at 0, 0.5, 1.5, 3.5, 7.5, then every 8 s to 95.5; one more would start past 100.
    assert len(recorder.sent_at) == 16 and recorder.sent_at[-1] == 95.5
    assert trio.current_time() == 95.5
    assert caught.value.attempt == 16 and "reset" in caught.value.message


@virtual_deadline(3600)
async def test_600_waiting_calls_wait_out_an_outage_at_the_default_budget_rate(autojump_clock):
    """The defaults (no breaker, to test the budget alone): 600 batch calls, 256 at a time,
    through 15 s down after the 150th request (502 pages, then resets). Every call succeeds;
    while down the backend sees at most one request per call in flight plus what the retry
    budget pays for: its refill (10/s) over the outage and one interval's allowance left from
    before (10 x 10 s + 20% of the first attempts)."""
    healthy = mock_transport(SimulatorConfig())
    seen = {"all": 0, "down": 0}
    down_at: list[float] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen["all"] += 1
        if seen["all"] == 150:
            down_at.append(trio.current_time())
        if down_at and trio.current_time() - down_at[0] < 15.0:
            seen["down"] += 1
            if trio.current_time() - down_at[0] < 7.5:
                return bad_gateway(request)
            raise httpx.ReadError("[Errno 104] Connection reset by peer")
        return await healthy.handle_async_request(request)

    policy = RetryConfig()
    async with sluice.open_runtime(
        config(retry=policy, breaker=None), transport=httpx.MockTransport(handler)
    ) as rt:
        requests = [
            ChatRequest(model="sim:sim-small", messages=f"q{i}", priority="batch", max_wait=600)
            for i in range(600)
        ]
        async with rt.map(requests, max_in_flight=256) as outcomes:
            errors = [o.error async for o in outcomes]
    assert errors == [None] * 600
    bound = 256 + policy.budget_min_per_second * (15.0 + policy.budget_interval)
    bound += policy.budget_ratio * 600
    assert 256 < seen["down"] <= bound, seen


@virtual_deadline(300)
async def test_a_call_queued_for_admission_ends_exactly_at_its_deadline(autojump_clock):
    """No cancel scope of the Supervisor's bounds the wait for admission: the RateLimiter
    gives the ask up at the call's total deadline, or at a waiting call's ``max_wait``, and a
    consumer that leaves ends it at once; each leaves the quota as it found it."""
    app = SimulatorApp(SimulatorConfig())
    cfg = config(breaker=None, rate_limit=RateLimitConfig(requests_per_minute=1))
    async with sluice.open_runtime(cfg, transport=mock_transport(app)) as rt:
        await rt.chat("sim:sim-small", "hi")  # the minute's one request
        start = trio.current_time()
        late = ChatRequest(model="sim:sim-small", messages="hi", deadlines=Deadlines(total=5.0))
        with pytest.raises(sluice.CallTimeout, match="total deadline passed while it waited"):
            await rt.chat(late)
        assert trio.current_time() - start == 5.0
        patient = ChatRequest(
            model="sim:sim-small", messages="hi", failure_mode="wait", max_wait=7.0
        )
        with pytest.raises(sluice.CallTimeout, match="max_wait"):
            await rt.chat(patient)
        assert trio.current_time() - start == 5.0 + 7.0
        with trio.move_on_after(2.0):
            async with rt.stream("sim:sim-small", "hi") as call:
                async for _event in call:
                    raise AssertionError("admitted inside the minute")
        assert trio.current_time() - start == 14.0
        await trio.testing.wait_all_tasks_blocked()  # the Supervisor has withdrawn the ask
        [stats] = (await rt.statistics()).quotas.values()
        assert not any(stats.queued.values()) and (stats.pending, stats.open_streams) == (0, 0)
        result = await rt.chat("sim:sim-small", "hi")  # admitted when the minute is over
        assert trio.current_time() - start == pytest.approx(60.0, abs=1.0)
        assert result.finish_reason == "stop"
