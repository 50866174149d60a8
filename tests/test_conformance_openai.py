"""The OpenAI codec against recorded traffic of OpenAI and compatible servers.

Every case of ``tests/conformance_data/manifest.json`` whose provider speaks chat completions gets
one reply test. Expected values were read from the recordings by hand and are written out per
case below. A case without written expectations (one added to the corpus later) still runs
the checks that need none: it decodes, every split of a stream gives the same result, and the
deltas add up to the final message.

Streams are fed whole, a byte at a time, 7 bytes at a time and in seeded random pieces.

Where the recorded request can be expressed as a :class:`ChatRequest`, a second test builds it
and compares the whole body as parsed JSON, after two normalizations of the recording: a
``"stream": false`` is dropped (we omit the default) and so is a tool's empty
``"description": ""`` (we omit empty fields).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import orjson
import pytest

from sluice._errors import BadRequest, CallError
from sluice._events import ReasoningDelta, TextDelta, ToolCallDelta, UsageReported
from sluice._messages import ChatRequest, Message, Tool, ToolCall, Usage
from sluice._protocols.openai import OpenAICodec
from tests.conformance import Case, load_cases, splits

if TYPE_CHECKING:
    from sluice._protocols.base import AttemptOutput

OPENAI_PROTOCOL_PROVIDERS = frozenset(
    {"openai", "openai_compat", "deepseek", "openrouter", "xai", "moonshot", "vllm", "azure"}
)
CASES = load_cases(OPENAI_PROTOCOL_PROVIDERS)
CODEC = OpenAICodec()
WALL_NOW = 1_769_111_919.0


@attrs.frozen(kw_only=True)
class Reply:
    """What a successful recorded reply must decode to."""

    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[tuple[str, str, Any], ...] = ()
    """(id, name, parsed arguments) in order."""
    raw_arguments: tuple[str, ...] | None = None
    """The argument text exactly as sent, where worth pinning."""
    usage: Usage | None
    finish_reason: str
    raw_finish_reason: str | None
    response_id: str
    chunks: int | None = None
    """JSON chunks in the stream (not counting ``[DONE]``)."""


@attrs.frozen(kw_only=True)
class ErrorReply:
    """What a recorded error reply must map to."""

    cls: type[CallError]
    status: int
    message: str
    error_type: str | None
    retry_after: float | None = None
    request_id: str | None = None


BOSTON = {"location": "Boston, MA"}

EXPECTED: dict[str, Reply | ErrorReply] = {
    "chat_stream_parallel_tool_calls_usage": Reply(
        tool_calls=(
            ("call_oStfjbrEyya6I2px3EzDuGVB", "getCurrentWeather", BOSTON),
            ("call_YZ4lwwqnfF0SkJgYRUhpJnn4", "getCurrentTime", BOSTON),
        ),
        raw_arguments=('{"location": "Boston, MA"}', '{"location": "Boston, MA"}'),
        usage=Usage(121, 50, 0, 0, 0),
        finish_reason="tool_calls",
        raw_finish_reason="tool_calls",
        response_id="chatcmpl-D0v79SZ1jIg58OjhfbzYsII57FtIr",
        chunks=17,
    ),
    "chat_stream_single_tool_call_strict_include_usage": Reply(
        tool_calls=(("call_ZR5UUuTt3pf61kjwAJIYdVMj", "get_capital", {"country": "UK"}),),
        raw_arguments=('{"country":"UK"}',),
        usage=Usage(53, 15, 0, 0, 0),
        finish_reason="tool_calls",
        raw_finish_reason="tool_calls",
        response_id="chatcmpl-Dx0XpqH8w09uBXwq1zFGYdETjtnEl",
        chunks=8,
    ),
    "chat_stream_text_after_tool_result": Reply(
        text="The capital of the UK is London.",
        usage=Usage(78, 9, 0, 0, 0),
        finish_reason="stop",
        raw_finish_reason="stop",
        response_id="chatcmpl-Dx0Xq5Xx9rHB2ehcHZCRDsnuymUXc",
        chunks=11,
    ),
    "chat_nonstream_tool_calls_raw": Reply(
        tool_calls=(("call_Z8ofZnYOCeOnpu0h2auwOgeR", "getCurrentWeather", BOSTON),),
        raw_arguments=('{"location":"Boston, MA"}',),
        usage=Usage(82, 17, 0, 0, 0),
        finish_reason="tool_calls",
        raw_finish_reason="tool_calls",
        response_id="chatcmpl-D0v6xBgiKgFa8ZeP6eXY6BIjUUWtI",
    ),
    "chat_nonstream_tool_choice_required_empty_args": Reply(
        tool_calls=(("call_55Y1MexM7u2PSyLKUqMvO1o0", "get_user_country", {}),),
        raw_arguments=("{}",),
        usage=Usage(68, 11, 0, 0, 0),
        finish_reason="tool_calls",
        raw_finish_reason="tool_calls",
        response_id="chatcmpl-D3aUtEhMCiguYuWihRuozlPfUWEdi",
    ),
    "error_400_invalid_request_error": ErrorReply(
        cls=BadRequest,
        status=400,
        message="Web search options not supported with this model.",
        error_type="invalid_request_error",
    ),
    "chat_stream_reasoner_reasoning_content_ABRIDGED": Reply(
        # The abridged file lost most reasoning deltas; usage still counts the full reply.
        reasoning=(
            "Hmm, the user just said \"Hello\". It's a simple greeting but I wonder if there's "
            "more to it.  \n\nThe message is very brief, so I don't have much context to work "
            "with. Maybe gender, location, or intent since there's zero information. If "
            "they're just being polite, they might not reply further - and that's okay too."
        ),
        text="Hello there! 😊 How can I help you today?",
        usage=Usage(6, 212, 0, 0, 198),
        finish_reason="stop",
        raw_finish_reason="stop",
        response_id="33be18fc-3842-486c-8c29-dd8e578f7f20",
        chunks=88,
    ),
    "openrouter_cerebras_qwen3_stream_reasoning_whole_tool_call": Reply(
        # ``reasoning`` only; ``reasoning_details`` repeats the same text and is not read.
        reasoning=(
            "Okay, the user is asking about the weather in Boston, MA. I need to use the "
            "getCurrentWeather function. The function requires the location parameter, which "
            "is provided as Boston, MA. The unit is optional, but since the user didn't "
            "specify, I'll default to celsius. So I'll call the function with location: "
            '"Boston, MA" and unit: "celsius".\n'
        ),
        tool_calls=(
            ("34fef3aa6", "getCurrentWeather", {"location": "Boston, MA", "unit": "celsius"}),
        ),
        raw_arguments=('{"location": "Boston, MA", "unit": "celsius"}',),
        # Usage rides on a chunk after the finish chunk; 112 completion tokens include 82
        # reasoning tokens, and the total agrees (199 + 112 = 311).
        usage=Usage(199, 112, 0, 0, 82),
        finish_reason="tool_calls",
        raw_finish_reason="tool_calls",
        response_id="gen-1769111902-Snmzjgi1ULLKdmqIWMEl",
        chunks=15,
    ),
    "moonshot_kimi_nonstream_reasoning_content_tool_call": Reply(
        reasoning=(
            "The user is asking for the weather in Beijing. I have a function available called "
            "`get_weather` that takes a location parameter (the city name) and returns the "
            "current weather for that location.\n\nI need to call the `get_weather` function "
            'with "Beijing" as the location parameter.'
        ),
        tool_calls=(("get_weather:0", "get_weather", {"location": "Beijing"}),),
        raw_arguments=('{"location": "Beijing"}',),
        usage=Usage(61, 81, 0, 0, 0),
        finish_reason="tool_calls",
        raw_finish_reason="tool_calls",
        response_id="chatcmpl-69809a775276a7d916e38571",
    ),
}


def decode_stream(body: bytes, pieces: list[bytes]) -> tuple[AttemptOutput, list[Any], int]:
    decoder = CODEC.stream_decoder("call-1")
    events: list[Any] = []
    for piece in pieces:
        events.extend(decoder.feed(piece))
    return decoder.finish(), events, decoder.chunks_seen


def assert_deltas_add_up(out: AttemptOutput, events: list[Any]) -> None:
    """The deltas a consumer saw rebuild the final message."""
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == out.message.text
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    assert reasoning == out.message.reasoning
    calls: dict[int, list[Any]] = {}
    for e in events:
        if isinstance(e, ToolCallDelta):
            call = calls.setdefault(e.index, [None, None, ""])
            if e.id is not None:
                assert call[0] is None, "an id is reported once"
                call[0] = e.id
            if e.name is not None:
                assert call[1] is None, "a name is reported once"
                call[1] = e.name
            call[2] += e.arguments
    rebuilt = tuple(
        ToolCall(id=i, name=n, arguments=a or "{}") for i, n, a in (calls[k] for k in sorted(calls))
    )
    assert rebuilt == out.message.tool_calls
    usages = [e.usage for e in events if isinstance(e, UsageReported)]
    assert (usages[-1] if usages else None) == out.usage


REPLY_CASES = [c for c in CASES if c.body_path is not None]  # request-only cases have no reply


@pytest.mark.parametrize("case", REPLY_CASES, ids=[c.name for c in REPLY_CASES])
def test_recorded_reply(case: Case) -> None:
    expected = EXPECTED.get(case.name)
    body = case.body()
    status = case.status()
    if status >= 400:
        error = CODEC.decode_error(status, case.headers(), body, wall_now=WALL_NOW)
        assert error.status == status
        if expected is not None:
            assert isinstance(expected, ErrorReply)
            assert type(error) is expected.cls
            assert error.message == expected.message
            assert error.error_type == expected.error_type
            assert getattr(error, "retry_after", None) == expected.retry_after
            assert error.request_id == expected.request_id
        return
    if case.streamed:
        results = {name: decode_stream(body, pieces) for name, pieces in splits(case, body).items()}
        out, _, chunks = results["whole"]
        for name, (other, other_events, other_chunks) in results.items():
            assert other == out, f"split {name!r} decoded differently"
            assert_deltas_add_up(other, other_events)
            assert other_chunks == chunks
    else:
        out, chunks = CODEC.decode_body(body), None
    if expected is None:
        return
    assert isinstance(expected, Reply)
    assert out.message.text == expected.text
    assert out.message.reasoning == expected.reasoning
    calls = out.message.tool_calls
    assert [(c.id, c.name, c.parsed_arguments()) for c in calls] == list(expected.tool_calls)
    if expected.raw_arguments is not None:
        assert tuple(c.arguments for c in calls) == expected.raw_arguments
    assert out.usage == expected.usage
    assert out.finish_reason == expected.finish_reason
    assert out.raw_finish_reason == expected.raw_finish_reason
    assert out.response_id == expected.response_id
    if expected.chunks is not None:
        assert chunks == expected.chunks


LOCATION = {"type": "string", "description": "The city and state, e.g. San Francisco, CA"}
WEATHER = Tool(
    name="getCurrentWeather",
    description="Get the current weather in a given location",
    parameters={
        "type": "object",
        "properties": {
            "location": LOCATION,
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["location"],
    },
)
TIME = Tool(
    name="getCurrentTime",
    description="Get the current time in a given location",
    parameters={
        "type": "object",
        "properties": {
            "location": LOCATION,
        },
        "required": ["location"],
    },
)
CAPITAL = Tool(
    name="get_capital",
    parameters={
        "additionalProperties": False,
        "properties": {"country": {"type": "string"}},
        "required": ["country"],
        "type": "object",
    },
    strict=True,
)
UK_QUESTION = "What is the capital of the UK? Use the tool, then answer."
UK_CALL = ToolCall(
    id="call_ZR5UUuTt3pf61kjwAJIYdVMj", name="get_capital", arguments='{"country":"UK"}'
)

REQUESTS: dict[str, ChatRequest] = {
    "chat_nonstream_tool_calls_raw": ChatRequest(
        model="openai:gpt-4.1",
        messages="What is the weather like in Boston, MA?",
        tools=(WEATHER,),
        stream=False,
    ),
    "chat_nonstream_tool_choice_required_empty_args": ChatRequest(
        model="openai:gpt-4o",
        messages="What is the largest city in the user country?",
        tools=(
            Tool(
                name="get_user_country",
                parameters={"additionalProperties": False, "properties": {}, "type": "object"},
            ),
            Tool(
                name="final_result",
                description="The final response which ends this conversation",
                parameters={
                    "additionalProperties": False,
                    "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
                    "required": ["city", "country"],
                    "type": "object",
                },
                strict=True,
            ),
        ),
        tool_choice="required",
        stream=False,
    ),
    "chat_stream_parallel_tool_calls_usage": ChatRequest(
        model="openai:gpt-4.1",
        messages="What are the weather and time in Boston, MA?",
        tools=(WEATHER, TIME),
    ),
    "chat_stream_single_tool_call_strict_include_usage": ChatRequest(
        model="openai:gpt-4o-mini", messages=UK_QUESTION, tools=(CAPITAL,), tool_choice="auto"
    ),
    "chat_stream_text_after_tool_result": ChatRequest(
        model="openai:gpt-4o-mini",
        messages=[
            Message.user(UK_QUESTION),
            Message.assistant([UK_CALL]),
            Message.tool("call_ZR5UUuTt3pf61kjwAJIYdVMj", "London"),
        ],
        tools=(CAPITAL,),
        tool_choice="auto",
    ),
    "error_400_invalid_request_error": ChatRequest(
        model="openai:gpt-4o",
        messages=[
            Message.system("You are a helpful assistant."),
            Message.user("What day is today?"),
        ],
        stream=False,
        extra_body={"web_search_options": {"search_context_size": "low"}},
    ),
    "chat_stream_reasoner_reasoning_content_ABRIDGED": ChatRequest(
        model="deepseek:deepseek-reasoner", messages="Hello"
    ),
    "openrouter_cerebras_qwen3_stream_reasoning_whole_tool_call": ChatRequest(
        model="openrouter:qwen/qwen3-32b",
        messages="What is the weather like in Boston, MA?",
        tools=(WEATHER,),
    ),
    "moonshot_kimi_nonstream_reasoning_content_tool_call": ChatRequest(
        model="moonshot:kimi-k2.5",
        messages="What is the weather in Beijing?",
        temperature=1,
        tools=(
            Tool(
                name="get_weather",
                description="Get current weather for a location",
                parameters={
                    "properties": {"location": {"description": "The city name", "type": "string"}},
                    "required": ["location"],
                    "type": "object",
                },
            ),
        ),
        stream=False,
        extra_body={"max_completion_tokens": 4096},
    ),
}

REQUEST_CASES = [c for c in CASES if c.name in REQUESTS]


def normalized_recording(recorded: dict[str, Any]) -> dict[str, Any]:
    """The recorded body without the two fields we deliberately omit (module docstring)."""
    body = dict(recorded)
    if body.get("stream") is False:
        del body["stream"]
    tools = []
    for tool in body.get("tools", ()):
        function = {
            k: v for k, v in tool["function"].items() if not (k == "description" and v == "")
        }
        tools.append({**tool, "function": function})
    if tools:
        body["tools"] = tools
    return body


@pytest.mark.parametrize("case", REQUEST_CASES, ids=[c.name for c in REQUEST_CASES])
def test_recorded_request(case: Case) -> None:
    recorded = case.request()
    assert recorded is not None
    http = CODEC.build_request(REQUESTS[case.name], base_url="https://host/v1", api_key="k")
    assert orjson.loads(http.body) == normalized_recording(recorded)
