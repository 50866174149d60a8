"""The OpenAI chat-completions codec on hand-written requests, streams, bodies and errors."""

from __future__ import annotations

import cProfile
import pstats
from types import MappingProxyType
from typing import Any

import orjson
import pytest

from sluice._errors import (
    AuthenticationFailed,
    BadRequest,
    CallError,
    ConfigError,
    ContentFiltered,
    ContextTooLong,
    NotFound,
    Overloaded,
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
from sluice._protocols.http_errors import error_for_status, parse_retry_after
from sluice._protocols.openai import OpenAICodec, OpenAIStreamDecoder
from sluice._version import USER_AGENT

CODEC = OpenAICodec()
BASE = "https://api.example.com/v1"


def body_of(request: ChatRequest) -> Any:
    return orjson.loads(CODEC.build_request(request, base_url=BASE, api_key=None).body)


# --- request building ---------------------------------------------------------------------


def test_streaming_request_line_headers_and_minimal_body() -> None:
    http = CODEC.build_request(
        ChatRequest(model="openai:gpt-4o-mini", messages="hi"),
        base_url=BASE + "/",
        api_key="sk-test",
    )
    assert http.method == "POST"
    assert http.url == "https://api.example.com/v1/chat/completions"
    assert http.headers == (
        ("user-agent", USER_AGENT),
        ("content-type", "application/json"),
        ("accept", "text/event-stream"),
        ("authorization", "Bearer sk-test"),
    )
    assert orjson.loads(http.body) == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_non_streaming_request_omits_stream_fields_and_auth_without_key() -> None:
    http = CODEC.build_request(
        ChatRequest(model="openai:gpt-4o", messages="hi", stream=False),
        base_url=BASE,
        api_key=None,
    )
    assert dict(http.headers) == {
        "user-agent": USER_AGENT,
        "content-type": "application/json",
        "accept": "application/json",
    }
    assert orjson.loads(http.body) == {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "hi"}],
    }


def test_extra_headers_are_added_and_replace_defaults_whatever_their_case() -> None:
    http = CODEC.build_request(
        ChatRequest(model="x:m", messages="hi"),
        base_url=BASE,
        api_key="k",
        headers={"Authorization": "Token t", "X-Title": "sluice"},
    )
    assert dict(http.headers) == {
        "user-agent": USER_AGENT,
        "content-type": "application/json",
        "accept": "text/event-stream",
        "authorization": "Token t",
        "x-title": "sluice",
    }


def test_messages_of_every_kind() -> None:
    messages = [
        Message.system("Be brief."),
        Message.user(
            [
                TextPart("Look: "),
                ImagePart(url="https://img.example/cat.png", detail="low"),
                ImagePart(url="data:image/png;base64,AAAA"),
                FilePart(data="JVBERi0=", media_type="application/pdf", name="a.pdf"),
                FilePart(file_id="file-123"),
            ]
        ),
        Message.assistant(
            [
                ReasoningPart(text="Think "),
                ReasoningPart(text="more."),
                TextPart("Calling."),
                ToolCall(id="call_1", name="f", arguments='{"a":1}'),
            ]
        ),
        Message.assistant([ToolCall(id="call_2", name="g")]),
        Message.tool("call_1", "one"),
        Message("tool", (ToolResultPart(tool_call_id="call_2", content="two", is_error=True),)),
        Message.user([TextPart("a"), TextPart("b")]),
        Message.assistant("Done."),
    ]
    assert body_of(ChatRequest(model="p:m", messages=messages, stream=False))["messages"] == [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look: "},
                {
                    "type": "image_url",
                    "image_url": {"url": "https://img.example/cat.png", "detail": "low"},
                },
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {
                    "type": "file",
                    "file": {
                        "file_data": "data:application/pdf;base64,JVBERi0=",
                        "filename": "a.pdf",
                    },
                },
                {"type": "file", "file": {"file_id": "file-123"}},
            ],
        },
        {
            "role": "assistant",
            "content": "Calling.",
            "reasoning_content": "Think more.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "f", "arguments": '{"a":1}'},
                }
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "one"},
        {"role": "tool", "tool_call_id": "call_2", "content": "two"},
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": "Done."},
    ]


def test_tool_results_inside_a_user_message_become_tool_messages_first() -> None:
    message = Message.user([ToolResultPart(tool_call_id="c", content="42"), TextPart("and?")])
    assert body_of(ChatRequest(model="p:m", messages=[message], stream=False))["messages"] == [
        {"role": "tool", "tool_call_id": "c", "content": "42"},
        {"role": "user", "content": "and?"},
    ]


def test_reasoning_outside_assistant_messages_is_not_sent() -> None:
    message = Message.user([ReasoningPart(text="hmm"), TextPart("hi")])
    assert body_of(ChatRequest(model="p:m", messages=[message], stream=False))["messages"] == [
        {"role": "user", "content": "hi"}
    ]


def test_tool_call_in_a_user_message_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="tool_call"):
        body_of(ChatRequest(model="p:m", messages=[Message.user([ToolCall(id="c", name="f")])]))


def test_tools_choices_format_and_sampling_fields() -> None:
    schema = MappingProxyType({"type": "object", "properties": {"q": {"type": "string"}}})
    request = ChatRequest(
        model="p:m",
        messages="hi",
        tools=(
            Tool(name="search", description="Search.", parameters=schema, strict=True),
            Tool(name="now"),
        ),
        tool_choice="search",
        parallel_tool_calls=False,
        response_format=ResponseFormat(schema={"type": "object"}, name="answer", strict=True),
        temperature=0.2,
        top_p=0.9,
        max_tokens=100,
        stop=("END",),
        seed=7,
        stream=False,
    )
    body = body_of(request)
    assert body == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "search",
                    "description": "Search.",
                    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
                    "strict": True,
                },
            },
            {
                "type": "function",
                "function": {"name": "now", "parameters": {"type": "object", "properties": {}}},
            },
        ],
        "tool_choice": {"type": "function", "function": {"name": "search"}},
        "parallel_tool_calls": False,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": True},
        },
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 100,
        "stop": ["END"],
        "seed": 7,
    }


@pytest.mark.parametrize("choice", ["auto", "required", "none"])
def test_tool_choice_words_are_sent_as_strings(choice: str) -> None:
    request = ChatRequest(model="p:m", messages="hi", tools=(Tool(name="f"),), tool_choice=choice)
    assert body_of(request)["tool_choice"] == choice


def test_json_object_response_format() -> None:
    request = ChatRequest(
        model="p:m", messages="hi", response_format=ResponseFormat(type="json_object")
    )
    assert body_of(request)["response_format"] == {"type": "json_object"}


def test_extra_body_merges_deeply_replaces_and_deletes() -> None:
    request = ChatRequest(
        model="p:m",
        messages="hi",
        max_tokens=10,
        extra_body={
            "stream_options": {"continuous_usage_stats": True},
            "max_tokens": None,
            "max_completion_tokens": 10,
            "messages": [{"role": "user", "content": "replaced"}],
        },
    )
    assert body_of(request) == {
        "model": "m",
        "messages": [{"role": "user", "content": "replaced"}],
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "max_completion_tokens": 10,
    }


# --- streamed replies -----------------------------------------------------------------------


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    """One SSE event holding a chat.completion.chunk."""
    payload: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk"}
    if delta is not None or finish is not None:
        payload["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    payload.update(extra)
    return b"data: " + orjson.dumps(payload) + b"\n\n"


DONE = b"data: [DONE]\n\n"
USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def run(*pieces: bytes) -> tuple[list[Any], OpenAIStreamDecoder]:
    decoder = CODEC.stream_decoder("c1")
    events: list[Any] = []
    for piece in pieces:
        events.extend(decoder.feed(piece))
    return events, decoder


def test_text_stream_events_and_output() -> None:
    events, decoder = run(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hel"}),
        chunk({"content": "lo"}),
        chunk({}, "stop"),
        chunk(choices=[], usage=USAGE),
        DONE,
    )
    assert events == [
        TextDelta("c1", "Hel"),
        TextDelta("c1", "lo"),
        UsageReported("c1", Usage(10, 5)),
    ]
    assert decoder.chunks_seen == 5
    out = decoder.finish()
    assert out.message == Message.assistant("Hello")
    assert (out.finish_reason, out.raw_finish_reason) == ("stop", "stop")
    assert out.usage == Usage(10, 5)
    assert out.response_id == "chatcmpl-1"


def test_usage_on_the_finish_chunk() -> None:
    _, decoder = run(chunk({"content": "x"}), chunk({"content": ""}, "stop", usage=USAGE), DONE)
    assert decoder.finish().usage == Usage(10, 5)


def test_usage_after_the_finish_chunk_with_choices() -> None:
    _, decoder = run(
        chunk({"content": "x"}, usage=None),
        chunk({}, "stop", usage=None),
        chunk({"content": ""}, usage=USAGE),
        DONE,
    )
    assert decoder.finish().usage == Usage(10, 5)


def test_last_usage_wins_and_repeats_are_reported_once() -> None:
    later = {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17}
    events, decoder = run(
        chunk({"content": "a"}, usage=USAGE),
        chunk({"content": "b"}, usage=USAGE),
        chunk({}, "stop", usage=later),
        DONE,
    )
    assert [e for e in events if isinstance(e, UsageReported)] == [
        UsageReported("c1", Usage(10, 5)),
        UsageReported("c1", Usage(10, 7)),
    ]
    assert decoder.finish().usage == Usage(10, 7)


def test_no_usage_reported_means_none() -> None:
    _, decoder = run(chunk({"content": "a"}, usage=None), chunk({}, "stop", usage=None), DONE)
    assert decoder.finish().usage is None


def test_reasoning_in_both_fields_is_counted_once() -> None:
    events, decoder = run(
        chunk({"reasoning_content": "Think", "reasoning": "Think"}),
        chunk({"reasoning": " hard"}),
        chunk({"reasoning_content": None, "content": "Yes"}),
        chunk({}, "stop"),
        DONE,
    )
    assert events == [
        ReasoningDelta("c1", "Think"),
        ReasoningDelta("c1", " hard"),
        TextDelta("c1", "Yes"),
    ]
    assert decoder.finish().message == Message.assistant(
        [ReasoningPart(text="Think hard"), TextPart("Yes")]
    )


def test_refusal_is_text() -> None:
    events, decoder = run(chunk({"refusal": "I can't."}), chunk({}, "stop"), DONE)
    assert events == [TextDelta("c1", "I can't.")]
    assert decoder.finish().message.text == "I can't."


def fragment(index: int, **fields: Any) -> bytes:
    """A chunk carrying one tool-call fragment; ``name`` and ``arguments`` go in ``function``."""
    function = {k: fields.pop(k) for k in ("name", "arguments") if k in fields}
    return chunk({"tool_calls": [{"index": index, **fields, "function": function}]})


def test_tool_call_fragments_merge_by_index_and_report_id_and_name_once() -> None:
    events, decoder = run(
        fragment(0, id="a", type="function", name="f", arguments=""),
        fragment(0, id="a", arguments='{"x"'),
        fragment(1, id="b", name="g", arguments="{}"),
        fragment(0, id="a", type="function", name="f", arguments=": 1}"),
        chunk({}, "tool_calls"),
        DONE,
    )  # fmt: skip
    assert events == [
        ToolCallDelta("c1", 0, "a", "f", ""),
        ToolCallDelta("c1", 0, None, None, '{"x"'),
        ToolCallDelta("c1", 1, "b", "g", "{}"),
        ToolCallDelta("c1", 0, None, None, ": 1}"),
    ]
    out = decoder.finish()
    assert out.message.tool_calls == (
        ToolCall(id="a", name="f", arguments='{"x": 1}'),
        ToolCall(id="b", name="g", arguments="{}"),
    )
    assert out.finish_reason == "tool_calls"


def test_tool_call_without_arguments_gets_empty_object() -> None:
    _, decoder = run(
        chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f"}}]}),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert decoder.finish().message.tool_calls == (ToolCall(id="a", name="f", arguments="{}"),)


def test_tool_call_fragments_without_index() -> None:
    _, decoder = run(
        chunk({"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": '{"k":'}}]}),
        chunk({"tool_calls": [{"function": {"arguments": "1}"}}]}),
        chunk({"tool_calls": [{"id": "b", "function": {"name": "g", "arguments": {"z": 2}}}]}),
        chunk({}, "stop"),
        DONE,
    )
    out = decoder.finish()
    assert out.message.tool_calls == (
        ToolCall(id="a", name="f", arguments='{"k":1}'),
        ToolCall(id="b", name="g", arguments='{"z":2}'),
    )
    assert (out.finish_reason, out.raw_finish_reason) == ("tool_calls", "stop")


def test_tool_calls_come_after_reasoning_and_text_in_index_order() -> None:
    _, decoder = run(
        chunk({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g"}}]}),
        chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f"}}]}),
        chunk({"content": "text"}),
        chunk({"reasoning_content": "why"}),
        DONE,
    )
    assert decoder.finish().message.content == (
        ReasoningPart(text="why"),
        TextPart("text"),
        ToolCall(id="a", name="f"),
        ToolCall(id="b", name="g"),
    )


@pytest.mark.parametrize(
    ("raw", "tool_call", "expected"),
    [
        ("stop", False, "stop"),
        ("length", False, "length"),
        ("tool_calls", False, "tool_calls"),
        ("function_call", False, "tool_calls"),
        ("content_filter", False, "content_filter"),
        ("insufficient_system_resource", False, "other"),
        (None, False, "other"),
        ("stop", True, "tool_calls"),
        (None, True, "tool_calls"),
        ("length", True, "length"),
        ("content_filter", True, "content_filter"),
    ],
)
def test_finish_reason_normalization(raw: str | None, tool_call: bool, expected: str) -> None:
    pieces = [chunk({"content": "x"})]
    if tool_call:
        pieces.append(chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f"}}]}))
    pieces.append(chunk({}, raw))
    out = run(*pieces, DONE)[1].finish()
    assert (out.finish_reason, out.raw_finish_reason) == (expected, raw)


def test_error_event_raises_the_mapped_error_without_status() -> None:
    error = {"error": {"message": "slow down", "type": "rate_limit_exceeded", "code": None}}
    decoder = CODEC.stream_decoder("c1")
    decoder.feed(chunk({"content": "a"}))
    with pytest.raises(RateLimited) as caught:
        decoder.feed(b"data: " + orjson.dumps(error) + b"\n\n")
    assert (caught.value.status, caught.value.error_type) == (None, "rate_limit_exceeded")
    assert caught.value.message == "slow down"


def test_error_event_with_numeric_code_uses_it_as_status() -> None:
    error = {"error": {"message": "Provider disconnected", "code": 502}}
    with pytest.raises(ServerError) as caught:
        run(chunk({"content": "a"}), b"data: " + orjson.dumps(error) + b"\n\n")
    assert caught.value.status == 502


def test_error_event_without_known_type_is_a_server_error() -> None:
    with pytest.raises(ServerError, match="boom"):
        run(b'event: error\ndata: {"error": {"message": "boom"}}\n\n')


def test_everything_after_done_is_ignored() -> None:
    events, decoder = run(
        chunk({"content": "a"}), DONE + b"data: not json\n\n", chunk({"content": "b"})
    )
    assert events == [TextDelta("c1", "a")]
    assert decoder.finish().message.text == "a"


def test_malformed_json_is_a_protocol_error_with_an_excerpt() -> None:
    with pytest.raises(ProtocolError, match=r"not JSON: \{oops"):
        run(b"data: {oops\n\n")


def test_json_that_is_not_an_object_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        run(b"data: [1, 2]\n\n")


def test_wrong_shapes_are_protocol_errors() -> None:
    with pytest.raises(ProtocolError, match="content is not a string"):
        run(chunk({"content": 5}))
    with pytest.raises(ProtocolError, match="choices"):
        run(b'data: {"choices": {"a": 1}}\n\n')


def test_comments_and_empty_data_are_not_chunks() -> None:
    events, decoder = run(b": OPENROUTER PROCESSING\n\ndata:\n\n", chunk({"content": "a"}))
    assert events == [TextDelta("c1", "a")]
    assert decoder.chunks_seen == 1


def test_premature_end_is_stream_broken() -> None:
    _, decoder = run(chunk({"content": "a"}), chunk({"content": "b"}), b'data: {"choi')
    with pytest.raises(StreamBroken) as caught:
        decoder.finish()
    assert caught.value.events_delivered == 2


def test_error_in_an_unclosed_last_event_is_raised_by_finish() -> None:
    _, decoder = run(chunk({"content": "a"}), b'data: {"error": {"message": "gone", "code": 503}}')
    with pytest.raises(ServerError, match="gone"):
        decoder.finish()


def test_finish_reason_without_done_is_complete() -> None:
    _, decoder = run(chunk({"content": "a"}), chunk({}, "length"))
    out = decoder.finish()
    assert (out.finish_reason, out.usage) == ("length", None)


def test_done_without_finish_reason_is_complete() -> None:
    _, decoder = run(chunk({"content": "a"}), DONE)
    assert decoder.finish().finish_reason == "other"


def test_last_event_without_blank_line_is_still_read() -> None:
    _, decoder = run(chunk({"content": "a"}), b'data: {"choices":[{"index":0,"delta":{},'
                     b'"finish_reason":"stop"}],"usage":' + orjson.dumps(USAGE) + b"}")  # fmt: skip
    out = decoder.finish()
    assert (out.finish_reason, out.usage) == ("stop", Usage(10, 5))


def test_done_without_newline_at_end_of_body() -> None:
    _, decoder = run(chunk({"content": "a"}), b"data: [DONE]")
    assert decoder.finish().message.text == "a"


def test_other_choices_are_ignored() -> None:
    other = {"choices": [{"index": 1, "delta": {"content": "no"}, "finish_reason": None}]}
    events, _ = run(b"data: " + orjson.dumps(other) + b"\n\n", chunk({"content": "yes"}))
    assert events == [TextDelta("c1", "yes")]


def test_text_chunks_read_in_the_feed_loop_and_whole_agree() -> None:
    """A chunk of one choice and nothing but text is read by the feed loop itself; one with
    anything more (a falsy ``logprobs`` kept as sent, a second choice, an index other than 0,
    a finish reason or usage beside the text) by the full reader: the events and the output
    are what each chunk says."""

    def raw(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        payload = {"id": "chatcmpl-1", "choices": choices, **extra}
        return b"data: " + orjson.dumps(payload) + b"\n\n"

    def text(content: str, index: int = 0, **more: Any) -> dict[str, Any]:
        return {"index": index, "delta": {"content": content}, **more}

    events, decoder = run(
        raw([text("a")]),
        raw([text("b")]),
        raw([text("c", logprobs={})]),
        raw([text("d"), text("x", index=1)]),
        raw([text("y", index=1)]),
        raw([text("e", finish_reason="stop")], usage=USAGE),
        DONE,
    )
    assert events == [
        TextDelta("c1", "a"),
        TextDelta("c1", "b"),
        TextDelta("c1", "c", {}),
        TextDelta("c1", "d"),
        TextDelta("c1", "e"),
        UsageReported("c1", Usage(10, 5)),
    ]
    assert decoder.chunks_seen == 6
    out = decoder.finish()
    assert (out.message, out.finish_reason) == (Message.assistant("abcde"), "stop")


def test_a_chunk_of_nothing_but_text_costs_no_call_of_its_own() -> None:
    """The feed loop reads a chunk of one piece of text itself: 200 of them in one read make
    no call to the full chunk reader (it made one per chunk), loud or quiet."""
    for quiet in (False, True):
        decoder = CODEC.stream_decoder("c1")
        decoder.feed(chunk({"role": "assistant", "content": ""}))  # names the response
        body = b"".join(chunk({"content": f" w{i}"}) for i in range(200))
        profiler = cProfile.Profile()
        profiler.enable()
        if quiet:
            assert decoder.feed_quiet(body)
        else:
            assert len(decoder.feed(body)) == 200
        profiler.disable()
        stats: Any = pstats.Stats(profiler)  # its stats are not in the stubs
        called = {name for _, _, name in stats.stats}
        assert not called & {"_chunk", "_read"}, called
        assert decoder.output_chars == len(b"".join(b" w%d" % i for i in range(200)))


# --- usage ----------------------------------------------------------------------------------


def test_usage_total_wins_when_completion_leaves_out_reasoning() -> None:
    usage = {
        "prompt_tokens": 335,
        "completion_tokens": 14,
        "total_tokens": 374,
        "prompt_tokens_details": {"cached_tokens": 320, "cache_write_tokens": 3},
        "completion_tokens_details": {"reasoning_tokens": 25},
    }
    _, decoder = run(chunk({}, "stop", usage=usage), DONE)
    assert decoder.finish().usage == Usage(335, 39, 320, 3, 25)


def test_usage_reads_deepseek_cache_hits() -> None:
    usage = {**USAGE, "prompt_cache_hit_tokens": 8, "prompt_cache_miss_tokens": 2}
    _, decoder = run(chunk({}, "stop", usage=usage), DONE)
    assert decoder.finish().usage == Usage(10, 5, 8, 0, 0)


# --- whole bodies -----------------------------------------------------------------------------


def completion(message: dict[str, Any], finish: str | None = "stop", **extra: Any) -> bytes:
    reply = {
        "id": "chatcmpl-9",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        **extra,
    }
    return orjson.dumps(reply)


def test_body_with_reasoning_text_and_usage() -> None:
    out = CODEC.decode_body(
        completion(
            {"role": "assistant", "content": "42", "reasoning": "Count."},
            usage={**USAGE, "completion_tokens_details": {"reasoning_tokens": 2}},
        )
    )
    assert out.message == Message.assistant([ReasoningPart(text="Count."), TextPart("42")])
    assert (out.finish_reason, out.usage, out.response_id) == (
        "stop",
        Usage(10, 5, 0, 0, 2),
        "chatcmpl-9",
    )


def test_body_with_refusal_keeps_it_as_text() -> None:
    out = CODEC.decode_body(completion({"role": "assistant", "content": None, "refusal": "No."}))
    assert out.message == Message.assistant("No.")
    assert out.usage is None


def test_body_with_tool_calls_and_stop_finishes_with_tool_calls() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "x", "type": "function", "function": {"name": "f", "arguments": ""}},
            {"id": "y", "type": "function", "function": {"name": "g", "arguments": {"a": 1}}},
        ],
    }
    out = CODEC.decode_body(completion(message))
    assert out.message.tool_calls == (
        ToolCall(id="x", name="f", arguments="{}"),
        ToolCall(id="y", name="g", arguments='{"a":1}'),
    )
    assert (out.finish_reason, out.raw_finish_reason) == ("tool_calls", "stop")


def test_body_with_error_raises_it() -> None:
    with pytest.raises(ContextTooLong):
        CODEC.decode_body(b'{"error": {"message": "too big", "code": "context_length_exceeded"}}')


@pytest.mark.parametrize(
    "body", [b"<html>", b"[]", b'{"choices": []}', b'{"choices": [{"index": 0}]}']
)
def test_malformed_bodies_are_protocol_errors(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        CODEC.decode_body(body)


# --- error replies ----------------------------------------------------------------------------

NOW = 1_700_000_000.0


def error_reply(
    status: int, body: bytes | dict[str, Any], headers: dict[str, str] | None = None
) -> CallError:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return CODEC.decode_error(status, headers or {}, raw, wall_now=NOW)


def openai_error(message: str, type_: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def test_429_with_retry_after_seconds() -> None:
    error = error_reply(
        429,
        openai_error("Rate limit reached", "requests", "rate_limit_exceeded"),
        {"retry-after": "20", "x-request-id": "req_1"},
    )
    assert isinstance(error, RateLimited)
    assert (error.status, error.retry_after, error.error_type, error.request_id) == (
        429,
        20.0,
        "rate_limit_exceeded",
        "req_1",
    )
    assert error.message == "Rate limit reached"


def test_429_prefers_retry_after_ms() -> None:
    error = error_reply(429, openai_error("slow"), {"retry-after-ms": "1500", "retry-after": "2"})
    assert isinstance(error, RateLimited)
    assert error.retry_after == 1.5


def test_429_with_http_date() -> None:
    error = error_reply(429, openai_error("slow"), {"retry-after": "Tue, 14 Nov 2023 22:13:50 GMT"})
    assert isinstance(error, RateLimited)
    assert error.retry_after == 30.0  # NOW is 22:13:20 GMT that day


def test_429_insufficient_quota_is_a_quota_error() -> None:
    error = error_reply(
        429,
        openai_error("You exceeded your current quota", "insufficient_quota", "insufficient_quota"),
    )
    assert isinstance(error, RateLimited)
    assert (error.quota, error.retryable) == ("quota", False)
    assert error_reply(429, openai_error("slow", "requests", "rate_limit_exceeded")).retryable


def test_429_without_headers_has_no_retry_after() -> None:
    error = error_reply(429, openai_error("slow"))
    assert isinstance(error, RateLimited)
    assert error.retry_after is None


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "1.25"}, 1.25),
        ({"retry-after": " 3 "}, 3.0),
        ({"retry-after": "0"}, 0.0),
        ({"retry-after": "-1"}, None),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after-ms": "-1", "retry-after": "4"}, 4.0),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after": "Mon, 13 Nov 2023 00:00:00 GMT"}, 0.0),
        ({"retry-after": "Tue, 14 Nov 2023 22:14:20 -0000"}, 60.0),
        ({}, None),
    ],
)
def test_parse_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert parse_retry_after(headers, NOW) == expected


IRE = "invalid_request_error"


@pytest.mark.parametrize(
    ("status", "body", "cls"),
    [
        (500, openai_error("The server had an error", "server_error"), ServerError),
        (502, b"<html><body>Bad gateway</body></html>", ServerError),
        (408, b"", ServerError),
        (409, b"", ServerError),
        (529, {"type": "error", "error": {"type": "overloaded_error", "message": "x"}}, Overloaded),
        (503, openai_error("busy", "overloaded"), Overloaded),
        (401, openai_error("Incorrect API key", IRE, "invalid_api_key"), AuthenticationFailed),
        (403, openai_error("not allowed"), AuthenticationFailed),
        (404, openai_error("The model `x` does not exist", IRE, "model_not_found"), NotFound),
        (400, openai_error("bad", IRE), BadRequest),
        (422, b'{"detail": "unprocessable"}', BadRequest),
        (418, b"teapot", BadRequest),
        (
            400,
            openai_error("This model's maximum context length is 8192 tokens.", IRE, None),
            ContextTooLong,
        ),
        (400, openai_error("Too many tokens", IRE, "context_length_exceeded"), ContextTooLong),
        (400, openai_error("prompt is too long: 208566 tokens > 200000 maximum"), ContextTooLong),
        (413, openai_error("Your input exceeds the context window of this model"), ContextTooLong),
        (400, openai_error("flagged", IRE, "content_policy_violation"), ContentFiltered),
    ],
)
def test_status_mapping(status: int, body: bytes | dict[str, Any], cls: type[CallError]) -> None:
    error = error_reply(status, body)
    assert type(error) is cls
    assert error.status == status


def test_error_type_prefers_code_then_type() -> None:
    assert (
        error_reply(400, openai_error("m", "invalid_request_error", "bad_param")).error_type
        == "bad_param"
    )
    assert (
        error_reply(400, openai_error("m", "invalid_request_error")).error_type
        == "invalid_request_error"
    )
    assert error_reply(400, {"error": {"message": "m", "code": 400}}).error_type is None


def test_non_json_error_body_becomes_a_short_excerpt() -> None:
    error = error_reply(502, b"<html>\n  <h1>502 Bad Gateway</h1>\n" + b"x" * 1000)
    assert error.message.startswith("<html> <h1>502 Bad Gateway</h1> xxx")
    assert len(error.message) == 200
    assert error.error_type is None


def test_empty_error_body() -> None:
    assert error_reply(500, b"").message == "HTTP 500 with an empty body"


VLLM_ERROR = b'{"object": "error", "message": "bad", "type": "BadRequestError", "code": 400}'
GEMINI_ERROR = b'[{"error": {"code": 400, "message": "key invalid", "status": "INVALID_ARGUMENT"}}]'


@pytest.mark.parametrize(
    ("body", "message", "error_type"),
    [
        (b'{"error": "model does not support tools"}', "model does not support tools", None),
        (VLLM_ERROR, "bad", "BadRequestError"),
        (GEMINI_ERROR, "key invalid", None),
    ],
)
def test_other_error_envelopes(body: bytes, message: str, error_type: str | None) -> None:
    error = error_reply(400, body)
    assert (type(error), error.message, error.error_type) == (BadRequest, message, error_type)


def test_request_id_header_fallback() -> None:
    assert error_reply(500, b"", {"request-id": "r-9"}).request_id == "r-9"


def test_every_error_keeps_the_providers_retry_after() -> None:
    """Issue 27 (it was RateLimited's alone): a 503's or 529's Retry-After reaches a gateway
    client too."""
    error = error_for_status(503, "busy", retry_after=5.0)
    assert type(error) is ServerError and error.retry_after == 5.0
    assert error_for_status(529, "busy", retry_after=2.0).retry_after == 2.0
    assert error_for_status(500, "oops").retry_after is None


@pytest.mark.parametrize(
    ("error_type", "message", "cls"),
    [
        ("rate_limit_exceeded", "slow", RateLimited),
        ("overloaded_error", "busy", Overloaded),
        ("server_error", "oops", ServerError),
        (None, "oops", ServerError),
        ("invalid_request_error", "bad", BadRequest),
        ("context_length_exceeded", "long", ContextTooLong),
        ("authentication_error", "who?", AuthenticationFailed),
        ("not_found_error", "where?", NotFound),
        ("content_filter", "no", ContentFiltered),
    ],
)
def test_stream_errors_without_status(
    error_type: str | None, message: str, cls: type[CallError]
) -> None:
    error = error_for_status(None, message, error_type=error_type)
    assert type(error) is cls
    assert error.status is None


def test_status_below_400_is_a_protocol_error() -> None:
    assert type(error_for_status(302, "moved")) is ProtocolError


@pytest.mark.parametrize(
    ("headers", "body", "wall_now", "expected"),
    [
        ({"retry-after-ms": "1500", "retry-after": "3"}, b"", 0.0, 1.5),
        ({"retry-after": "3"}, b"", 0.0, 3.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, b"", 1445412470.0, 10.0),
        (
            {
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": "1m30s",
                "x-ratelimit-remaining-tokens": "5",
                "x-ratelimit-reset-tokens": "6ms",
            },
            b"",
            0.0,
            90.0,
        ),
        ({"x-ratelimit-reset-tokens": "6ms"}, b"", 0.0, 0.006),
        (
            {
                "anthropic-ratelimit-requests-remaining": "0",
                "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:10Z",
            },
            b"",
            1767225600.0,
            10.0,
        ),
        (
            {},
            b'{"error":{"code":429,"details":[{"@type":'
            b'"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"30s"}]}}',
            0.0,
            30.0,
        ),
        (
            {},
            b'[{"error":{"code":429,"details":[{"@type":'
            b'"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"12.5s"}]}}]',
            0.0,
            12.5,
        ),
        ({}, b'{"error":{"message":"slow down"}}', 0.0, None),
    ],
    ids=[
        "ms-first",
        "seconds",
        "http-date",
        "reset-of-exhausted",
        "reset-only",
        "anthropic",
        "gemini-retryinfo",
        "gemini-list",
        "nothing",
    ],
)
def test_provider_wait_reads_every_form(headers, body, wall_now, expected):
    from sluice._protocols.http_errors import provider_wait

    assert provider_wait(headers, body, wall_now) == expected


# --- passed through for the gateway (issue 27) ------------------------------------------------


def _chunk(delta: dict[str, Any], logprobs: Any = None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": None}
    return b"data: " + orjson.dumps({"id": "c1", "choices": [choice], **extra}) + b"\n\n"


def _lp(token: str) -> dict[str, Any]:
    return {"content": [{"token": token, "logprob": -0.5, "bytes": [], "top_logprobs": []}]}


def test_logprobs_go_with_their_chunk_and_join_in_the_output() -> None:
    decoder = OpenAIStreamDecoder("c")
    meta = {"system_fingerprint": "fp_1", "service_tier": "default"}
    events = decoder.feed(
        _chunk({"role": "assistant", "content": ""}, **meta)
        + _chunk({"content": "Hel"}, _lp("Hel"), **meta)
        + _chunk({"content": "lo"}, _lp("lo"), **meta)
        + _chunk({"content": "!"}, **meta)
    )
    assert events == [
        TextDelta("c", "Hel", _lp("Hel")),
        TextDelta("c", "lo", _lp("lo")),
        TextDelta("c", "!"),
    ]
    assert decoder.feed(b"data: [DONE]\n\n") == []
    out = decoder.finish()
    assert out.logprobs == {"content": _lp("Hel")["content"] + _lp("lo")["content"]}
    assert (out.system_fingerprint, out.service_tier) == ("fp_1", "default")


def test_a_whole_reply_keeps_logprobs_fingerprint_and_tier() -> None:
    body = {
        "id": "c1",
        "system_fingerprint": "fp_2",
        "service_tier": "flex",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hi"},
                "logprobs": _lp("Hi"),
                "finish_reason": "stop",
            }
        ],
    }
    out = CODEC.decode_body(orjson.dumps(body))
    assert out.logprobs == _lp("Hi")
    assert (out.system_fingerprint, out.service_tier) == ("fp_2", "flex")


def test_an_error_reply_keeps_param_and_code() -> None:
    body = {
        "error": {
            "message": "bad",
            "type": "invalid_request_error",
            "param": "tools[0]",
            "code": "invalid_value",
        }
    }
    error = CODEC.decode_error(400, {}, orjson.dumps(body), wall_now=0.0)
    assert (error.param, error.code, error.error_type) == (
        "tools[0]",
        "invalid_value",
        "invalid_value",
    )
    plain = CODEC.decode_error(400, {}, b'{"error": {"message": "bad"}}', wall_now=0.0)
    assert (plain.param, plain.code) == (None, None)


def test_extra_headers_never_replace_credentials_and_yield_to_configured_ones() -> None:
    request = ChatRequest(
        model="openai:gpt-4o",
        messages="hi",
        extra_headers={"Authorization": "Bearer stolen", "X-Trace": "t1", "x-team": "a"},
    )
    built = CODEC.build_request(request, base_url=BASE, api_key="sk-real", headers={"x-team": "b"})
    headers = dict(built.headers)
    assert headers["authorization"] == "Bearer sk-real"
    assert (headers["x-trace"], headers["x-team"]) == ("t1", "b")


def test_cache_control_is_not_sent_to_an_openai_backend() -> None:
    request = ChatRequest(
        model="openai:gpt-4o",
        messages=[
            {
                "role": "system",
                "content": [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}],
            },
            {
                "role": "user",
                "content": [{"type": "text", "text": "U", "cache_control": {"type": "ephemeral"}}],
            },
        ],
    )
    body = body_of(request)
    assert body["messages"] == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U"},
    ]
