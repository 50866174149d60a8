"""The gateway's wire formats, pure: Anthropic bodies into ChatRequest, events into chunks,
errors into each client protocol's format and status; /metrics is a pluggable route."""

import orjson
import pytest

from sluice._errors import (
    AuthenticationFailed,
    BudgetExceeded,
    ConfigError,
    NotFound,
    Overloaded,
    RateLimited,
    ServerError,
)
from sluice._events import ReasoningSignature, ToolCallDelta
from sluice._gateway.anthropic_wire import AnthropicEvents, parse_messages_body, render_message
from sluice._gateway.errors import response_for
from sluice._gateway.openai_wire import OpenAIChunks
from sluice._gateway.request_head import HeadError, parse_head
from sluice._messages import (
    ChatResult,
    ImagePart,
    Message,
    ReasoningPart,
    SpecificTool,
    TextPart,
    ToolCall,
    ToolResultPart,
    Usage,
)

from .gateway_helpers import gateway_harness
from .helpers import virtual_deadline


def test_anthropic_body_becomes_a_chat_request():
    request = parse_messages_body(
        {
            "model": "claude",
            "max_tokens": 100,
            "system": [{"type": "text", "text": "Be brief."}],
            "messages": [
                {"role": "user", "content": "Weather?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                        {"type": "text", "text": "Checking."},
                        {"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"c": "P"}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                        {"type": "text", "text": "And tomorrow?"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AA=="},
                        },
                    ],
                },
            ],
            "tools": [{"name": "w", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "tool", "name": "w", "disable_parallel_tool_use": True},
            "stop_sequences": ["END"],
            "temperature": 0,
            "top_k": 5,
        },
        model="sim:sim-small",
    )
    assert request.model == "sim:sim-small" and request.max_tokens == 100
    assert [m.role for m in request.messages] == ["system", "user", "assistant", "tool", "user"]
    assert request.messages[0].text == "Be brief."
    assistant = request.messages[2]
    assert assistant.content == (
        ReasoningPart(text="hmm", signature="sig"),
        TextPart("Checking."),
        ToolCall(id="toolu_1", name="w", arguments='{"c":"P"}'),
    )
    assert request.messages[3].content == (ToolResultPart(tool_call_id="toolu_1", content="sunny"),)
    assert request.messages[4].content == (
        TextPart("And tomorrow?"),
        ImagePart(url="data:image/png;base64,AA==", media_type="image/png"),
    )
    assert request.tool_choice == SpecificTool("w") and request.parallel_tool_calls is False
    assert request.stop == ("END",) and request.temperature == 0.0
    assert request.extra_body == {"top_k": 5}


_USER = {"role": "user", "content": "x"}


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        ({"max_tokens": 5, "messages": []}, "messages"),
        ({"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}, "messages.0.role"),
        (
            {"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "audio"}]}]},
            "messages.0.content.0.type",
        ),
        ({"max_tokens": 5, "messages": [_USER], "stop_sequences": 7}, "stop_sequences"),
        ({"max_tokens": 5, "messages": [_USER], "stop_sequences": True}, "stop_sequences"),
        ({"max_tokens": 5, "messages": [_USER], "stop_sequences": [3]}, "stop_sequences.0"),
    ],
)
def test_bad_anthropic_bodies_name_the_field(body, where):
    with pytest.raises(ConfigError, match=rf"^{where}: "):
        parse_messages_body(body, model="sim:x")


def _result(*parts, finish="stop"):
    return ChatResult(
        call_id="c1",
        provider="sim",
        model="sim-small",
        message=Message("assistant", parts),
        finish_reason=finish,
        usage=Usage(10, 5),
    )


def test_anthropic_events_open_and_close_blocks():
    events = AnthropicEvents("msg_1", "m")
    out = events.start() + events.text("Hi") + events.text("!")
    out += events.tool_call(ToolCallDelta("c1", 0, "toolu_a", "w", ""))
    out += events.tool_call(ToolCallDelta("c1", 0, None, None, '{"c":1}'))
    out += events.finish(_result(TextPart("Hi!"), finish="tool_calls"))
    kinds = [
        line.removeprefix(b"event: ") for line in out.split(b"\n") if line.startswith(b"event:")
    ]
    assert kinds == [
        b"message_start",
        b"content_block_start",
        b"content_block_delta",
        b"content_block_delta",
        b"content_block_stop",
        b"content_block_start",
        b"content_block_delta",
        b"content_block_stop",
        b"message_delta",
        b"message_stop",
    ]
    datas = [orjson.loads(line[6:]) for line in out.split(b"\n") if line.startswith(b"data: ")]
    assert datas[5]["content_block"] == {
        "type": "tool_use",
        "id": "toolu_a",
        "name": "w",
        "input": {},
    }
    assert datas[5]["index"] == 1
    assert datas[8]["delta"]["stop_reason"] == "tool_use"
    assert datas[8]["usage"]["output_tokens"] == 5 and datas[8]["usage"]["input_tokens"] == 10


def test_openai_chunks_match_the_wire_format():
    chunks = OpenAIChunks("chatcmpl-1", "m", 7, include_usage=True)
    role = orjson.loads(chunks.role()[6:])
    assert role == {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 7,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": "", "refusal": None},
                "logprobs": None,
                "finish_reason": None,
            }
        ],
        "usage": None,
    }
    first = orjson.loads(chunks.tool_call(ToolCallDelta("c", 0, "call_1", "w", '{"a"'))[6:])
    later = orjson.loads(chunks.tool_call(ToolCallDelta("c", 0, None, None, ":1}"))[6:])
    assert first["choices"][0]["delta"]["tool_calls"] == [
        {
            "index": 0,
            "id": "call_1",
            "type": "function",
            "function": {"name": "w", "arguments": '{"a"'},
        }
    ]
    assert later["choices"][0]["delta"]["tool_calls"] == [
        {"index": 0, "function": {"arguments": ":1}"}}
    ]
    end = chunks.finish(_result(TextPart("x"))).split(b"\n\n")
    assert orjson.loads(end[0][6:])["choices"][0]["finish_reason"] == "stop"
    usage = orjson.loads(end[1][6:])
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] == 15
    assert end[2] == b"data: [DONE]"


def test_render_message_keeps_tool_input_as_an_object():
    body = orjson.loads(
        render_message(
            _result(
                TextPart("ok"),
                ToolCall(id="t", name="w", arguments='{"c":"P"}'),
                finish="tool_calls",
            ),
            model="m",
            message_id="msg_1",
        )
    )
    assert body["content"][1] == {"type": "tool_use", "id": "t", "name": "w", "input": {"c": "P"}}
    assert body["stop_reason"] == "tool_use" and body["usage"]["input_tokens"] == 10


@pytest.mark.parametrize(
    ("error", "openai_status", "anthropic_status", "anthropic_type"),
    [
        (RateLimited("slow down", retry_after=3.0), 429, 429, "rate_limit_error"),
        (Overloaded("busy"), 529, 529, "overloaded_error"),
        (ServerError("boom", status=500), 502, 502, "api_error"),
        (AuthenticationFailed("bad upstream key", status=401), 502, 502, "api_error"),
        (NotFound("no model", status=404), 404, 404, "not_found_error"),
        (BudgetExceeded("spent"), 429, 400, "invalid_request_error"),
        (ConfigError("bad"), 400, 400, "invalid_request_error"),
    ],
)
def test_errors_in_each_clients_format(error, openai_status, anthropic_status, anthropic_type):
    status, headers, body = response_for("openai", error)
    assert status == openai_status and "message" in orjson.loads(body)["error"]
    status, headers, body = response_for("anthropic", error)
    assert status == anthropic_status
    assert orjson.loads(body)["error"]["type"] == anthropic_type
    if isinstance(error, RateLimited):
        assert (b"retry-after", b"3") in headers


@virtual_deadline(10)
async def test_metrics_is_a_pluggable_route(autojump_clock):
    async with gateway_harness() as gw:
        status, _, body = await gw.call("/metrics", None, method="GET")
        assert status == 200 and b"sluice_gateway_requests_total" in body  # the default
        gw.gateway.metrics = None
        status, _, _ = await gw.call("/metrics", None, method="GET")
        assert status == 404
        gw.gateway.metrics = lambda: b"sluice_calls_total 3\n"
        status, headers, body = await gw.call("/metrics", None, method="GET")
        assert status == 200 and body == b"sluice_calls_total 3\n"
        assert headers["content-type"].startswith("text/plain")


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET / HTTP/1.1\r\nhost : a", 400),  # whitespace before the colon
        (b"GET / HTTP/1.1\r\nhost: a\r\n folded", 400),  # obsolete line folding
        (b"GET / HTTP/1.1\r\nhost: a\x00", 400),
        (b"GET / HTTP/1.1\r\nhost: a\nx: b", 400),  # a bare LF
        (b"GET / HTTP/1.1", 400),  # no host
        (b"GET / HTTP/2.0\r\nhost: a", 505),
        (b"GET  / HTTP/1.1\r\nhost: a", 400),
        (b"GET / HTTP/1.1\r\nhost: a\r\ncontent-length: 1\r\ncontent-length: 2", 400),
        (b"GET / HTTP/1.1\r\nhost: a\r\ncontent-length: -1", 400),
    ],
)
def test_malformed_heads_are_refused(head, status):
    with pytest.raises(HeadError) as caught:
        parse_head(head)
    assert caught.value.status == status


def test_heads_parse_like_h11():
    head = parse_head(
        b"POST /v1/messages?beta=true HTTP/1.1\r\nHost: gw\r\nX-Api-Key:  k \t\r\n"
        b"content-length: 12\r\ncontent-length: 12"
    )
    assert (head.method, head.target, head.http_version) == (
        b"POST",
        b"/v1/messages?beta=true",
        b"1.1",
    )
    assert head.headers == [
        (b"host", b"gw"),
        (b"x-api-key", b"k"),
        (b"content-length", b"12"),
        (b"content-length", b"12"),
    ]
    assert head.content_length == 12 and not head.chunked and not head.expect_continue
    assert parse_head(b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked").chunked
    assert parse_head(b"GET / HTTP/1.0").http_version == b"1.0"


@virtual_deadline(10)
async def test_client_only_parameters_reach_only_a_provider_of_the_same_protocol(autojump_clock):
    config = {
        "ledger": {"persist": False},
        "providers": {"simant": {"protocol": "anthropic", "base_url": "http://sim.invalid/v1"}},
    }
    async with gateway_harness(config=config) as gw:
        body = {"messages": [{"role": "user", "content": "hi"}], "user": "u-1", "store": False}
        same = gw.gateway._parse(body, "sim:sim-small", "openai", None)
        other = gw.gateway._parse(body, "simant:sim-small", "openai", None)
        assert same.extra_body == {"user": "u-1", "store": False}
        assert other.extra_body == {}
        assert same.on_partial == "fail" and same.tag is None


def test_signatures_close_their_thinking_block_and_redacted_blocks_stand_alone():
    events = AnthropicEvents("msg_1", "m")
    out = b"".join(
        [
            events.start(Usage(50, 1, 0, 0, 0)),
            events.reasoning("first"),
            events.signature(ReasoningSignature("c", "sig-1")),
            events.reasoning("second"),
            events.signature(ReasoningSignature("c", "sig-2")),
            events.signature(ReasoningSignature("c", "opaque", redacted=True)),
            events.text("answer"),
        ]
    )
    data = [orjson.loads(line[6:]) for line in out.split(b"\n") if line.startswith(b"data: ")]
    assert data[0]["message"]["usage"]["input_tokens"] == 50
    blocks = [(d["index"], d["content_block"]) for d in data if d["type"] == "content_block_start"]
    assert blocks == [
        (0, {"type": "thinking", "thinking": "", "signature": ""}),
        (1, {"type": "thinking", "thinking": "", "signature": ""}),
        (2, {"type": "redacted_thinking", "data": "opaque"}),
        (3, {"type": "text", "text": ""}),
    ]
    signatures = [
        (d["index"], d["delta"]["signature"])
        for d in data
        if d["type"] == "content_block_delta" and d["delta"]["type"] == "signature_delta"
    ]
    assert signatures == [(0, "sig-1"), (1, "sig-2")]
