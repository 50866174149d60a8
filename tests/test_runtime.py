"""The whole runtime (all four actors, the real codec) against the simulator, on virtual time.

The simulator runs behind its ``mock_transport``: the real request handling, latency model and
fault injection, no sockets, so ``autojump_clock`` makes every schedule exact.
"""

from __future__ import annotations

import random

import attrs
import httpx
import pytest
import trio
import trio.testing

import sluice
from sluice import (
    Admitted,
    ChatRequest,
    Completed,
    Deadlines,
    Failed,
    FirstToken,
    RateLimitConfig,
    RetryConfig,
    Retrying,
    RuntimeConfig,
    StreamReset,
    TextDelta,
)
from sluice._config import ProviderConfig
from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport

from .helpers import Recorder, collect, virtual_deadline

NO_JITTER = RetryConfig(jitter=0.0)


def config(*, rate_limit: RateLimitConfig | None = None, **fields) -> RuntimeConfig:
    providers = {"sim": ProviderConfig(rate_limit=rate_limit or RateLimitConfig())}
    fields.setdefault("retry", NO_JITTER)
    return RuntimeConfig(providers=providers, **fields)


@virtual_deadline(60)
async def test_streamed_call_yields_events_in_order_and_a_result(autojump_clock):
    sim = SimulatorConfig(ttft=0.5, tokens_per_second=10, output_tokens=5)
    async with sluice.open_runtime(config(), transport=mock_transport(sim)) as rt:
        events, call = await collect(rt, "sim:sim-small", "Say hi")
        totals = await rt.ledger_totals()
    kinds = [type(e).__name__ for e in events]
    assert kinds[:3] == ["Queued", "Admitted", "FirstToken"]
    assert kinds[-2:] == ["UsageReported", "Completed"]
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    result = call.result
    assert result is not None and call.error is None
    assert "".join(deltas) == result.text and len(deltas) == 5
    assert result.finish_reason == "stop"
    assert result.usage.output_tokens == 5
    assert result.attempts == 1
    # headers and first chunk at 0.5, then 4 more chunks 0.1 s apart
    assert result.timings.time_to_first_token == 0.5
    assert result.timings.total == pytest.approx(0.9)
    assert totals["sim:sim-small"].calls == 1
    assert totals["sim:sim-small"].output_tokens == 5


@virtual_deadline(60)
async def test_second_call_admitted_while_first_still_streams_with_one_pending_slot(
    autojump_clock,
):
    """A pending slot is freed by the first chunk, not by the end of the stream."""
    sim = SimulatorConfig(ttft=1.0, tokens_per_second=10, output_tokens=21)
    cfg = config(rate_limit=RateLimitConfig(max_pending=1))
    results: dict[str, list] = {}
    async with sluice.open_runtime(cfg, transport=mock_transport(sim)) as rt:

        async def run(name: str) -> None:
            results[name], _ = await collect(rt, "sim:sim-small", name)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "first")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(run, "second")

    def at(events, kind):
        return next(e.at for e in events if isinstance(e, kind))

    first, second = results["first"], results["second"]
    assert at(first, Admitted) == 0.0
    assert at(first, FirstToken) == 1.0
    assert at(second, Admitted) == 1.0  # admitted at the first call's first chunk
    first_done = first[-1]
    assert isinstance(first_done, Completed)
    assert first_done.result.timings.total == pytest.approx(3.0)  # still streaming at 1.0
    assert at(second, FirstToken) == 2.0


@virtual_deadline(60)
async def test_429_with_retry_after_delays_the_next_attempt_by_exactly_that(autojump_clock):
    sim = SimulatorConfig(script=("429:retry_after=2",))
    recorder = Recorder(mock_transport(sim))
    cfg = config(rate_limit=RateLimitConfig(cooldown_jitter=0.0))
    async with sluice.open_runtime(cfg, transport=recorder) as rt:
        events, call = await collect(rt, "sim:sim-small")
    assert recorder.sent_at == [0.0, 2.0]
    retrying = [e for e in events if isinstance(e, Retrying)]
    assert len(retrying) == 1 and retrying[0].delay == 2.0
    assert isinstance(retrying[0].error, sluice.RateLimited)
    assert retrying[0].error.retry_after == 2.0
    assert not any(isinstance(e, StreamReset) for e in events)  # nothing had been delivered
    assert call.result is not None and call.result.attempts == 2


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
@virtual_deadline(60)
async def test_429_cooldown_jitter_is_bounded(autojump_clock, seed):
    sim = SimulatorConfig(script=("429:retry_after=2",))
    recorder = Recorder(mock_transport(sim))
    cfg = config(rate_limit=RateLimitConfig(cooldown_jitter=0.5))
    async with sluice.open_runtime(cfg, transport=recorder, rng=random.Random(seed)) as rt:
        await rt.chat("sim:sim-small", "hi")
    first, second = recorder.sent_at
    assert first == 0.0
    assert 2.0 <= second <= 2.5


@virtual_deadline(60)
async def test_429_pauses_other_calls_on_the_same_key(autojump_clock):
    sim = SimulatorConfig(script=("429:retry_after=3",), ttft=0.1)
    recorder = Recorder(mock_transport(sim))
    cfg = config(rate_limit=RateLimitConfig(cooldown_jitter=0.0))
    async with (
        sluice.open_runtime(cfg, transport=recorder) as rt,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(rt.chat, "sim:sim-small", "one")
        await trio.sleep(1.0)  # the 429 came at once; the key cools down until 3.0
        nursery.start_soon(rt.chat, "sim:sim-small", "two")
    assert recorder.sent_at == [0.0, 3.0, 3.0]


@virtual_deadline(60)
async def test_disconnect_after_three_chunks_resets_the_stream_then_completes(autojump_clock):
    sim = SimulatorConfig(script=("disconnect:3",), ttft=0.2, tokens_per_second=20)
    async with sluice.open_runtime(config(), transport=mock_transport(sim)) as rt:
        events, call = await collect(rt, "sim:sim-small", "tell me a story")
        clean = await rt.chat("sim:sim-small", "tell me a story")
    kinds = [type(e).__name__ for e in events]
    reset_at = kinds.index("StreamReset")
    before = [e for e in events[:reset_at] if isinstance(e, TextDelta)]
    after = [e for e in events[reset_at:] if isinstance(e, TextDelta)]
    assert len(before) == 2  # the 3rd data chunk is the role chunk + 2 words of text
    assert kinds[reset_at + 1] == "Retrying"
    retrying = events[reset_at + 1]
    assert isinstance(retrying, Retrying)
    assert isinstance(retrying.error, sluice.StreamBroken)
    assert kinds[-1] == "Completed"
    result = call.result
    assert result is not None and result.attempts == 2
    # the result holds only the winning attempt, identical to a clean run of the same request
    assert result.text == clean.text == "".join(e.text for e in after)
    assert kinds.count("Queued") == 2 and kinds.count("FirstToken") == 2


@virtual_deadline(60)
async def test_consumer_leaving_early_cancels_its_request_and_nothing_else(autojump_clock):
    sim = SimulatorConfig(ttft=0.5, tokens_per_second=10, output_tokens=30)
    recorder = Recorder(mock_transport(sim))
    async with sluice.open_runtime(config(), transport=recorder) as rt:
        other: list[sluice.ChatResult] = []

        async def bystander() -> None:
            other.append(await rt.chat("sim:sim-small", "bystander"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(bystander)
            async with rt.stream("sim:sim-small", "leaver") as call:
                async for event in call:
                    if isinstance(event, TextDelta):
                        break
            left_at = trio.current_time()
        after = await rt.chat("sim:sim-small", "after")
        totals = await rt.ledger_totals()
    assert left_at == 0.5
    assert len(other) == 1 and other[0].usage.output_tokens == 30
    assert after.finish_reason == "stop"
    assert call.result is None
    assert sorted(recorder.closed_early) == [False, False, True]  # only the leaver's request
    assert totals["sim:sim-small"].calls == 2  # the abandoned call is not counted


@virtual_deadline(60)
async def test_server_errors_are_retried_with_backoff_until_success(autojump_clock):
    sim = SimulatorConfig(script=("500", "503"))
    recorder = Recorder(mock_transport(sim))
    async with sluice.open_runtime(config(), transport=recorder) as rt:
        result = await rt.chat("sim:sim-small", "hi")
    assert recorder.sent_at == [0.0, 0.5, 1.5]
    assert result.attempts == 3


@virtual_deadline(60)
async def test_attempts_are_bounded_and_the_last_error_is_raised(autojump_clock):
    sim = SimulatorConfig(script=("500", "500", "500"))
    cfg = config(retry=RetryConfig(max_attempts=3, jitter=0.0))
    async with sluice.open_runtime(cfg, transport=mock_transport(sim)) as rt:
        with pytest.raises(sluice.ServerError) as caught:
            await rt.chat("sim:sim-small", "hi")
        totals = await rt.ledger_totals()
    assert caught.value.status == 500
    assert caught.value.attempt == 3
    assert caught.value.provider == "sim"
    assert totals["sim:sim-small"].failures == 1


@virtual_deadline(60)
async def test_fatal_errors_are_not_retried(autojump_clock):
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            401,
            json={
                "error": {
                    "message": "bad key",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            },
        )

    recorder = Recorder(httpx.MockTransport(handler))
    async with sluice.open_runtime(config(), transport=recorder) as rt:
        events, call = await collect(rt, "sim:sim-small")
    assert len(recorder.sent_at) == 1
    assert isinstance(events[-1], Failed)
    assert isinstance(call.error, sluice.AuthenticationFailed)
    assert call.error.error_type == "invalid_api_key"


@virtual_deadline(60)
async def test_non_streamed_call_gives_the_same_result(autojump_clock):
    sim = SimulatorConfig(ttft=0.3)
    async with sluice.open_runtime(config(), transport=mock_transport(sim)) as rt:
        streamed = await rt.chat("sim:sim-small", "same prompt")
        whole = await rt.chat("sim:sim-small", "same prompt", stream=False)
    assert whole.text == streamed.text
    assert whole.usage == streamed.usage
    assert whole.timings.time_to_first_token == 0.3


@virtual_deadline(60)
async def test_tool_call_is_assembled_from_fragments(autojump_clock):
    tool = sluice.Tool(
        name="get_weather",
        parameters={
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
        },
    )
    async with sluice.open_runtime(config(), transport=mock_transport()) as rt:
        result = await rt.chat("sim:sim-small", "weather?", tools=[tool], tool_choice="required")
    assert result.finish_reason == "tool_calls"
    (call,) = result.tool_calls
    assert call.name == "get_weather"
    args = call.parsed_arguments()
    assert isinstance(args["city"], str) and isinstance(args["days"], int)


@virtual_deadline(60)
async def test_first_token_deadline_fails_a_stalled_attempt(autojump_clock):
    sim = SimulatorConfig(ttft=10.0)
    cfg = config(retry=RetryConfig(max_attempts=2, jitter=0.0))
    recorder = Recorder(mock_transport(sim))
    async with sluice.open_runtime(cfg, transport=recorder) as rt:
        request = ChatRequest(
            model="sim:sim-small", messages="hi", deadlines=Deadlines(first_token=2.0)
        )
        with pytest.raises(sluice.CallTimeout) as caught:
            await rt.chat(request)
        failed_at = trio.current_time()
    assert caught.value.timeout_kind == "first_token"
    assert recorder.sent_at == [0.0, 2.5]
    assert failed_at == 4.5


@virtual_deadline(60)
async def test_total_deadline_covers_retries_and_waiting(autojump_clock):
    sim = SimulatorConfig(script=("429:retry_after=5",))
    async with sluice.open_runtime(config(), transport=mock_transport(sim)) as rt:
        request = ChatRequest(model="sim:sim-small", messages="hi", deadlines=Deadlines(total=3))
        with pytest.raises(sluice.RateLimited):
            await rt.chat(request)  # a 5 s wait cannot fit a 3 s deadline: fail now
        assert trio.current_time() == 0.0


@virtual_deadline(60)
async def test_unknown_provider_is_a_config_error_naming_the_fix(autojump_clock):
    async with sluice.open_runtime(config(), transport=mock_transport()) as rt:
        with pytest.raises(sluice.ConfigError, match="base_url"):
            await rt.chat("nowhere:model", "hi")
        # A bare name is a model group's; with none by that name, the error says both forms.
        with pytest.raises(sluice.ConfigError, match=r"neither 'provider:model'.* model group"):
            await rt.chat("no-colon", "hi")
        assert (await rt.chat("sim:sim-small", "still fine")).text


@virtual_deadline(60)
async def test_openai_without_a_key_is_a_config_error(autojump_clock):
    async with sluice.open_runtime(config(), transport=mock_transport(), environ={}) as rt:
        with pytest.raises(sluice.ConfigError, match="OPENAI_API_KEY"):
            await rt.chat("openai:gpt-4o-mini", "hi")


@virtual_deadline(120)
async def test_map_gives_exactly_one_outcome_per_request(autojump_clock):
    sim = SimulatorConfig(ttft=0.2, tokens_per_second=50, rate_500=0.2, fault_seed=4)
    requests = [ChatRequest(model="sim:sim-small", messages=f"q{i}") for i in range(50)]
    requests.insert(10, ChatRequest(model="nowhere:x", messages="bad"))
    async with (
        sluice.open_runtime(config(), transport=mock_transport(sim)) as rt,
        rt.map(iter(requests), max_in_flight=8) as outcomes,
    ):
        seen = [o async for o in outcomes]
    assert sorted(o.index for o in seen) == list(range(51))
    bad = next(o for o in seen if o.index == 10)
    assert isinstance(bad.error, sluice.ConfigError) and bad.result is None
    good = [o for o in seen if o.index != 10]
    assert all(o.result is not None and o.error is None for o in good)
    assert any(o.result.attempts > 1 for o in good if o.result)


@virtual_deadline(60)
async def test_map_respects_max_in_flight(autojump_clock):
    app = SimulatorApp(SimulatorConfig(ttft=1.0))
    async with sluice.open_runtime(config(), transport=mock_transport(app)) as rt:
        requests = (ChatRequest(model="sim:sim-small", messages=f"q{i}") for i in range(9))
        async with rt.map(requests, max_in_flight=3) as outcomes:
            done_at = [trio.current_time() async for _ in outcomes]
    assert sorted(done_at) == [1.0] * 3 + [2.0] * 3 + [3.0] * 3


@virtual_deadline(60)
async def test_runtime_config_round_trips_through_json():
    cfg = attrs.evolve(config(), stream_buffer=4)
    raw = sluice._serde.converter.dumps(cfg) if hasattr(sluice, "serde") else None
    from sluice._serde import converter

    raw = converter.dumps(cfg)
    assert sluice.load_config(raw) == attrs.evolve(cfg)


@virtual_deadline(60)
async def test_a_call_abandoned_while_queued_leaves_the_queue_and_is_never_sent(autojump_clock):
    """A caller that gives up while its call waits for admission takes it out of the queue."""
    app = SimulatorApp(SimulatorConfig(ttft=5.0))
    cfg = config(rate_limit=RateLimitConfig(max_pending=1))
    async with sluice.open_runtime(cfg, transport=mock_transport(app)) as rt:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(rt.chat, "sim:sim-small", "first")  # holds the slot until 5.0
            await trio.testing.wait_all_tasks_blocked()
            with trio.move_on_after(0.5) as gave_up:
                await rt.chat("sim:sim-small", "second")
            assert gave_up.cancelled_caught  # it was still queued when abandoned
            await trio.testing.wait_all_tasks_blocked()
            stats = await rt.statistics()
            assert stats.calls_in_flight == 1
            assert sum(stats.quotas["sim"].queued.values()) == 0
        assert app.chat_requests_seen == 1
        assert (await rt.statistics()).quotas["sim"].windows == {}


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


@virtual_deadline(60)
async def test_a_request_that_cannot_be_written_as_json_fails_alone(autojump_clock):
    # orjson reads far deeper JSON than it writes: a body nested past its writing limit once
    # crashed the provider actor, and a few of them in a row ended the runtime.
    sim = SimulatorConfig(ttft=0.1, output_tokens=3)
    deep = ChatRequest(model="sim:sim-small", messages="hi", extra_body={"x": _nested(300)})
    deep_tool = ChatRequest(
        model="sim:sim-small",
        messages="hi",
        tools=[sluice.Tool(name="t", parameters={"type": "object", "x": _nested(300)})],
    )
    async with sluice.open_runtime(config(), transport=mock_transport(sim)) as rt:
        for _ in range(10):
            with pytest.raises(sluice.BadRequest, match="cannot be written as JSON"):
                await rt.chat(deep)
            with pytest.raises(sluice.ConfigError, match="tool 't'"):
                await rt.chat(deep_tool)
        reply = await rt.chat(ChatRequest(model="sim:sim-small", messages="still here?"))
    assert reply.finish_reason == "stop"
