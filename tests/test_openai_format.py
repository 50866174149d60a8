"""OpenAI chat-completions dicts <-> sluice models (pure, sync)."""

from __future__ import annotations

import pytest

from sluice._errors import ConfigError
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
from sluice._openai_format import parse_chat_body, parse_message, render_chat_completion


def body(**fields):
    fields.setdefault("model", "sim:sim-small")
    fields.setdefault("messages", [{"role": "user", "content": "Hi"}])
    return fields


def test_minimal_body_becomes_a_streaming_request():
    request = parse_chat_body(body())
    assert request.model == "sim:sim-small"
    assert request.messages == (Message.user("Hi"),)
    assert request.stream is True
    assert request.tools == ()
    assert request.extra_body == {}


def test_every_role_is_read():
    messages = [
        {"role": "developer", "content": "Be brief."},
        {
            "role": "system",
            "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "kind."}],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
                {
                    "type": "file",
                    "file": {"file_data": "data:application/pdf;base64,QUJD", "filename": "a.pdf"},
                },
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "look", "arguments": '{"q": 1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "found it"},
        {"role": "assistant", "content": "Done.", "reasoning_content": "thinking"},
    ]
    request = parse_chat_body(body(messages=messages))
    assert request.messages == (
        Message.system("Be brief."),
        Message.system("Be kind."),
        Message(
            "user",
            (
                TextPart("What is this?"),
                ImagePart(url="https://x/y.png", detail="low"),
                FilePart(data="QUJD", media_type="application/pdf", name="a.pdf"),
            ),
        ),
        Message("assistant", (ToolCall(id="call_1", name="look", arguments='{"q": 1}'),)),
        Message("tool", (ToolResultPart(tool_call_id="call_1", content="found it"),)),
        Message("assistant", (ReasoningPart(text="thinking"), TextPart("Done."))),
    )


def test_sampling_and_tool_fields_are_mapped():
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            "strict": True,
        },
    }
    request = parse_chat_body(
        body(
            tools=[weather],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            parallel_tool_calls=False,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "out", "schema": {"type": "object"}},
            },
            temperature=0,
            top_p=0.5,
            max_tokens=10,
            stop="END",
            seed=7,
        )
    )
    assert request.tools == (
        Tool(
            name="get_weather",
            description="Weather for a city.",
            parameters={"type": "object", "properties": {"city": {"type": "string"}}},
            strict=True,
        ),
    )
    assert request.tool_choice == SpecificTool("get_weather")
    assert request.parallel_tool_calls is False
    assert request.response_format == ResponseFormat(
        type="json_schema", schema={"type": "object"}, name="out"
    )
    assert (request.temperature, request.top_p, request.max_tokens, request.seed) == (
        0.0,
        0.5,
        10,
        7,
    )
    assert request.stop == ("END",)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"tool_choice": "required"}, "required"),
        ({"tool_choice": "none"}, "none"),
        ({}, None),
    ],
)
def test_tool_choice_strings(fields, expected):
    assert parse_chat_body(body(**fields)).tool_choice == expected


def test_response_format_variants():
    assert parse_chat_body(body(response_format={"type": "text"})).response_format is None
    assert parse_chat_body(
        body(response_format={"type": "json_object"})
    ).response_format == ResponseFormat(type="json_object")


def test_max_completion_tokens_wins_over_max_tokens_and_stop_lists_are_kept():
    request = parse_chat_body(body(max_tokens=100, max_completion_tokens=20, stop=["a", "b"]))
    assert request.max_tokens == 20
    assert request.stop == ("a", "b")


def test_unknown_keys_go_to_extra_body_and_stream_keys_are_dropped():
    request = parse_chat_body(
        body(
            stream=False,
            stream_options={"include_usage": False},
            user="u1",
            presence_penalty=0.5,
            n=1,
        ),
        stream=False,
    )
    assert request.extra_body == {"user": "u1", "presence_penalty": 0.5}
    assert request.stream is False


def test_model_override_replaces_the_body_model():
    assert parse_chat_body(body(model="gpt-4o-mini"), model="sim:echo").model == "sim:echo"


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        (
            body(model="gpt-4o-mini"),
            "body.model: 'gpt-4o-mini' names no provider; write it as 'provider:model'",
        ),
        ({"messages": [{"role": "user", "content": "x"}]}, "body.model: missing"),
        (body(model=":x"), "body.model"),
        (body(messages=[]), "body.messages: must hold at least one message"),
        ({"model": "sim:x"}, "body.messages: missing"),
        (body(messages="hi"), "body.messages: expected an array, got a string"),
        (body(messages=[{"role": "robot", "content": "x"}]), "body.messages[0].role"),
        (
            body(messages=[{"role": "user", "content": 3}]),
            "body.messages[0].content: expected an array, got a number",
        ),
        (
            body(messages=[{"role": "user", "content": [{"type": "input_audio"}]}]),
            "body.messages[0].content[0].type: unsupported content part type 'input_audio'",
        ),
        (
            body(messages=[{"role": "tool", "content": "x"}]),
            "body.messages[0].tool_call_id: expected a string",
        ),
        (body(temperature="hot"), "body.temperature: expected a number, got a string"),
        (body(max_tokens=1.5), "body.max_tokens: expected an integer"),
        (body(n=2), "body.n: only one choice per request is supported"),
        (body(tools=[{"type": "retrieval"}]), "body.tools[0].type"),
        (body(tool_choice=5), "body.tool_choice"),
        (body(response_format={"type": "yaml"}), "body.response_format.type"),
        (body(stop=[1]), "body.stop[0]: expected a string"),
        ([1, 2], "body: expected an object, got an array"),
    ],
)
def test_bad_bodies_name_the_field(bad, fragment):
    with pytest.raises(ConfigError) as info:
        parse_chat_body(bad)
    assert fragment in str(info.value)


def result(**fields):
    fields.setdefault("call_id", "c7")
    fields.setdefault("provider", "sim")
    fields.setdefault("model", "sim-small")
    fields.setdefault("message", Message.assistant("Hello there."))
    fields.setdefault("finish_reason", "stop")
    return ChatResult(**fields)


def test_text_result_renders_as_a_chat_completion():
    usage = Usage(input_tokens=12, output_tokens=5, cache_read_tokens=4, reasoning_tokens=2)
    completion = render_chat_completion(result(usage=usage), created=1700000000)
    assert completion == {
        "id": "chatcmpl-c7",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "sim-small",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello there."},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 12,
            "completion_tokens": 5,
            "total_tokens": 17,
            "prompt_tokens_details": {"cached_tokens": 4},
            "completion_tokens_details": {"reasoning_tokens": 2},
        },
    }


def test_tool_call_result_has_null_content_and_function_calls():
    call = ToolCall(id="call_9", name="get_weather", arguments='{"city": "Oslo"}')
    completion = render_chat_completion(
        result(message=Message.assistant([call]), finish_reason="tool_calls"), created=0
    )
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_9",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
            }
        ],
    }


def test_other_finish_reason_shows_the_providers_own_value():
    completion = render_chat_completion(
        result(finish_reason="other", raw_finish_reason="pause_turn"), created=0
    )
    assert completion["choices"][0]["finish_reason"] == "pause_turn"


def test_rendered_assistant_message_reads_back_as_the_same_message():
    message = Message(
        "assistant",
        (
            ReasoningPart(text="let me see"),
            TextPart("Calling two tools."),
            ToolCall(id="a", name="f", arguments='{"x": 1}'),
            ToolCall(id="b", name="g", arguments="{}"),
        ),
    )
    rendered = render_chat_completion(result(message=message), created=0)["choices"][0]["message"]
    assert parse_message(rendered) == message
