"""The Anthropic codec against recorded Anthropic traffic.

Every ``anthropic`` case of ``tests/conformance_data/manifest.json`` gets one reply test (the two
request-only cases have no reply test). Expected values were read from the recordings by hand
and are written out per case below. Streams are fed whole, a byte at a time, 7 bytes at a
time and in seeded random pieces, and every split must give the same result, the same event
count and deltas that add up to the final message.

Where the recorded request can be expressed as a :class:`ChatRequest`, a second test builds it
and compares the whole body as parsed JSON, after these normalizations of the recording (each
an input we deliberately omit or cannot express):

* ``"stream": false`` is dropped: we omit the default;
* a tool's ``"description": ""`` and a tool result's ``"is_error": false`` are dropped: we omit
  empty and default fields;
* the ``cache_control`` on the last tool of the caching case is dropped: :class:`Tool` has no
  cache breakpoints, so that one input cannot be expressed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import orjson
import pytest

from sluice._errors import CallError, ContextTooLong, Overloaded
from sluice._events import ReasoningDelta, TextDelta, ToolCallDelta, UsageReported
from sluice._messages import ChatRequest, Message, Tool, ToolCall, Usage
from sluice._protocols.anthropic import AnthropicCodec
from tests.conformance import Case, decode_pieces, load_cases, splits

if TYPE_CHECKING:
    from sluice._protocols.base import AttemptOutput

CASES = load_cases(frozenset({"anthropic"}))
CODEC = AnthropicCodec()
WALL_NOW = 1_769_470_467.0


@attrs.frozen(kw_only=True)
class Reply:
    """What a successful recorded reply must decode to."""

    parts: tuple[str, ...]
    """The message's part types, in order."""
    text: str = ""
    reasoning: str = ""
    signature: str | None = None
    """The signature of the (single) reasoning part."""
    tool_calls: tuple[tuple[str, str, Any], ...] = ()
    """(id, name, parsed arguments) in order."""
    raw_arguments: tuple[str, ...] | None = None
    usage: Usage
    finish_reason: str
    raw_finish_reason: str
    response_id: str
    chunks: int | None = None
    """Events in the stream, ``ping`` not counted."""


@attrs.frozen(kw_only=True)
class ErrorReply:
    """What a recorded error reply must map to."""

    cls: type[CallError]
    status: int
    """The HTTP status; for a case recorded without headers, the one its source reported."""
    message: str
    error_type: str
    request_id: str | None
    retry_after: float | None = None


HELP_TEXT = (
    "I'd be happy to help you check the weather! However, I need to know which location "
    "you're interested in. Could you please provide:\n\n1. The city and state (e.g., San "
    "Francisco, CA) or\n2. The city and country (e.g., London, UK)\n\nAlso, would you like the "
    "temperature in Celsius or Fahrenheit?"
)
THINKING_SIGNATURE = (
    "EtICCkYICxgCKkARDRHxiNXHCcLFFJcta90QwhdCi9Wo5jidivkr+cJXUddQZVjOeXK0WmjjeD1wD5POjU5NQauf"
    "Z0x+hpnjlzKeEgx7EZ0nO2v7fx5WNSEaDA75Rm5H/g/QMSKTbyIwwAKk+dyda4LZGMrIH26JlqvQWhTcfoHsyefj"
    "MKrB5k5ff9mKRKZksZ9Qf8p2dkU2KrkBTTJB3kHGXcCFSAG5ROV+uGNjfkrEssZFmCbLE36p3soy/BMzHzhvw+Vp"
    "HRHc0A45x7BI6BefdpwF6aJgK418dP5TVC1gPLP9ENz4r4/nS63HVyxha4m8+MXmUtZ7DQ8VmSsiheMduBcL9z0R"
    "X1CEUJKaepw4CrRFSv9TZrT6l611WvBLSERIUmkLrfl+G2bZgQFT1o4cjU0ce3ZxrCCeoRnL+aA0l2yDJnvfFxeP"
    "9KxS7EFPWa45d6gYAQ=="
)

EXPECTED: dict[str, Reply | ErrorReply] = {
    "messages_stream_text_then_two_tool_use": Reply(
        parts=("text", "tool_call", "tool_call"),
        text="I'll calculate the tip and get the waiter's name for you.",
        tool_calls=(
            (
                "toolu_01VsaoaKxpzdz8vgY4hTGjE3",
                "calculateTip",
                {"billAmount": 50, "tipPercentage": 15},
            ),
            # A tool without parameters: one empty input_json_delta, so "{}".
            ("toolu_01Uksi8drJHeC8rCj8yVUtCJ", "getWaiterName", {}),
        ),
        raw_arguments=('{"billAmount": 50, "tipPercentage": 15}', "{}"),
        # message_delta repeats input_tokens 679 and raises output_tokens from 5 to 111.
        usage=Usage(679, 111, 0, 0, 0),
        finish_reason="tool_calls",
        raw_finish_reason="tool_use",
        response_id="msg_01NHvMRiHy8uqTTxcg2bA6J3",
        chunks=20,
    ),
    "messages_stream_thinking_signature_then_text": Reply(
        parts=("reasoning", "text"),
        reasoning=(
            "This is a simple addition problem. Let me think through it step by step.\n\n"
            "5 + 3\n\nI need to add 3 to 5.\n\nStarting with 5, I add 3:\n5 + 1 = 6\n6 + 1 = 7\n"
            "7 + 1 = 8\n\nSo 5 + 3 = 8"
        ),
        signature=THINKING_SIGNATURE,
        text=(
            "# Adding 5 + 3\n\nLet me work through this step by step:\n\n**Step 1:** Start with "
            "the first number: **5**\n\n**Step 2:** Add the second number: **3**\n\n**Step 3:** "
            "Count up from 5, three times:\n- 5 + 1 = 6\n- 6 + 1 = 7\n- 7 + 1 = 8\n\n"
            "**Answer: 5 + 3 = 8**"
        ),
        usage=Usage(50, 211, 0, 0, 0),
        finish_reason="stop",
        raw_finish_reason="end_turn",
        response_id="msg_015p8Cc5938XnHxgs9GKuBm5",
        # 20 thinking deltas (the last empty), 1 signature, 28 text deltas, 7 framing events.
        chunks=56,
    ),
    "messages_nonstream_tool_use": Reply(
        parts=("tool_call",),
        tool_calls=(
            ("toolu_01XnSg3YrHqGYq2L7V184iUK", "getCurrentWeather", {"location": "Boston, MA"}),
        ),
        raw_arguments=('{"location":"Boston, MA"}',),
        usage=Usage(604, 56, 0, 0, 0),
        finish_reason="tool_calls",
        raw_finish_reason="tool_use",
        response_id="msg_01PCLnFdYgzwikTmiYq6pVtP",
    ),
    "messages_nonstream_after_tool_result": Reply(
        parts=("text",),
        text="The weather in Boston is currently **72°F and sunny**. It's a beautiful day!",
        usage=Usage(680, 23, 0, 0, 0),
        finish_reason="stop",
        raw_finish_reason="end_turn",
        response_id="msg_01159ZqKcPbBZPDmcu3b2YFk",
    ),
    "messages_nonstream_cache_creation": Reply(
        parts=("text",),
        text=HELP_TEXT,
        # 332 uncached + 1546 written to the cache: every prompt token counts as input.
        usage=Usage(1878, 82, 0, 1546, 0),
        finish_reason="stop",
        raw_finish_reason="end_turn",
        response_id="msg_01BKdmru2zQ7jh5eDSTAm5uR",
    ),
    "messages_nonstream_cache_read": Reply(
        parts=("text",),
        text=HELP_TEXT,
        usage=Usage(1878, 82, 1546, 0, 0),
        finish_reason="stop",
        raw_finish_reason="end_turn",
        response_id="msg_01DwB6gYEf3wukGV96FrLED2",
    ),
    "messages_nonstream_tool_choice_any_empty_input": Reply(
        parts=("tool_call",),
        tool_calls=(("toolu_01ECaF1WRmnTui1BpXZXyBds", "get_user_country", {}),),
        raw_arguments=("{}",),
        usage=Usage(711, 23, 0, 0, 0),
        finish_reason="tool_calls",
        raw_finish_reason="tool_use",
        response_id="msg_014qNMmxefjUvuPTSkMMHjWE",
    ),
    "error_529_overloaded": ErrorReply(
        cls=Overloaded,
        status=529,
        message="Overloaded",
        error_type="overloaded_error",
        request_id="req_01RCc7MbLyQNtGKzBTv8VCep",
    ),
    "error_529_overloaded_with_request_id": ErrorReply(
        cls=Overloaded,
        status=529,
        message="Overloaded",
        error_type="overloaded_error",
        request_id="req_011CZAYwiDg6Eqv7HiBNWoE5",
    ),
    "error_400_invalid_request_prompt_too_long": ErrorReply(
        cls=ContextTooLong,
        status=400,
        message="prompt is too long: 205351 tokens > 200000 maximum",
        error_type="invalid_request_error",
        request_id="req_011CV5J4YZo4J3KLTDZgDN7S",
    ),
}


def decode_stream(pieces: list[bytes]) -> tuple[AttemptOutput, list[Any], int]:
    out, events, seen = decode_pieces(CODEC, pieces)
    return out, events, seen


def assert_deltas_add_up(out: AttemptOutput, events: list[Any]) -> None:
    """The deltas a consumer saw rebuild the final message, and all carry the call id."""
    assert all(e.call_id == "call-1" for e in events)
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
    rebuilt = [(i, n, a or "{}") for i, n, a in (calls[k] for k in sorted(calls))]
    assert rebuilt == [(c.id, c.name, c.arguments) for c in out.message.tool_calls]
    usages = [e.usage for e in events if isinstance(e, UsageReported)]
    assert (usages[-1] if usages else None) == out.usage


REPLY_CASES = [c for c in CASES if c.body_path is not None]  # request-only cases have no reply


@pytest.mark.parametrize("case", REPLY_CASES, ids=[c.name for c in REPLY_CASES])
def test_recorded_reply(case: Case) -> None:
    expected = EXPECTED.get(case.name)
    body = case.body()
    status = case.status()
    if isinstance(expected, ErrorReply) or status >= 400:
        assert isinstance(expected, ErrorReply), "every recorded error has expectations"
        if case.headers():
            assert status == expected.status
        error = CODEC.decode_error(expected.status, case.headers(), body, wall_now=WALL_NOW)
        assert type(error) is expected.cls
        assert error.status == expected.status
        assert error.message == expected.message
        assert error.error_type == expected.error_type
        assert error.request_id == expected.request_id
        assert getattr(error, "retry_after", None) == expected.retry_after
        # The same body read as a reply (an error that came with a 200) raises the same
        # class, with no status.
        with pytest.raises(expected.cls) as raised:
            CODEC.decode_body(body)
        assert raised.value.status is None
        assert raised.value.message == expected.message
        return
    if case.streamed:
        results = {name: decode_stream(pieces) for name, pieces in splits(case, body).items()}
        out, _, chunks = results["whole"]
        for name, (other, other_events, other_chunks) in results.items():
            assert other == out, f"split {name!r} decoded differently"
            assert_deltas_add_up(other, other_events)
            assert other_chunks == chunks
    else:
        out, chunks = CODEC.decode_body(body), None
    assert isinstance(expected, Reply), f"no expectations written for {case.name}"
    assert tuple(p.type for p in out.message.content) == expected.parts
    assert out.message.text == expected.text
    assert out.message.reasoning == expected.reasoning
    signatures = [getattr(p, "signature", None) for p in out.message.content]
    assert signatures == [
        expected.signature if kind == "reasoning" else None for kind in expected.parts
    ]
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


WEATHER = Tool(
    name="getCurrentWeather",
    description="Get the current weather in a given location",
    parameters={
        "properties": {
            "location": {
                "description": "The city and state, e.g. San Francisco, CA",
                "type": "string",
            },
            "unit": {"enum": ["fahrenheit", "celsius"], "type": "string"},
        },
        "required": ["location"],
        "type": "object",
    },
)
TIP_QUESTION = (
    "Calculate a 15% tip on a $50 bill and tell me who is the waiter in the format: "
    "'<waiterName> should get a tip of <tipAmount>'"
)
COUNTRY_TOOLS = (
    Tool(
        name="get_user_country",
        parameters={"additionalProperties": False, "properties": {}, "type": "object"},
    ),
    Tool(
        name="final_result",
        description="The final response which ends this conversation",
        parameters={
            "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
            "required": ["city", "country"],
            "type": "object",
        },
    ),
)
COUNTRY_QUESTION = "What is the largest city in the user country?"
WEATHER_SENTENCE = (
    "Get current weather conditions including temperature, humidity, wind speed, and "
    "precipitation for a specified geographic location. "
)
TIME_SENTENCE = (
    "Get the current time in any timezone around the world using IANA timezone identifiers. "
)

REQUESTS: dict[str, ChatRequest] = {
    "messages_stream_text_then_two_tool_use": ChatRequest(
        model="anthropic:claude-sonnet-4-5",
        messages=TIP_QUESTION,
        max_tokens=2048,
        temperature=0,
        tools=(
            Tool(
                name="calculateTip",
                description="Calculate tip amount based on bill total and percentage",
                parameters={
                    "properties": {
                        "billAmount": {"description": "The total bill amount", "type": "number"},
                        "tipPercentage": {"description": "The tip percentage", "type": "number"},
                    },
                    "required": ["billAmount", "tipPercentage"],
                    "type": "object",
                },
            ),
            Tool(
                name="getWaiterName",
                description="Get the name of the waiter",
                parameters={"properties": {}, "type": "object"},
            ),
        ),
    ),
    "messages_stream_thinking_signature_then_text": ChatRequest(
        model="anthropic:claude-sonnet-4-5",
        messages="What is 5 + 3? Think step by step.",
        max_tokens=4096,
        temperature=1,
        extra_body={"thinking": {"type": "enabled", "budget_tokens": 2048}},
    ),
    "messages_nonstream_tool_use": ChatRequest(
        model="anthropic:claude-haiku-4-5",
        messages="What is the weather in Boston?",
        max_tokens=2048,
        temperature=0,
        tools=(WEATHER,),
        stream=False,
    ),
    "messages_nonstream_after_tool_result": ChatRequest(
        model="anthropic:claude-haiku-4-5",
        messages=[
            Message.user("What is the weather in Boston?"),
            Message.assistant(
                [
                    ToolCall(
                        id="toolu_01XnSg3YrHqGYq2L7V184iUK",
                        name="getCurrentWeather",
                        arguments='{"location":"Boston, MA"}',
                    )
                ]
            ),
            Message.tool("toolu_01XnSg3YrHqGYq2L7V184iUK", '{"Boston","72 and sunny"}'),
        ],
        max_tokens=2048,
        temperature=0,
        tools=(WEATHER,),
        stream=False,
    ),
    "messages_nonstream_cache_creation": ChatRequest(
        model="anthropic:claude-sonnet-4-5",
        messages="What's the weather?",
        max_tokens=100,
        temperature=0,
        tools=(
            Tool(
                name="get_weather",
                description="ToolsTest-v1 " + WEATHER_SENTENCE * 30,
                parameters={
                    "properties": {
                        "location": {
                            "description": "City and state, e.g. San Francisco, CA, or city "
                            "and country, e.g. London, UK",
                            "type": "string",
                        },
                        "units": {
                            "description": "Temperature units: celsius or fahrenheit",
                            "enum": ["celsius", "fahrenheit"],
                            "type": "string",
                        },
                    },
                    "required": ["location"],
                    "type": "object",
                },
            ),
            Tool(
                name="get_time",
                description="ToolsTest-v1 " + TIME_SENTENCE * 30,
                parameters={
                    "properties": {
                        "format": {
                            "description": "Time format: 12h or 24h",
                            "enum": ["12h", "24h"],
                            "type": "string",
                        },
                        "timezone": {
                            "description": "IANA timezone name like America/New_York or "
                            "Europe/London",
                            "type": "string",
                        },
                    },
                    "required": ["timezone"],
                    "type": "object",
                },
            ),
        ),
        stream=False,
    ),
    "messages_nonstream_tool_choice_any_empty_input": ChatRequest(
        model="anthropic:claude-sonnet-4-5",
        messages=COUNTRY_QUESTION,
        tools=COUNTRY_TOOLS,
        tool_choice="required",
        stream=False,
    ),
    "messages_nonstream_after_tool_result_is_error_false": ChatRequest(
        model="anthropic:claude-sonnet-4-5",
        messages=[
            Message.user(COUNTRY_QUESTION),
            Message.assistant(
                [ToolCall(id="toolu_01ECaF1WRmnTui1BpXZXyBds", name="get_user_country")]
            ),
            Message.tool("toolu_01ECaF1WRmnTui1BpXZXyBds", "Mexico"),
        ],
        tools=COUNTRY_TOOLS,
        tool_choice="required",
        stream=False,
    ),
}

REQUEST_CASES = [c for c in CASES if c.name in REQUESTS]


def normalized_recording(recorded: dict[str, Any]) -> dict[str, Any]:
    """The recorded body without the fields listed in the module docstring."""
    body = dict(recorded)
    if body.get("stream") is False:
        del body["stream"]
    if "tools" in body:
        body["tools"] = [
            {
                k: v
                for k, v in tool.items()
                if not (k == "description" and v == "") and k != "cache_control"
            }
            for tool in body["tools"]
        ]
    messages = []
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, list):
            content = [
                {k: v for k, v in block.items() if not (k == "is_error" and v is False)}
                for block in content
            ]
        messages.append({**message, "content": content})
    body["messages"] = messages
    return body


def test_every_case_with_a_recorded_request_is_compared() -> None:
    """Each recorded request this protocol can express has a ChatRequest written for it."""
    if not CASES:
        pytest.skip("the conformance corpus is not there")
    with_requests = {c.name for c in CASES if c.request() is not None}
    assert with_requests == set(REQUESTS)


@pytest.mark.parametrize("case", REQUEST_CASES, ids=[c.name for c in REQUEST_CASES])
def test_recorded_request(case: Case) -> None:
    recorded = case.request()
    assert recorded is not None
    http = CODEC.build_request(
        REQUESTS[case.name], base_url="https://api.anthropic.com/v1", api_key="k"
    )
    assert http.url == "https://api.anthropic.com/v1/messages"
    assert ("anthropic-version", "2023-06-01") in http.headers
    assert orjson.loads(http.body) == normalized_recording(recorded)
