"""The pure parts behind the simulator's faults, quotas and JSON-text replies: directive
parsing and choice, broken-JSON generation, event shaping, the quota window, response-format
parsing and JSON reply planning. Synchronous; no trio, no sockets."""

from __future__ import annotations

import random
import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.simulator._broken import (
    FALLBACK,
    KINDS,
    applicable_kinds,
    break_json,
    strip_envelope,
)
from sluice.simulator._config import SimulatorConfig
from sluice.simulator._directives import (
    BrokenJson,
    Directive,
    Empty,
    Fail,
    Malformed,
    Normal,
    Reset,
    Stall,
    Trickle,
    Truncated,
    choose_directive,
    parse_directive,
)
from sluice.simulator._quota import QuotaWindow, format_duration
from sluice.simulator._reply import plan_reply
from sluice.simulator._request import ANY_OBJECT, RequestError, parse_chat_request
from sluice.simulator._shaping import (
    cut_after,
    half,
    insert_after,
    schedule,
    stall_after,
    truncate,
)

# --- directives -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "directive"),
    [
        ("529", Fail(529)),
        ("429_date", Fail(429, None, http_date=True)),
        ("429_DATE:retry_after=2.5", Fail(429, 2.5, http_date=True)),
        ("reset", Reset()),
        ("stall:30", Stall(30.0)),
        ("stall : 0.5", Stall(0.5)),
        ("stall_after:3:10", Stall(10.0, 3)),
        ("stall_after:0:1.5", Stall(1.5, 0)),
        ("trickle", Trickle(16, 0.05)),
        ("trickle:4", Trickle(4, 0.05)),
        ("trickle:4:0.25", Trickle(4, 0.25)),
        ("malformed", Malformed(1)),
        ("malformed:0", Malformed(0)),
        ("malformed:7", Malformed(7)),
        ("truncated_json", Truncated()),
        ("empty", Empty()),
        ("broken_json", BrokenJson()),
        ("broken_json:fences", BrokenJson("fences")),
        ("Broken_JSON:No_Envelope", BrokenJson("no_envelope")),
    ],
)
def test_new_directives_parse(text: str, directive: Any) -> None:
    assert parse_directive(text) == directive


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("stall", "stall needs the seconds: stall:SECONDS"),
        ("stall:soon", "seconds must be a number >= 0, got 'soon'"),
        ("stall:-1", "seconds must be a number >= 0"),
        ("stall:inf", "seconds must be a number >= 0"),
        ("stall_after:3", "stall_after needs events and seconds: stall_after:N:S"),
        ("stall_after:x:3", "expected a whole number of events, got 'x'"),
        ("trickle:0", "trickle needs at least 1 byte a piece"),
        ("trickle:big", "expected a whole number of bytes, got 'big'"),
        ("trickle:1:2:3", "takes at most 2 arguments"),
        ("malformed:-2", "expected a whole number of events, got '-2'"),
        ("broken_json:yaml", "unknown kind 'yaml'; expected one of fences, prose"),
        ("reset:now", "'reset' takes no arguments"),
        ("empty:1", "'empty' takes no arguments"),
        ("429_date:wait=1", "unknown option 'wait=1'"),
        ("refused", "expected ok, 429"),
    ],
)
def test_bad_new_directives_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_directive(text)


def test_the_syntax_message_lists_every_directive() -> None:
    with pytest.raises(ValueError, match="expected ok") as info:
        parse_directive("teapot")
    for word in ("stall_after", "trickle", "malformed", "truncated_json", "empty", "broken_json"):
        assert word in str(info.value)


def test_rates_are_drawn_once_per_request_and_only_when_there_are_some() -> None:
    rng = random.Random(0)
    state = rng.getstate()
    assert choose_directive(index=0, override=None, script=(), rates=(), rng=rng) == Normal()
    assert rng.getstate() == state
    rates: list[tuple[Directive, float]] = [(Reset(), 0.25), (Stall(1.0), 0.25), (Empty(), 0.25)]
    picks = [
        choose_directive(index=i, override=None, script=(), rates=rates, rng=rng)
        for i in range(4000)
    ]
    for directive in (Reset(), Stall(1.0), Empty(), Normal()):
        assert picks.count(directive) / len(picks) == pytest.approx(0.25, abs=0.03)


# --- config -----------------------------------------------------------------------------------


def test_fault_rates_take_a_mapping_or_pairs() -> None:
    assert SimulatorConfig(fault_rates={"stall:3": 0.1}).fault_rates == (("stall:3", 0.1),)
    assert SimulatorConfig(fault_rates=[("reset", 0.2)]).fault_rates == (("reset", 0.2),)
    assert SimulatorConfig(fault_rates={"empty": 0.1}).has_random_faults
    assert SimulatorConfig(rate_529=0.1).has_random_faults
    assert not SimulatorConfig(fault_rates={"empty": 0}).has_random_faults
    assert SimulatorConfig(tpm=10).has_quota
    assert not SimulatorConfig().has_quota


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"fault_rates": {"stall": 0.1}}, "fault_rates['stall']: bad directive 'stall'"),
        ({"fault_rates": {"reset": 2}}, "fault_rates['reset'] must be a probability"),
        ({"fault_rates": {"reset": True}}, "fault_rates['reset'] must be a probability"),
        ({"fault_rates": [("reset",)]}, "expected (directive, probability) pairs"),
        ({"rate_529": 0.5, "fault_rates": {"reset": 0.6}}, "must be at most 1, got 1.1"),
        ({"rate_broken_json": -1}, "'rate_broken_json' must be a probability"),
        ({"rpm": 0}, "'rpm' must be >= 1"),
        ({"tpm": 1.5}, "'tpm' must be <class 'int'>"),
        ({"ping_interval": 0}, "'ping_interval' must be > 0"),
        ({"script": ("ok", "stall")}, "script[1]: bad directive 'stall'"),
    ],
)
def test_config_rejects_bad_new_values(changes: dict[str, Any], message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=re.escape(message)):
        SimulatorConfig(**changes)


# --- broken JSON ------------------------------------------------------------------------------

CALL = {"name": "search", "parameters": {"query": 'it\'s "x"', "limit": [1, 2], "deep": {}}}


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("fences", '```json\n{"name":"search","parameters":{"query":"it\'s \\"x\\"",'),
        ("prose", 'Sure! Here is the JSON you asked for:\n{"name":"search",'),
        (
            "trailing_comma",
            '{"name":"search","parameters":{"query":"it\'s \\"x\\"","limit":[1,2,],"deep":{},},}',
        ),
        (
            "single_quotes",
            "{'name':'search','parameters':{'query':'it\\'s \"x\"','limit':[1,2],'deep':{}}}",
        ),
        (
            "unquoted_keys",
            '{name:"search",parameters:{query:"it\'s \\"x\\"",limit:[1,2],deep:{}}}',
        ),
        (
            "unclosed",
            '{"name":"search","parameters":{"query":"it\'s \\"x\\"","limit":[1,2],"deep":{',
        ),
        ("no_envelope", '{"query":"it\'s \\"x\\"","limit":[1,2],"deep":{}}'),
        ("double_encoded", '"{\\"name\\":\\"search\\",\\"parameters\\":'),
    ],
)
def test_each_kind_breaks_json_its_own_way(kind: str, text: str) -> None:
    assert break_json(CALL, kind).startswith(text)


def test_fences_and_prose_wrap_the_whole_json() -> None:
    plain = orjson.dumps(CALL).decode()
    assert break_json(CALL, "fences") == f"```json\n{plain}\n```"
    assert plain in break_json(CALL, "prose")
    assert orjson.loads(orjson.loads(break_json(CALL, "double_encoded"))) == CALL


def test_envelopes_are_found_inside_item_and_lists() -> None:
    assert strip_envelope({"item": CALL}) == CALL["parameters"]
    assert strip_envelope([CALL, {"name": "x", "arguments": {"a": 1}}]) == [
        CALL["parameters"],
        {"a": 1},
    ]
    assert strip_envelope({"query": "x"}) is None
    assert strip_envelope({"name": "only a name"}) is None
    assert strip_envelope(["a", 1]) is None


@pytest.mark.parametrize(
    ("value", "missing"),
    [
        ({}, {"trailing_comma", "single_quotes", "unquoted_keys", "no_envelope"}),
        ([], {"trailing_comma", "single_quotes", "unquoted_keys", "no_envelope"}),
        (42, {"trailing_comma", "single_quotes", "unquoted_keys", "unclosed", "no_envelope"}),
        ("text", {"trailing_comma", "unquoted_keys", "unclosed", "no_envelope"}),
        ([1], {"single_quotes", "unquoted_keys", "no_envelope"}),
        ({"a": 1}, {"no_envelope"}),
        ({"a b": 1}, {"unquoted_keys", "no_envelope"}),
        (CALL, set()),
    ],
)
def test_kinds_apply_only_where_they_change_something(value: Any, missing: set[str]) -> None:
    assert set(KINDS) - set(applicable_kinds(value)) == missing


def test_a_kind_that_cannot_apply_falls_back_to_prose() -> None:
    assert FALLBACK == "prose"
    assert break_json(42, "unquoted_keys") == break_json(42, "prose")
    with pytest.raises(ValueError, match="unknown broken-JSON kind 'nope'"):
        break_json(CALL, "nope")


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=15,
)


@settings(max_examples=200, deadline=None)
@given(value=JSON_VALUES)
def test_every_applicable_kind_makes_strict_parsing_fail_or_change(value: Any) -> None:
    for kind in applicable_kinds(value):
        text = break_json(value, kind)
        try:
            parsed = orjson.loads(text)
        except orjson.JSONDecodeError:
            continue
        if kind == "no_envelope":
            assert parsed == strip_envelope(value)
        else:
            assert kind == "double_encoded"
            assert parsed == orjson.dumps(value).decode()


# --- shaping ----------------------------------------------------------------------------------

SLOTS = [[b"a", b"b"], [b"c"], [b"d", b"e"]]


def test_cut_keeps_events_and_times_but_never_the_last_event() -> None:
    plan = schedule(SLOTS, 0.5)
    assert cut_after(plan, 3) == [(0.0, [b"a", b"b"]), (0.5, [b"c"])]
    assert cut_after(plan, 1) == [(0.0, [b"a"])]
    assert cut_after(plan, 99) == [(0.0, [b"a", b"b"]), (0.5, [b"c"]), (1.0, [b"d"])]
    assert cut_after(plan, 0) == []


def test_insert_goes_after_n_events_and_before_the_last() -> None:
    plan = schedule(SLOTS, 1.0)
    assert insert_after(plan, 0, b"X")[0] == (0.0, [b"X", b"a", b"b"])
    assert insert_after(plan, 2, b"X")[:2] == [(0.0, [b"a", b"b", b"X"]), (1.0, [b"c"])]
    assert insert_after(plan, 4, b"X")[2] == (2.0, [b"d", b"X", b"e"])
    assert insert_after(plan, 99, b"X")[2] == (2.0, [b"d", b"X", b"e"])


def test_stall_splits_the_slot_at_the_boundary_and_shifts_the_rest() -> None:
    plan = schedule(SLOTS, 1.0)
    assert stall_after(plan, 1, 10.0) == [
        (0.0, [b"a"]),
        (10.0, [b"b"]),
        (11.0, [b"c"]),
        (12.0, [b"d", b"e"]),
    ]
    assert stall_after(plan, 3, 10.0) == [(0.0, [b"a", b"b"]), (1.0, [b"c"]), (12.0, [b"d", b"e"])]
    assert stall_after(plan, 0, 5.0)[:2] == [(0.0, []), (5.0, [b"a", b"b"])]
    assert stall_after(plan, 99, 5.0)[-2:] == [(2.0, [b"d"]), (7.0, [b"e"])]


def test_truncate_keeps_half_the_bytes_at_their_times() -> None:
    plan = schedule([[b"aaaa"], [b"bbbb"], [b"cccc"]], 1.0)
    assert truncate(plan) == [(0.0, [b"aaaa"]), (1.0, [b"bb"])]
    assert half("é€x".encode()) == "é".encode()  # never inside a character
    assert half(b"") == b""


# --- quotas -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (-1, "0s"),
        (0.006, "6ms"),
        (0.0061, "7ms"),
        (0.999, "999ms"),
        (1, "1s"),
        (8.64, "8.64s"),
        (59.75, "59.75s"),
        (60, "1m0s"),
        (123.25, "2m3.25s"),
    ],
)
def test_durations_are_written_as_openai_does(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_requests_slide_out_of_the_window() -> None:
    quota = QuotaWindow(rpm=2, tpm=None)
    assert quota.admit(0.0, 5) is None
    assert quota.admit(10.0, 5) is None
    assert quota.admit(20.0, 5) == (40.0, "requests")
    assert quota.admit(59.999, 5) == pytest.approx((0.001, "requests"))
    assert quota.admit(60.0, 5) is None
    assert dict(quota.headers(60.0)) == {
        b"x-ratelimit-limit-requests": b"2",
        b"x-ratelimit-remaining-requests": b"0",
        b"x-ratelimit-reset-requests": b"1m0s",
    }
    assert dict(quota.headers(130.0))[b"x-ratelimit-remaining-requests"] == b"2"


def test_tokens_wait_until_enough_have_left_the_window() -> None:
    quota = QuotaWindow(rpm=None, tpm=100)
    assert quota.admit(0.0, 40) is None
    assert quota.admit(5.0, 40) is None
    assert quota.admit(6.0, 30) == (54.0, "tokens")  # needs the first 40 gone: at t=60
    assert quota.admit(6.0, 90) == (59.0, "tokens")  # needs both gone: at t=65
    assert quota.admit(6.0, 101) == (60.0, "tokens")  # never fits: a full window
    assert quota.admit(6.0, 20) is None
    assert dict(quota.headers(6.0))[b"x-ratelimit-remaining-tokens"] == b"0"


def test_the_longer_wait_names_the_limit() -> None:
    quota = QuotaWindow(rpm=1, tpm=10)
    assert quota.admit(0.0, 10) is None
    assert quota.admit(30.0, 1) == (30.0, "requests")  # both wait 30 s: requests first


def test_anthropic_headers_have_rfc3339_resets() -> None:
    quota = QuotaWindow(rpm=3, tpm=1000)
    quota.admit(0.0, 100)
    headers = dict(quota.anthropic_headers(20.0, wall_now=1_769_470_000.2))
    assert headers == {
        b"anthropic-ratelimit-requests-limit": b"3",
        b"anthropic-ratelimit-requests-remaining": b"2",
        b"anthropic-ratelimit-requests-reset": b"2026-01-26T23:27:21Z",
        b"anthropic-ratelimit-tokens-limit": b"1000",
        b"anthropic-ratelimit-tokens-remaining": b"900",
        b"anthropic-ratelimit-tokens-reset": b"2026-01-26T23:27:21Z",
    }


# --- response formats and JSON replies --------------------------------------------------------


def body(**fields: Any) -> bytes:
    fields.setdefault("model", "sim-small")
    fields.setdefault("messages", [{"role": "user", "content": "hello there"}])
    return orjson.dumps(fields)


SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


@pytest.mark.parametrize(
    ("fields", "schema"),
    [
        ({}, None),
        ({"response_format": {"type": "text"}}, None),
        ({"response_format": {"type": "json_object"}}, ANY_OBJECT),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "n"}}}, ANY_OBJECT),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "n", "schema": SCHEMA},
                }
            },
            SCHEMA,
        ),
        ({"format": "json"}, ANY_OBJECT),
        ({"format": SCHEMA}, SCHEMA),
        ({"format": ""}, None),
    ],
)
def test_response_formats_set_the_json_schema(fields: dict[str, Any], schema: Any) -> None:
    assert parse_chat_request(body(**fields)).json_schema == schema


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"response_format": "json"}, "response_format"),
        ({"response_format": {"type": "xml"}}, "response_format.type"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        ({"format": 3}, "format"),
    ],
)
def test_bad_response_formats_are_request_errors(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_chat_request(body(**fields))
    assert info.value.param == param


def test_json_replies_follow_the_schema_and_max_tokens() -> None:
    request = parse_chat_request(body(format=SCHEMA))
    reply = plan_reply(request, seed=0, output_tokens=24)
    assert reply.finish_reason == "stop"
    assert reply.tool_name is None
    assert set(orjson.loads("".join(reply.tokens))) == {"n"}
    cut = plan_reply(
        parse_chat_request(body(format=SCHEMA, max_tokens=2)), seed=0, output_tokens=24
    )
    assert (cut.finish_reason, cut.tokens) == ("length", reply.tokens[:2])


def test_broken_replies_record_the_kind_applied() -> None:
    request = parse_chat_request(body(format=SCHEMA))
    reply = plan_reply(request, seed=0, output_tokens=24, broken=lambda kinds: "unquoted_keys")
    assert reply.broken == "unquoted_keys"
    assert "".join(reply.tokens).startswith("{n:")
    seen: list[tuple[str, ...]] = []

    def choose(kinds: Any) -> str:
        seen.append(tuple(kinds))
        return "no_envelope"

    fallback = plan_reply(request, seed=0, output_tokens=24, broken=choose)
    assert seen == [applicable_kinds(orjson.loads("".join(reply.tokens).replace("{n:", '{"n":')))]
    assert "no_envelope" not in seen[0]
    assert fallback.broken == "prose"


def test_tools_win_over_a_response_format_unless_ignored() -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": SCHEMA}}
    fields = {"tools": [tool], "tool_choice": "required", "format": SCHEMA}
    assert parse_chat_request(body(**fields)).tool is not None
    ignored = parse_chat_request(body(**fields), ignore_tool_choice=True)
    assert (ignored.tool, ignored.json_schema) == (None, SCHEMA)
    notools = parse_chat_request(body(model="sim-notools", **fields))
    assert notools.tool is None
    assert notools.prompt_chars == len("hello there")  # ignored tools are not prompt
