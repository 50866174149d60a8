"""The Anthropic messages codec on hand-written requests, streams, bodies and errors."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from sluice._errors import (
    AuthenticationFailed,
    BadRequest,
    CallError,
    ConfigError,
    NotFound,
    Overloaded,
    ProtocolError,
    RateLimited,
    ServerError,
    StreamBroken,
)
from sluice._events import (
    ReasoningDelta,
    ReasoningSignature,
    TextDelta,
    ToolCallDelta,
    UsageReported,
)
from sluice._messages import (
    ChatRequest,
    ContentPart,
    FilePart,
    ImagePart,
    Message,
    ReasoningPart,
    ResponseFormat,
    SpecificTool,
    TextPart,
    Tool,
    ToolCall,
    Usage,
)
from sluice._protocols import codec_for
from sluice._protocols.anthropic import AnthropicCodec, AnthropicStreamDecoder
from sluice._version import USER_AGENT

CODEC = AnthropicCodec()
BASE = "https://api.anthropic.com/v1"


def body_of(request: ChatRequest) -> Any:
    return orjson.loads(CODEC.build_request(request, base_url=BASE, api_key=None).body)


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(
        b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events
    )


def decode(body: bytes) -> tuple[Any, list[Any]]:
    decoder = AnthropicStreamDecoder("c")
    events = decoder.feed(body)
    return decoder.finish(), events


START = {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 10}}}
STOP = {"type": "message_stop"}


def block(index: int, **content: Any) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": content}


def delta(index: int, **fields: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": fields}


def message_delta(reason: str | None, **usage: int) -> dict[str, Any]:
    return {"type": "message_delta", "delta": {"stop_reason": reason}, "usage": usage}


# --- request building ---------------------------------------------------------------------


def test_codec_is_registered_under_its_protocol_name() -> None:
    assert isinstance(codec_for("anthropic"), AnthropicCodec)


def test_streaming_request_line_headers_and_minimal_body() -> None:
    http = CODEC.build_request(
        ChatRequest(model="anthropic:claude-sonnet-4-5", messages="hi"),
        base_url=BASE + "/",
        api_key="sk-ant",
    )
    assert http.method == "POST"
    assert http.url == "https://api.anthropic.com/v1/messages"
    assert http.headers == (
        ("user-agent", USER_AGENT),
        ("content-type", "application/json"),
        ("accept", "text/event-stream"),
        ("anthropic-version", "2023-06-01"),
        ("x-api-key", "sk-ant"),
    )
    assert orjson.loads(http.body) == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,  # required by the API; ours when the request sets none
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "stream": True,
    }


def test_no_key_no_key_header_and_caller_headers_win() -> None:
    http = CODEC.build_request(
        ChatRequest(model="anthropic:m", messages="hi", stream=False),
        base_url=BASE,
        api_key=None,
        headers={"Anthropic-Version": "2024-01-01", "anthropic-beta": "files-api-2025-04-14"},
    )
    assert dict(http.headers) == {
        "user-agent": USER_AGENT,
        "content-type": "application/json",
        "accept": "application/json",
        "anthropic-version": "2024-01-01",
        "anthropic-beta": "files-api-2025-04-14",
    }
    assert "stream" not in orjson.loads(http.body)


def test_one_system_message_is_a_string_several_are_blocks() -> None:
    one = body_of(
        ChatRequest(model="a:m", messages=[Message.system("Be brief."), Message.user("q")])
    )
    assert one["system"] == "Be brief."
    assert one["messages"] == [{"role": "user", "content": [{"type": "text", "text": "q"}]}]
    two = body_of(
        ChatRequest(
            model="a:m",
            messages=[Message.system("A."), Message.user("q"), Message.system("B.")],
        )
    )
    assert two["system"] == [{"type": "text", "text": "A."}, {"type": "text", "text": "B."}]


def test_a_system_message_with_an_image_is_refused() -> None:
    image = ImagePart(url="https://x/y.png")
    with pytest.raises(ConfigError, match="system message"):
        body_of(ChatRequest(model="a:m", messages=[Message.system([image])]))


def test_tool_calls_and_their_results_share_turns() -> None:
    calls = [
        ToolCall(id="toolu_1", name="weather", arguments='{"city": "Paris"}'),
        ToolCall(id="toolu_2", name="time", arguments=""),
    ]
    body = body_of(
        ChatRequest(
            model="a:m",
            messages=[
                Message.user("weather and time in Paris?"),
                Message.assistant([TextPart("Checking."), *calls]),
                Message.tool("toolu_1", "sunny"),
                Message.tool("toolu_2", "boom", is_error=True),
                Message.user("and tomorrow?"),
            ],
        )
    )
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "weather",
                    "input": {"city": "Paris"},
                },
                {"type": "tool_use", "id": "toolu_2", "name": "time", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "boom",
                    "is_error": True,
                },
                {"type": "text", "text": "and tomorrow?"},
            ],
        },
    ]


@pytest.mark.parametrize("arguments", ['{"a": ', "[1, 2]"])
def test_tool_call_arguments_that_are_not_an_object_are_refused(arguments: str) -> None:
    call = ToolCall(id="t", name="f", arguments=arguments)
    with pytest.raises(ConfigError, match="not"):
        body_of(ChatRequest(model="a:m", messages=[Message.assistant([call])]))


def test_signed_reasoning_goes_back_as_thinking_unsigned_reasoning_is_dropped() -> None:
    body = body_of(
        ChatRequest(
            model="a:m",
            messages=[
                Message.user("q"),
                Message.assistant(
                    [
                        ReasoningPart(text="hmm", signature="sig1"),
                        ReasoningPart(text="", signature="encrypted"),
                        ReasoningPart(text="unsigned"),
                        TextPart(""),
                        TextPart("A."),
                    ]
                ),
                Message.user([ReasoningPart(text="user reasoning", signature="s")]),
            ],
        )
    )
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig1"},
            {"type": "redacted_thinking", "data": "encrypted"},
            {"type": "text", "text": "A."},
        ],
    }
    assert len(body["messages"]) == 2  # the last message held nothing sendable


def test_images_and_documents() -> None:
    parts: list[ContentPart] = [
        ImagePart(url="data:image/png;base64,iVBORw0KGgo="),
        ImagePart(url="https://example.com/cat.jpg"),
        FilePart(data="JVBERi0=", name="report.pdf"),
        FilePart(data="aGVsbG8=", media_type="text/plain"),
        FilePart(data="data:application/pdf;base64,JVBERi0="),
        FilePart(file_id="file_01"),
    ]
    content = body_of(ChatRequest(model="a:m", messages=[Message.user(parts)]))["messages"][0][
        "content"
    ]
    assert content == [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="},
            "title": "report.pdf",
        },
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "hello"},
        },
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="},
        },
        {"type": "document", "source": {"type": "file", "file_id": "file_01"}},
    ]


def test_a_data_url_that_is_not_base64_is_refused() -> None:
    image = ImagePart(url="data:image/svg+xml,<svg/>")
    with pytest.raises(ConfigError, match="base64"):
        body_of(ChatRequest(model="a:m", messages=[Message.user([image])]))


TOOL = Tool(name="f", description="does f", parameters={"type": "object", "properties": {}})


@pytest.mark.parametrize(
    ("choice", "parallel", "wire"),
    [
        ("auto", None, {"type": "auto"}),
        ("required", None, {"type": "any"}),
        ("none", None, {"type": "none"}),
        (SpecificTool("f"), None, {"type": "tool", "name": "f"}),
        (None, None, None),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
        (
            SpecificTool("f"),
            False,
            {"type": "tool", "name": "f", "disable_parallel_tool_use": True},
        ),
        ("none", False, {"type": "none"}),
        ("auto", True, {"type": "auto"}),
    ],
)
def test_tool_choice_in_anthropic_shape(choice: Any, parallel: bool | None, wire: Any) -> None:
    body = body_of(
        ChatRequest(
            model="a:m",
            messages="q",
            tools=[TOOL],
            tool_choice=choice,
            parallel_tool_calls=parallel,
        )
    )
    assert body["tools"] == [
        {"name": "f", "description": "does f", "input_schema": {"type": "object", "properties": {}}}
    ]
    assert body.get("tool_choice") == wire


def test_sampling_fields_and_what_the_protocol_cannot_say() -> None:
    body = body_of(
        ChatRequest(
            model="a:m",
            messages="q",
            temperature=0.2,
            top_p=0.9,
            max_tokens=100,
            stop=["END"],
            seed=7,
            response_format=ResponseFormat(type="json_object"),
            parallel_tool_calls=False,  # no tools: nothing to disable
        )
    )
    assert body == {
        "model": "m",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}],
        "temperature": 0.2,
        "top_p": 0.9,
        "stop_sequences": ["END"],
        "stream": True,
    }


def test_extra_body_merges_last() -> None:
    body = body_of(
        ChatRequest(
            model="a:m",
            messages="q",
            extra_body={"thinking": {"type": "enabled", "budget_tokens": 1024}, "stream": None},
        )
    )
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert "stream" not in body


# --- streamed replies -----------------------------------------------------------------------


def test_a_stream_of_every_kind_of_block() -> None:
    body = sse(
        START,
        block(0, type="thinking", thinking="", signature=""),
        {"type": "ping"},
        delta(0, type="thinking_delta", thinking="Let me see."),
        delta(0, type="thinking_delta", thinking=""),
        delta(0, type="signature_delta", signature="c2ln"),
        {"type": "content_block_stop", "index": 0},
        block(1, type="redacted_thinking", data="ZW5j"),
        {"type": "content_block_stop", "index": 1},
        block(2, type="text", text=""),
        delta(2, type="text_delta", text="Sure."),
        delta(2, type="citations_delta", citation={"cited_text": "x"}),
        {"type": "content_block_stop", "index": 2},
        block(3, type="tool_use", id="toolu_9", name="f", input={}),
        delta(3, type="input_json_delta", partial_json=""),
        delta(3, type="input_json_delta", partial_json='{"x":'),
        delta(3, type="input_json_delta", partial_json=" 1}"),
        {"type": "content_block_stop", "index": 3},
        message_delta("tool_use", output_tokens=30),
        STOP,
    )
    out, events = decode(body)
    assert events == [
        ReasoningDelta("c", "Let me see."),
        ReasoningSignature("c", "c2ln"),
        ReasoningSignature("c", "ZW5j", redacted=True),
        TextDelta("c", "Sure."),
        ToolCallDelta("c", 0, "toolu_9", "f", ""),
        ToolCallDelta("c", 0, None, None, '{"x":'),
        ToolCallDelta("c", 0, None, None, " 1}"),
        UsageReported("c", Usage(10, 30, 0, 0, 0)),
    ]
    assert out.message == Message.assistant(
        [
            ReasoningPart(text="Let me see.", signature="c2ln"),
            ReasoningPart(text="", signature="ZW5j"),
            TextPart("Sure."),
            ToolCall(id="toolu_9", name="f", arguments='{"x": 1}'),
        ]
    )
    assert (out.finish_reason, out.raw_finish_reason) == ("tool_calls", "tool_use")
    assert out.response_id == "msg_1"


def test_a_decoded_thinking_block_goes_back_unchanged() -> None:
    body = sse(
        START,
        block(0, type="thinking", thinking="", signature=""),
        delta(0, type="thinking_delta", thinking="hmm"),
        delta(0, type="signature_delta", signature="sig"),
        block(1, type="redacted_thinking", data="enc"),
        message_delta("end_turn", output_tokens=1),
        STOP,
    )
    out, _ = decode(body)
    sent = body_of(ChatRequest(model="a:m", messages=[Message.user("q"), out.message]))
    assert sent["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
        {"type": "redacted_thinking", "data": "enc"},
    ]


def test_usage_keeps_the_latest_value_of_every_field() -> None:
    start = {
        "type": "message_start",
        "message": {
            "id": "m",
            "usage": {
                "input_tokens": 3,
                "cache_read_input_tokens": 1301,
                "cache_creation_input_tokens": 20,
                "output_tokens": 1,
            },
        },
    }
    # Older API versions send only output_tokens in message_delta.
    out, events = decode(sse(start, message_delta("end_turn", output_tokens=50), STOP))
    assert out.usage == Usage(1324, 50, 1301, 20, 0)
    assert [e for e in events if isinstance(e, UsageReported)] == [UsageReported("c", out.usage)]


def test_ping_events_are_not_counted_and_deliver_nothing() -> None:
    decoder = AnthropicStreamDecoder("c")
    assert decoder.feed(sse({"type": "ping"}, {"type": "ping"})) == []
    assert decoder.chunks_seen == 0
    decoder.feed(sse(START))
    assert decoder.chunks_seen == 1


def test_tool_input_that_came_whole_in_the_block_start() -> None:
    body = sse(
        START,
        block(0, type="tool_use", id="t1", name="f", input={"a": [1, 2]}),
        {"type": "content_block_stop", "index": 0},
        message_delta("tool_use"),
        STOP,
    )
    out, events = decode(body)
    assert out.message.tool_calls == (ToolCall(id="t1", name="f", arguments='{"a":[1,2]}'),)
    assert events[:2] == [
        ToolCallDelta("c", 0, "t1", "f", ""),
        ToolCallDelta("c", 0, None, None, '{"a":[1,2]}'),
    ]


def test_deltas_without_a_block_start_still_count() -> None:
    body = sse(
        START,
        delta(0, type="text_delta", text="Hi"),
        delta(1, type="input_json_delta", partial_json="{}"),
        message_delta("end_turn"),
        STOP,
    )
    out, _ = decode(body)
    assert out.message == Message.assistant(
        [TextPart("Hi"), ToolCall(id="call_0", name="", arguments="{}")]
    )
    assert out.finish_reason == "tool_calls"


def test_server_tool_blocks_are_not_tool_calls() -> None:
    body = sse(
        START,
        block(0, type="server_tool_use", id="srvtoolu_1", name="web_search", input={}),
        delta(0, type="input_json_delta", partial_json='{"query": "x"}'),
        block(1, type="web_search_tool_result", tool_use_id="srvtoolu_1", content=[]),
        block(2, type="text", text="Found it."),
        message_delta("end_turn"),
        STOP,
    )
    out, events = decode(body)
    assert out.message == Message.assistant([TextPart("Found it.")])
    assert events == [TextDelta("c", "Found it."), UsageReported("c", Usage(10, 0, 0, 0, 0))]


@pytest.mark.parametrize(
    ("raw", "calls", "finish"),
    [
        ("end_turn", False, "stop"),
        ("stop_sequence", False, "stop"),
        ("max_tokens", False, "length"),
        ("model_context_window_exceeded", False, "length"),
        ("refusal", False, "content_filter"),
        ("pause_turn", False, "other"),
        ("end_turn", True, "tool_calls"),
        ("max_tokens", True, "length"),
    ],
)
def test_finish_reasons(raw: str, calls: bool, finish: str) -> None:
    events: list[dict[str, Any]] = [START]
    if calls:
        events.append(block(0, type="tool_use", id="t", name="f", input={}))
    out, _ = decode(sse(*events, message_delta(raw), STOP))
    assert (out.finish_reason, out.raw_finish_reason) == (finish, raw)


@pytest.mark.parametrize(
    ("error_type", "cls"),
    [
        ("overloaded_error", Overloaded),
        ("api_error", ServerError),
        ("rate_limit_error", RateLimited),
        ("invalid_request_error", BadRequest),
        ("request_too_large", BadRequest),
        ("authentication_error", AuthenticationFailed),
        ("permission_error", AuthenticationFailed),
        ("not_found_error", NotFound),
    ],
)
def test_an_error_event_mid_stream_raises_its_class(error_type: str, cls: type[CallError]) -> None:
    decoder = AnthropicStreamDecoder("c")
    assert decoder.feed(sse(START, block(0, type="text", text="Hel"))) == [
        UsageReported("c", Usage(10, 0, 0, 0, 0)),
        TextDelta("c", "Hel"),
    ]
    error = {"type": "error", "error": {"type": error_type, "message": "went wrong"}}
    with pytest.raises(cls) as raised:
        decoder.feed(sse(error))
    assert (raised.value.message, raised.value.error_type) == ("went wrong", error_type)
    assert raised.value.status is None


def test_a_cut_stream_is_broken_but_a_missing_message_stop_is_not() -> None:
    decoder = AnthropicStreamDecoder("c")
    decoder.feed(sse(START, block(0, type="text", text="Hel")))
    with pytest.raises(StreamBroken, match="2 events"):
        decoder.finish()
    out, _ = decode(sse(START, block(0, type="text", text="Hi"), message_delta("end_turn")))
    assert out.message.text == "Hi"


def test_an_unclosed_last_event_is_read_and_a_cut_one_dropped() -> None:
    body = sse(START, message_delta("end_turn", output_tokens=2)) + b"data: " + orjson.dumps(STOP)
    out, _ = decode(body)
    assert out.usage == Usage(10, 2, 0, 0, 0)
    decoder = AnthropicStreamDecoder("c")
    decoder.feed(sse(START) + b'data: {"type":"message_de')
    with pytest.raises(StreamBroken):
        decoder.finish()


def test_bytes_after_message_stop_are_ignored() -> None:
    decoder = AnthropicStreamDecoder("c")
    decoder.feed(sse(START, message_delta("end_turn"), STOP))
    assert decoder.feed(b"data: not json\n\n") == []
    assert decoder.finish().finish_reason == "stop"


@pytest.mark.parametrize(
    "payload", [b"data: {not json\n\n", b"data: [1]\n\n", b'data: {"type":"message_start"}\n\n']
)
def test_malformed_events_are_protocol_errors(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        AnthropicStreamDecoder("c").feed(payload)


# --- whole bodies and errors --------------------------------------------------------------------


def test_a_whole_body_with_thinking_text_and_a_tool_call() -> None:
    body = orjson.dumps(
        {
            "id": "msg_2",
            "type": "message",
            "content": [
                {"type": "thinking", "thinking": "Plan.", "signature": "s"},
                {"type": "text", "text": "Calling."},
                {"type": "tool_use", "id": "toolu_3", "name": "f", "input": {"q": "é"}},
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 5, "output_tokens": 7},
        }
    )
    out = CODEC.decode_body(body)
    assert out.message == Message.assistant(
        [
            ReasoningPart(text="Plan.", signature="s"),
            TextPart("Calling."),
            ToolCall(id="toolu_3", name="f", arguments='{"q":"é"}'),
        ]
    )
    assert out.usage == Usage(5, 7, 0, 0, 0)


@pytest.mark.parametrize("body", [b"<html>", b"[]", b'{"type": "message"}'])
def test_a_body_that_is_not_a_message_is_a_protocol_error(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        CODEC.decode_body(body)


def test_error_replies() -> None:
    body = b'{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}'
    error = CODEC.decode_error(
        429, {"retry-after": "12", "request-id": "req_h"}, body, wall_now=0.0
    )
    assert isinstance(error, RateLimited)
    assert (error.retry_after, error.request_id, error.status) == (12.0, "req_h", 429)
    # Overload has also come back as a 500.
    body = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    assert type(CODEC.decode_error(500, {}, body, wall_now=0.0)) is Overloaded
    body = b'{"type":"error","error":{"type":"api_error","message":"Internal"},"request_id":null}'
    error = CODEC.decode_error(500, {}, body, wall_now=0.0)
    assert (type(error), error.request_id) == (ServerError, None)
    error = CODEC.decode_error(502, {}, b"<html>Bad gateway</html>", wall_now=0.0)
    assert (type(error), error.message) == (ServerError, "<html>Bad gateway</html>")
    assert CODEC.decode_error(503, {}, b"", wall_now=0.0).message == "HTTP 503 with an empty body"


# --- passed through for the gateway (issue 27) ------------------------------------------------


def test_a_part_s_own_cache_control_is_sent_on_its_block_and_wins_over_a_breakpoint() -> None:
    hour = {"type": "ephemeral", "ttl": "1h"}
    request = ChatRequest(
        model="anthropic:claude",
        messages=[
            Message.system([TextPart("rules"), TextPart("doc", cache_control=hour)]),
            Message.user([TextPart("q", cache_control=hour), TextPart("more")]),
        ],
        tools=[Tool(name="a"), Tool(name="b", cache_control=hour)],
        cache_breakpoints={"tools", "system", "last_message"},
    )
    body = body_of(request)
    assert body["system"] == [
        {"type": "text", "text": "rules"},
        {"type": "text", "text": "doc", "cache_control": hour},
    ]
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "q", "cache_control": hour},
        {"type": "text", "text": "more", "cache_control": {"type": "ephemeral"}},
    ]
    assert [t.get("cache_control") for t in body["tools"]] == [None, hour]


def test_stop_sequence_is_kept_streamed_and_whole() -> None:
    stream = {
        "type": "message_delta",
        "delta": {"stop_reason": "stop_sequence", "stop_sequence": "END"},
    }
    out, _ = decode(sse(START, block(0, type="text", text="a"), stream, STOP))
    assert (out.raw_finish_reason, out.stop_sequence, out.finish_reason) == (
        "stop_sequence",
        "END",
        "stop",
    )
    whole = {
        "content": [{"type": "text", "text": "a"}],
        "stop_reason": "stop_sequence",
        "stop_sequence": "END",
    }
    assert CODEC.decode_body(orjson.dumps(whole)).stop_sequence == "END"


def test_the_prompt_count_is_reported_with_the_first_output_not_alone() -> None:
    decoder = AnthropicStreamDecoder("c")
    assert decoder.feed(sse(START, {"type": "ping"})) == []
    assert decoder.feed(sse(block(0, type="text", text="Hi"))) == [
        UsageReported("c", Usage(10, 0, 0, 0, 0)),
        TextDelta("c", "Hi"),
    ]
    assert decoder.feed(sse(delta(0, type="text_delta", text="!"))) == [TextDelta("c", "!")]


def test_extra_headers_reach_the_request_but_never_the_key_or_version_it_sets() -> None:
    request = ChatRequest(
        model="anthropic:claude",
        messages="hi",
        extra_headers={"anthropic-beta": "b1", "x-api-key": "stolen", "content-length": "1"},
    )
    headers = dict(CODEC.build_request(request, base_url=BASE, api_key="sk-real").headers)
    assert (headers["anthropic-beta"], headers["x-api-key"]) == ("b1", "sk-real")
    assert "content-length" not in headers
