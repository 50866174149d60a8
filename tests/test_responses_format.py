"""The Responses API as a server speaks it, pure: request bodies into ChatRequest (with errors
naming the field), results into ``response`` objects, a call's deltas into the SSE events."""

import typing

import orjson
import pytest

from sluice._errors import ConfigError
from sluice._events import ReasoningSignature, ToolCallDelta
from sluice._messages import (
    ChatResult,
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
from sluice._responses_format import ResponsesEvents, parse_responses_body, render_response


def test_a_string_input_is_one_user_message_after_the_instructions():
    request = parse_responses_body(
        {
            "model": "sim:echo",
            "input": "Hi",
            "instructions": "Be brief.",
            "max_output_tokens": 50,
            "temperature": 0.5,
            "top_p": 0.9,
            "stream": True,
            "parallel_tool_calls": False,
        }
    )
    assert request.model == "sim:echo"
    assert request.messages == (Message.system("Be brief."), Message.user("Hi"))
    assert request.max_tokens == 50
    assert request.temperature == 0.5
    assert request.top_p == 0.9
    assert request.parallel_tool_calls is False
    assert request.stream is True  # the caller's choice, not the body's
    assert request.extra_body == {}


def test_items_become_a_conversation_with_tool_turns():
    request = parse_responses_body(
        {
            "model": "x",
            "input": [
                {"role": "developer", "content": "Rules."},
                {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "Weather?"},
                        {"type": "input_image", "image_url": "https://x/a.png", "detail": "low"},
                        {
                            "type": "input_file",
                            "file_data": "data:application/pdf;base64,AAA=",
                            "filename": "a.pdf",
                        },
                    ],
                },
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text",
                                                                 "text": "think"}],
                 "encrypted_content": "sig"},
                {"role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
                {"type": "function_call", "call_id": "c1", "name": "w", "arguments": '{"c":"P"}'},
                {"type": "function_call", "call_id": "c2", "name": "w", "arguments": '{"c":"L"}'},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                {"type": "function_call_output", "call_id": "c2",
                 "output": [{"type": "input_text", "text": "rain"}]},
                {"role": "user", "content": "Thanks"},
            ],
        },
        model="openai:gpt",
    )  # fmt: skip
    assert request.model == "openai:gpt"
    assert request.messages == (
        Message.system("Rules."),
        Message.user(
            (
                TextPart("Weather?"),
                ImagePart(url="https://x/a.png", detail="low"),
                FilePart(data="AAA=", media_type="application/pdf", name="a.pdf"),
            )
        ),
        Message.assistant(
            (
                ReasoningPart(text="think", signature="sig"),
                TextPart("Checking."),
                ToolCall(id="c1", name="w", arguments='{"c":"P"}'),
                ToolCall(id="c2", name="w", arguments='{"c":"L"}'),
            )
        ),
        Message("tool", (ToolResultPart(tool_call_id="c1", content="sunny"),)),
        Message("tool", (ToolResultPart(tool_call_id="c2", content="rain"),)),
        Message.user("Thanks"),
    )


def test_tools_choice_format_and_unknown_keys():
    request = parse_responses_body(
        {
            "model": "sim:echo",
            "input": "go",
            "tools": [
                {
                    "type": "function",
                    "name": "w",
                    "description": "weather",
                    "parameters": {"type": "object", "properties": {"c": {"type": "string"}}},
                    "strict": True,
                }
            ],
            "tool_choice": {"type": "function", "name": "w"},
            "text": {
                "format": {"type": "json_schema", "name": "out", "schema": {"type": "object"},
                           "strict": True},
                "verbosity": "low",
            },
            "metadata": {"k": "v"},
            "reasoning": {"effort": "low", "summary": "auto"},
            "store": False,
            "previous_response_id": "resp_1",
        }
    )  # fmt: skip
    assert request.tools == (
        Tool(
            name="w",
            description="weather",
            parameters={"type": "object", "properties": {"c": {"type": "string"}}},
            strict=True,
        ),
    )
    assert request.tool_choice == SpecificTool("w")
    assert request.response_format == ResponseFormat(
        type="json_schema", schema={"type": "object"}, name="out", strict=True
    )
    assert request.extra_body == {
        "text": {"verbosity": "low"},
        "metadata": {"k": "v"},
        "reasoning": {"effort": "low", "summary": "auto"},
        "store": False,
        "previous_response_id": "resp_1",
    }
    plain = parse_responses_body(
        {"model": "a:b", "input": "x", "tool_choice": "required", "text": {"format": {"type":
                                                                                      "text"}}}
    )  # fmt: skip
    assert plain.tool_choice == "required"
    assert plain.response_format is None
    assert plain.extra_body == {}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "body: expected an object, got an array"),
        ({"input": "x"}, "body.model: missing"),
        ({"model": "gpt-4o", "input": "x"}, "body.model: 'gpt-4o' names no provider"),
        ({"model": "a:b"}, "body.input: missing"),
        ({"model": "a:b", "input": []}, "body.input: must hold at least one item"),
        ({"model": "a:b", "input": 3}, "body.input: expected an array, got a number"),
        (
            {"model": "a:b", "input": [{"role": "robot", "content": "x"}]},
            "body.input[0].role: expected 'user', 'system', 'developer' or 'assistant'",
        ),
        (
            {"model": "a:b", "input": [{"role": "user", "content": [{"type": "audio"}]}]},
            "body.input[0].content[0].type: expected 'input_text'",
        ),
        (
            {"model": "a:b", "input": [{"role": "user", "content": [{"type": "input_image"}]}]},
            "body.input[0].content[0].image_url: missing",
        ),
        (
            {"model": "a:b", "input": [{"type": "function_call", "name": "w"}]},
            "body.input[0].call_id: expected a string, got null",
        ),
        (
            {"model": "a:b", "input": [{"type": "item_reference", "id": "msg_1"}]},
            "body.input[0].type: 'item_reference' needs stored responses",
        ),
        (
            {"model": "a:b", "input": "x", "tools": [{"type": "web_search"}]},
            "body.tools[0].type: only 'function' tools are supported here, got 'web_search'",
        ),
        (
            {"model": "a:b", "input": "x", "tool_choice": {"type": "allowed_tools"}},
            "body.tool_choice: expected 'auto', 'required', 'none'",
        ),
        (
            {"model": "a:b", "input": "x", "text": {"format": {"type": "yaml"}}},
            "body.text.format.type: expected 'text', 'json_object' or 'json_schema'",
        ),
        (
            {"model": "a:b", "input": "x", "max_output_tokens": "9"},
            "body.max_output_tokens: expected an integer, got a string",
        ),
        (
            {"model": "a:b", "input": "x", "temperature": True},
            "body.temperature: expected a number, got a boolean",
        ),
        (
            {"model": "a:b", "input": "x", "metadata": {"k": 1}},
            "body.metadata.k: expected a string, got a number",
        ),
        (
            {"model": "a:b", "input": "x", "parallel_tool_calls": "yes"},
            "body.parallel_tool_calls: expected a boolean",
        ),
    ],
)
def test_bad_bodies_name_the_field(body, message):
    with pytest.raises(ConfigError) as caught:
        parse_responses_body(body)
    assert str(caught.value).startswith(message)


_SOME_USAGE = Usage(10, 5, cache_read_tokens=4, reasoning_tokens=2)


def _result(*parts, finish="stop", usage=_SOME_USAGE):
    return ChatResult(
        call_id="c",
        provider="sim",
        model="echo",
        message=Message.assistant(parts),
        finish_reason=finish,
        usage=usage,
    )


_ECHO: dict[str, typing.Any] = {
    "instructions": None,
    "max_output_tokens": None,
    "metadata": {},
    "parallel_tool_calls": True,
    "previous_response_id": None,
    "reasoning": {"effort": None, "summary": None},
    "store": False,
    "temperature": 1.0,
    "text": {"format": {"type": "text"}},
    "tool_choice": "auto",
    "tools": [],
    "top_p": 1.0,
    "truncation": "disabled",
    "user": None,
}
_USAGE = {
    "input_tokens": 10,
    "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 0},
    "output_tokens": 5,
    "output_tokens_details": {"reasoning_tokens": 2},
    "total_tokens": 15,
}


def test_a_result_renders_as_a_response_object():
    result = _result(
        ReasoningPart(text="hmm", signature="sig"),
        TextPart("Checking."),
        ToolCall(id="call_1", name="w", arguments='{"c":"P"}'),
    )
    body = render_response(
        result,
        response_id="resp_ab",
        model="gpt",
        created_at=7,
        body={"instructions": "Be brief.", "metadata": {"k": "v"}, "temperature": 0.2},
    )
    assert body == {
        "id": "resp_ab",
        "object": "response",
        "created_at": 7,
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "model": "gpt",
        "output": [
            {
                "id": "rs_ab_0",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "hmm"}],
                "encrypted_content": "sig",
            },
            {
                "id": "msg_ab_1",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": "Checking.", "annotations": [], "logprobs": []}
                ],
            },
            {
                "id": "fc_ab_2",
                "type": "function_call",
                "status": "completed",
                "arguments": '{"c":"P"}',
                "call_id": "call_1",
                "name": "w",
            },
        ],
        **_ECHO,
        "instructions": "Be brief.",
        "metadata": {"k": "v"},
        "temperature": 0.2,
        "usage": _USAGE,
    }


def test_a_cut_reply_is_incomplete_and_tool_calls_alone_have_no_message():
    cut = render_response(
        _result(TextPart("Hal"), finish="length"), response_id="resp_x", model="m", created_at=0
    )
    assert cut["status"] == "incomplete"
    assert cut["incomplete_details"] == {"reason": "max_output_tokens"}
    assert cut["output"][0]["status"] == "incomplete"
    filtered = render_response(
        _result(TextPart(""), finish="content_filter"), response_id="resp_x", model="m",
        created_at=0,
    )  # fmt: skip
    assert filtered["incomplete_details"] == {"reason": "content_filter"}
    calls = render_response(
        _result(ToolCall(id="c1", name="w"), finish="tool_calls"),
        response_id="resp_x",
        model="m",
        created_at=0,
    )
    assert calls["status"] == "completed"
    assert [i["type"] for i in calls["output"]] == ["function_call"]


def _events(raw: bytes) -> list[tuple[str, dict]]:
    """Every SSE event as (event name, data), checking the framing on the way."""
    out = []
    for block in raw.split(b"\n\n")[:-1]:
        name, data = block.split(b"\n")
        assert name.startswith(b"event: ") and data.startswith(b"data: ")
        parsed = orjson.loads(data[6:])
        assert parsed["type"] == name[7:].decode()
        out.append((name[7:].decode(), parsed))
    assert raw.endswith(b"\n\n")
    return out


def test_a_text_stream_has_exact_bytes():
    encoder = ResponsesEvents("resp_ab", "gpt", 7)
    raw = encoder.start() + encoder.text("Hel") + encoder.text("lo")
    raw += encoder.finish(_result(TextPart("Hello")))
    shell = (
        b'{"id":"resp_ab","object":"response","created_at":7,"status":"in_progress",'
        b'"error":null,"incomplete_details":null,"model":"gpt","output":[],'
        b'"instructions":null,"max_output_tokens":null,"metadata":{},'
        b'"parallel_tool_calls":true,"previous_response_id":null,'
        b'"reasoning":{"effort":null,"summary":null},"store":false,"temperature":1.0,'
        b'"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,'
        b'"truncation":"disabled","user":null,"usage":null}'
    )
    part = b'{"type":"output_text","text":"%s","annotations":[],"logprobs":[]}'
    ids = b'"item_id":"msg_ab_0","output_index":0'
    done_item = (
        b'{"id":"msg_ab_0","type":"message","status":"completed","role":"assistant",'
        b'"content":[' + part % b"Hello" + b"]}"
    )
    final = (
        shell.replace(b'"in_progress"', b'"completed"')
        .replace(b'"output":[]', b'"output":[' + done_item + b"]")
        .replace(
            b'"usage":null',
            b'"usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":4,'
            b'"cache_write_tokens":0},'
            b'"output_tokens":5,"output_tokens_details":{"reasoning_tokens":2},'
            b'"total_tokens":15}',
        )
    )
    expected = [
        (b"response.created", b'"response":' + shell),
        (b"response.in_progress", b'"response":' + shell),
        (
            b"response.output_item.added",
            b'"output_index":0,"item":{"id":"msg_ab_0","type":"message",'
            b'"status":"in_progress","role":"assistant","content":[]}',
        ),
        (b"response.content_part.added", ids + b',"content_index":0,"part":' + part % b""),
        (b"response.output_text.delta", ids + b',"content_index":0,"delta":"Hel","logprobs":[]'),
        (b"response.output_text.delta", ids + b',"content_index":0,"delta":"lo","logprobs":[]'),
        (
            b"response.output_text.done",
            ids + b',"content_index":0,"text":"Hello","logprobs":[]',
        ),
        (b"response.content_part.done", ids + b',"content_index":0,"part":' + part % b"Hello"),
        (b"response.output_item.done", b'"output_index":0,"item":' + done_item),
        (b"response.completed", b'"response":' + final),
    ]
    assert raw == b"".join(
        b'event: %s\ndata: {"type":"%s","sequence_number":%d,%s}\n\n' % (name, name, n, data)
        for n, (name, data) in enumerate(expected)
    )


def test_reasoning_then_parallel_tool_calls_stream_as_items():
    encoder = ResponsesEvents("resp_r", "m", 0, {"tools": [{"type": "function", "name": "w"}]})
    raw = encoder.start()
    raw += encoder.reasoning("let me ") + encoder.reasoning("see")
    raw += encoder.signature(ReasoningSignature("c", "sig"))
    raw += encoder.tool_call(ToolCallDelta("c", 0, "call_a", "w", ""))
    raw += encoder.tool_call(ToolCallDelta("c", 1, "call_b", "w", '{"c":'))
    raw += encoder.tool_call(ToolCallDelta("c", 0, None, None, '{"c":"P"}'))
    raw += encoder.tool_call(ToolCallDelta("c", 1, None, None, '"L"}'))
    raw += encoder.finish(
        _result(
            ReasoningPart(text="let me see", signature="sig"),
            ToolCall(id="call_a", name="w", arguments='{"c":"P"}'),
            ToolCall(id="call_b", name="w", arguments='{"c":"L"}'),
            finish="tool_calls",
        )
    )
    events = _events(raw)
    assert [e[1]["sequence_number"] for e in events] == list(range(len(events)))
    assert [(name, d.get("output_index"), d.get("delta")) for name, d in events] == [
        ("response.created", None, None),
        ("response.in_progress", None, None),
        ("response.output_item.added", 0, None),
        ("response.reasoning_summary_part.added", 0, None),
        ("response.reasoning_summary_text.delta", 0, "let me "),
        ("response.reasoning_summary_text.delta", 0, "see"),
        ("response.reasoning_summary_text.done", 0, None),
        ("response.reasoning_summary_part.done", 0, None),
        ("response.output_item.done", 0, None),
        ("response.output_item.added", 1, None),
        ("response.output_item.added", 2, None),
        ("response.function_call_arguments.delta", 2, '{"c":'),
        ("response.function_call_arguments.delta", 1, '{"c":"P"}'),
        ("response.function_call_arguments.delta", 2, '"L"}'),
        ("response.function_call_arguments.done", 1, None),
        ("response.output_item.done", 1, None),
        ("response.function_call_arguments.done", 2, None),
        ("response.output_item.done", 2, None),
        ("response.completed", None, None),
    ]
    added_call = events[9][1]["item"]
    assert added_call == {
        "id": "fc_r_1",
        "type": "function_call",
        "status": "in_progress",
        "arguments": "",
        "call_id": "call_a",
        "name": "w",
    }
    assert events[14][1]["arguments"] == '{"c":"P"}'
    response = events[-1][1]["response"]
    assert response["tools"] == [{"type": "function", "name": "w"}]
    assert response["output"] == [
        {
            "id": "rs_r_0",
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "let me see"}],
            "encrypted_content": "sig",
        },
        {**added_call, "status": "completed", "arguments": '{"c":"P"}'},
        {
            "id": "fc_r_2",
            "type": "function_call",
            "status": "completed",
            "arguments": '{"c":"L"}',
            "call_id": "call_b",
            "name": "w",
        },
    ]
    # The whole response equals the unstreamed rendering of the same result.
    assert (
        response["output"]
        == render_response(
            _result(
                ReasoningPart(text="let me see", signature="sig"),
                ToolCall(id="call_a", name="w", arguments='{"c":"P"}'),
                ToolCall(id="call_b", name="w", arguments='{"c":"L"}'),
            ),
            response_id="resp_r",
            model="m",
            created_at=0,
        )["output"]
    )


def test_a_cut_stream_ends_incomplete_and_a_failure_ends_failed():
    encoder = ResponsesEvents("resp_x", "m", 0)
    cut = _result(TextPart("Hal"), finish="length")
    raw = encoder.start() + encoder.text("Hal") + encoder.finish(cut)
    events = _events(raw)
    assert events[-2][1]["item"]["status"] == "incomplete"
    assert events[-1][0] == "response.incomplete"
    assert events[-1][1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}

    failing = ResponsesEvents("resp_y", "m", 0)
    error = b'{"error":{"message":"upstream broke","type":"server_error","code":null}}'
    events = _events(failing.start() + failing.text("Hi") + failing.error(error))
    assert [e[0] for e in events[-4:]] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.failed",
    ]
    failed = events[-1][1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": "server_error", "message": "upstream broke"}
    assert failed["output"][0]["status"] == "incomplete"


def test_a_result_with_no_streamed_deltas_takes_its_output_from_the_result():
    encoder = ResponsesEvents("resp_z", "m", 0)
    raw = encoder.start() + encoder.finish(_result(TextPart("cached")))
    response = _events(raw)[-1][1]["response"]
    assert response["output"][0]["content"][0]["text"] == "cached"


def test_logprobs_go_on_the_delta():
    encoder = ResponsesEvents("resp_l", "m", 0)
    encoder.start()
    lp = {"content": [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105], "top_logprobs": []}]}
    event = _events(encoder.text("Hi", lp))[-1][1]
    assert event["logprobs"] == lp["content"]


def test_the_openai_sdk_models_accept_the_bodies_and_every_event():
    """The SDK's own (pydantic) models validate what the module writes, strictly."""
    from openai.types.responses import Response, ResponseStreamEvent

    result = _result(
        ReasoningPart(text="hmm"),
        TextPart("Hi"),
        ToolCall(id="call_1", name="w", arguments="{}"),
        finish="tool_calls",
    )
    Response.model_validate(
        render_response(result, response_id="resp_v", model="m", created_at=1), strict=True
    )
    encoder = ResponsesEvents("resp_v", "m", 1)
    raw = encoder.start() + encoder.reasoning("hmm") + encoder.text("Hi")
    raw += encoder.tool_call(ToolCallDelta("c", 0, "call_1", "w", "{}")) + encoder.finish(result)
    failing = ResponsesEvents("resp_f", "m", 1)
    raw += failing.start() + failing.error(b'{"error":{"message":"no","type":"tokens"}}')
    union = typing.get_args(typing.get_args(ResponseStreamEvent)[0])
    by_type = {typing.get_args(c.model_fields["type"].annotation)[0]: c for c in union}
    for name, data in _events(raw):
        by_type[name].model_validate(data, strict=True)


def test_the_opening_events_hold_numbers_0_and_1_whenever_they_are_made():
    early = ResponsesEvents("resp_o", "m", 0)
    late = ResponsesEvents("resp_o", "m", 0)
    first = early.start() + early.text("Hi")
    delta = late.text("Hi")
    assert late.start() + delta == first
