"""The Ollama codec against recorded and documented Ollama ``/api/chat`` traffic.

Every ``ollama`` case of ``tests/conformance_data/manifest.json`` gets one reply test (the
request-only case has no reply test). Expected values were read from the files by hand and are
written out per case below. Streams are fed whole, a byte at a time, 7 bytes at a time and in
seeded random pieces, and every split must give the same result, the same line count and
deltas that add up to the final message.

``DOC_chat_stream_tool_call_fragment`` is a documented example, not a recording: the blog
post it comes from stops before the final ``done`` line, so the stream as stored must end in
:class:`StreamBroken` after delivering its deltas; with a ``done`` line appended (made up here,
in the shape of the recorded one) it completes.

Where the recorded request can be expressed as a :class:`ChatRequest`, a second test builds it
and compares the whole body as parsed JSON, after these normalizations of the recording:

* langchaingo's Go client sends ``"format": ""`` and ``"options": {}`` when they are unset; we
  leave both out;
* we name the tool of a ``tool`` message (``tool_name``, which Ollama documents); langchaingo
  did not, so the follow-up case's recording gets the name added.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import orjson
import pytest

from sluice._errors import BadRequest, CallError, StreamBroken
from sluice._events import ReasoningDelta, TextDelta, ToolCallDelta, UsageReported
from sluice._messages import ChatRequest, Message, Tool, ToolCall, Usage
from sluice._protocols.ollama import OllamaCodec
from tests.conformance import Case, load_cases, splits

if TYPE_CHECKING:
    from sluice._protocols.base import AttemptOutput

CASES = load_cases(frozenset({"ollama"}))
CODEC = OllamaCodec()
WALL_NOW = 1_755_432_694.0


@attrs.frozen(kw_only=True)
class Reply:
    """What a stream must decode to."""

    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[tuple[str, str, Any], ...] = ()
    """(id, name, parsed arguments) in order."""
    raw_arguments: tuple[str, ...] | None = None
    usage: Usage | None
    finish_reason: str | None
    """None for a stream that must end in StreamBroken."""
    raw_finish_reason: str | None
    chunks: int


@attrs.frozen(kw_only=True)
class ErrorReply:
    """What a recorded error reply must map to."""

    cls: type[CallError]
    status: int
    message: str


TORONTO = {"format": "celsius", "location": "Toronto"}

EXPECTED: dict[str, Reply | ErrorReply] = {
    "chat_stream_text_done_stats": Reply(
        text="Okay, here we go!\n\n1, 2, 3, 4, 5\n",
        # The done line: prompt_eval_count 16, eval_count 22.
        usage=Usage(16, 22, 0, 0, 0),
        finish_reason="stop",
        raw_finish_reason="stop",
        chunks=22,
    ),
    "DOC_chat_stream_tool_call_fragment": Reply(
        # The model's "</think>" arrives as plain content; the call has no id, so call_0.
        text="celsius</think>",
        tool_calls=(("call_0", "get_current_weather", TORONTO),),
        raw_arguments=('{"format":"celsius","location":"Toronto"}',),
        usage=None,
        finish_reason=None,
        raw_finish_reason=None,
        chunks=3,
    ),
    "error_400_model_does_not_support_tools": ErrorReply(
        cls=BadRequest,
        status=400,
        message="registry.ollama.ai/library/gemma3:1b does not support tools",
    ),
}

DONE_LINE = (
    b'{"model":"qwen3","created_at":"2025-05-27T22:54:58.2Z","message":{"role":"assistant",'
    b'"content":""},"done_reason":"stop","done":true,"prompt_eval_count":20,"eval_count":9}\n'
)
"""A final line for the documented example, which has none (made up; see the docstring)."""


def decode_stream(pieces: list[bytes]) -> tuple[AttemptOutput | StreamBroken, list[Any], int]:
    decoder = CODEC.stream_decoder("call-1")
    events: list[Any] = []
    for piece in pieces:
        events.extend(decoder.feed(piece))
    try:
        out: AttemptOutput | StreamBroken = decoder.finish()
    except StreamBroken as exc:
        out = exc
    return out, events, decoder.chunks_seen


def deltas(
    events: list[Any],
) -> tuple[str, str, list[tuple[int, str | None, str | None, str]], list[Usage]]:
    """What the events a consumer saw add up to: text, reasoning, calls and usages."""
    assert all(e.call_id == "call-1" for e in events)
    return (
        "".join(e.text for e in events if isinstance(e, TextDelta)),
        "".join(e.text for e in events if isinstance(e, ReasoningDelta)),
        [(e.index, e.id, e.name, e.arguments) for e in events if isinstance(e, ToolCallDelta)],
        [e.usage for e in events if isinstance(e, UsageReported)],
    )


def assert_matches(reply: Reply, out: AttemptOutput, events: list[Any]) -> None:
    text, reasoning, calls, usages = deltas(events)
    message = out.message
    assert (text, reasoning) == (message.text, message.reasoning)
    assert calls == [(i, c.id, c.name, c.arguments) for i, c in enumerate(message.tool_calls)]
    assert usages == [out.usage]
    assert message.text == reply.text
    assert message.reasoning == reply.reasoning
    got = [(c.id, c.name, c.parsed_arguments()) for c in message.tool_calls]
    assert got == list(reply.tool_calls)
    if reply.raw_arguments is not None:
        assert tuple(c.arguments for c in message.tool_calls) == reply.raw_arguments
    assert out.usage == reply.usage
    assert out.finish_reason == reply.finish_reason
    assert out.raw_finish_reason == reply.raw_finish_reason
    assert out.response_id is None  # Ollama gives replies no id


REPLY_CASES = [c for c in CASES if c.body_path is not None]  # request-only cases have no reply


@pytest.mark.parametrize("case", REPLY_CASES, ids=[c.name for c in REPLY_CASES])
def test_recorded_reply(case: Case) -> None:
    expected = EXPECTED.get(case.name)
    body = case.body()
    status = case.status()
    if status >= 400:
        assert isinstance(expected, ErrorReply), "every recorded error has expectations"
        assert status == expected.status
        error = CODEC.decode_error(status, case.headers(), body, wall_now=WALL_NOW)
        assert type(error) is expected.cls
        assert error.status == expected.status
        assert error.message == expected.message
        assert error.error_type is None
        assert error.request_id is None
        return
    assert isinstance(expected, Reply), f"no expectations written for {case.name}"
    results = {name: decode_stream(pieces) for name, pieces in splits(case, body).items()}
    out, events, chunks = results["whole"]
    assert chunks == expected.chunks
    for name, (other, other_events, other_chunks) in results.items():
        assert other_events == events, f"split {name!r} gave other events"
        assert other_chunks == chunks
        if isinstance(out, StreamBroken):
            assert isinstance(other, StreamBroken)
        else:
            assert other == out, f"split {name!r} decoded differently"
    if expected.finish_reason is None:
        # The documented example stops before its done line.
        assert isinstance(out, StreamBroken)
        text, reasoning, calls, usages = deltas(events)
        assert (text, reasoning, usages) == (expected.text, expected.reasoning, [])
        assert [(i, n, orjson.loads(a)) for _, i, n, a in calls] == list(expected.tool_calls)
        decoder = CODEC.stream_decoder("call-1")
        completed = decoder.feed(body) + decoder.feed(DONE_LINE)
        out = decoder.finish()
        assert out.finish_reason == "tool_calls"  # Ollama says "stop" after calling tools
        assert out.raw_finish_reason == "stop"
        assert out.usage == Usage(20, 9, 0, 0, 0)
        assert_matches(
            attrs.evolve(
                expected,
                usage=Usage(20, 9, 0, 0, 0),
                finish_reason="tool_calls",
                raw_finish_reason="stop",
            ),
            out,
            completed,
        )
        return
    assert not isinstance(out, StreamBroken)
    assert_matches(expected, out, events)


WEATHER_TOOL = Tool(
    name="getWeather",
    description="Get the current weather for a location.",
    parameters={
        "type": "object",
        "required": ["location"],
        "properties": {
            "location": {
                "type": "string",
                "description": "The city and state, e.g. San Francisco, CA",
            }
        },
    },
)

REQUESTS: dict[str, ChatRequest] = {
    "chat_stream_text_done_stats": ChatRequest(
        model="ollama:gemma3:1b", messages="Count from 1 to 5", max_tokens=50, temperature=0
    ),
    "request_tool_result_followup": ChatRequest(
        model="ollama:gpt-oss:120b",
        messages=[
            Message.user("What's the weather like in San Francisco?"),
            Message.assistant(
                [
                    ToolCall(
                        id="call_0",
                        name="getWeather",
                        arguments='{"location": "San Francisco, CA"}',
                    )
                ]
            ),
            Message.tool("call_0", '{"temperature": 72, "condition": "sunny"}'),
        ],
        tools=(WEATHER_TOOL,),
        stream=False,
    ),
    "error_400_model_does_not_support_tools": ChatRequest(
        model="ollama:gemma3:1b",
        messages="Which date do we have today?",
        tools=(
            Tool(
                name="getTime",
                description="Get the current time.",
                parameters={"type": "object", "required": [], "properties": {}},
            ),
        ),
        stream=False,
    ),
    "DOC_chat_stream_tool_call_fragment": ChatRequest(
        model="ollama:qwen3",
        messages="What is the weather today in Toronto?",
        tools=(
            Tool(
                name="get_current_weather",
                description="Get the current weather for a location",
                parameters={
                    "type": "object",
                    "properties": {
                        "location": {
                            "type": "string",
                            "description": "The location to get the weather for, e.g. San "
                            "Francisco, CA",
                        },
                        "format": {
                            "type": "string",
                            "description": "The format to return the weather in, e.g. "
                            "'celsius' or 'fahrenheit'",
                            "enum": ["celsius", "fahrenheit"],
                        },
                    },
                    "required": ["location", "format"],
                },
            ),
        ),
    ),
}

REQUEST_CASES = [c for c in CASES if c.name in REQUESTS]


def normalized_recording(recorded: dict[str, Any]) -> dict[str, Any]:
    """The recorded body after the normalizations listed in the module docstring."""
    body = dict(recorded)
    if body.get("format") == "":
        del body["format"]
    if body.get("options") == {}:
        del body["options"]
    body["messages"] = [
        {**m, "tool_name": "getWeather"} if m["role"] == "tool" and "tool_name" not in m else m
        for m in body["messages"]
    ]
    return body


def test_every_case_with_a_recorded_request_is_compared() -> None:
    if not CASES:
        pytest.skip("the conformance corpus is not there")
    with_requests = {c.name for c in CASES if c.request() is not None}
    assert with_requests == set(REQUESTS)


@pytest.mark.parametrize("case", REQUEST_CASES, ids=[c.name for c in REQUEST_CASES])
def test_recorded_request(case: Case) -> None:
    recorded = case.request()
    assert recorded is not None
    http = CODEC.build_request(REQUESTS[case.name], base_url="http://localhost:11434", api_key=None)
    assert http.url == "http://localhost:11434/api/chat"
    assert orjson.loads(http.body) == normalized_recording(recorded)
