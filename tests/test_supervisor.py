"""Failure semantics through the whole runtime, on virtual time: typed errors, the retry policy
and budget, deadlines, mid-stream restarts, fallbacks, the circuit breaker, crashed actors."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import attrs
import httpx
import pytest
import trio

import sluice
from sluice import CallError, ChatRequest, Deadlines, RateLimitConfig, RetryConfig, RuntimeConfig
from sluice._config import BreakerConfig, ProviderConfig
from sluice._events import FallingBack, Retrying, StreamReset, TextDelta
from sluice._limits.store import (
    BudgetAsk,
    BudgetRefused,
    MemoryQuotaStore,
    Reservation,
    TooLarge,
    WindowSpec,
)
from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport

from .helpers import Recorder, collect, virtual_deadline

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sluice._limits.cost import Cost

NO_JITTER = RetryConfig(jitter=0.0)


def config(
    *, retry: RetryConfig = NO_JITTER, breaker: BreakerConfig | None = None, **provider
) -> RuntimeConfig:
    sim = ProviderConfig(breaker=breaker, **provider)
    return RuntimeConfig(providers={"sim": sim}, retry=retry)


ONE_ATTEMPT = RetryConfig(max_attempts=1, jitter=0.0)


@pytest.mark.parametrize(
    ("directive", "error_type", "status"),
    [
        ("429:retry_after=1", sluice.RateLimited, 429),
        ("500", sluice.ServerError, 500),
        ("503", sluice.ServerError, 503),
        ("529", sluice.Overloaded, 529),
        ("disconnect:3", sluice.StreamBroken, None),
        ("disconnect:0", sluice.StreamBroken, None),
    ],
)
@virtual_deadline(60)
async def test_each_simulated_fault_maps_to_its_error_type(
    autojump_clock, directive, error_type, status
):
    sim = SimulatorConfig(script=(directive,))
    async with sluice.open_runtime(config(retry=ONE_ATTEMPT), transport=mock_transport(sim)) as rt:
        with pytest.raises(error_type) as caught:
            await rt.chat("sim:sim-small", "hi")
    error = caught.value
    assert error.status == status
    assert (error.call_id, error.provider, error.model, error.attempt) == (
        "c1",
        "sim",
        "sim-small",
        1,
    )
    if status is not None:
        assert error.request_id and error.request_id.startswith("sim-req-")


@virtual_deadline(60)
async def test_retries_follow_the_policy_to_the_exact_second(autojump_clock):
    sim = SimulatorConfig(script=("500", "529", "503"))
    recorder = Recorder(mock_transport(sim))
    policy = RetryConfig(base_delay=0.5, max_delay=1.5, jitter=0.0)
    async with sluice.open_runtime(config(retry=policy), transport=recorder) as rt:
        result = await rt.chat("sim:sim-small", "hi")
    assert recorder.sent_at == [0.0, 0.5, 1.5, 3.0]  # 0.5, 1.0, then capped at 1.5
    assert result.attempts == 4


@virtual_deadline(60)
async def test_x_should_retry_overrides_the_status(autojump_clock):
    replies = iter(
        [
            httpx.Response(500, headers={"x-should-retry": "false"}, json={"error": "no"}),
            httpx.Response(400, headers={"x-should-retry": "true"}, json={"error": "again"}),
        ]
    )

    def handler(request: httpx.Request) -> httpx.Response:
        return next(replies)

    transport = httpx.MockTransport(handler)
    async with sluice.open_runtime(config(), transport=transport) as rt:
        with pytest.raises(sluice.ServerError) as first:
            await rt.chat("sim:sim-small", "hi")
        assert first.value.attempt == 1 and not first.value.retryable
        replies = iter(
            [
                httpx.Response(400, headers={"x-should-retry": "true"}, json={"error": "x"}),
                *[httpx.Response(400, json={"error": "bad"})] * 3,
            ]
        )
        with pytest.raises(sluice.BadRequest) as second:
            await rt.chat("sim:sim-small", "hi")
    assert second.value.attempt == 2  # retried once on the provider's word, then fatal


@virtual_deadline(600)
async def test_retry_budget_caps_retries_during_a_total_outage(autojump_clock):
    app = SimulatorApp(SimulatorConfig(rate_500=1.0))
    policy = RetryConfig(
        max_attempts=5,
        jitter=0.0,
        budget_ratio=0.2,
        budget_min_per_second=0.1,
        budget_interval=60.0,
    )
    cfg = config(retry=policy, breaker=None)
    async with sluice.open_runtime(cfg, transport=mock_transport(app)) as rt:
        requests = [ChatRequest(model="sim:sim-small", messages=f"q{i}") for i in range(100)]
        async with rt.map(requests, max_in_flight=100) as outcomes:
            errors = [o.error async for o in outcomes]
    assert all(isinstance(e, sluice.ServerError) for e in errors)
    # without a budget: 500 requests; with it: 100 first attempts + 0.2 * 100 + 0.1 * 60
    assert app.chat_requests_seen == 100 + 26


@virtual_deadline(60)
async def test_first_token_idle_and_total_deadlines_are_distinct_timeouts(autojump_clock):
    slow_start = mock_transport(SimulatorConfig(ttft=30.0))
    slow_middle = mock_transport(SimulatorConfig(tokens_per_second=0.2, output_tokens=5))
    kinds = []
    for transport, deadlines in (
        (slow_start, Deadlines(first_token=2.0)),
        (slow_middle, Deadlines(idle=3.0)),
        (slow_middle, Deadlines(total=4.0, idle=100.0)),
    ):
        async with sluice.open_runtime(config(retry=ONE_ATTEMPT), transport=transport) as rt:
            request = ChatRequest(model="sim:sim-small", messages="hi", deadlines=deadlines)
            started = trio.current_time()
            with pytest.raises(sluice.CallTimeout) as caught:
                await rt.chat(request)
            kinds.append((caught.value.timeout_kind, trio.current_time() - started))
    assert kinds == [("first_token", 2.0), ("idle", 3.0), ("total", 4.0)]


@virtual_deadline(60)
async def test_partial_output_policy_fail_stops_at_once(autojump_clock):
    sim = SimulatorConfig(script=("disconnect:3",), tokens_per_second=10)
    async with sluice.open_runtime(config(), transport=mock_transport(sim)) as rt:
        request = ChatRequest(model="sim:sim-small", messages="hi", on_partial="fail")
        events, call = await collect(rt, request)
    assert isinstance(call.error, sluice.StreamBroken)
    assert call.error.events_delivered > 0
    assert call.error.attempt == 1  # not retried
    assert not any(isinstance(e, (StreamReset, Retrying)) for e in events)


@virtual_deadline(60)
async def test_fallback_chain_is_followed_and_recorded(autojump_clock):
    sim = SimulatorConfig(script=("529", "529", "ok"))
    recorder = Recorder(mock_transport(sim))
    async with sluice.open_runtime(config(retry=ONE_ATTEMPT), transport=recorder) as rt:
        request = ChatRequest(
            model="sim:sim-small", messages="hi", fallbacks=("sim:sim-large", "sim:sim-echo")
        )
        events, call = await collect(rt, request)
    fell = [(e.from_model, e.to_model) for e in events if isinstance(e, FallingBack)]
    assert fell == [("sim:sim-small", "sim:sim-large"), ("sim:sim-large", "sim:sim-echo")]
    assert call.result is not None
    assert call.result.models_tried == ("sim:sim-small", "sim:sim-large", "sim:sim-echo")
    assert call.result.model == "sim-echo"
    assert call.result.attempts == 3


@virtual_deadline(60)
async def test_no_fallback_for_errors_not_configured(autojump_clock):
    sim = SimulatorConfig(script=("500",))
    recorder = Recorder(mock_transport(sim))
    async with sluice.open_runtime(config(retry=ONE_ATTEMPT), transport=recorder) as rt:
        request = ChatRequest(model="sim:sim-small", messages="hi", fallbacks=("sim:sim-large",))
        events, call = await collect(rt, request)
    assert isinstance(call.error, sluice.ServerError)
    assert not any(isinstance(e, FallingBack) for e in events)
    assert len(recorder.sent_at) == 1  # sim:sim-large was never asked


@virtual_deadline(120)
async def test_breaker_opens_fails_fast_probes_and_closes(autojump_clock):
    app = SimulatorApp(SimulatorConfig(script=("500",) * 5))
    breaker = BreakerConfig(min_failures=5, open_for=10.0)
    async with sluice.open_runtime(
        config(retry=ONE_ATTEMPT, breaker=breaker), transport=mock_transport(app)
    ) as rt:
        for _ in range(5):
            with pytest.raises(sluice.ServerError):
                await rt.chat("sim:sim-small", "hi")
        assert (await rt.statistics()).breakers == {"sim:sim-small": "open"}
        with pytest.raises(sluice.CircuitOpen) as fast:
            await rt.chat("sim:sim-small", "hi")
        assert fast.value.retry_after == 10.0
        assert app.chat_requests_seen == 5  # failed fast: nothing sent
        await trio.sleep(10)
        assert (await rt.statistics()).breakers == {"sim:sim-small": "half_open"}
        probe = await rt.chat("sim:sim-small", "hi")  # the probe succeeds and closes it
        assert probe.finish_reason == "stop"
        assert (await rt.statistics()).breakers == {"sim:sim-small": "closed"}
        await rt.chat("sim:sim-small", "hi")
    assert app.chat_requests_seen == 7


@virtual_deadline(120)
async def test_open_breaker_falls_back(autojump_clock):
    app = SimulatorApp(SimulatorConfig(script=("500",) * 2))
    cfg = RuntimeConfig(
        providers={
            "sim": ProviderConfig(breaker=BreakerConfig(min_failures=2)),
            "backup": ProviderConfig(base_url="http://sim.invalid/v1"),
        },
        retry=ONE_ATTEMPT,
    )
    async with sluice.open_runtime(cfg, transport=mock_transport(app)) as rt:
        for _ in range(2):
            with pytest.raises(sluice.ServerError):
                await rt.chat("sim:sim-small", "hi")
        request = ChatRequest(model="sim:sim-small", messages="hi", fallbacks=("backup:x",))
        result = await rt.chat(request)
    assert result.models_tried == ("sim:sim-small", "backup:x")
    assert result.provider == "backup"


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


@virtual_deadline(60)
async def test_provider_actor_crash_is_survived_and_its_calls_complete(autojump_clock, caplog):
    sim = SimulatorConfig(ttft=0.5, tokens_per_second=20)
    transport = CrashingTransport(mock_transport(sim), crash_on={4})
    async with sluice.open_runtime(config(), transport=transport) as rt:
        requests = [ChatRequest(model="sim:sim-small", messages=f"q{i}") for i in range(10)]
        async with rt.map(requests, max_in_flight=10) as outcomes:
            results = [o async for o in outcomes]
        stats = await rt.statistics()
    assert all(o.result is not None for o in results), [o.error for o in results]
    assert "the provider sim actor crashed; restarting it" in caplog.text
    assert stats.calls_in_flight == 0 and stats.attempts_in_flight == {"sim": 0}
    assert stats.quotas["sim"].pending == 0 and stats.quotas["sim"].open_streams == 0


class _CrashAfter(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, chunks: int) -> None:
        self.inner, self.chunks = inner, chunks

    async def __aiter__(self):
        n = 0
        async for chunk in self.inner:
            yield chunk
            n += 1
            if n == self.chunks:
                raise RuntimeError("injected crash mid-stream")


class MidStreamCrash(httpx.AsyncBaseTransport):
    """The first reply's body raises a bug-like exception after ``chunks`` chunks: the
    provider actor crashes with deltas already in the consumer's stream."""

    def __init__(self, inner: httpx.AsyncBaseTransport, chunks: int) -> None:
        self.inner, self.chunks, self.seen = inner, chunks, 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        self.seen += 1
        if self.seen > 1:
            return response
        assert isinstance(response.stream, httpx.AsyncByteStream)
        body = _CrashAfter(response.stream, self.chunks)
        return httpx.Response(response.status_code, headers=response.headers, stream=body)


@virtual_deadline(60)
async def test_an_attempt_lost_after_deltas_is_reset_then_resubmitted(autojump_clock, caplog):
    """The provider's answer for a lost attempt says what it delivered: the consumer is told
    to discard it, then gets the whole reply of the attempt resubmitted in its place."""
    sim = SimulatorConfig(tokens_per_second=20, output_tokens=6)
    transport = MidStreamCrash(mock_transport(sim), chunks=3)
    async with sluice.open_runtime(config(), transport=transport) as rt:
        events, call = await collect(rt, "sim:sim-small")
        stats = await rt.statistics()
    assert "the provider sim actor crashed; restarting it" in caplog.text
    kinds = [type(e).__name__ for e in events]
    reset = kinds.index("StreamReset")
    assert "TextDelta" in kinds[:reset] and kinds[reset + 1 :].count("Queued") == 1
    reset_event = events[reset]
    assert isinstance(reset_event, StreamReset)
    assert "lost when its actor crashed" in reset_event.reason
    assert call.result is not None and call.result.attempts == 2
    after = "".join(e.text for e in events[reset:] if isinstance(e, TextDelta))
    assert after == call.result.text
    assert kinds.count("Queued") == kinds.count("Admitted") == 2  # each attempt's lead once
    assert stats.calls_in_flight == 0 and stats.attempts_in_flight == {"sim": 0}


class CrashingStore(MemoryQuotaStore):
    def __init__(self, crash_on: set[int]) -> None:
        super().__init__()
        self.crash_on = crash_on
        self.calls = 0

    async def reserve(
        self,
        key: str,
        specs: Sequence[WindowSpec],
        cost: Cost,
        now: float,
        *,
        caps: tuple[int | None, int | None] = (None, None),
        budget: BudgetAsk | None = None,
    ) -> Reservation | TooLarge | BudgetRefused | float:
        self.calls += 1
        if self.calls in self.crash_on:
            raise RuntimeError("injected limiter crash")
        return await super().reserve(key, specs, cost, now, caps=caps, budget=budget)


@virtual_deadline(60)
async def test_rate_limiter_crash_is_survived(autojump_clock, caplog):
    sim = SimulatorConfig(ttft=0.5)
    store = CrashingStore(crash_on={3})
    async with sluice.open_runtime(
        config(rate_limit=RateLimitConfig(max_pending=2)),
        transport=mock_transport(sim),
        quota_store=store,
    ) as rt:
        requests = [ChatRequest(model="sim:sim-small", messages=f"q{i}") for i in range(8)]
        async with rt.map(requests, max_in_flight=8) as outcomes:
            results = [o async for o in outcomes]
    assert all(o.result is not None for o in results)
    assert "the rate limiter actor crashed; restarting it" in caplog.text


@virtual_deadline(60)
async def test_a_call_that_keeps_crashing_its_actor_fails_alone(autojump_clock):
    transport = CrashingTransport(mock_transport(), crash_on={1, 2, 3, 4})
    async with sluice.open_runtime(config(), transport=transport) as rt:
        with pytest.raises(sluice.ConnectionFailed, match="lost when its actor crashed"):
            await rt.chat("sim:sim-small", "hi")
        assert (await rt.chat("sim:sim-small", "hi")).finish_reason == "stop"


@virtual_deadline(60)
async def test_a_crash_loop_stops_the_runtime_with_a_clear_error(autojump_clock):
    transport = CrashingTransport(mock_transport(), crash_on=set(range(1, 100)))
    requests = [ChatRequest(model="sim:sim-small", messages=f"q{i}") for i in range(4)]

    async def run() -> None:
        async with (
            sluice.open_runtime(config(), transport=transport) as rt,
            rt.map(requests, max_in_flight=1) as outcomes,  # one crash per attempt
        ):
            async for _ in outcomes:
                pass

    with pytest.raises(sluice.ActorCrashed, match="provider sim actor crashed 6 times"):
        await run()


@virtual_deadline(3600)
async def test_chaos_every_call_ends_once_without_duplicates_or_leaks(autojump_clock):
    """2,000 calls, 20% of requests faulted (429, 500, 529-free mix, mid-stream cuts)."""
    chaos = SimulatorConfig(
        ttft=0.2,
        tokens_per_second=50,
        rate_429=0.05,
        retry_after=1.0,
        rate_500=0.1,
        rate_disconnect=0.05,
        disconnect_after=4,
        fault_seed=7,
    )
    policy = RetryConfig(max_attempts=6, base_delay=0.2, max_delay=2.0, budget_ratio=1.0)
    cfg = RuntimeConfig(
        providers={"sim": ProviderConfig(rate_limit=RateLimitConfig(cooldown_jitter=0.5))},
        retry=policy,
    )
    clean: dict[str, str] = {}
    async with sluice.open_runtime(cfg, transport=mock_transport(SimulatorConfig())) as rt:
        for i in range(20):
            clean[f"prompt {i}"] = (await rt.chat("sim:sim-small", f"prompt {i}")).text
    seen: dict[int, int] = {}
    results = 0
    errors: list[str] = []
    async with sluice.open_runtime(
        cfg, transport=mock_transport(chaos), rng=random.Random(3)
    ) as rt:
        requests = (
            ChatRequest(model="sim:sim-small", messages=f"prompt {i % 20}") for i in range(2000)
        )
        async with rt.map(requests, max_in_flight=200) as outcomes:
            async for o in outcomes:
                seen[o.index] = seen.get(o.index, 0) + 1
                assert (o.result is None) != (o.error is None)
                if isinstance(o.error, CallError):
                    errors.append(o.error.kind)
                if o.result is not None:
                    results += 1
                    assert o.result.text == clean[f"prompt {o.index % 20}"]  # no duplicated chunk
        stats = await rt.statistics()
        totals = await rt.ledger_totals()
    assert sorted(seen) == list(range(2000)) and set(seen.values()) == {1}
    # Most calls succeed; the rest failed with an injected fault once the policy or the retry
    # budget said stop (random 429s pause the whole key, which starves first attempts).
    assert results >= 1900
    assert set(errors) <= {"RateLimited", "ServerError", "StreamBroken"}
    assert stats.calls_in_flight == 0 and stats.attempts_in_flight == {"sim": 0}
    quota = stats.quotas["sim"]
    assert quota.pending == 0 and quota.open_streams == 0 and sum(quota.queued.values()) == 0
    assert totals["sim:sim-small"].calls == 2000
    assert totals["sim:sim-small"].attempts > 2000


def test_error_repr_and_str_name_the_call():
    error = sluice.RateLimited("slow down", retry_after=2.0).in_context(
        call_id="c9", provider="openai", model="gpt-x", attempt=3
    )
    assert str(error) == "[openai:gpt-x] RateLimited: slow down"
    assert "call_id='c9'" in repr(error) and "attempt=3" in repr(error)
    assert attrs.evolve(error, should_retry=False).retryable is False


@pytest.mark.parametrize(
    ("directive", "stream", "deadlines", "error_type", "detail"),
    [
        ("stall:30", True, Deadlines(first_token=5.0), sluice.CallTimeout, "first_token"),
        ("stall_after:3:30", True, Deadlines(idle=5.0), sluice.CallTimeout, "idle"),
        ("malformed:2", True, Deadlines(), sluice.ProtocolError, None),
        ("truncated_json", False, Deadlines(), sluice.ProtocolError, None),
        ("truncated_json", True, Deadlines(), sluice.StreamBroken, None),
        ("reset", True, Deadlines(), sluice.ConnectionFailed, None),
        ("429_date:retry_after=3", True, Deadlines(), sluice.RateLimited, None),
    ],
)
@virtual_deadline(120)
async def test_more_simulated_faults_map_to_their_types(
    autojump_clock, directive, stream, deadlines, error_type, detail
):
    sim = SimulatorConfig(script=(directive,), tokens_per_second=10)
    async with sluice.open_runtime(config(retry=ONE_ATTEMPT), transport=mock_transport(sim)) as rt:
        request = ChatRequest(
            model="sim:sim-small", messages="hi", stream=stream, deadlines=deadlines
        )
        with pytest.raises(error_type) as caught:
            await rt.chat(request)
    if detail is not None:
        assert caught.value.timeout_kind == detail
    if isinstance(caught.value, sluice.RateLimited):
        assert caught.value.retry_after is not None and 2.0 <= caught.value.retry_after <= 4.0
