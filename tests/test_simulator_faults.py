"""The simulator's extended faults, tool-ignoring mode and quotas, through its httpx transport.

No sockets; everything timed runs on ``autojump_clock`` and asserts exact virtual times. The
Anthropic route has its own file; these use the OpenAI route unless a test says otherwise.
"""

from __future__ import annotations

import email.utils
from typing import Any

import httpx
import orjson
import pytest
import trio
import trio.testing

from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport
from sluice.simulator._broken import KINDS
from sluice.simulator._transport import RESET_MESSAGE

WALL = 1_700_000_000.0
MESSAGES = [{"role": "user", "content": "Tell me about rivers."}]
POINT = {
    "type": "object",
    "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
    "required": ["x", "y"],
    "additionalProperties": False,
}
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
# The forcing path's tool-union schema for two tools, wrapped in "item" (the spec's §5.2).
UNION = {
    "type": "object",
    "properties": {
        "item": {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {
                        "name": {"const": "get_weather", "type": "string"},
                        "parameters": {
                            "type": "object",
                            "properties": {"city": {"type": "string"}},
                            "required": ["city"],
                        },
                    },
                    "required": ["name", "parameters"],
                    "additionalProperties": False,
                },
                {
                    "type": "object",
                    "properties": {
                        "name": {"const": "search", "type": "string"},
                        "parameters": {
                            "type": "object",
                            "properties": {"query": {"type": "string"}},
                            "required": ["query"],
                        },
                    },
                    "required": ["name", "parameters"],
                    "additionalProperties": False,
                },
            ]
        }
    },
    "required": ["item"],
}


def app_of(config: SimulatorConfig | None = None) -> SimulatorApp:
    return SimulatorApp(config, wall_clock=lambda: WALL)


def client(app_or_config: SimulatorApp | SimulatorConfig | None = None) -> httpx.AsyncClient:
    app = app_or_config if isinstance(app_or_config, SimulatorApp) else app_of(app_or_config)
    return httpx.AsyncClient(transport=mock_transport(app), base_url="http://sim/v1")


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "sim-small", "messages": MESSAGES, **fields}


def fault(directive: str) -> dict[str, str]:
    return {"x-sim-fault": directive}


def sse_payloads(data: bytes) -> list[bytes]:
    """The raw ``data:`` payloads of an SSE body (no JSON parsing)."""
    return [block.removeprefix(b"data: ") for block in data.split(b"\n\n") if block]


async def timed_stream(
    http: httpx.AsyncClient, payload: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[httpx.Response, float, list[tuple[float, bytes]]]:
    """POST ``payload``; the response, when its head arrived, and each body piece with its
    arrival time."""
    pieces: list[tuple[float, bytes]] = []
    async with http.stream("POST", "/chat/completions", json=payload, headers=headers) as r:
        head_at = trio.current_time()
        async for piece in r.aiter_raw():
            pieces.append((trio.current_time(), piece))
    return r, head_at, pieces


def joined(pieces: list[tuple[float, bytes]]) -> bytes:
    return b"".join(piece for _, piece in pieces)


def as_request(body: bytes, number: int) -> bytes:
    """``body`` of request ``sim-req-1`` as request ``number`` would have it."""
    return body.replace(b"sim-req-1", b"sim-req-%d" % number)


# --- stalls -------------------------------------------------------------------------------


async def test_stall_holds_back_the_head_of_a_stream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(60):
        config = SimulatorConfig(ttft=0.5, tokens_per_second=10, output_tokens=3)
        async with client(config) as http:
            r, head_at, pieces = await timed_stream(http, chat(stream=True), fault("stall:30"))
        assert r.status_code == 200
        assert head_at == 30.5
        assert [at for at, _ in pieces] == [30.5, 30.6, 30.7]
        assert sse_payloads(joined(pieces))[-1] == b"[DONE]"


async def test_stall_delays_a_non_streaming_reply(autojump_clock: trio.testing.MockClock) -> None:
    with trio.fail_after(60):
        async with client(SimulatorConfig(ttft=1.0)) as http:
            r = await http.post("/chat/completions", json=chat(), headers=fault("stall:7.5"))
            assert trio.current_time() == 8.5
        assert r.json()["object"] == "chat.completion"


async def test_stall_after_events_splits_the_stream(autojump_clock: trio.testing.MockClock) -> None:
    with trio.fail_after(60):
        config = SimulatorConfig(ttft=0.5, tokens_per_second=10, output_tokens=4)
        async with client(config) as http:
            r, head_at, pieces = await timed_stream(
                http, chat(stream=True), fault("stall_after:3:20")
            )
        assert (r.status_code, head_at) == (200, 0.5)
        # slot 0 (opening + token 1) at 0.5, token 2 at 0.6; token 3 was due at 0.7 but is
        # the fourth event, so it and everything after it moved 20 s later.
        assert [at for at, _ in pieces] == [0.5, 0.6, 20.7, 20.8]
        assert [len(sse_payloads(p)) for _, p in pieces] == [2, 1, 1, 3]


async def test_stall_after_zero_sends_the_head_then_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(60):
        async with client(SimulatorConfig(ttft=0.25, output_tokens=2)) as http:
            _, head_at, pieces = await timed_stream(
                http, chat(stream=True), fault("stall_after:0:9")
            )
        assert head_at == 0.25
        data_pieces = [(at, p) for at, p in pieces if p]
        assert [at for at, _ in data_pieces] == [9.25]
        assert sse_payloads(joined(pieces))[-1] == b"[DONE]"


async def test_stall_after_on_a_json_body_sends_half_then_the_rest(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(60):
        async with (
            client(SimulatorConfig(ttft=2.0)) as http,
            http.stream(
                "POST", "/chat/completions", json=chat(), headers=fault("stall_after:1:4")
            ) as r,
        ):
            assert trio.current_time() == 2.0
            pieces = [(trio.current_time(), p) async for p in r.aiter_raw()]
        assert [at for at, _ in pieces] == [2.0, 6.0]
        body = joined(pieces)
        assert len(body) == int(r.headers["content-length"])
        assert orjson.loads(body)["object"] == "chat.completion"


# --- trickle, malformed, truncated, empty ------------------------------------------------


async def test_trickle_sends_a_few_bytes_at_a_time(autojump_clock: trio.testing.MockClock) -> None:
    with trio.fail_after(60):
        async with client(SimulatorConfig(ttft=1.0)) as http:
            plain = (await http.post("/chat/completions", json=chat())).content
            start = trio.current_time()
            async with http.stream(
                "POST", "/chat/completions", json=chat(), headers=fault("trickle:10:0.5")
            ) as r:
                pieces = [(trio.current_time() - start, p) async for p in r.aiter_raw()]
        body = joined(pieces)
        assert body == as_request(plain, 2)
        assert int(r.headers["content-length"]) == len(body)
        assert [len(p) for _, p in pieces[:-1]] == [10] * (len(pieces) - 1)
        assert [at for at, _ in pieces] == [1.0 + 0.5 * i for i in range(len(pieces))]


async def test_trickle_without_arguments_on_a_stream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(600):
        async with client(SimulatorConfig(output_tokens=3)) as http:
            _, head_at, pieces = await timed_stream(http, chat(stream=True), fault("trickle"))
        assert head_at == 0.0
        assert all(len(p) == 16 for _, p in pieces[:-1])
        expected = [0.0]
        for _ in pieces[1:]:
            expected.append(expected[-1] + 0.05)  # each piece 0.05 s after the one before
        assert [at for at, _ in pieces] == expected
        assert sse_payloads(joined(pieces))[-1] == b"[DONE]"


@pytest.mark.parametrize(("after", "position"), [(0, 0), (2, 2), (99, 5)])
async def test_malformed_inserts_one_event_that_is_not_json(after: int, position: int) -> None:
    with trio.fail_after(10):
        async with client(SimulatorConfig(output_tokens=3)) as http:
            r = await http.post(
                "/chat/completions", json=chat(stream=True), headers=fault(f"malformed:{after}")
            )
        payloads = sse_payloads(r.content)
        assert len(payloads) == 1 + 3 + 1 + 1 + 1  # opening, tokens, finish, [DONE], malformed
        bad = [i for i, p in enumerate(payloads) if p != b"[DONE]" and not _is_json(p)]
        assert bad == [position]
        assert payloads[-1] == b"[DONE]"


def _is_json(data: bytes) -> bool:
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return True


@pytest.mark.parametrize("directive", ["truncated_json", "malformed"])
async def test_a_truncated_json_body_is_well_delivered_but_invalid(directive: str) -> None:
    with trio.fail_after(10):
        async with client() as http:
            whole = await http.post("/chat/completions", json=chat())
            cut = await http.post("/chat/completions", json=chat(), headers=fault(directive))
        assert cut.status_code == 200
        assert int(cut.headers["content-length"]) == len(cut.content) > 0
        assert as_request(whole.content, 2).startswith(cut.content)
        assert len(cut.content) == len(whole.content) // 2
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(cut.content)


async def test_a_truncated_stream_ends_cleanly_without_done(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(10):
        config = SimulatorConfig(tokens_per_second=10, output_tokens=6)
        async with client(config) as http:
            whole = joined((await timed_stream(http, chat(stream=True)))[2])
            r, _, pieces = await timed_stream(http, chat(stream=True), fault("truncated_json"))
        body = joined(pieces)
        assert r.status_code == 200
        assert as_request(whole, 2).startswith(body)
        assert len(body) == len(whole) // 2
        assert b"[DONE]" not in body
        assert not body.endswith(b"\n\n")  # the last event is cut mid-JSON
        # the first request took 0.5 s; the pieces left keep their usual times after that
        assert [at for at, _ in pieces] == [0.5 + 0.1 * i for i in range(len(pieces))]
        assert len(pieces) < 6


async def test_empty_replies() -> None:
    with trio.fail_after(10):
        async with client() as http:
            plain = await http.post("/chat/completions", json=chat(), headers=fault("empty"))
            streamed = await http.post(
                "/chat/completions",
                json=chat(stream=True, stream_options={"include_usage": True}),
                headers=fault("empty"),
            )
        assert (plain.status_code, plain.content) == (200, b"")
        assert plain.headers["content-length"] == "0"
        opening, finish, usage, done = sse_payloads(streamed.content)
        assert orjson.loads(opening)["choices"][0]["delta"] == {
            "role": "assistant",
            "content": "",
            "refusal": None,
        }
        assert orjson.loads(finish)["choices"][0]["finish_reason"] == "stop"
        assert orjson.loads(usage)["usage"]["completion_tokens"] == 0
        assert done == b"[DONE]"


# --- error faults -------------------------------------------------------------------------


async def test_429_date_sends_retry_after_as_an_http_date() -> None:
    with trio.fail_after(10):
        async with client(SimulatorConfig(retry_after=3)) as http:
            default = await http.post("/chat/completions", json=chat(), headers=fault("429_date"))
            given = await http.post(
                "/chat/completions", json=chat(), headers=fault("429_date:retry_after=90.5")
            )
        for r, wait in ((default, 3), (given, 91)):
            assert r.status_code == 429
            assert "retry-after-ms" not in r.headers
            assert r.headers["retry-after"] == email.utils.formatdate(WALL + wait, usegmt=True)
            when = email.utils.parsedate_to_datetime(r.headers["retry-after"]).timestamp()
            assert when - WALL == wait
        assert default.json()["error"]["code"] == "rate_limit_exceeded"


async def test_529_has_the_overloaded_body_of_the_route() -> None:
    with trio.fail_after(10):
        async with client(SimulatorConfig(rate_529=1.0)) as http:
            r = await http.post("/chat/completions", json=chat())
        assert r.status_code == 529
        assert r.json()["error"]["type"] == "overloaded_error"


async def test_reset_closes_without_a_response_in_the_transport() -> None:
    with trio.fail_after(10):
        app = app_of(SimulatorConfig(script=("reset",)))
        async with client(app) as http:
            with pytest.raises(httpx.RemoteProtocolError) as info:
                await http.post("/chat/completions", json=chat())
            after = await http.post("/chat/completions", json=chat())
        assert str(info.value) == RESET_MESSAGE == "Server disconnected without sending a response."
        assert after.status_code == 200
        assert (app.requests_seen, app.chat_requests_seen) == (2, 2)


async def test_script_runs_the_new_directives_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(60):
        script = ("empty", "truncated_json", "stall:2", "429_date", "ok")
        async with client(SimulatorConfig(script=script)) as http:
            results = []
            for _ in script:
                r = await http.post("/chat/completions", json=chat())
                results.append((r.status_code, len(r.content) > 0, trio.current_time()))
        assert [(status, t) for status, _, t in results] == [
            (200, 0.0),
            (200, 0.0),
            (200, 2.0),
            (429, 2.0),
            (200, 2.0),
        ]
        assert [has for _, has, _ in results] == [False, True, True, True, True]


async def test_random_fault_rates_repeat_for_a_fault_seed() -> None:
    async def outcomes(seed: int) -> list[str]:
        config = SimulatorConfig(
            rate_529=0.2, fault_rates={"reset": 0.2, "empty": 0.2}, fault_seed=seed
        )
        out = []
        async with client(config) as http:
            for _ in range(40):
                try:
                    r = await http.post("/chat/completions", json=chat())
                except httpx.RemoteProtocolError:
                    out.append("reset")
                else:
                    out.append("empty" if not r.content else str(r.status_code))
        return out

    with trio.fail_after(10):
        first = await outcomes(3)
        assert first == await outcomes(3)
        assert first != await outcomes(4)
        assert set(first) == {"200", "529", "reset", "empty"}


async def test_a_bad_fault_header_names_the_new_syntax() -> None:
    with trio.fail_after(10):
        async with client() as http:
            r = await http.post("/chat/completions", json=chat(), headers=fault("stall_after:2"))
        assert r.status_code == 400
        assert r.json()["error"]["param"] == "x-sim-fault"
        assert "stall_after needs events and seconds" in r.json()["error"]["message"]


# --- structured output, tool-ignoring mode and broken JSON --------------------------------


IMPOSSIBLE = {"type": "integer", "minimum": 5, "maximum": 1}


def json_schema_format(schema: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "ToolCall", "schema": schema}}


async def test_response_format_gets_schema_valid_json_text() -> None:
    with trio.fail_after(10):
        async with client() as http:
            r = await http.post(
                "/chat/completions", json=chat(response_format=json_schema_format(POINT))
            )
            streamed = await http.post(
                "/chat/completions",
                json=chat(stream=True, response_format=json_schema_format(POINT)),
            )
        content = r.json()["choices"][0]["message"]["content"]
        value = orjson.loads(content)
        assert set(value) == {"x", "y"}
        assert all(isinstance(v, int) for v in value.values())
        text = "".join(
            orjson.loads(p)["choices"][0]["delta"].get("content") or ""
            for p in sse_payloads(streamed.content)[:-1]
        )
        assert text == content


@pytest.mark.parametrize(
    ("config", "model"),
    [(SimulatorConfig(ignore_tool_choice=True), "sim-small"), (SimulatorConfig(), "sim-notools")],
)
async def test_tool_ignoring_mode_answers_the_union_schema_as_text(
    config: SimulatorConfig, model: str
) -> None:
    with trio.fail_after(10):
        async with client(config) as http:
            forced = await http.post(
                "/chat/completions",
                json=chat(
                    model=model,
                    tools=[WEATHER],
                    tool_choice="required",
                    response_format=json_schema_format(UNION),
                ),
            )
            ollama_style = await http.post(
                "/chat/completions",
                json=chat(model=model, tools=[WEATHER], tool_choice="required", format=UNION),
            )
            plain = await http.post(
                "/chat/completions",
                json=chat(
                    model=model,
                    tools=[WEATHER],
                    # not even checked: this server does not know tool_choice
                    tool_choice={"type": "function", "function": {"name": "nowhere"}},
                ),
            )
        for r in (forced, ollama_style):
            message = r.json()["choices"][0]["message"]
            assert "tool_calls" not in message
            assert r.json()["choices"][0]["finish_reason"] == "stop"
            item = orjson.loads(message["content"])["item"]
            assert item["name"] in ("get_weather", "search")
            expected = {"get_weather": {"city"}, "search": {"query"}}[item["name"]]
            assert set(item["parameters"]) == expected
        assert plain.status_code == 200
        assert plain.json()["choices"][0]["message"]["content"].count(" ") == 23


@pytest.mark.parametrize("kind", KINDS)
async def test_broken_json_directive_breaks_the_json_text(kind: str) -> None:
    with trio.fail_after(10):
        async with client(SimulatorConfig(ignore_tool_choice=True)) as http:
            payload = chat(response_format=json_schema_format(UNION))
            good = await http.post("/chat/completions", json=payload)
            bad = await http.post(
                "/chat/completions", json=payload, headers=fault(f"broken_json:{kind}")
            )
        value = orjson.loads(good.json()["choices"][0]["message"]["content"])
        text = bad.json()["choices"][0]["message"]["content"]
        if kind == "no_envelope":
            assert orjson.loads(text) == value["item"]["parameters"]
        elif kind == "double_encoded":
            assert orjson.loads(orjson.loads(text)) == value
        else:
            with pytest.raises(orjson.JSONDecodeError):
                orjson.loads(text)


async def test_random_broken_json_kinds_come_from_the_fault_dice() -> None:
    async def texts(seed: int) -> list[str]:
        config = SimulatorConfig(rate_broken_json=1.0, ignore_tool_choice=True, fault_seed=seed)
        async with client(config) as http:
            payload = chat(response_format=json_schema_format(UNION))
            return [
                (await http.post("/chat/completions", json=payload)).json()["choices"][0][
                    "message"
                ]["content"]
                for _ in range(30)
            ]

    with trio.fail_after(10):
        first = await texts(1)
        assert first == await texts(1)
        assert first != await texts(2)
        shapes = {t[:3] for t in first}
        assert len(shapes) >= 4  # fences, prose, quotes, double encoding... all show up


async def test_broken_json_breaks_openai_tool_call_arguments() -> None:
    with trio.fail_after(10):
        async with client() as http:
            r = await http.post(
                "/chat/completions",
                json=chat(tools=[WEATHER], tool_choice="required"),
                headers=fault("broken_json:single_quotes"),
            )
        (call,) = r.json()["choices"][0]["message"]["tool_calls"]
        assert call["function"]["arguments"].startswith("{'city':'")


async def test_bad_response_formats_are_400s() -> None:
    with trio.fail_after(10):
        async with client() as http:
            bad_type = await http.post(
                "/chat/completions", json=chat(response_format={"type": "yaml"})
            )
            bad_schema = await http.post(
                "/chat/completions",
                json=chat(response_format=json_schema_format(IMPOSSIBLE)),
            )
        assert bad_type.json()["error"]["param"] == "response_format.type"
        assert bad_schema.json()["error"]["param"] == "response_format"
        assert "Invalid schema for 'response_format'" in bad_schema.json()["error"]["message"]


# --- quotas -------------------------------------------------------------------------------


def limits(r: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in r.headers.items() if k.startswith("x-ratelimit-")}


async def test_rpm_refuses_with_retry_after_until_the_window_slides(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(600):
        async with client(SimulatorConfig(rpm=2)) as http:
            first = await http.post("/chat/completions", json=chat())
            await trio.sleep(10)
            second = await http.post("/chat/completions", json=chat())
            refused = await http.post("/chat/completions", json=chat())
            await trio.sleep(50)  # t = 60: the first request leaves the window
            third = await http.post("/chat/completions", json=chat())
            models = await http.get("/models")
        assert limits(first) == {
            "x-ratelimit-limit-requests": "2",
            "x-ratelimit-remaining-requests": "1",
            "x-ratelimit-reset-requests": "1m0s",
        }
        assert limits(second)["x-ratelimit-remaining-requests"] == "0"
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "50"
        assert refused.headers["retry-after-ms"] == "50000"
        assert refused.json()["error"] == {
            "message": "Rate limit reached on requests per min (simulated): Limit 2. "
            "Please try again in 50s.",
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        }
        assert limits(refused)["x-ratelimit-reset-requests"] == "1m0s"  # second was at t=10
        assert third.status_code == 200
        assert limits(third)["x-ratelimit-remaining-requests"] == "0"
        assert limits(models) == {
            "x-ratelimit-limit-requests": "2",
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": "1m0s",
        }


async def test_tpm_counts_prompt_and_reply_tokens(autojump_clock: trio.testing.MockClock) -> None:
    with trio.fail_after(600):
        # each request: 4 prompt tokens ("Tell me about rivers.") + 24 reply tokens = 28
        async with client(SimulatorConfig(tpm=66)) as http:
            ok = [await http.post("/chat/completions", json=chat()) for _ in range(2)]
            await trio.sleep(0.25)
            refused = await http.post("/chat/completions", json=chat())
            short = await http.post("/chat/completions", json=chat(max_tokens=6))
        assert [limits(r)["x-ratelimit-remaining-tokens"] for r in ok] == ["38", "10"]
        assert refused.status_code == 429
        assert refused.headers["retry-after-ms"] == "59750"
        assert refused.json()["error"]["type"] == "tokens"
        assert short.status_code == 200  # 4 + 6 tokens still fit
        assert limits(short) == {
            "x-ratelimit-limit-tokens": "66",
            "x-ratelimit-remaining-tokens": "0",
            "x-ratelimit-reset-tokens": "1m0s",
        }


async def test_quota_headers_go_on_faults_and_errors_too() -> None:
    with trio.fail_after(10):
        async with client(SimulatorConfig(rpm=5, tpm=1000)) as http:
            failed = await http.post("/chat/completions", json=chat(), headers=fault("500"))
            bad = await http.post("/chat/completions", content=b"{")
            missing = await http.get("/nowhere")
        for r in (failed, bad, missing):
            assert limits(r)["x-ratelimit-remaining-requests"] == "5"  # none of them counted
            assert limits(r)["x-ratelimit-reset-tokens"] == "0s"


async def test_without_limits_there_are_no_quota_headers() -> None:
    with trio.fail_after(10):
        async with client() as http:
            r = await http.post("/chat/completions", json=chat())
        assert limits(r) == {}
