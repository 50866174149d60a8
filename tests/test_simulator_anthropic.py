"""The simulator's Anthropic messages route: request parsing, the wire format (checked against
the recorded Anthropic traffic in ``tests/conformance_data``), and the route through the httpx
transport with its latency, tool use, errors and faults. Timed tests run on ``autojump_clock``."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
import trio
import trio.testing

from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport
from sluice.simulator._anthropic_request import parse_messages_request
from sluice.simulator._anthropic_wire import MessageEncoder, message_body, message_events
from sluice.simulator._reply import plan_reply
from sluice.simulator._request import RequestError
from tests.conformance import conformance_dir

RECORDED = conformance_dir() / "raw" / "anthropic"

WEATHER: dict[str, Any] = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
        "required": ["city"],
    },
}
CLOCK: dict[str, Any] = {"name": "get_time", "input_schema": {"type": "object", "properties": {}}}


def request(**fields: Any) -> dict[str, Any]:
    return {
        "model": "claude-sim",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "Tell me about rivers."}],
        **fields,
    }


def parse(**fields: Any) -> Any:
    return parse_messages_request(orjson.dumps(request(**fields)))


def sse(data: bytes) -> list[tuple[str, Any]]:
    """``(event name, parsed data)`` for every SSE event; each must have both lines."""
    out = []
    for block in data.decode().split("\n\n"):
        if not block:
            continue
        event_line, data_line = block.split("\n")
        assert event_line.startswith("event: "), block
        assert data_line.startswith("data: "), block
        out.append((event_line.removeprefix("event: "), orjson.loads(data_line[6:])))
    return out


# --- request parsing ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"model": None}, "model: Field required"),
        ({"max_tokens": None}, "max_tokens: Field required"),
        ({"max_tokens": 0}, "max_tokens: Input should be an integer >= 1"),
        ({"messages": None}, "messages: Field required"),
        ({"messages": []}, "messages: at least one message is required"),
        ({"messages": [{"role": "system", "content": "x"}]}, "messages.0.role"),
        ({"stream": "yes"}, "stream: Input should be a valid boolean"),
        ({"tools": [{"name": "t"}]}, "tools.0.input_schema: Field required"),
        ({"tools": [WEATHER], "tool_choice": {"type": "required"}}, "tool_choice: Input tag"),
        ({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "x"}}, "'x' was not found"),
        ({"tool_choice": {"type": "any"}}, "'any' requires at least one tool"),
    ],
)
def test_bad_messages_requests_say_what_is_wrong(fields: dict[str, Any], message: str) -> None:
    body = {k: v for k, v in request(**fields).items() if v is not None}
    with pytest.raises(RequestError, match=message):
        parse_messages_request(orjson.dumps(body))


@pytest.mark.parametrize(
    ("choice", "text", "tools", "called"),
    [
        (None, "hello", [WEATHER], None),
        (None, "please use a tool", [WEATHER, CLOCK], "get_weather"),
        ({"type": "auto"}, "what does get_time say?", [WEATHER, CLOCK], "get_time"),
        ({"type": "none"}, "use the tool get_time", [WEATHER, CLOCK], None),
        ({"type": "any"}, "hello", [WEATHER, CLOCK], "get_weather"),
        ({"type": "any"}, "call get_time", [WEATHER, CLOCK], "get_time"),
        ({"type": "tool", "name": "get_time"}, "hello", [WEATHER, CLOCK], "get_time"),
        (
            {"type": "any"},
            "hello",
            [{"type": "web_search_20250305", "name": "s"}, CLOCK],
            "get_time",
        ),
    ],
)
def test_tool_choice_decides_the_tool(
    choice: Any, text: str, tools: list[Any], called: str | None
) -> None:
    fields: dict[str, Any] = {"messages": [{"role": "user", "content": text}], "tools": tools}
    if choice is not None:
        fields["tool_choice"] = choice
    parsed = parse(**fields)
    assert (parsed.tool.name if parsed.tool else None) == called


def test_auto_does_not_call_again_after_a_tool_result() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "use the tool"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
        },
    ]
    assert parse(messages=messages, tools=[WEATHER]).tool is None
    assert parse(messages=messages, tools=[WEATHER], tool_choice={"type": "any"}).tool is not None


def test_system_and_block_text_count_as_prompt() -> None:
    plain = parse()
    with_system = parse(system=[{"type": "text", "text": "x" * 40}])
    assert with_system.prompt_chars == plain.prompt_chars + 40
    assert with_system.digest != plain.digest
    blocks = parse(messages=[{"role": "user", "content": [{"type": "text", "text": "Tell me"}]}])
    assert blocks.last_user_text == "Tell me"


def test_ignoring_tools_skips_their_checks() -> None:
    body = orjson.dumps(request(tools=[{"name": "t"}], tool_choice={"type": "bogus"}))
    assert parse_messages_request(body, ignore_tool_choice=True).tool is None
    body = orjson.dumps(request(model="sim-notools", tools=[WEATHER], tool_choice={"type": "any"}))
    assert parse_messages_request(body).tool is None


# --- wire format --------------------------------------------------------------------------


def encoded_stream(paced: bool = False, **fields: Any) -> list[tuple[str, Any]]:
    parsed = parse(**fields)
    reply = plan_reply(parsed, seed=0, output_tokens=4)
    encoder = MessageEncoder(
        message_id="msg_x", model="claude-sim", input_tokens=reply.prompt_tokens
    )
    slots = message_events(encoder, reply, tokens_per_chunk=1, paced=paced)
    return sse(b"".join(event for slot in slots for event in slot))


def test_text_stream_event_order() -> None:
    events = encoded_stream()
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "ping",
        *["content_block_delta"] * 4,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(data["type"] == name for name, data in events)
    start = events[0][1]["message"]
    assert (start["id"], start["model"], start["content"], start["stop_reason"]) == (
        "msg_x",
        "claude-sim",
        [],
        None,
    )
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 4
    assert delta["usage"]["input_tokens"] == start["usage"]["input_tokens"] == 4


def test_tool_use_stream_starts_with_an_empty_json_delta() -> None:
    events = encoded_stream(tools=[WEATHER], tool_choice={"type": "any"})
    names = [name for name, _ in events]
    assert names[:4] == ["message_start", "content_block_start", "ping", "content_block_delta"]
    block = events[1][1]["content_block"]
    assert block["type"] == "tool_use"
    assert block["id"].startswith("toolu_")
    assert (block["name"], block["input"]) == ("get_weather", {})
    deltas = [data["delta"] for name, data in events if name == "content_block_delta"]
    assert deltas[0] == {"type": "input_json_delta", "partial_json": ""}
    arguments = orjson.loads("".join(d["partial_json"] for d in deltas))
    assert set(arguments) == {"city", "days"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_max_tokens_is_the_stop_reason_when_it_cuts() -> None:
    events = encoded_stream(max_tokens=2)
    assert events[-2][1]["delta"]["stop_reason"] == "max_tokens"
    assert events[-2][1]["usage"]["output_tokens"] == 2


def test_paced_streams_repeat_the_ping() -> None:
    parsed = parse()
    reply = plan_reply(parsed, seed=0, output_tokens=7)
    encoder = MessageEncoder(message_id="m", model="c", input_tokens=1)
    slots = message_events(encoder, reply, tokens_per_chunk=1, paced=True, ping_every=3)
    pings = [i for i, slot in enumerate(slots) if any(b"event: ping" in e for e in slot)]
    assert pings == [0, 3, 6]


def _shape(value: Any) -> Any:
    """Key structure of a JSON value: dicts become their keys with shaped values."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value[:1]]
    return type(value).__name__ if value is not None else None


def test_stream_events_have_the_recorded_shape() -> None:
    recorded = sse(
        b"\n\n".join(
            b"\n".join(line.rstrip() for line in block.split(b"\n"))
            for block in (RECORDED / "messages_stream_text_then_two_tool_use.sse")
            .read_bytes()
            .split(b"\n\n")
        )
    )
    ours = encoded_stream() + encoded_stream(tools=[WEATHER], tool_choice={"type": "any"})
    recorded_shapes: dict[tuple[Any, Any, Any], Any] = {}
    for name, data in recorded:
        key = (name, data.get("delta", {}).get("type"), data.get("content_block", {}).get("type"))
        recorded_shapes.setdefault(key, _shape(data))
    seen = set()
    for name, data in ours:
        key = (name, data.get("delta", {}).get("type"), data.get("content_block", {}).get("type"))
        assert _shape(data) == recorded_shapes[key], key
        seen.add(key)
    assert seen == set(recorded_shapes)


@pytest.mark.parametrize(
    ("recording", "fields"),
    [
        ("messages_nonstream_tool_use.json", {"tools": [WEATHER], "tool_choice": {"type": "any"}}),
        ("messages_nonstream_after_tool_result.json", {}),
    ],
)
def test_message_body_has_the_recorded_shape(recording: str, fields: dict[str, Any]) -> None:
    reply = plan_reply(parse(**fields), seed=0, output_tokens=4)
    ours = orjson.loads(message_body(message_id="msg_x", model="claude-sim", reply=reply))
    theirs = orjson.loads((RECORDED / recording).read_bytes())
    assert list(ours) == list(theirs)  # same keys, same order
    ours["content"][0].pop("input", None)
    theirs["content"][0].pop("input", None)
    assert _shape(ours) == _shape(theirs)


# --- the route, through the transport -----------------------------------------------------


def client(app_or_config: SimulatorApp | SimulatorConfig | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=mock_transport(app_or_config), base_url="http://sim/v1")


async def post_stream(
    http: httpx.AsyncClient, payload: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[httpx.Response, list[tuple[float, list[tuple[str, Any]]]]]:
    pieces = []
    async with http.stream("POST", "/messages", json=payload, headers=headers) as r:
        async for piece in r.aiter_raw():
            pieces.append((trio.current_time(), sse(piece)))
    return r, pieces


async def test_streamed_message_follows_the_latency_model(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(60):
        config = SimulatorConfig(ttft=0.5, tokens_per_second=10, output_tokens=4, ping_interval=0.2)
        async with client(config) as http:
            r, pieces = await post_stream(http, request(stream=True), {"x-api-key": "anything"})
        assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
        assert r.headers["request-id"] == "sim-req-1"
        assert "x-request-id" not in r.headers
        assert [at for at, _ in pieces] == [0.5, 0.6, 0.7, 0.8]
        names = [[name for name, _ in events] for _, events in pieces]
        assert names == [
            ["message_start", "content_block_start", "ping", "content_block_delta"],
            ["content_block_delta"],
            ["ping", "content_block_delta"],  # every 0.2 s of a paced stream
            ["content_block_delta", "content_block_stop", "message_delta", "message_stop"],
        ]


async def test_non_streamed_message_and_tool_use() -> None:
    with trio.fail_after(10):
        async with client() as http:
            text = await http.post("/messages", json=request())
            tool = await http.post(
                "/messages",
                json=request(tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"}),
            )
        assert text.headers["content-type"] == "application/json"
        assert text.json()["content"][0]["text"].count(" ") == 23
        assert text.json()["stop_reason"] == "end_turn"
        (block,) = tool.json()["content"]
        assert block["type"] == "tool_use"
        assert set(block["input"]) == {"city", "days"}
        assert tool.json()["stop_reason"] == "tool_use"


@pytest.mark.parametrize(
    ("directive", "status", "type_"),
    [
        ("429", 429, "rate_limit_error"),
        ("529", 529, "overloaded_error"),
        ("500", 500, "api_error"),
        ("503", 503, "api_error"),
        ("400", 400, "invalid_request_error"),
        ("401", 401, "authentication_error"),
    ],
)
async def test_error_faults_have_anthropic_error_bodies(
    directive: str, status: int, type_: str
) -> None:
    with trio.fail_after(10):
        async with client() as http:
            r = await http.post("/messages", json=request(), headers={"x-sim-fault": directive})
        assert r.status_code == status
        assert r.json() == {
            "type": "error",
            "error": {"type": type_, "message": r.json()["error"]["message"]},
            "request_id": "sim-req-1",
        }
        assert r.headers["request-id"] == "sim-req-1"
        assert "retry-after-ms" not in r.headers
        assert r.headers.get("retry-after") == ("1" if status == 429 else None)
        assert r.headers.get("x-should-retry") == ("true" if status == 529 else None)


async def test_bad_requests_are_invalid_request_errors() -> None:
    with trio.fail_after(10):
        async with client() as http:
            no_max = await http.post("/messages", json={"model": "c", "messages": []})
            bad_fault = await http.post(
                "/messages", json=request(), headers={"x-sim-fault": "sometimes"}
            )
        for r in (no_max, bad_fault):
            assert r.status_code == 400
            assert r.json()["type"] == "error"
            assert r.json()["error"]["type"] == "invalid_request_error"
        assert no_max.json()["error"]["message"] == "max_tokens: Field required"


async def test_faults_and_script_are_shared_with_the_openai_route() -> None:
    with trio.fail_after(10):
        app = SimulatorApp(SimulatorConfig(script=("500", "disconnect:3", "malformed:1")))
        async with client(app) as http:
            chat = await http.post(
                "/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
            )
            with pytest.raises(httpx.RemoteProtocolError):
                await http.post("/messages", json=request(stream=True))
            malformed = await http.post("/messages", json=request(stream=True))
        assert chat.status_code == 500
        blocks = malformed.content.split(b"\n\n")
        assert blocks[1].startswith(b"event: content_block_delta\ndata: {")
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(blocks[1].split(b"\n")[1].removeprefix(b"data: "))
        assert blocks[-2].startswith(b"event: message_stop")
        assert app.chat_requests_seen == 3


async def test_empty_message_stream_has_no_content_block() -> None:
    with trio.fail_after(10):
        async with client() as http:
            _, pieces = await post_stream(http, request(stream=True), {"x-sim-fault": "empty"})
            body = await http.post("/messages", json=request(), headers={"x-sim-fault": "empty"})
        events = [e for _, evs in pieces for e in evs]
        assert [name for name, _ in events] == [
            "message_start",
            "ping",
            "message_delta",
            "message_stop",
        ]
        assert events[2][1]["usage"]["output_tokens"] == 0
        assert (body.status_code, body.content) == (200, b"")


async def test_quota_headers_in_both_families(autojump_clock: trio.testing.MockClock) -> None:
    with trio.fail_after(60):
        app = SimulatorApp(SimulatorConfig(rpm=1), wall_clock=lambda: 1_769_470_000.0)
        async with client(app) as http:
            ok = await http.post("/messages", json=request())
            await trio.sleep(15)
            refused = await http.post("/messages", json=request())
        assert ok.headers["anthropic-ratelimit-requests-remaining"] == "0"
        assert ok.headers["x-ratelimit-remaining-requests"] == "0"
        assert ok.headers["anthropic-ratelimit-requests-reset"] == "2026-01-26T23:27:40Z"
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "45"
        assert refused.json()["error"]["type"] == "rate_limit_error"
        assert refused.headers["x-ratelimit-reset-requests"] == "45s"
