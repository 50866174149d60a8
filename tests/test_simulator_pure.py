"""The simulator's pure parts: text, token counts, schema examples, directives, request parsing,
reply planning and SSE encoding. Synchronous; no trio, no sockets."""

from __future__ import annotations

import random
import re
from typing import Any

import attrs
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.simulator._config import SimulatorConfig
from sluice.simulator._directives import (
    Directive,
    Disconnect,
    Fail,
    Normal,
    choose_directive,
    parse_directive,
)
from sluice.simulator._reply import plan_reply
from sluice.simulator._request import RequestError, parse_chat_request
from sluice.simulator._schema import SchemaError, example_for_schema
from sluice.simulator._shaping import cut_after, schedule
from sluice.simulator._text import (
    WORDS,
    count_tokens,
    generate_tokens,
    split_fragments,
    split_words,
)
from sluice.simulator._wire import (
    DONE,
    ChunkEncoder,
    completion_body,
    sse_events,
    sse_slots,
    status_error_body,
)

# --- a tiny JSON-schema validator for the subset the generator supports ----------------------


def _resolve(root: Any, ref: str) -> Any:
    node = root
    for key in ref[2:].split("/"):
        node = node[key]
    return node


def validate(value: Any, schema: Any, root: Any = None) -> None:
    """Assert ``value`` satisfies ``schema`` (the subset this simulator generates for)."""
    root = schema if root is None else root
    if schema is True:
        return
    if "$ref" in schema:
        return validate(value, _resolve(root, schema["$ref"]), root)
    if "const" in schema:
        assert value == schema["const"]
    if "enum" in schema:
        assert value in schema["enum"]
    if "anyOf" in schema or "oneOf" in schema:
        branches = schema.get("anyOf") or schema["oneOf"]
        errors = 0
        for branch in branches:
            try:
                validate(value, branch, root)
            except AssertionError:
                errors += 1
        assert errors < len(branches), f"{value!r} matches no branch"
    for branch in schema.get("allOf", []):
        validate(value, branch, root)
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    if kinds:
        checks = {
            "object": lambda v: isinstance(v, dict),
            "array": lambda v: isinstance(v, list),
            "string": lambda v: isinstance(v, str),
            "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
            "boolean": lambda v: isinstance(v, bool),
            "null": lambda v: v is None,
        }
        assert any(checks[k](value) for k in kinds), f"{value!r} is not {kinds}"
    if isinstance(value, dict):
        for name in schema.get("required", []):
            assert name in value, f"missing {name}"
        props = schema.get("properties", {})
        for name, sub in value.items():
            if name in props:
                validate(sub, props[name], root)
            else:
                assert schema.get("additionalProperties", True) is not False, name
    if isinstance(value, list):
        assert len(value) >= schema.get("minItems", 0)
        assert len(value) <= schema.get("maxItems", len(value))
        if isinstance(schema.get("items"), dict):
            for item in value:
                validate(item, schema["items"], root)
    if isinstance(value, str):
        assert len(value) >= schema.get("minLength", 0)
        assert len(value) <= schema.get("maxLength", len(value))
        if schema.get("format") == "date":
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", value)
        if schema.get("format") == "email":
            assert re.fullmatch(r"[a-z]+@example\.com", value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema:
            assert value >= schema["minimum"]
        if "maximum" in schema:
            assert value <= schema["maximum"]
        if isinstance(schema.get("exclusiveMinimum"), int | float):
            assert value > schema["exclusiveMinimum"]
        if isinstance(schema.get("exclusiveMaximum"), int | float):
            assert value < schema["exclusiveMaximum"]
        if "multipleOf" in schema:
            assert (value / schema["multipleOf"]) == pytest.approx(
                round(value / schema["multipleOf"])
            )
    return None


BIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 3, "maxLength": 12},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "step": {"type": "integer", "multipleOf": 5, "minimum": 12, "maximum": 40},
        "units": {"enum": ["celsius", "fahrenheit"]},
        "flag": {"type": "boolean"},
        "when": {"type": "string", "format": "date"},
        "mail": {"type": "string", "format": "email"},
        "maybe": {"type": ["string", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 4},
        "point": {"$ref": "#/$defs/point"},
        "shape": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/point"}]},
        "both": {"allOf": [{"$ref": "#/$defs/point"}, {"properties": {"z": {"type": "number"}}}]},
        "kind": {"const": "fixed"},
        "tree": {"$ref": "#/$defs/node"},
    },
    "required": ["city", "days", "units"],
    "additionalProperties": False,
    "$defs": {
        "point": {
            "type": "object",
            "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
            "required": ["x", "y"],
        },
        "node": {
            "type": "object",
            "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            "required": ["children"],
        },
    },
}


# --- text -------------------------------------------------------------------------------------


def test_generated_tokens_are_deterministic_words() -> None:
    tokens = generate_tokens(7, b"digest", 30)
    assert tokens == generate_tokens(7, b"digest", 30)
    assert tokens != generate_tokens(8, b"digest", 30)
    assert tokens != generate_tokens(7, b"other", 30)
    assert len(tokens) == 30
    assert not tokens[0].startswith(" ")
    assert all(t.startswith(" ") for t in tokens[1:])
    assert tokens[0][0].isupper()
    assert all(w.strip(".").lower() in WORDS for w in "".join(tokens).split())


def test_shorter_reply_is_a_prefix_of_the_longer_one() -> None:
    assert generate_tokens(1, b"d", 24)[:5] == generate_tokens(1, b"d", 5)


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("", 0), ("word", 1), ("  two words ", 2), ("It ends. Here", 3), ("a\nb\tc", 3)],
)
def test_a_token_is_a_run_of_non_whitespace(text: str, tokens: int) -> None:
    assert count_tokens(text) == tokens


def test_a_reply_counted_by_the_rule_gives_its_token_count() -> None:
    tokens = generate_tokens(3, b"digest", 57)
    assert count_tokens("".join(tokens)) == 57


def test_fragments_rejoin_to_the_json_text() -> None:
    assert split_fragments('{"country":"UK"}') == ('{"', "country", '":"', "UK", '"}')
    text = '{"a b":[1, 2.5, true], "c":"d\\"e"}'
    assert "".join(split_fragments(text)) == text


def test_words_keep_their_leading_space() -> None:
    assert split_words("Say  hello to\nme ") == ("Say", "  hello", " to", "\nme")


# --- schema examples --------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**64))
def test_schema_examples_validate_for_any_seed(seed: int) -> None:
    value = example_for_schema(BIG_SCHEMA, seed=seed)
    validate(value, BIG_SCHEMA)
    assert value == example_for_schema(BIG_SCHEMA, seed=seed)


def test_optional_properties_are_included() -> None:
    value = example_for_schema(BIG_SCHEMA, seed=3)
    assert set(value) == set(BIG_SCHEMA["properties"])
    assert value["kind"] == "fixed"
    assert set(value["both"]) == {"x", "y", "z"}


def test_empty_parameters_give_an_empty_object() -> None:
    assert example_for_schema({"type": "object", "properties": {}}, seed=0) == {}


def test_draft4_exclusive_bounds_are_honoured() -> None:
    schema = {
        "type": "integer",
        "minimum": 1,
        "exclusiveMinimum": True,
        "maximum": 3,
        "exclusiveMaximum": True,
    }
    assert {example_for_schema(schema, seed=s) for s in range(20)} == {2}


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "integer", "minimum": 5, "maximum": 4}, "no integer"),
        ({"enum": []}, "non-empty"),
        ({"$ref": "https://example.com/s.json"}, "only local"),
        ({"$ref": "#/$defs/missing"}, "points nowhere"),
        ({"type": "tuple"}, "unknown type"),
        ({"$ref": "#"}, "nests too deeply"),
        ({"type": "string", "minLength": 5, "maxLength": 2}, "minLength 5 > maxLength 2"),
    ],
)
def test_unsatisfiable_schemas_raise(schema: dict[str, Any], message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        example_for_schema(schema, seed=0)


# --- directives -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "directive"),
    [
        ("ok", Normal()),
        (" OK ", Normal()),
        ("429", Fail(429)),
        ("429:retry_after=2", Fail(429, 2.0)),
        ("429:retry_after=0.5", Fail(429, 0.5)),
        ("500", Fail(500)),
        ("503", Fail(503)),
        ("529", Fail(529)),
        ("disconnect", Disconnect()),
        ("disconnect:3", Disconnect(3)),
        ("disconnect:after=0", Disconnect(0)),
    ],
)
def test_directives_parse(text: str, directive: Any) -> None:
    assert parse_directive(text) == directive


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected ok, 429"),
        ("teapot", "expected ok, 429"),
        ("200", "not in 400-599"),
        ("429:wait=2", "unknown option 'wait=2'"),
        ("429:retry_after=soon", "retry_after must be a number >= 0"),
        ("429:retry_after=-1", "retry_after must be a number >= 0"),
        ("disconnect:x", "whole number of events"),
        ("disconnect:1,2", "whole number of events, got '1,2'"),
        ("disconnect:1:2", "takes at most 1 argument"),
        ("ok:1", "takes no arguments"),
    ],
)
def test_bad_directives_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_directive(text)


def test_header_beats_script_which_beats_rates() -> None:
    script = [Fail(500)]
    rng = random.Random(0)
    rates = [(Fail(429), 1.0)]
    pick = choose_directive
    assert pick(index=0, override=Normal(), script=script, rates=rates, rng=rng) == Normal()
    assert pick(index=0, override=None, script=script, rates=rates, rng=rng) == Fail(500)
    assert pick(index=1, override=None, script=script, rates=rates, rng=rng) == Fail(429)
    assert pick(index=1, override=None, script=script, rates=(), rng=rng) == Normal()


def test_random_faults_repeat_for_a_seed_and_follow_the_rates() -> None:
    rates: list[tuple[Directive, float]] = [(Fail(429), 0.2), (Fail(500), 0.1), (Disconnect(), 0.1)]

    def run(seed: int) -> list[Any]:
        rng = random.Random(seed)
        return [
            choose_directive(index=i, override=None, script=(), rates=rates, rng=rng)
            for i in range(2000)
        ]

    first = run(5)
    assert first == run(5)
    assert first != run(6)
    share = {d: first.count(d) / len(first) for d in (Fail(429), Fail(500), Disconnect())}
    assert share[Fail(429)] == pytest.approx(0.2, abs=0.03)
    assert share[Fail(500)] == pytest.approx(0.1, abs=0.03)
    assert share[Disconnect()] == pytest.approx(0.1, abs=0.03)


# --- config -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"rate_429": 1.5}, "'rate_429' must be a probability"),
        ({"rate_500": -0.1}, "'rate_500' must be a probability"),
        ({"ttft": -1.0}, "'ttft' must be >= 0"),
        ({"tokens_per_second": -2.0}, "'tokens_per_second' must be >= 0 or None"),
        ({"tokens_per_chunk": 0}, "'tokens_per_chunk' must be >= 1"),
        ({"script": ("ok", "42")}, "script[1]: bad directive '42'"),
        ({"rate_429": 0.6, "rate_500": 0.6}, "at most 1"),
    ],
)
def test_config_rejects_bad_values(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        SimulatorConfig(**changes)


def test_config_defaults_are_instant_and_fault_free() -> None:
    config = SimulatorConfig()
    assert (config.ttft, config.output_tokens, config.tokens_per_chunk) == (0.0, 24, 1)
    assert not config.paced
    assert not config.has_random_faults
    assert attrs.evolve(config, tokens_per_second=None).paced is False
    assert attrs.evolve(config, tokens_per_second=5).paced


# --- request parsing and reply planning -------------------------------------------------------


def body(**fields: Any) -> bytes:
    fields.setdefault("model", "sim-small")
    fields.setdefault("messages", [{"role": "user", "content": "hello there"}])
    return orjson.dumps(fields)


WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
CLOCK: dict[str, Any] = {"type": "function", "function": {"name": "get_time"}}


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b"{not json", None),
        (b"[1, 2]", None),
        (orjson.dumps({"model": "m"}), "messages"),
        (orjson.dumps({"model": "m", "messages": []}), "messages"),
        (orjson.dumps({"messages": [{"role": "user", "content": "x"}]}), "model"),
        (body(messages=[{"content": "no role"}]), "messages[0]"),
        (body(max_tokens=0), "max_tokens"),
        (body(stream="yes"), "stream"),
        (
            body(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}}),
            "tool_choice",
        ),
        (body(tool_choice="sometimes", tools=[WEATHER]), "tool_choice"),
        (body(tool_choice="required"), "tools"),
    ],
)
def test_invalid_requests_are_rejected_with_the_param(raw: bytes, param: str | None) -> None:
    with pytest.raises(RequestError) as info:
        parse_chat_request(raw)
    assert info.value.param == param


def test_request_digest_ignores_key_order_but_not_content() -> None:
    a = parse_chat_request(b'{"model":"m","messages":[{"role":"user","content":"hi"}]}')
    b = parse_chat_request(b'{"messages":[{"content":"hi","role":"user"}],"model":"m"}')
    c = parse_chat_request(b'{"model":"m","messages":[{"role":"user","content":"ho"}]}')
    assert a.digest == b.digest != c.digest


@pytest.mark.parametrize(
    ("choice", "text", "tools", "called"),
    [
        (None, "hello", [WEATHER], None),
        (None, "please use a tool", [WEATHER, CLOCK], "get_weather"),
        ("auto", "what does get_time say?", [WEATHER, CLOCK], "get_time"),
        ("auto", "toolbox is not the word", [WEATHER], None),
        ("none", "use the tool get_time", [WEATHER, CLOCK], None),
        ("required", "hello", [WEATHER, CLOCK], "get_weather"),
        ("required", "call get_time", [WEATHER, CLOCK], "get_time"),
        (
            {"type": "function", "function": {"name": "get_time"}},
            "hello",
            [WEATHER, CLOCK],
            "get_time",
        ),
    ],
)
def test_tool_choice_decides_whether_and_which_tool_is_called(
    choice: Any, text: str, tools: list[Any], called: str | None
) -> None:
    fields: dict[str, Any] = {"messages": [{"role": "user", "content": text}], "tools": tools}
    if choice is not None:
        fields["tool_choice"] = choice
    request = parse_chat_request(body(**fields))
    assert (request.tool.name if request.tool else None) == called


def test_auto_does_not_call_again_after_a_tool_result() -> None:
    messages = [
        {"role": "user", "content": "use the tool"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "sunny"},
    ]
    assert parse_chat_request(body(messages=messages, tools=[WEATHER])).tool is None


def test_text_reply_length_follows_output_tokens_and_max_tokens() -> None:
    request = parse_chat_request(body())
    reply = plan_reply(request, seed=0, output_tokens=24)
    assert (reply.completion_tokens, reply.finish_reason) == (24, "stop")
    short = plan_reply(parse_chat_request(body(max_tokens=5)), seed=0, output_tokens=24)
    assert (short.completion_tokens, short.finish_reason) == (5, "length")
    assert short.tokens == reply.tokens[:5]
    newer = plan_reply(
        parse_chat_request(body(max_tokens=3, max_completion_tokens=7)), seed=0, output_tokens=24
    )
    assert newer.completion_tokens == 7
    assert (
        plan_reply(parse_chat_request(body(max_tokens=99)), seed=0, output_tokens=24).finish_reason
        == "stop"
    )


def test_prompt_tokens_count_message_text() -> None:
    request = parse_chat_request(
        body(
            messages=[
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "x" * 41 + " and eight more words, all of them here"},
            ]
        )
    )
    assert plan_reply(request, seed=0, output_tokens=1).prompt_tokens == 2 + 9


def test_min_tokens_and_ignore_eos_set_the_reply_length() -> None:
    def reply(**fields: object) -> tuple[int, str]:
        planned = plan_reply(parse_chat_request(body(**fields)), seed=0, output_tokens=24)
        return planned.completion_tokens, planned.finish_reason

    assert reply() == (24, "stop")
    assert reply(max_tokens=100) == (24, "stop")
    assert reply(max_tokens=100, ignore_eos=True) == (100, "length")
    assert reply(min_tokens=40) == (40, "stop")
    assert reply(min_tokens=40, max_tokens=30) == (30, "length")
    assert reply(ignore_eos=True) == (24, "stop")  # nothing to run to without max_tokens
    with pytest.raises(RequestError, match="min_tokens"):
        parse_chat_request(body(min_tokens=-1))
    with pytest.raises(RequestError, match="ignore_eos"):
        parse_chat_request(body(ignore_eos="yes"))


def test_echo_model_repeats_the_last_user_message() -> None:
    request = parse_chat_request(
        body(model="sim-echo", messages=[{"role": "user", "content": "say it back"}])
    )
    reply = plan_reply(request, seed=0, output_tokens=24)
    assert "".join(reply.tokens) == "say it back"
    assert reply.completion_tokens == 3


def test_tool_reply_arguments_are_valid_json_for_the_schema() -> None:
    tool = {"type": "function", "function": {"name": "big", "parameters": BIG_SCHEMA}}
    request = parse_chat_request(body(tools=[tool], tool_choice="required"))
    reply = plan_reply(request, seed=0, output_tokens=24)
    assert reply.finish_reason == "tool_calls"
    assert reply.tool_name == "big"
    assert reply.tool_call_id is not None
    assert reply.tool_call_id.startswith("call_")
    validate(orjson.loads("".join(reply.tokens)), BIG_SCHEMA)
    assert reply == plan_reply(request, seed=0, output_tokens=24)


def test_max_tokens_cuts_tool_arguments() -> None:
    request = parse_chat_request(body(tools=[WEATHER], tool_choice="required", max_tokens=2))
    reply = plan_reply(request, seed=0, output_tokens=24)
    assert reply.finish_reason == "length"
    assert reply.completion_tokens == 2


@pytest.mark.parametrize(
    "parameters",
    [
        {"type": "integer", "minimum": 3, "maximum": 1},
        {"type": "integer", "minimum": 1e300},  # no JSON integer that large on the wire
        {"type": "object", "properties": ["x"]},
    ],
)
def test_unusable_tool_schemas_are_request_errors(parameters: Any) -> None:
    tool = {"type": "function", "function": {"name": "bad", "parameters": parameters}}
    request = parse_chat_request(body(tools=[tool], tool_choice="required"))
    with pytest.raises(RequestError, match="Invalid schema for function 'bad'"):
        plan_reply(request, seed=0, output_tokens=24)


# --- wire encoding ----------------------------------------------------------------------------


def events(data: bytes) -> list[Any]:
    """The JSON payloads of an SSE body, with [DONE] as the string "[DONE]"."""
    assert data.endswith(b"\n\n")
    out = []
    for block in data.split(b"\n\n")[:-1]:
        assert block.startswith(b"data: ")
        payload = block.removeprefix(b"data: ")
        out.append("[DONE]" if payload == b"[DONE]" else orjson.loads(payload))
    return out


def encoder(include_usage: bool = True) -> ChunkEncoder:
    return ChunkEncoder(
        completion_id="chatcmpl-x", created=1700000000, model="m", include_usage=include_usage
    )


def test_text_stream_has_openai_shape() -> None:
    reply = plan_reply(parse_chat_request(body()), seed=0, output_tokens=3)
    (slot,) = sse_slots(encoder(), reply, tokens_per_chunk=1, paced=False)
    got = events(slot)
    assert got[-1] == "[DONE]"
    first, *content, finish, usage, _ = got
    assert first == {
        "id": "chatcmpl-x",
        "object": "chat.completion.chunk",
        "created": 1700000000,
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
    assert "".join(c["choices"][0]["delta"]["content"] for c in content) == "".join(reply.tokens)
    assert finish["choices"] == [
        {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    ]
    assert usage["choices"] == []
    assert usage["usage"] == {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": 3,
        "total_tokens": reply.prompt_tokens + 3,
    }


def test_without_include_usage_there_is_no_usage_chunk() -> None:
    reply = plan_reply(parse_chat_request(body()), seed=0, output_tokens=2)
    got = events(sse_slots(encoder(False), reply, tokens_per_chunk=1, paced=False)[0])
    assert len(got) == 5
    assert all("usage" not in e for e in got[:-1])


def test_paced_slots_group_tokens_per_chunk() -> None:
    reply = plan_reply(parse_chat_request(body()), seed=0, output_tokens=5)
    slots = sse_slots(encoder(), reply, tokens_per_chunk=2, paced=True)
    assert [len(events(s)) for s in slots] == [2, 1, 4]
    contents = [
        e["choices"][0]["delta"].get("content")
        for s in slots
        for e in events(s)
        if e != "[DONE]" and e["choices"]
    ]
    assert contents == ["", *("".join(reply.tokens[i : i + 2]) for i in (0, 2, 4)), None]


@pytest.mark.parametrize(("cut", "kept"), [(0, 0), (1, 1), (3, 3), (99, 27)])
def test_cut_streams_keep_that_many_events_and_never_done(cut: int, kept: int) -> None:
    reply = plan_reply(parse_chat_request(body()), seed=0, output_tokens=24)
    slots = sse_events(encoder(), reply, tokens_per_chunk=1, paced=True)
    plan = cut_after(schedule(slots, 0.5), cut)
    got = [e for _, evs in plan for e in events(b"".join(evs))]
    assert len(got) == kept
    assert "[DONE]" not in got
    assert all(evs for _, evs in plan)
    assert [at for at, _ in plan] == [0.5 * i for i in range(len(plan))]


def test_tool_call_stream_opens_with_id_and_name_then_argument_fragments() -> None:
    request = parse_chat_request(body(tools=[WEATHER], tool_choice="required"))
    reply = plan_reply(request, seed=0, output_tokens=24)
    (slot,) = sse_slots(encoder(False), reply, tokens_per_chunk=1, paced=False)
    first, *fragments, finish, done = events(slot)
    assert done == "[DONE]"
    assert first["choices"][0]["delta"] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "index": 0,
                "id": reply.tool_call_id,
                "type": "function",
                "function": {"name": "get_weather", "arguments": ""},
            }
        ],
        "refusal": None,
    }
    for chunk in fragments:
        (call,) = chunk["choices"][0]["delta"]["tool_calls"]
        assert set(call) == {"index", "function"}
        assert set(call["function"]) == {"arguments"}
    arguments = "".join(
        c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] for c in fragments
    )
    validate(orjson.loads(arguments), WEATHER["function"]["parameters"])
    assert finish["choices"][0]["finish_reason"] == "tool_calls"


def test_completion_body_for_a_tool_call() -> None:
    request = parse_chat_request(body(tools=[WEATHER], tool_choice="required"))
    reply = plan_reply(request, seed=0, output_tokens=24)
    data = orjson.loads(completion_body(completion_id="c", created=1, model="m", reply=reply))
    assert data["object"] == "chat.completion"
    (choice,) = data["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert "city" in orjson.loads(call["function"]["arguments"])


def test_done_marker() -> None:
    assert DONE == b"data: [DONE]\n\n"


@pytest.mark.parametrize(
    ("status", "type_", "code"),
    [
        (429, "requests", "rate_limit_exceeded"),
        (500, "server_error", None),
        (503, "server_error", None),
        (529, "overloaded_error", None),
        (418, "invalid_request_error", None),
        (599, "server_error", None),
    ],
)
def test_status_error_bodies(status: int, type_: str, code: str | None) -> None:
    error = orjson.loads(status_error_body(status))["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"]) == (type_, code)


# --- robustness: whatever a client sends, the answer is a value or a RequestError -------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
SCHEMA_KEYS = st.sampled_from(
    [
        "type",
        "properties",
        "required",
        "items",
        "enum",
        "const",
        "anyOf",
        "allOf",
        "$ref",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "multipleOf",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "format",
    ]
)
SCHEMAS = st.recursive(
    st.dictionaries(SCHEMA_KEYS, JSON, max_size=4),
    lambda inner: st.dictionaries(
        SCHEMA_KEYS,
        inner
        | st.dictionaries(st.text(max_size=4), inner, max_size=3)
        | st.lists(inner, max_size=3),
        max_size=4,
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    parameters=SCHEMAS | JSON,
    extra=st.dictionaries(
        st.sampled_from(
            ["stream", "stream_options", "max_tokens", "tool_choice", "messages", "model"]
        ),
        JSON,
        max_size=3,
    ),
)
def test_arbitrary_requests_never_raise_anything_but_request_errors(
    parameters: Any, extra: dict[str, Any]
) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": parameters}}
    fields = {"tools": [tool], "tool_choice": "required", **extra}
    try:
        reply = plan_reply(parse_chat_request(body(**fields)), seed=0, output_tokens=4)
    except RequestError:
        return
    if reply.tool_name is not None and reply.finish_reason == "tool_calls":
        orjson.loads("".join(reply.tokens))


def test_malformed_or_huge_schemas_are_schema_errors() -> None:
    for schema in (
        {"type": "object", "properties": ["x"]},
        {"type": "array", "minItems": "many"},
        {"type": "array", "minItems": 10**9},
        {"type": "string", "minLength": 10**9},
        {"type": "integer", "minimum": "1"},
    ):
        with pytest.raises(SchemaError):
            example_for_schema(schema, seed=0)
