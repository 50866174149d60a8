"""The Ollama ``/api/chat`` codec on hand-written requests, streams, bodies and errors."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from sluice._errors import (
    BadRequest,
    ConfigError,
    NotFound,
    ProtocolError,
    RateLimited,
    ServerError,
    StreamBroken,
)
from sluice._events import ReasoningDelta, TextDelta, ToolCallDelta, UsageReported
from sluice._messages import (
    ChatRequest,
    FilePart,
    ImagePart,
    Message,
    ReasoningPart,
    ResponseFormat,
    TextPart,
    Tool,
    ToolCall,
    ToolResultPart,
    Usage,
)
from sluice._protocols import codec_for
from sluice._protocols.ollama import OllamaCodec, OllamaStreamDecoder
from sluice._version import USER_AGENT

CODEC = OllamaCodec()
BASE = "http://localhost:11434"


def body_of(request: ChatRequest) -> Any:
    return orjson.loads(CODEC.build_request(request, base_url=BASE, api_key=None).body)


def ndjson(*lines: dict[str, Any]) -> bytes:
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)


def line(content: str = "", **message: Any) -> dict[str, Any]:
    return {"model": "m", "message": {"role": "assistant", "content": content, **message}}


def done(reason: str = "stop", prompt: int = 5, output: int = 7) -> dict[str, Any]:
    return {
        **line(),
        "done": True,
        "done_reason": reason,
        "prompt_eval_count": prompt,
        "eval_count": output,
    }


def decode(body: bytes) -> tuple[Any, list[Any]]:
    decoder = OllamaStreamDecoder("c")
    events = decoder.feed(body)
    return decoder.finish(), events


# --- request building ---------------------------------------------------------------------


def test_codec_is_registered_under_its_protocol_name() -> None:
    assert isinstance(codec_for("ollama"), OllamaCodec)


@pytest.mark.parametrize("base", [BASE, BASE + "/", BASE + "/v1", BASE + "/v1/"])
def test_url_is_the_native_chat_endpoint(base: str) -> None:
    http = CODEC.build_request(
        ChatRequest(model="ollama:m", messages="hi"), base_url=base, api_key=None
    )
    assert http.url == "http://localhost:11434/api/chat"


def test_headers_and_stream_is_always_sent() -> None:
    http = CODEC.build_request(
        ChatRequest(model="ollama:llama3.2:3b", messages="hi"), base_url=BASE, api_key="key"
    )
    assert http.headers == (
        ("user-agent", USER_AGENT),
        ("content-type", "application/json"),
        ("accept", "application/x-ndjson"),
        ("authorization", "Bearer key"),
    )
    assert orjson.loads(http.body) == {
        "model": "llama3.2:3b",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
    }
    # Ollama streams when "stream" is absent, so false is sent too.
    assert body_of(ChatRequest(model="o:m", messages="hi", stream=False))["stream"] is False


def test_images_reasoning_tool_calls_and_results() -> None:
    body = body_of(
        ChatRequest(
            model="o:m",
            messages=[
                Message.system("Be brief."),
                Message.user(
                    [
                        TextPart("What is "),
                        TextPart("this?"),
                        ImagePart(url="data:image/png;base64,iVBO"),
                        FilePart(data="R0lG", media_type="image/gif"),
                        ReasoningPart(text="not sent from a user"),
                    ]
                ),
                Message.assistant(
                    [
                        ReasoningPart(text="Look it up."),
                        ToolCall(id="call_a", name="lookup", arguments='{"q": "cat"}'),
                        ToolCall(id="call_b", name="other", arguments=""),
                    ]
                ),
                Message.tool("call_a", "a cat"),
                Message(
                    "tool",
                    [
                        ToolResultPart(tool_call_id="call_b", content="x", name="renamed"),
                        ToolResultPart(tool_call_id="unknown", content="y"),
                    ],
                ),
            ],
        )
    )
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is this?", "images": ["iVBO", "R0lG"]},
        {
            "role": "assistant",
            "content": "",
            "thinking": "Look it up.",
            "tool_calls": [
                {"function": {"index": 0, "name": "lookup", "arguments": {"q": "cat"}}},
                {"function": {"index": 1, "name": "other", "arguments": {}}},
            ],
        },
        {"role": "tool", "content": "a cat", "tool_name": "lookup"},
        {"role": "tool", "content": "x", "tool_name": "renamed"},
        {"role": "tool", "content": "y"},
    ]


@pytest.mark.parametrize(
    ("part", "match"),
    [
        (ImagePart(url="https://example.com/cat.png"), "base64 data"),
        (FilePart(data="JVBERi0=", media_type="application/pdf"), "only images"),
        (FilePart(file_id="file-1"), "only images"),
        (ImagePart(url="data:image/svg+xml,<svg/>"), "base64"),
    ],
)
def test_what_ollama_cannot_take_is_refused(part: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        body_of(ChatRequest(model="o:m", messages=[Message.user([part])]))


TOOL = Tool(name="f", description="does f", parameters={"type": "object", "properties": {}})


@pytest.mark.parametrize(
    ("choice", "sends_tools"), [(None, True), ("auto", True), ("required", True), ("none", False)]
)
def test_tools_and_the_only_tool_choice_ollama_can_honour(choice: Any, sends_tools: bool) -> None:
    body = body_of(ChatRequest(model="o:m", messages="q", tools=[TOOL], tool_choice=choice))
    wire = {
        "type": "function",
        "function": {
            "name": "f",
            "description": "does f",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    assert body.get("tools") == ([wire] if sends_tools else None)
    assert "tool_choice" not in body


def test_options_format_and_think() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    body = body_of(
        ChatRequest(
            model="o:m",
            messages="q",
            temperature=0.1,
            top_p=0.5,
            max_tokens=64,
            stop="###",
            seed=3,
            response_format=ResponseFormat(schema=schema),
            extra_body={"think": True, "options": {"num_ctx": 8192}, "keep_alive": "1m"},
        )
    )
    assert body["options"] == {
        "temperature": 0.1,
        "top_p": 0.5,
        "num_predict": 64,
        "stop": ["###"],
        "seed": 3,
        "num_ctx": 8192,
    }
    assert body["format"] == schema
    assert (body["think"], body["keep_alive"]) == (True, "1m")
    fmt = ResponseFormat(type="json_object")
    assert body_of(ChatRequest(model="o:m", messages="q", response_format=fmt))["format"] == "json"
    fmt = ResponseFormat(type="text")
    assert "format" not in body_of(ChatRequest(model="o:m", messages="q", response_format=fmt))


# --- streamed replies -----------------------------------------------------------------------


def test_thinking_text_tool_calls_and_the_done_line() -> None:
    body = ndjson(
        line(thinking="Hmm."),
        line("Calling."),
        line(
            tool_calls=[
                {"id": "call_x1", "function": {"index": 0, "name": "f", "arguments": {"a": 1}}},
                {"function": {"name": "g", "arguments": {}}},
            ]
        ),
        done(prompt=12, output=30),
    )
    out, events = decode(body)
    assert events == [
        ReasoningDelta("c", "Hmm."),
        TextDelta("c", "Calling."),
        ToolCallDelta("c", 0, "call_x1", "f", '{"a":1}'),
        ToolCallDelta("c", 1, "call_1", "g", "{}"),
        UsageReported("c", Usage(12, 30, 0, 0, 0)),
    ]
    assert out.message == Message.assistant(
        [
            ReasoningPart(text="Hmm."),
            TextPart("Calling."),
            ToolCall(id="call_x1", name="f", arguments='{"a":1}'),
            ToolCall(id="call_1", name="g", arguments="{}"),
        ]
    )
    assert (out.finish_reason, out.raw_finish_reason) == ("tool_calls", "stop")
    assert out.response_id is None


def test_lines_cut_anywhere_crlf_and_blank_lines() -> None:
    body = b"\r\n" + ndjson(line("h\u00e9"), line("llo")).replace(b"\n", b"\r\n") + b"\n\n"
    body += ndjson(done())
    for size in (1, 2, 3, 5):
        decoder = OllamaStreamDecoder("c")
        events = []
        for i in range(0, len(body), size):
            events += decoder.feed(body[i : i + size])
        assert [e.text for e in events if isinstance(e, TextDelta)] == ["h\u00e9", "llo"]
        assert decoder.chunks_seen == 3
        assert decoder.finish().message.text == "h\u00e9llo"


def test_a_last_line_without_a_newline_is_read_and_a_cut_one_is_broken() -> None:
    body = ndjson(line("a")) + orjson.dumps(done())
    out, _ = decode(body)
    assert out.usage == Usage(5, 7, 0, 0, 0)
    decoder = OllamaStreamDecoder("c")
    decoder.feed(ndjson(line("a")) + b'{"model":"m","done":tr')
    with pytest.raises(StreamBroken, match="1 lines"):
        decoder.finish()


def test_bytes_after_the_done_line_are_ignored() -> None:
    decoder = OllamaStreamDecoder("c")
    decoder.feed(ndjson(done()))
    assert decoder.feed(b"garbage\n") == []
    assert decoder.finish().finish_reason == "stop"


@pytest.mark.parametrize(
    ("raw", "finish"), [("length", "length"), ("load", "other"), (None, "other")]
)
def test_finish_reasons(raw: str | None, finish: str) -> None:
    last = done()
    if raw is None:
        del last["done_reason"]
    else:
        last["done_reason"] = raw
    out, _ = decode(ndjson(last))
    assert (out.finish_reason, out.raw_finish_reason) == (finish, raw)


def test_an_error_line_mid_stream() -> None:
    decoder = OllamaStreamDecoder("c")
    decoder.feed(ndjson(line("a")))
    with pytest.raises(ServerError, match="model runner has unexpectedly stopped") as raised:
        decoder.feed(b'{"error":"model runner has unexpectedly stopped"}\n')
    assert raised.value.status is None


def test_arguments_sent_as_json_text_are_kept() -> None:
    out, _ = decode(
        ndjson(line(tool_calls=[{"function": {"name": "f", "arguments": '{"a":2}'}}]), done())
    )
    assert out.message.tool_calls == (ToolCall(id="call_0", name="f", arguments='{"a":2}'),)


@pytest.mark.parametrize(
    "payload",
    [b"{oops\n", b"[1]\n", b'{"message": "x"}\n', b'{"message": {"tool_calls": [{"f": 1}]}}\n'],
)
def test_malformed_lines_are_protocol_errors(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        OllamaStreamDecoder("c").feed(payload)


# --- whole bodies and errors --------------------------------------------------------------------


def test_a_whole_body() -> None:
    body = orjson.dumps(
        {
            **done(prompt=9, output=3),
            "message": {
                "role": "assistant",
                "content": "",
                "thinking": "t",
                "tool_calls": [{"function": {"name": "f", "arguments": {"x": "y"}}}],
            },
        }
    )
    out = CODEC.decode_body(body)
    assert out.message == Message.assistant(
        [ReasoningPart(text="t"), ToolCall(id="call_0", name="f", arguments='{"x":"y"}')]
    )
    assert (out.finish_reason, out.usage) == ("tool_calls", Usage(9, 3, 0, 0, 0))


def test_a_streamed_body_read_whole_is_decoded_as_a_stream() -> None:
    out = CODEC.decode_body(ndjson(line("a"), line("b"), done()))
    assert out.message.text == "ab"


def test_a_body_that_is_an_error_or_not_a_reply() -> None:
    with pytest.raises(ServerError, match="boom"):
        CODEC.decode_body(b'{"error": "boom"}')
    with pytest.raises(ProtocolError):
        CODEC.decode_body(b"<html>")
    with pytest.raises(ProtocolError):
        CODEC.decode_body(b'{"model": "m"}')


def test_error_replies() -> None:
    body = b'{"error":"model \\"nope\\" not found, try pulling it first"}'
    error = CODEC.decode_error(404, {}, body, wall_now=0.0)
    assert (type(error), error.message) == (
        NotFound,
        'model "nope" not found, try pulling it first',
    )
    error = CODEC.decode_error(429, {"retry-after": "3"}, b'{"error":"too many"}', wall_now=0.0)
    assert isinstance(error, RateLimited)
    assert error.retry_after == 3.0
    error = CODEC.decode_error(400, {}, b'{"error":"invalid format"}', wall_now=0.0)
    assert (type(error), error.error_type) == (BadRequest, None)
    error = CODEC.decode_error(500, {}, b"Internal Server Error", wall_now=0.0)
    assert (type(error), error.message) == (ServerError, "Internal Server Error")
