"""The response cache wired into the runtime: hits replay without quota, failures never stick.

On virtual time against the simulator (``mock_transport``) or scripted httpx replies; the file
test runs on the real clock, because opening the file uses a worker thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx
import orjson
import pytest
import trio

import sluice
from sluice import (
    CacheConfig,
    ChatRequest,
    Completed,
    Message,
    ProviderConfig,
    RateLimitConfig,
    RetryConfig,
    Retrying,
    RuntimeConfig,
    TextDelta,
    Tool,
    ToolCallDelta,
)
from sluice._cache import request_key
from sluice._errors import BadRequest, ToolCallError
from sluice.simulator import SimulatorConfig, mock_transport

from .helpers import virtual_deadline

if TYPE_CHECKING:
    from collections.abc import Callable

CACHED = RuntimeConfig(retry=RetryConfig(jitter=0.0), cache=CacheConfig(enabled=True))
WEATHER = Tool(
    name="get_weather",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)


class Wire(httpx.AsyncBaseTransport):
    """Counts the requests that reach the backend: the simulator, or a scripted handler."""

    def __init__(
        self,
        handler: Callable[[httpx.Request], httpx.Response] | None = None,
        sim: SimulatorConfig | None = None,
    ) -> None:
        self.sim = mock_transport(sim or SimulatorConfig()) if handler is None else None
        self.handler = handler
        self.bodies: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(orjson.loads(await request.aread()))
        if self.sim is not None:
            return await self.sim.handle_async_request(request)
        assert self.handler is not None
        return self.handler(request)


def completion(content: str | None, tool_calls: list[dict[str, Any]] | None = None):
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return httpx.Response(
        200,
        json={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        },
    )


def one_shot(prompt: str) -> ChatRequest:
    """A request whose reply comes whole (what ``completion`` scripts)."""
    return ChatRequest(model="sim:x", messages=prompt, stream=False)


def scripted(*replies: httpx.Response) -> Wire:
    queue = list(replies)
    return Wire(lambda request: queue.pop(0) if len(queue) > 1 else queue[0])


@virtual_deadline(60)
async def test_the_second_identical_call_is_answered_from_the_cache(autojump_clock):
    wire = Wire()
    async with sluice.open_runtime(CACHED, transport=wire) as rt:
        first = await rt.chat("sim:echo", "Say something")
        second = await rt.chat("sim:echo", "Say something")
        other = await rt.chat("sim:echo", "Say something else")
        assert rt.cache is not None
        stats = rt.cache.statistics()
        await rt.ledger.flush()
        totals = (await rt.ledger_totals())["sim:echo"]
    assert len(wire.bodies) == 2  # the repeat never reached the backend
    # The ledger counts what the provider was asked: the hit is not a call there.
    assert (totals.calls, totals.input_tokens) == (
        2,
        first.usage.input_tokens + other.usage.input_tokens,
    )
    assert not first.cached and second.cached and not other.cached
    assert second.message == first.message and second.finish_reason == first.finish_reason
    assert second.call_id != first.call_id
    assert (second.usage.total_tokens, second.attempts) == (0, 0)
    assert first.usage.total_tokens > 0
    assert (stats.hits, stats.misses, stats.stores) == (1, 2, 2)


@virtual_deadline(600)
async def test_a_hit_takes_no_quota_and_does_not_wait(autojump_clock):
    """One request a minute: the hit comes at once, and the window still holds one request."""
    config = RuntimeConfig(
        cache=CacheConfig(enabled=True),
        providers={"sim": ProviderConfig(rate_limit=RateLimitConfig(requests_per_minute=1))},
    )
    async with sluice.open_runtime(config, transport=Wire()) as rt:
        await rt.chat("sim:echo", "one")
        before = (await rt.statistics()).quotas
        start = trio.current_time()
        hits = [await rt.chat("sim:echo", "one") for _ in range(5)]
        assert trio.current_time() == start
        after = (await rt.statistics()).quotas
        assert after == before
        assert after["sim"].windows["requests/60s"][0] == 1
        await rt.chat("sim:echo", "two")  # a miss waits for the window as always
        assert trio.current_time() - start >= 59
    assert all(hit.cached for hit in hits)


@virtual_deadline(60)
async def test_a_streamed_hit_replays_its_deltas_then_completed(autojump_clock):
    async with sluice.open_runtime(CACHED, transport=Wire()) as rt:
        async with rt.stream("sim:echo", "Tell me a story") as live:
            live_events = [event async for event in live]
        async with rt.stream("sim:echo", "Tell me a story") as replay:
            events = [event async for event in replay]
    assert live.result is not None and replay.result is not None
    assert replay.result.cached and replay.result.text == live.result.text
    assert events == [
        TextDelta(replay.call_id, live.result.text),
        Completed(replay.call_id, replay.result),
    ]
    streamed = "".join(e.text for e in live_events if isinstance(e, TextDelta))
    assert streamed == live.result.text


@virtual_deadline(60)
async def test_a_one_shot_call_and_a_stream_share_answers(autojump_clock):
    wire = Wire()
    async with sluice.open_runtime(CACHED, transport=wire) as rt:
        one_shot = await rt.chat(ChatRequest(model="sim:echo", messages="hi", stream=False))
        async with rt.stream("sim:echo", "hi") as call:
            events = [event async for event in call]
    assert len(wire.bodies) == 1
    assert call.result is not None and call.result.text == one_shot.text
    assert isinstance(events[-1], Completed)


@virtual_deadline(60)
async def test_a_cached_tool_call_replays_with_its_parsed_arguments(autojump_clock):
    wire = Wire()
    request = ChatRequest(
        model="sim:sim-small",
        messages="What is the weather in Paris?",
        tools=[WEATHER],
        tool_choice="required",
    )
    async with sluice.open_runtime(CACHED, transport=wire) as rt:
        first = await rt.chat(request)
        async with rt.stream(request) as call:
            events = [event async for event in call]
    assert len(wire.bodies) == 1
    (tool_call,) = first.tool_calls
    (delta,) = [e for e in events if isinstance(e, ToolCallDelta)]
    assert (delta.id, delta.name, delta.arguments) == (
        tool_call.id,
        tool_call.name,
        tool_call.arguments,
    )
    assert delta.partial_arguments == orjson.loads(tool_call.arguments)
    assert call.result is not None and call.result.tool_calls == first.tool_calls


@virtual_deadline(60)
async def test_map_gets_hits_too(autojump_clock):
    wire = Wire()
    requests = [ChatRequest(model="sim:echo", messages="same") for _ in range(3)]
    async with (
        sluice.open_runtime(CACHED, transport=wire) as rt,
        rt.map(requests, max_in_flight=1) as outcomes,
    ):
        results = [outcome.result async for outcome in outcomes]
    assert len(wire.bodies) == 1
    assert [r.cached for r in results if r is not None] == [False, True, True]


@virtual_deadline(60)
async def test_a_failed_call_is_not_cached(autojump_clock):
    wire = scripted(
        httpx.Response(400, json={"error": {"message": "bad", "type": "invalid_request_error"}}),
        completion("fine now"),
    )
    async with sluice.open_runtime(CACHED, transport=wire) as rt:
        with pytest.raises(BadRequest):
            await rt.chat(one_shot("hello"))
        again = await rt.chat(one_shot("hello"))
        third = await rt.chat(one_shot("hello"))
    assert len(wire.bodies) == 2
    assert not again.cached and again.text == "fine now"
    assert third.cached


@virtual_deadline(60)
async def test_an_empty_reply_is_not_cached(autojump_clock):
    wire = scripted(completion(""), completion("now with words"))
    async with sluice.open_runtime(CACHED, transport=wire) as rt:
        empty = await rt.chat(one_shot("hello"))
        full = await rt.chat(one_shot("hello"))
        assert rt.cache is not None and rt.cache.statistics().skipped == 1
    assert empty.text == "" and full.text == "now with words" and not full.cached


@virtual_deadline(60)
async def test_a_stream_left_early_is_not_cached(autojump_clock):
    wire = Wire(sim=SimulatorConfig(tokens_per_second=10))
    async with sluice.open_runtime(CACHED, transport=wire) as rt:
        async with rt.stream("sim:echo", "a long enough prompt to stream in pieces") as call:
            async for event in call:
                if isinstance(event, TextDelta):
                    break
        result = await rt.chat("sim:echo", "a long enough prompt to stream in pieces")
    assert len(wire.bodies) == 2 and not result.cached


@virtual_deadline(60)
async def test_a_corrected_call_stores_only_its_final_reply_under_the_callers_request(
    autojump_clock,
):
    bad = completion(None, [{"id": "call_1", "type": "function", "function": {"name": "nope"}}])
    good = completion(
        None,
        [
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    )
    wire = scripted(bad, good)
    request = ChatRequest(
        model="sim:x", messages="Weather in Paris?", tools=[WEATHER], stream=False
    )
    async with sluice.open_runtime(CACHED, transport=wire) as rt:
        async with rt.stream(request) as call:
            events = [event async for event in call]
        again = await rt.chat(request)
        assert rt.cache is not None
        stats = rt.cache.statistics()
    assert [type(e) for e in events].count(Retrying) == 1
    assert (stats.stores, stats.entries, stats.hits) == (1, 1, 1)
    first = call.result
    assert first is not None and first.corrections == 1
    assert len(wire.bodies) == 2  # the bad reply, the corrected one; then a hit
    # The correction went out with temporary messages; the key is of the caller's request.
    assert len(wire.bodies[1]["messages"]) > len(wire.bodies[0]["messages"])
    assert again.cached and again.tool_calls == first.tool_calls
    assert again.corrections == 0 and again.message.tool_calls[0].name == "get_weather"


@virtual_deadline(60)
async def test_a_call_that_runs_out_of_corrections_is_not_cached(autojump_clock):
    bad = completion(None, [{"id": "call_1", "type": "function", "function": {"name": "nope"}}])
    wire = scripted(bad)
    request = ChatRequest(model="sim:x", messages="Weather?", tools=[WEATHER], stream=False)
    async with sluice.open_runtime(CACHED, transport=wire) as rt:
        for _ in range(2):
            with pytest.raises(ToolCallError):
                await rt.chat(request)
        assert rt.cache is not None and rt.cache.statistics().stores == 0
    assert len(wire.bodies) == 2 * 3  # each call: its attempt and two corrections


@virtual_deadline(60)
async def test_a_call_can_opt_out_and_another_opt_in(autojump_clock):
    wire = Wire()
    async with sluice.open_runtime(CACHED, transport=wire) as rt:
        for _ in range(2):
            await rt.chat("sim:echo", "fresh", response_cache=False)
        assert rt.cache is not None and rt.cache.statistics().stores == 0
    assert len(wire.bodies) == 2
    wire = Wire()
    async with sluice.open_runtime(RuntimeConfig(), transport=wire) as rt:
        assert rt.cache is None  # nothing opened until a call asks
        await rt.chat("sim:echo", "opt in", response_cache=True)
        hit = await rt.chat("sim:echo", "opt in", response_cache=True)
        plain = await rt.chat("sim:echo", "opt in")  # the default stays off
    assert hit.cached and not plain.cached
    assert len(wire.bodies) == 2


async def test_the_file_keeps_answers_across_runtimes(tmp_path):
    config = RuntimeConfig(cache=CacheConfig(enabled=True, path=str(tmp_path / "cache.sqlite3")))
    wire = Wire()
    with trio.fail_after(20):
        async with sluice.open_runtime(config, transport=wire) as rt:
            first = await rt.chat("sim:echo", "remember me")
        async with sluice.open_runtime(config, transport=wire) as rt:
            again = await rt.chat("sim:echo", "remember me")
            assert rt.cache is not None
            stats = rt.cache.statistics()
    assert len(wire.bodies) == 1
    assert again.cached and again.message == first.message
    assert (stats.hits, stats.file_hits) == (1, 1)


async def test_a_cache_file_that_cannot_be_opened_fails_at_open(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    config = RuntimeConfig(cache=CacheConfig(enabled=True, path=str(blocker / "c.sqlite3")))
    with trio.fail_after(20), pytest.raises(sluice.ConfigError, match=r"cache\.path"):
        async with sluice.open_runtime(config, transport=Wire()):
            raise AssertionError("the runtime should not start")


def test_a_message_history_in_the_key_ignores_nothing_that_was_said():
    """Assistant tool calls and tool results are part of the conversation, so of the key."""
    base = [Message.user("hi"), Message.tool("call_1", "sunny")]
    one = ChatRequest(model="sim:x", messages=base)
    two = ChatRequest(model="sim:x", messages=[Message.user("hi"), Message.tool("call_1", "rain")])
    assert request_key(one) != request_key(two)
