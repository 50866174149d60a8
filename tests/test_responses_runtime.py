"""A provider speaking the Responses API (``protocol = "openai-responses"``) through the whole
runtime: tools with repair and correction retries, budgets and the ledger, reasoning summaries
and cached and reasoning tokens in the result.

Replies come from a test server of the suite's own, never the simulator: on virtual time an
``httpx.MockTransport`` answers with event streams written in the exact shape OpenAI's
Responses API sends; over loopback (real clock) :class:`tests.recording_upstream.RecordingUpstream`
replays the recorded bytes of ``tests/conformance_data/openai_responses``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import trio

import sluice
from sluice import BudgetExceeded, ChatRequest, Message, RetryConfig, RuntimeConfig, Tool, Usage
from sluice._config import BudgetConfig, LedgerConfig, ModelConfig, PriceConfig, ProviderConfig
from sluice._events import ReasoningDelta, ReasoningSignature, ToolCallDelta
from sluice._protocols.responses_request import split_reasoning_signature
from sluice._serde import Secret
from sluice._tools import ToolOptions

from .helpers import virtual_deadline
from .recording_upstream import RecordingUpstream, sse_reply

RECORDED = Path(__file__).resolve().parent / "conformance_data" / "openai_responses"
WEATHER = Tool(
    name="get_weather",
    description="The weather in a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)
USAGE = {
    "input_tokens": 120,
    "input_tokens_details": {"cached_tokens": 100},
    "output_tokens": 40,
    "output_tokens_details": {"reasoning_tokens": 30},
    "total_tokens": 160,
}


def config(**ledger: Any) -> RuntimeConfig:
    """A custom provider ``rsp`` that speaks the Responses API at a made-up URL."""
    ledger.setdefault("persist", False)
    return RuntimeConfig(
        providers={
            "rsp": ProviderConfig(
                base_url="http://responses.test/v1",
                protocol="openai-responses",
                api_key=Secret("sk-test"),
            )
        },
        retry=RetryConfig(jitter=0.0),
        ledger=LedgerConfig(**ledger),
    )


def stream(*events: dict[str, Any]) -> bytes:
    """Events as OpenAI writes them, with ``sequence_number`` and ``event:`` lines."""
    out = []
    for number, event in enumerate(events):
        event = {**event, "sequence_number": number}
        out.append(b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event))
    return b"\n\n".join(out) + b"\n\n"


def response(status: str = "completed", usage: Any = USAGE, **fields: Any) -> dict[str, Any]:
    return {
        "id": "resp_abc",
        "object": "response",
        "created_at": 1767225600,
        "status": status,
        "model": "gpt-5-2025-08-07",
        "output": [],
        "usage": usage,
        **fields,
    }


def call_reply(*argument_pieces: str, name: str = "get_weather") -> bytes:
    """A reasoning item with a summary, then one function call whose arguments come in pieces."""
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": name,
        "arguments": "",
        "status": "in_progress",
    }
    return stream(
        {"type": "response.created", "response": response("in_progress", usage=None)},
        {"type": "response.output_item.added", "output_index": 0, "item": reasoning},
        {
            "type": "response.reasoning_summary_text.delta",
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": 0,
            "delta": "Need the weather.",
        },
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {**reasoning, "encrypted_content": "gAAAAB-secret"},
        },
        {"type": "response.output_item.added", "output_index": 1, "item": call},
        *(
            {
                "type": "response.function_call_arguments.delta",
                "item_id": "fc_1",
                "output_index": 1,
                "delta": piece,
            }
            for piece in argument_pieces
        ),
        {"type": "response.completed", "response": response()},
    )


def text_reply(*pieces: str) -> bytes:
    message = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
    return stream(
        {"type": "response.created", "response": response("in_progress", usage=None)},
        {"type": "response.output_item.added", "output_index": 0, "item": message},
        *(
            {
                "type": "response.output_text.delta",
                "item_id": "msg_1",
                "output_index": 0,
                "content_index": 0,
                "delta": piece,
                "logprobs": [],
            }
            for piece in pieces
        ),
        {"type": "response.completed", "response": response()},
    )


class Server:
    """Answers ``POST /v1/responses`` with the scripted bodies in order; records each request."""

    def __init__(self, *bodies: bytes) -> None:
        self.bodies = list(bodies)
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        self.requests.append(orjson.loads(request.content))
        body = self.bodies.pop(0) if len(self.bodies) > 1 else self.bodies[0]
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)


@pytest.mark.parametrize(
    "pieces",
    [
        ("{'city':", " 'Paris'}"),  # single quotes
        ('{"city": "Paris",', "}"),  # a trailing comma
        ('{"city": ', '"Paris"'),  # cut short
    ],
    ids=["single_quotes", "trailing_comma", "truncated"],
)
@virtual_deadline(60)
async def test_broken_arguments_are_repaired_and_reasoning_and_usage_reach_the_result(
    autojump_clock, pieces
):
    server = Server(call_reply(*pieces))
    request = ChatRequest(model="rsp:gpt-5", messages="Weather in Paris?", tools=[WEATHER])
    async with (
        sluice.open_runtime(config(), transport=server.transport) as rt,
        rt.stream(request) as call,
    ):
        events = [event async for event in call]
    result = call.result
    assert result is not None and call.error is None
    (tool_call,) = result.tool_calls
    assert (tool_call.id, tool_call.name, tool_call.arguments) == (
        "call_1",
        "get_weather",
        '{"city":"Paris"}',
    )
    assert (result.attempts, result.corrections, result.finish_reason) == (1, 0, "tool_calls")
    assert result.reasoning == "Need the weather."
    assert result.usage == Usage(120, 40, 100, 0, 30)
    assert (result.request_id, result.model) == ("resp_abc", "gpt-5")
    assert [e.text for e in events if isinstance(e, ReasoningDelta)] == ["Need the weather."]
    signed = [e for e in events if isinstance(e, ReasoningSignature)]
    assert [(e.signature, e.redacted) for e in signed] == [("rs_1 gAAAAB-secret", False)]
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert (deltas[0].id, deltas[0].name) == ("call_1", "get_weather")
    assert server.paths == ["/v1/responses"]
    sent = server.requests[0]
    assert sent["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": WEATHER.parameters,
        }
    ]
    assert (sent["store"], sent["stream"]) == (False, True)


@virtual_deadline(60)
async def test_the_next_turn_sends_the_call_its_result_and_the_encrypted_reasoning_back(
    autojump_clock,
):
    server = Server(call_reply('{"city":"Paris"}'), text_reply("Sunny", " in Paris."))
    async with sluice.open_runtime(config(), transport=server.transport) as rt:
        first = await rt.chat(
            ChatRequest(model="rsp:gpt-5", messages="Weather in Paris?", tools=[WEATHER])
        )
        history = [Message.user("Weather in Paris?"), first.message]
        history.append(Message.tool("call_1", "18C, sunny"))
        second = await rt.chat(ChatRequest(model="rsp:gpt-5", messages=history, tools=[WEATHER]))
    assert second.text == "Sunny in Paris." and second.finish_reason == "stop"
    assert server.requests[1]["input"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Need the weather."}],
            "encrypted_content": "gAAAAB-secret",
        },
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city":"Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "18C, sunny"},
    ]


@virtual_deadline(60)
async def test_a_tool_call_against_tool_choice_none_is_corrected(autojump_clock):
    server = Server(call_reply("{}"), text_reply("It is sunny."))
    request = ChatRequest(
        model="rsp:gpt-5", messages="Weather?", tools=[WEATHER], tool_choice="none"
    )
    async with sluice.open_runtime(config(), transport=server.transport) as rt:
        result = await rt.chat(request)
    assert (result.text, result.tool_calls) == ("It is sunny.", ())
    assert (result.attempts, result.corrections) == (2, 1)
    first, second = server.requests
    assert first["tool_choice"] == "none"
    # The second attempt is the first plus the rejected reply and the note, as input items.
    assert second["input"][: len(first["input"])] == first["input"]
    assert second["input"][len(first["input"]) :] == [
        {"role": "assistant", "content": '{"name":"get_weather","arguments":"{}"}'},
        {
            "role": "user",
            "content": "Your previous reply could not be used. "
            "Do not call any tool in this reply; answer in text.",
        },
    ]


@virtual_deadline(60)
async def test_an_uncorrectable_reply_ends_after_the_correction_limit(autojump_clock):
    server = Server(call_reply("{}", name="no_such_tool"))
    request = ChatRequest(
        model="rsp:gpt-5",
        messages="Weather?",
        tools=[WEATHER],
        tool_options=ToolOptions(max_corrections=1),
    )
    async with sluice.open_runtime(config(), transport=server.transport) as rt:
        with pytest.raises(sluice.ToolCallError) as caught:
            await rt.chat(request)
    assert caught.value.tool_name == "no_such_tool"
    assert len(server.requests) == 2


@virtual_deadline(60)
async def test_the_ledger_prices_cached_and_reasoning_tokens_and_a_budget_holds(autojump_clock):
    prices = {"rsp:gpt-5": PriceConfig(input=1.0, output=4.0, cache_read=0.25)}
    budget = BudgetConfig(max_tokens=400)
    server = Server(text_reply("Hi."))
    cfg = config(prices=prices, budgets=(budget,))
    async with sluice.open_runtime(cfg, transport=server.transport) as rt:
        for _ in range(2):
            result = await rt.chat("rsp:gpt-5", "hello", max_tokens=50)
            assert result.usage == Usage(120, 40, 100, 0, 30)
        # 320 of 400 tokens used: a third call, reserving its prompt and 50 output tokens,
        # still fits; a fourth cannot and is refused unsent.
        await rt.chat("rsp:gpt-5", "hello", max_tokens=50)
        with pytest.raises(BudgetExceeded):
            await rt.chat("rsp:gpt-5", "hello", max_tokens=50)
        (total,) = await rt.ledger.snapshot(by=())
    assert len(server.requests) == 3
    t = total.totals
    assert (t.calls, t.failures, t.input_tokens, t.output_tokens) == (4, 1, 360, 120)
    assert (t.cache_read_tokens, t.reasoning_tokens) == (300, 90)
    # Per call: 20 uncached prompt tokens at $1/M, 100 cached at $0.25/M, 40 output at $4/M.
    assert t.cost_micros == 3 * (20 + 25 + 160)


@virtual_deadline(60)
async def test_a_model_chooses_the_responses_api_beside_chat_completions(autojump_clock):
    chat_body = (
        b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"chat"}}]}\n\n'
        b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
        b"data: [DONE]\n\n"
    )

    def handler(request: httpx.Request) -> httpx.Response:
        body = text_reply("responses") if request.url.path.endswith("/responses") else chat_body
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    cfg = RuntimeConfig(
        providers={
            "mix": ProviderConfig(
                base_url="http://mixed.test/v1",
                models={"o3-pro": ModelConfig(protocol="openai-responses")},
            )
        },
        ledger=LedgerConfig(persist=False),
    )
    async with sluice.open_runtime(cfg, transport=httpx.MockTransport(handler)) as rt:
        by_responses = await rt.chat("mix:o3-pro", "hi")
        by_chat = await rt.chat("mix:gpt-4o", "hi")
        by_responses_whole = await rt.chat(ChatRequest(model="mix:o3-pro", messages="hi"))
    assert (by_responses.text, by_chat.text) == ("responses", "chat")
    assert by_responses.usage == Usage(120, 40, 100, 0, 30)
    assert by_responses_whole.text == "responses"


async def test_recorded_replies_over_loopback():
    """Two recorded turns of OpenAI's Responses API, replayed by a real HTTP server one event
    per write: the reasoning item's encrypted content goes back with the tool result."""
    upstream = RecordingUpstream()
    upstream.reply(
        sse_reply((RECORDED / "stream_reasoning_encrypted_function_call_usage.sse").read_bytes()),
        sse_reply((RECORDED / "stream_text_after_function_call_output.sse").read_bytes()),
    )
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(upstream.serve)
            cfg = RuntimeConfig(
                providers={
                    "rsp": ProviderConfig(
                        base_url=f"http://127.0.0.1:{port}/v1",
                        protocol="openai-responses",
                        api_key=Secret("sk-loopback"),
                    )
                },
                ledger=LedgerConfig(persist=False),
            )
            async with sluice.open_runtime(cfg) as rt:
                question = Message.user("Calculate 100 * 200 / 3")
                first = await rt.chat(
                    ChatRequest(
                        model="rsp:gpt-5",
                        messages=[question],
                        tools=[Tool(name="final_result")],
                        extra_body={"include": ["reasoning.encrypted_content"]},
                    )
                )
                (call,) = first.tool_calls
                follow = [question, first.message, Message.tool(call.id, "6666")]
                second = await rt.chat(ChatRequest(model="rsp:gpt-5", messages=follow))
            nursery.cancel_scope.cancel()
    assert (call.name, call.arguments) == ("final_result", '{"result":6666}')
    assert first.usage == Usage(53, 469, 0, 0, 448)
    assert first.service_tier == "flex"
    assert second.text == "The capital of France is Paris."
    sent = upstream.received[1]
    assert (sent.method, sent.path) == ("POST", "/v1/responses")
    assert sent.headers["authorization"] == "Bearer sk-loopback"
    (part,) = [p for p in first.message.content if p.type == "reasoning"]
    found = split_reasoning_signature(part.signature)
    assert found is not None
    assert sent.body["input"][1] == {
        "type": "reasoning",
        "id": found[0],
        "summary": [],
        "encrypted_content": found[1],
    }
    assert sent.body["input"][2:] == [
        {
            "type": "function_call",
            "call_id": call.id,
            "name": "final_result",
            "arguments": '{"result":6666}',
        },
        {"type": "function_call_output", "call_id": call.id, "output": "6666"},
    ]
