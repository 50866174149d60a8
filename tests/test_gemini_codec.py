"""The Gemini codec on hand-written requests, streams, bodies and errors."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from sluice._errors import (
    AuthenticationFailed,
    BadRequest,
    CallError,
    ConfigError,
    Overloaded,
    ProtocolError,
    RateLimited,
    ServerError,
    StreamBroken,
)
from sluice._events import ReasoningDelta, TextDelta, ToolCallDelta, UsageReported
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
    ToolResultPart,
    Usage,
)
from sluice._protocols import codec_for
from sluice._protocols.gemini import GeminiCodec, GeminiStreamDecoder
from sluice._serde import converter
from sluice._version import USER_AGENT

CODEC = GeminiCodec()
BASE = "https://generativelanguage.googleapis.com/v1beta"


def body_of(request: ChatRequest) -> Any:
    return orjson.loads(CODEC.build_request(request, base_url=BASE, api_key=None).body)


def sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(c) + b"\r\n\r\n" for c in chunks)


def chunk(*parts: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], **extra}


def decode(body: bytes) -> tuple[Any, list[Any]]:
    decoder = GeminiStreamDecoder("c")
    events = decoder.feed(body)
    return decoder.finish(), events


# --- the signature field on messages --------------------------------------------------------


def test_signatures_are_optional_and_round_trip_through_serde() -> None:
    assert TextPart("hi") == TextPart("hi", "text", signature=None)
    assert ToolCall(id="a", name="f").signature is None
    message = Message.assistant(
        [TextPart("x", signature="s1"), ToolCall(id="a", name="f", signature="s2"), TextPart("y")]
    )
    assert converter.structure(converter.unstructure(message), Message) == message
    old = {"role": "assistant", "content": [{"type": "text", "text": "x"}]}
    assert converter.structure(old, Message) == Message.assistant("x")


# --- request building ---------------------------------------------------------------------


def test_codec_is_registered_under_its_protocol_name() -> None:
    assert isinstance(codec_for("gemini"), GeminiCodec)


def test_streaming_and_whole_urls_headers_and_minimal_body() -> None:
    http = CODEC.build_request(
        ChatRequest(model="gemini:gemini-2.5-flash", messages="hi"),
        base_url=BASE + "/",
        api_key="AIza",
    )
    assert http.url == f"{BASE}/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert http.headers == (
        ("user-agent", USER_AGENT),
        ("content-type", "application/json"),
        ("accept", "text/event-stream"),
        ("x-goog-api-key", "AIza"),
    )
    assert orjson.loads(http.body) == {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    http = CODEC.build_request(
        ChatRequest(model="gemini:models/gemini-2.5-pro", messages="hi", stream=False),
        base_url=BASE,
        api_key=None,
        headers={"X-Goog-Api-Client": "sluice"},
    )
    assert http.url == f"{BASE}/models/gemini-2.5-pro:generateContent"
    assert dict(http.headers) == {
        "user-agent": USER_AGENT,
        "content-type": "application/json",
        "accept": "application/json",
        "x-goog-api-client": "sluice",
    }


def test_roles_system_instruction_and_merged_turns() -> None:
    body = body_of(
        ChatRequest(
            model="g:m",
            messages=[
                Message.system("Be brief."),
                Message.user("a"),
                Message.user("b"),
                Message.assistant("c"),
            ],
        )
    )
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "a"}, {"text": "b"}]},
        {"role": "model", "parts": [{"text": "c"}]},
    ]


def test_function_calls_and_responses_with_signatures_and_names() -> None:
    body = body_of(
        ChatRequest(
            model="g:m",
            messages=[
                Message.user("q"),
                Message.assistant(
                    [
                        ReasoningPart(text="thinking", signature="r-sig"),
                        TextPart("", signature="t-sig"),
                        ToolCall(
                            id="id1", name="temp", arguments='{"city":"Paris"}', signature="s"
                        ),
                        ToolCall(id="call_1", name="time", arguments=""),
                    ]
                ),
                Message.tool("id1", "22°C"),
                Message(
                    "tool", [ToolResultPart(tool_call_id="call_1", content="x", is_error=True)]
                ),
                Message.user([ToolResultPart(tool_call_id="zz", content="y", name="named")]),
            ],
        )
    )
    assert body["contents"][1:] == [
        {
            "role": "model",
            "parts": [
                {"text": "thinking", "thought": True, "thoughtSignature": "r-sig"},
                {"text": "", "thoughtSignature": "t-sig"},
                {
                    "functionCall": {"id": "id1", "name": "temp", "args": {"city": "Paris"}},
                    "thoughtSignature": "s",
                },
                {"functionCall": {"id": "call_1", "name": "time", "args": {}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "id": "id1",
                        "name": "temp",
                        "response": {"output": "22°C"},
                    }
                },
                {"functionResponse": {"id": "call_1", "name": "time", "response": {"error": "x"}}},
                {"functionResponse": {"id": "zz", "name": "named", "response": {"output": "y"}}},
            ],
        },
    ]


def test_a_result_whose_tool_name_cannot_be_found_is_refused() -> None:
    with pytest.raises(ConfigError, match="tool name"):
        body_of(ChatRequest(model="g:m", messages=[Message.tool("nowhere", "x")]))


def test_reasoning_and_empty_text_outside_model_turns_are_not_sent() -> None:
    body = body_of(
        ChatRequest(
            model="g:m",
            messages=[Message.user([ReasoningPart(text="r"), TextPart(""), TextPart("q")])],
        )
    )
    assert body["contents"] == [{"role": "user", "parts": [{"text": "q"}]}]


def test_images_and_files() -> None:
    parts: list[ContentPart] = [
        ImagePart(url="data:image/png;base64,iVBO"),
        ImagePart(url="https://example.com/cat.jpg", media_type="image/jpeg"),
        FilePart(data="JVBERi0="),
        FilePart(data="data:text/csv;base64,YSxi"),
        FilePart(file_id="https://generativelanguage.googleapis.com/v1beta/files/abc"),
    ]
    body = body_of(ChatRequest(model="g:m", messages=[Message.user(parts)]))
    assert body["contents"][0]["parts"] == [
        {"inlineData": {"mimeType": "image/png", "data": "iVBO"}},
        {"fileData": {"fileUri": "https://example.com/cat.jpg", "mimeType": "image/jpeg"}},
        {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0="}},
        {"inlineData": {"mimeType": "text/csv", "data": "YSxi"}},
        {"fileData": {"fileUri": "https://generativelanguage.googleapis.com/v1beta/files/abc"}},
    ]


TOOL = Tool(name="f", description="does f", parameters={"type": "object", "properties": {}})


@pytest.mark.parametrize(
    ("choice", "config"),
    [
        ("auto", {"mode": "AUTO"}),
        ("required", {"mode": "ANY"}),
        ("none", {"mode": "NONE"}),
        (SpecificTool("f"), {"mode": "ANY", "allowedFunctionNames": ["f"]}),
    ],
)
def test_tools_and_tool_choice(choice: Any, config: dict[str, Any]) -> None:
    body = body_of(
        ChatRequest(
            model="g:m", messages="q", tools=[TOOL], tool_choice=choice, parallel_tool_calls=False
        )
    )
    assert body["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "f",
                    "description": "does f",
                    "parametersJsonSchema": {"type": "object", "properties": {}},
                }
            ]
        }
    ]
    assert body["toolConfig"] == {"functionCallingConfig": config}
    assert "parallel_tool_calls" not in body


def test_generation_config_uses_gemini_names() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    body = body_of(
        ChatRequest(
            model="g:m",
            messages="q",
            temperature=0.3,
            top_p=0.8,
            max_tokens=256,
            stop=("END",),
            seed=5,
            response_format=ResponseFormat(schema=schema),
            extra_body={"generationConfig": {"thinkingConfig": {"includeThoughts": True}}},
        )
    )
    assert body["generationConfig"] == {
        "temperature": 0.3,
        "topP": 0.8,
        "maxOutputTokens": 256,  # never max_tokens: the API rejects that name
        "stopSequences": ["END"],
        "seed": 5,
        "responseMimeType": "application/json",
        "responseJsonSchema": schema,
        "thinkingConfig": {"includeThoughts": True},
    }
    plain = body_of(
        ChatRequest(model="g:m", messages="q", response_format=ResponseFormat(type="json_object"))
    )
    assert plain["generationConfig"] == {"responseMimeType": "application/json"}
    text = body_of(
        ChatRequest(model="g:m", messages="q", response_format=ResponseFormat(type="text"))
    )
    assert "generationConfig" not in text


def test_a_decoded_reply_goes_back_with_its_ids_and_signatures() -> None:
    reply = chunk(
        {"text": "Let me check.", "thought": True, "thoughtSignature": "r"},
        {"functionCall": {"name": "temp", "args": {"city": "Paris"}}, "thoughtSignature": "s"},
        {"functionCall": {"name": "temp", "args": {"city": "Rome"}}},
        finish="STOP",
    )
    out = CODEC.decode_body(orjson.dumps(reply))
    body = body_of(
        ChatRequest(
            model="g:m",
            messages=[
                Message.user("q"),
                out.message,
                Message.tool("call_0", "20"),
                Message.tool("call_1", "25"),
            ],
        )
    )
    assert body["contents"][1]["parts"] == [
        {"text": "Let me check.", "thought": True, "thoughtSignature": "r"},
        {
            "functionCall": {"id": "call_0", "name": "temp", "args": {"city": "Paris"}},
            "thoughtSignature": "s",
        },
        {"functionCall": {"id": "call_1", "name": "temp", "args": {"city": "Rome"}}},
    ]
    assert [p["functionResponse"]["name"] for p in body["contents"][2]["parts"]] == ["temp"] * 2


# --- streamed replies -----------------------------------------------------------------------


def test_thoughts_text_and_calls_in_order_with_merged_pieces() -> None:
    body = sse(
        chunk({"text": "Plan", "thought": True}),
        chunk({"text": " more.", "thought": True}, {"text": "Answer"}),
        chunk({"text": " here."}),
        chunk({"functionCall": {"name": "f", "args": {"x": 1}}}),
        chunk({"text": "After."}, finish="STOP", usageMetadata={"promptTokenCount": 4}),
    )
    out, events = decode(body)
    assert events == [
        ReasoningDelta("c", "Plan"),
        ReasoningDelta("c", " more."),
        TextDelta("c", "Answer"),
        TextDelta("c", " here."),
        ToolCallDelta("c", 0, "call_0", "f", '{"x":1}'),
        TextDelta("c", "After."),
        UsageReported("c", Usage(4, 0, 0, 0, 0)),
    ]
    assert out.message == Message.assistant(
        [
            ReasoningPart(text="Plan more."),
            TextPart("Answer here."),
            ToolCall(id="call_0", name="f", arguments='{"x":1}'),
            TextPart("After."),
        ]
    )
    assert out.finish_reason == "tool_calls"


def test_a_signature_on_an_empty_final_piece_joins_the_open_text() -> None:
    out, _ = decode(
        sse(chunk({"text": "Hi"}), chunk({"text": "", "thoughtSignature": "s"}, finish="STOP"))
    )
    assert out.message == Message.assistant([TextPart("Hi", signature="s")])
    out, _ = decode(
        sse(
            chunk({"functionCall": {"name": "f"}}),
            chunk({"text": "", "thoughtSignature": "s"}, finish="STOP"),
        )
    )
    assert out.message.content[1] == TextPart("", signature="s")


def test_usage_comes_from_the_last_event_and_is_reported_once() -> None:
    usage = {"promptTokenCount": 55, "candidatesTokenCount": 2, "totalTokenCount": 57}
    final = {
        "promptTokenCount": 165,
        "cachedContentTokenCount": 100,
        "candidatesTokenCount": 5,
        "thoughtsTokenCount": 20,
        "totalTokenCount": 190,
    }
    out, events = decode(
        sse(
            chunk({"text": "a"}, usageMetadata=usage),
            chunk({"text": "b"}, finish="STOP", usageMetadata=final),
        )
    )
    assert out.usage == Usage(165, 25, 100, 0, 20)
    assert [e for e in events if isinstance(e, UsageReported)] == [UsageReported("c", out.usage)]


def test_usage_without_a_total_adds_candidates_and_thoughts() -> None:
    meta = {"promptTokenCount": 3, "candidatesTokenCount": 4, "thoughtsTokenCount": 5}
    out, _ = decode(sse(chunk({"text": "a"}, finish="STOP", usageMetadata=meta)))
    assert out.usage == Usage(3, 9, 0, 0, 5)


@pytest.mark.parametrize(
    ("raw", "finish"),
    [
        ("MAX_TOKENS", "length"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("PROHIBITED_CONTENT", "content_filter"),
        ("MALFORMED_FUNCTION_CALL", "other"),
        ("OTHER", "other"),
    ],
)
def test_finish_reasons(raw: str, finish: str) -> None:
    out, _ = decode(sse(chunk({"text": "a"}, finish=raw)))
    assert (out.finish_reason, out.raw_finish_reason) == (finish, raw)


def test_a_blocked_prompt_finishes_as_content_filter() -> None:
    blocked = {"promptFeedback": {"blockReason": "OTHER"}, "usageMetadata": {"promptTokenCount": 8}}
    out, events = decode(sse(blocked))
    assert (out.finish_reason, out.raw_finish_reason) == ("content_filter", "OTHER")
    assert out.message == Message.assistant()
    assert events == [UsageReported("c", Usage(8, 0, 0, 0, 0))]


def test_a_stream_without_a_finish_reason_is_broken() -> None:
    decoder = GeminiStreamDecoder("c")
    assert decoder.feed(sse(chunk({"text": "Hel"}))) == [TextDelta("c", "Hel")]
    with pytest.raises(StreamBroken, match="1 events"):
        decoder.finish()


def test_the_last_event_without_its_blank_line_is_read() -> None:
    body = sse(chunk({"text": "a"})) + b"data: " + orjson.dumps(chunk({"text": "b"}, finish="STOP"))
    out, _ = decode(body)
    assert out.message.text == "ab"


@pytest.mark.parametrize(
    ("error", "cls"),
    [
        ({"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}, Overloaded),
        ({"code": 500, "message": "Internal error", "status": "INTERNAL"}, ServerError),
        ({"code": 429, "message": "Quota", "status": "RESOURCE_EXHAUSTED"}, RateLimited),
        ({"code": 400, "message": "Bad", "status": "INVALID_ARGUMENT"}, BadRequest),
    ],
)
def test_an_error_event_mid_stream(error: dict[str, Any], cls: type[CallError]) -> None:
    decoder = GeminiStreamDecoder("c")
    decoder.feed(sse(chunk({"text": "a"})))
    with pytest.raises(cls) as raised:
        decoder.feed(sse({"error": error}))
    assert raised.value.status == error["code"]
    assert raised.value.error_type == error["status"]


@pytest.mark.parametrize(
    "payload",
    [
        b"data: {oops\r\n\r\n",
        b"data: [1]\r\n\r\n",
        b'data: {"candidates": [{"content": {"parts": "x"}}]}\r\n\r\n',
        b'data: {"candidates": [{"content": {"parts": [{"functionCall": {"args": {}}}]}}]}\n\n',
    ],
)
def test_malformed_events_are_protocol_errors(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        GeminiStreamDecoder("c").feed(payload)


# --- whole bodies and errors --------------------------------------------------------------------


def test_a_json_array_body_is_decoded_like_a_stream() -> None:
    body = orjson.dumps([chunk({"text": "a"}), chunk({"text": "b"}, finish="STOP")])
    out = CODEC.decode_body(body)
    assert (out.message.text, out.finish_reason) == ("ab", "stop")


def test_a_body_without_a_finish_reason_is_taken_as_it_is() -> None:
    out = CODEC.decode_body(orjson.dumps(chunk({"text": "a"})))
    assert (out.message.text, out.finish_reason, out.raw_finish_reason) == ("a", "other", None)


def test_an_error_body_raises() -> None:
    body = orjson.dumps([{"error": {"code": 404, "message": "no model", "status": "NOT_FOUND"}}])
    with pytest.raises(CallError, match="no model") as raised:
        CODEC.decode_body(body)
    assert raised.value.status == 404


def test_error_replies() -> None:
    body = orjson.dumps(
        {
            "error": {
                "code": 429,
                "message": "Resource exhausted",
                "status": "RESOURCE_EXHAUSTED",
                "details": [
                    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "17s"}
                ],
            }
        }
    )
    error = CODEC.decode_error(429, {}, body, wall_now=0.0)
    assert isinstance(error, RateLimited)
    assert (error.retry_after, error.error_type) == (17.0, "RESOURCE_EXHAUSTED")
    denied = b'{"error": {"code": 403, "message": "denied", "status": "PERMISSION_DENIED"}}'
    assert type(CODEC.decode_error(403, {}, denied, wall_now=0.0)) is AuthenticationFailed
    error = CODEC.decode_error(502, {}, b"<html>gateway</html>", wall_now=0.0)
    assert (type(error), error.message) == (ServerError, "<html>gateway</html>")
