"""The ``openai-responses`` codec, pure: request bytes, stream and body decoding, error mapping,
and the per-model choice between OpenAI's two APIs on one provider.

Replies here are written by hand in the exact shape OpenAI's Responses API sends (the recorded
ones are in ``test_conformance_responses.py``); each stream is also fed a byte at a time.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from sluice._cli import main
from sluice._config import load_config
from sluice._errors import (
    BadRequest,
    ConfigError,
    ContentFiltered,
    ContextTooLong,
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
    FilePart,
    ImagePart,
    Message,
    ReasoningPart,
    ResponseFormat,
    TextPart,
    Tool,
    ToolCall,
    Usage,
)
from sluice._protocols import PROTOCOLS, codec_for, embed_codec
from sluice._protocols.openai import OpenAICodec
from sluice._protocols.openai_family import OpenAIFamilyCodec
from sluice._protocols.quirks import RequestQuirks
from sluice._protocols.responses import ResponsesCodec
from sluice._protocols.responses_request import (
    reasoning_signature,
    split_reasoning_signature,
)
from sluice.providers._codec import provider_codec
from sluice.providers._operations import check_model
from sluice.providers._registry import resolve_provider
from sluice.transport import HttpxTransport

CODEC = ResponsesCodec()
BASE = "https://api.openai.com/v1"

LOOKUP = Tool(
    name="lookup",
    description="Look it up.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}},
    strict=True,
)


def sse(*events: dict[str, Any]) -> bytes:
    """An event stream as OpenAI writes it: ``event:`` names the type, then the data line."""
    return b"".join(
        b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events
    )


def decode(body: bytes) -> tuple[Any, list[Any]]:
    """Decode ``body`` whole and a byte at a time; both must agree. (output, events)"""
    whole = CODEC.stream_decoder("c1")
    events = whole.feed(body)
    out = whole.finish()
    piecewise = CODEC.stream_decoder("c1")
    one_by_one = [e for i in range(len(body)) for e in piecewise.feed(body[i : i + 1])]
    assert piecewise.finish() == out
    assert one_by_one == events
    return out, events


def response(status: str = "completed", **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "resp_1",
        "object": "response",
        "status": status,
        "model": "gpt-5",
        "output": [],
        "usage": {
            "input_tokens": 120,
            "input_tokens_details": {"cached_tokens": 100},
            "output_tokens": 40,
            "output_tokens_details": {"reasoning_tokens": 30},
            "total_tokens": 160,
        },
    }
    body.update(fields)
    return body


CREATED = {"type": "response.created", "response": response("in_progress", usage=None)}


# Request building --------------------------------------------------------------------------


def test_a_full_request_is_written_exactly():
    request = ChatRequest(
        model="openai:gpt-5",
        messages=[
            Message.system("Be brief."),
            Message.user(
                [
                    TextPart("What is in this image?"),
                    ImagePart(url="https://example.com/a.png", detail="low"),
                ]
            ),
            Message.assistant(
                [
                    ReasoningPart(text="Look first.", signature="rs_1 gAAA"),
                    TextPart("Let me check."),
                    ToolCall(id="call_1", name="lookup", arguments='{"q":"a"}'),
                ]
            ),
            Message.tool("call_1", "a cat"),
            Message.system("Answer in French."),
        ],
        tools=[LOOKUP],
        tool_choice="lookup",
        parallel_tool_calls=False,
        response_format=ResponseFormat(schema={"type": "object"}, name="answer", strict=True),
        temperature=0.5,
        top_p=0.9,
        max_tokens=100,
    )
    built = CODEC.build_request(request, base_url=BASE + "/", api_key="sk-test")
    assert (built.method, built.url) == ("POST", "https://api.openai.com/v1/responses")
    assert dict(built.headers) == {
        "user-agent": dict(built.headers)["user-agent"],
        "content-type": "application/json",
        "accept": "text/event-stream",
        "authorization": "Bearer sk-test",
    }
    assert built.body == (
        b'{"model":"gpt-5","instructions":"Be brief.","input":['
        b'{"role":"user","content":[{"type":"input_text","text":"What is in this image?"},'
        b'{"type":"input_image","image_url":"https://example.com/a.png","detail":"low"}]},'
        b'{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"Look first."}],'
        b'"encrypted_content":"gAAA"},'
        b'{"role":"assistant","content":"Let me check."},'
        b'{"type":"function_call","call_id":"call_1","name":"lookup","arguments":"{\\"q\\":\\"a\\"}"},'
        b'{"type":"function_call_output","call_id":"call_1","output":"a cat"},'
        b'{"role":"system","content":"Answer in French."}],'
        b'"tools":[{"type":"function","name":"lookup","description":"Look it up.",'
        b'"parameters":{"type":"object","properties":{"q":{"type":"string"}}},"strict":true}],'
        b'"tool_choice":{"type":"function","name":"lookup"},"parallel_tool_calls":false,'
        b'"text":{"format":{"type":"json_schema","name":"answer","schema":{"type":"object"},'
        b'"strict":true}},"temperature":0.5,"top_p":0.9,"max_output_tokens":100,'
        b'"store":false,"stream":true}'
    )


def test_a_plain_request_and_what_the_api_has_no_field_for():
    request = ChatRequest(
        model="openai:gpt-4o", messages="Hi", seed=7, stop=["END"], stream=False, tool_choice="auto"
    )
    built = CODEC.build_request(request, base_url=BASE, api_key=None)
    assert built.body == (
        b'{"model":"gpt-4o","input":[{"role":"user","content":"Hi"}],"tool_choice":"auto",'
        b'"store":false}'
    )
    assert dict(built.headers)["accept"] == "application/json"
    assert "authorization" not in dict(built.headers)


def test_extra_body_merges_last_and_can_turn_store_back_on():
    request = ChatRequest(
        model="openai:o3",
        messages="Hi",
        stream=False,
        extra_body={
            "store": None,
            "include": ["reasoning.encrypted_content"],
            "reasoning": {"effort": "low", "summary": "auto"},
        },
    )
    body = orjson.loads(CODEC.build_request(request, base_url=BASE, api_key=None).body)
    assert body == {
        "model": "o3",
        "input": [{"role": "user", "content": "Hi"}],
        "include": ["reasoning.encrypted_content"],
        "reasoning": {"effort": "low", "summary": "auto"},
    }
    stored = ChatRequest(model="openai:o3", messages="Hi", extra_body={"store": True})
    assert orjson.loads(CODEC.build_request(stored, base_url=BASE, api_key=None).body)["store"]


def test_files_json_mode_and_another_providers_reasoning():
    request = ChatRequest(
        model="openai:gpt-4.1",
        messages=[
            Message.user([FilePart(data="JVBERi0=", name="a.pdf"), FilePart(file_id="file-1")]),
            # Anthropic's signed thinking has no wire form in the Responses API: not sent.
            Message.assistant([ReasoningPart(text="hmm", signature="EqQBCkYI"), TextPart("ok")]),
            Message.assistant([ReasoningPart(text="no signature at all")]),
        ],
        response_format=ResponseFormat(type="json_object"),
        stream=False,
    )
    body = orjson.loads(CODEC.build_request(request, base_url=BASE, api_key=None).body)
    assert body["input"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "input_file",
                    "file_data": "data:application/pdf;base64,JVBERi0=",
                    "filename": "a.pdf",
                },
                {"type": "input_file", "file_id": "file-1"},
            ],
        },
        {"role": "assistant", "content": "ok"},
    ]
    assert body["text"] == {"format": {"type": "json_object"}}


def test_a_system_message_with_an_image_is_refused():
    request = ChatRequest(
        model="openai:gpt-4o", messages=[Message.system([ImagePart(url="https://x/y.png")])]
    )
    with pytest.raises(ConfigError, match="system message can hold only text"):
        CODEC.build_request(request, base_url=BASE, api_key=None)


def test_quirks_azure_path_and_omitted_tool_choice():
    quirks = RequestQuirks(omit_tool_choice=["required"], azure_api_version="2025-04-01-preview")
    codec = ResponsesCodec(quirks)
    request = ChatRequest(
        model="azure:my-deploy", messages="Hi", tools=[LOOKUP], tool_choice="required"
    )
    built = codec.build_request(request, base_url="https://res.openai.azure.com", api_key=None)
    assert built.url == (
        "https://res.openai.azure.com/openai/responses?api-version=2025-04-01-preview"
    )
    body = orjson.loads(built.body)
    assert body["model"] == "my-deploy" and "tool_choice" not in body


def test_reasoning_signatures_round_trip():
    assert reasoning_signature("rs_1", "gAAA") == "rs_1 gAAA"
    assert reasoning_signature("rs_1", None) == "rs_1 "
    assert split_reasoning_signature("rs_1 gAAA") == ("rs_1", "gAAA")
    assert split_reasoning_signature("rs_1 ") == ("rs_1", None)
    assert split_reasoning_signature("EqQBCkYI") is None
    assert split_reasoning_signature(None) is None


# Stream decoding ----------------------------------------------------------------------------


def test_reasoning_summary_parts_text_and_usage():
    reasoning = {"type": "reasoning", "id": "rs_9", "summary": []}
    message = {"type": "message", "id": "msg_9", "role": "assistant", "content": []}
    body = sse(
        CREATED,
        {"type": "response.output_item.added", "output_index": 0, "item": reasoning},
        {
            "type": "response.reasoning_summary_part.added",
            "item_id": "rs_9",
            "output_index": 0,
            "summary_index": 0,
            "part": {"type": "summary_text", "text": ""},
        },
        {
            "type": "response.reasoning_summary_text.delta",
            "item_id": "rs_9",
            "output_index": 0,
            "summary_index": 0,
            "delta": "**Plan**",
        },
        {
            "type": "response.reasoning_summary_part.added",
            "item_id": "rs_9",
            "output_index": 0,
            "summary_index": 1,
            "part": {"type": "summary_text", "text": ""},
        },
        {
            "type": "response.reasoning_summary_text.delta",
            "item_id": "rs_9",
            "output_index": 0,
            "summary_index": 1,
            "delta": "Add them.",
        },
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {**reasoning, "encrypted_content": "gAAAB"},
        },
        {"type": "response.output_item.added", "output_index": 1, "item": message},
        {
            "type": "response.output_text.delta",
            "item_id": "msg_9",
            "output_index": 1,
            "content_index": 0,
            "delta": "4",
            "logprobs": [],
        },
        {"type": "response.completed", "response": response()},
    )
    out, events = decode(body)
    assert out.message == Message(
        "assistant",
        (ReasoningPart(text="**Plan**\n\nAdd them.", signature="rs_9 gAAAB"), TextPart("4")),
    )
    assert events == [
        ReasoningDelta("c1", "**Plan**"),
        ReasoningDelta("c1", "\n\n"),
        ReasoningDelta("c1", "Add them."),
        ReasoningSignature("c1", "rs_9 gAAAB"),
        TextDelta("c1", "4"),
        UsageReported("c1", Usage(120, 40, 100, 0, 30)),
    ]
    assert (out.finish_reason, out.raw_finish_reason) == ("stop", "completed")
    assert out.usage == Usage(120, 40, 100, 0, 30)
    assert out.response_id == "resp_1"
    # The next turn carries the reasoning item back, encrypted content and all.
    follow = ChatRequest(model="openai:gpt-5", messages=[Message.user("2+2?"), out.message])
    items = orjson.loads(CODEC.build_request(follow, base_url=BASE, api_key=None).body)["input"]
    assert items[1:] == [
        {
            "type": "reasoning",
            "id": "rs_9",
            "summary": [{"type": "summary_text", "text": "**Plan**\n\nAdd them."}],
            "encrypted_content": "gAAAB",
        },
        {"role": "assistant", "content": "4"},
    ]


def test_two_function_calls_and_a_refusal():
    call = {"type": "function_call", "status": "in_progress", "arguments": ""}
    body = sse(
        CREATED,
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**call, "id": "fc_a", "call_id": "call_a", "name": "lookup"},
        },
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {**call, "id": "fc_b", "call_id": "call_b", "name": "lookup"},
        },
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_b",
            "output_index": 1,
            "delta": '{"q":',
        },
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_a",
            "output_index": 0,
            "delta": '{"q":"x"}',
        },
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_b",
            "output_index": 1,
            "delta": '"y"}',
        },
        {
            "type": "response.function_call_arguments.done",
            "item_id": "fc_b",
            "output_index": 1,
            "arguments": '{"q":"y"}',
        },
        {
            "type": "response.refusal.delta",
            "item_id": "msg_1",
            "output_index": 2,
            "delta": "I won't.",
        },
        {"type": "response.completed", "response": response()},
    )
    out, events = decode(body)
    assert [e for e in events if isinstance(e, ToolCallDelta)] == [
        ToolCallDelta("c1", 0, "call_a", "lookup", ""),
        ToolCallDelta("c1", 1, "call_b", "lookup", ""),
        ToolCallDelta("c1", 1, None, None, '{"q":'),
        ToolCallDelta("c1", 0, None, None, '{"q":"x"}'),
        ToolCallDelta("c1", 1, None, None, '"y"}'),
    ]
    assert out.message.tool_calls == (
        ToolCall(id="call_a", name="lookup", arguments='{"q":"x"}'),
        ToolCall(id="call_b", name="lookup", arguments='{"q":"y"}'),
    )
    assert out.message.text == "I won't."
    assert out.finish_reason == "tool_calls"


def test_arguments_that_come_only_with_the_finished_item():
    body = sse(
        CREATED,
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "lookup",
                "arguments": '{"q":"z"}',
                "status": "completed",
            },
        },
        {"type": "response.completed", "response": response()},
    )
    out, events = decode(body)
    assert events[0] == ToolCallDelta("c1", 0, "call_1", "lookup", '{"q":"z"}')
    assert out.message.tool_calls == (ToolCall(id="call_1", name="lookup", arguments='{"q":"z"}'),)


def test_a_stream_with_only_the_final_object_still_gives_the_reply():
    output = [
        {
            "type": "message",
            "id": "m",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Hello", "annotations": []}],
        },
    ]
    out, events = decode(sse({"type": "response.completed", "response": response(output=output)}))
    assert events[0] == TextDelta("c1", "Hello")
    assert out.message == Message("assistant", (TextPart("Hello"),))


@pytest.mark.parametrize(
    ("reason", "finish"),
    [("max_output_tokens", "length"), ("content_filter", "content_filter"), ("other", "other")],
)
def test_an_incomplete_response_names_why(reason, finish):
    body = sse(
        CREATED,
        {
            "type": "response.output_text.delta",
            "item_id": "m",
            "output_index": 0,
            "content_index": 0,
            "delta": "Once upon",
        },
        {
            "type": "response.incomplete",
            "response": response("incomplete", incomplete_details={"reason": reason}),
        },
    )
    out, _ = decode(body)
    assert (out.finish_reason, out.raw_finish_reason) == (finish, reason)
    assert out.message.text == "Once upon"
    whole = response("incomplete", incomplete_details={"reason": reason})
    assert CODEC.decode_body(orjson.dumps(whole)).finish_reason == finish


@pytest.mark.parametrize(
    ("error", "cls", "status"),
    [
        ({"code": "server_error", "message": "Something went wrong."}, ServerError, None),
        ({"code": "rate_limit_exceeded", "message": "Slow down."}, RateLimited, None),
        ({"code": "invalid_prompt", "message": "Bad prompt."}, BadRequest, 400),
        ({"code": "invalid_image_url", "message": "No image there."}, BadRequest, 400),
        (
            {"code": "image_content_policy_violation", "message": "Not allowed."},
            ContentFiltered,
            400,
        ),
    ],
)
def test_a_failed_response_raises_the_error_its_code_calls_for(error, cls, status):
    body = sse(CREATED, {"type": "response.failed", "response": response("failed", error=error)})
    decoder = CODEC.stream_decoder("c1")
    with pytest.raises(cls) as caught:
        decoder.feed(body)
    assert type(caught.value) is cls
    assert (caught.value.message, caught.value.error_type) == (error["message"], error["code"])
    assert caught.value.status == status
    with pytest.raises(cls):
        CODEC.decode_body(orjson.dumps(response("failed", error=error)))


def test_an_error_event_mid_stream():
    body = sse(
        CREATED,
        {
            "type": "error",
            "code": "context_length_exceeded",
            "param": "input",
            "message": "Your input exceeds the context window of this model.",
            "sequence_number": 1,
        },
    )
    with pytest.raises(ContextTooLong) as caught:
        CODEC.stream_decoder("c1").feed(body)
    assert (caught.value.error_type, caught.value.param) == ("context_length_exceeded", "input")


def test_a_stream_cut_before_the_final_event_is_broken():
    body = sse(
        CREATED,
        {
            "type": "response.output_text.delta",
            "item_id": "m",
            "output_index": 0,
            "content_index": 0,
            "delta": "Hel",
        },
    )
    decoder = CODEC.stream_decoder("c1")
    assert decoder.feed(body) == [TextDelta("c1", "Hel")]
    with pytest.raises(StreamBroken, match=r"without response\.completed"):
        decoder.finish()


def test_a_payload_that_is_not_json_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="not JSON"):
        CODEC.stream_decoder("c1").feed(b"data: {nope\n\n")
    with pytest.raises(ProtocolError, match="not a response"):
        CODEC.decode_body(b'{"id": "x"}')


def test_error_replies_are_read_as_the_chat_apis():
    body = (
        b'{"error": {"message": "Incorrect API key.", "type": "invalid_request_error",'
        b' "code": "invalid_api_key", "param": null}}'
    )
    error = CODEC.decode_error(401, {"x-request-id": "req_1"}, body, wall_now=0.0)
    expected = OpenAICodec().decode_error(401, {"x-request-id": "req_1"}, body, wall_now=0.0)

    def fields(e: Any) -> tuple[Any, ...]:
        return (type(e), e.message, e.status, e.error_type, e.code, e.param, e.request_id)

    assert fields(error) == fields(expected)
    assert (type(error).__name__, error.code, error.request_id) == (
        "AuthenticationFailed",
        "invalid_api_key",
        "req_1",
    )


# One provider, both APIs -------------------------------------------------------------------


def test_the_protocol_is_known_everywhere_a_protocol_is_checked():
    assert "openai-responses" in PROTOCOLS
    assert type(codec_for("openai-responses")) is ResponsesCodec
    config = load_config({"providers": {"openai": {"protocol": "openai-responses"}}})
    spec = resolve_provider("openai", config, {"OPENAI_API_KEY": "sk-test"})
    # OpenAI's own server, spoken to through its other API: its auth and quirks still hold.
    assert (spec.protocol, spec.auth) == ("openai-responses", "bearer")
    assert (
        spec.quirks == resolve_provider("openai", load_config({}), {"OPENAI_API_KEY": "k"}).quirks
    )


def family_spec() -> Any:
    config = load_config(
        {"providers": {"openai": {"models": {"o3-pro": {"protocol": "openai-responses"}}}}}
    )
    return resolve_provider("openai", config, {"OPENAI_API_KEY": "sk-test"})


def test_a_model_can_choose_the_responses_api_on_an_openai_provider():
    spec = family_spec()
    assert spec.model_protocols == {"o3-pro": "openai-responses"}
    codec = provider_codec(spec)
    chat = codec.build_request(
        ChatRequest(model="openai:gpt-4o", messages="Hi"), base_url=BASE, api_key="k"
    )
    responses = codec.build_request(
        ChatRequest(model="openai:o3-pro", messages="Hi", max_tokens=50), base_url=BASE, api_key="k"
    )
    assert chat.url == BASE + "/chat/completions"
    assert responses.url == BASE + "/responses"
    assert orjson.loads(responses.body)["max_output_tokens"] == 50
    # A provider without the setting gets its protocol's codec, unwrapped.
    plain = resolve_provider("openai", load_config({}), {"OPENAI_API_KEY": "k"})
    assert not isinstance(provider_codec(plain), OpenAIFamilyCodec)


def test_the_family_codec_reads_each_reply_with_its_apis_decoder():
    codec = OpenAIFamilyCodec(OpenAICodec(), {"o3-pro": CODEC}, chat=OpenAICodec(), responses=CODEC)
    responses_stream = sse(
        CREATED,
        {
            "type": "response.output_text.delta",
            "item_id": "m",
            "output_index": 0,
            "content_index": 0,
            "delta": "Hi",
        },
        {"type": "response.completed", "response": response()},
    )
    chat_stream = (
        b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"Yo"}}]}\n\n'
        b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
        b"data: [DONE]\n\n"
    )
    for body, text in ((responses_stream, "Hi"), (chat_stream, "Yo")):
        decoder = codec.stream_decoder("c1")
        events = [e for i in range(len(body)) for e in decoder.feed(body[i : i + 1])]
        assert decoder.finish().message.text == text
        assert [e.text for e in events if isinstance(e, TextDelta)] == [text]
        assert decoder.chunks_seen > 0
    whole = response(
        output=[{"type": "message", "content": [{"type": "output_text", "text": "A"}]}]
    )
    assert codec.decode_body(orjson.dumps(whole)).message.text == "A"
    chat_body = {
        "id": "c",
        "choices": [{"index": 0, "message": {"content": "B"}, "finish_reason": "stop"}],
    }
    assert codec.decode_body(orjson.dumps(chat_body)).message.text == "B"
    with pytest.raises(StreamBroken):
        codec.stream_decoder("c1").finish()


def test_a_model_protocol_outside_openais_family_is_refused():
    config = load_config(
        {"providers": {"anthropic": {"models": {"x": {"protocol": "openai-responses"}}}}}
    )
    with pytest.raises(ConfigError, match=r"providers\.anthropic\.models\.x\.protocol"):
        resolve_provider("anthropic", config, {"ANTHROPIC_API_KEY": "k"})
    with pytest.raises(ConfigError, match="openai-responses"):
        load_config({"providers": {"openai": {"models": {"x": {"protocol": "gemini"}}}}})


def test_reasoning_effort_goes_where_the_responses_api_reads_it():
    config = load_config(
        {
            "providers": {
                "openai": {
                    "protocol": "openai-responses",
                    "params": {"reasoning_effort": "high", "seed": 1, "presence_penalty": 0.5},
                }
            }
        }
    )
    spec = resolve_provider("openai", config, {"OPENAI_API_KEY": "k"})
    built = provider_codec(spec).build_request(
        ChatRequest(model="openai:o3", messages="Hi"), base_url=BASE, api_key="k"
    )
    body = orjson.loads(built.body)
    assert body["reasoning"] == {"effort": "high"}
    assert "seed" not in body and "presence_penalty" not in body and "reasoning_effort" not in body


# ``sluice providers`` ---------------------------------------------------------------------


async def test_providers_check_calls_the_responses_endpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    seen: list[tuple[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((str(request.url), orjson.loads(request.content)))
        body = response(
            output=[{"type": "message", "content": [{"type": "output_text", "text": "pong"}]}]
        )
        return httpx.Response(200, json=body)

    config = load_config({"providers": {"openai": {"protocol": "openai-responses"}}})
    spec = resolve_provider("openai", config, {"OPENAI_API_KEY": "sk-test"})
    client = HttpxTransport(httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    result = await check_model(spec, "gpt-5", client)
    assert result.ok and result.message == "model 'gpt-5' answered, 40 output tokens"
    (url, body) = seen[0]
    assert url == "https://api.openai.com/v1/responses"
    assert (body["model"], body["max_output_tokens"], body["input"]) == (
        "gpt-5",
        16,
        [{"role": "user", "content": "ping"}],
    )


def test_providers_list_shows_the_protocol(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)
    path = tmp_path / "c.toml"
    path.write_text(
        '[providers.corp]\nbase_url = "http://corp/v1"\nprotocol = "openai-responses"\n'
    )
    assert main(["providers", "list", "--config", str(path)]) == 0
    (line,) = [row for row in capsys.readouterr().out.splitlines() if row.startswith("corp ")]
    assert line.split()[:2] == ["corp", "openai-responses"]
    assert main(["providers", "list", "--json", "--config", str(path)]) == 0
    rows = {r["id"]: r for r in orjson.loads(capsys.readouterr().out)["providers"]}
    assert rows["corp"]["protocol"] == "openai-responses"


def test_logprobs_ride_with_the_text_in_the_chat_apis_shape():
    first = [{"token": "4", "logprob": -0.01, "bytes": [52], "top_logprobs": []}]
    body = sse(
        CREATED,
        {"type": "response.output_text.delta", "item_id": "m", "output_index": 0,
         "content_index": 0, "delta": "4", "logprobs": first},
        {"type": "response.completed", "response": response()},
    )  # fmt: skip
    out, events = decode(body)
    assert events[0] == TextDelta("c1", "4", {"content": first})
    assert out.logprobs == {"content": first}
    whole = response(
        output=[
            {
                "type": "message",
                "content": [{"type": "output_text", "text": "4", "logprobs": first}],
            }
        ]
    )
    assert CODEC.decode_body(orjson.dumps(whole)).logprobs == {"content": first}


def test_a_type_named_only_by_the_event_line_is_read():
    body = (
        b"event: response.output_text.delta\n"
        b'data: {"item_id":"m","output_index":0,"delta":"Hi"}\n\n'
        b"event: response.completed\n"
        b"data: " + orjson.dumps({"response": response()}) + b"\n\n"
    )
    out, _ = decode(body)
    assert (out.message.text, out.finish_reason) == ("Hi", "stop")


def test_a_tool_call_in_a_users_message_is_refused():
    request = ChatRequest(
        model="openai:gpt-4o", messages=[Message.user([ToolCall(id="c", name="f")])]
    )
    with pytest.raises(ConfigError, match="a tool_call part cannot be sent"):
        CODEC.build_request(request, base_url=BASE, api_key=None)


def test_embeddings_are_whatever_the_chat_protocol_offers():
    """One server serves both APIs and ``/embeddings``: a provider on the Responses protocol,
    or with a model on it, embeds exactly as it would on chat completions."""
    chat = embed_codec(codec_for("openai"))
    family = OpenAIFamilyCodec(OpenAICodec(), {}, chat=OpenAICodec(), responses=CODEC)
    for codec in (CODEC, family):
        found = embed_codec(codec)
        assert (found is None) == (chat is None)
        if chat is not None:
            assert type(found) is type(codec)
    with pytest.raises(AttributeError, match="no attribute 'build_request_twice'"):
        CODEC.build_request_twice  # noqa: B018
