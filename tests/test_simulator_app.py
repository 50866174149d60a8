"""The simulator app through its httpx transport: wire format, latency schedule, tool calls and
faults. No sockets; timed tests run on ``autojump_clock`` and assert exact virtual times."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
import trio
import trio.testing

from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport

MESSAGES = [{"role": "user", "content": "Tell me about rivers."}]
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "units": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}


def client(app_or_config: SimulatorApp | SimulatorConfig | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=mock_transport(app_or_config), base_url="http://sim/v1")


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "sim-small", "messages": MESSAGES, **fields}


def parse_sse(data: bytes) -> list[Any]:
    """JSON payloads of the ``data:`` events in ``data``; ``[DONE]`` stays a string."""
    out: list[Any] = []
    for block in data.split(b"\n\n"):
        if block:
            assert block.startswith(b"data: "), block
            payload = block.removeprefix(b"data: ")
            out.append("[DONE]" if payload == b"[DONE]" else orjson.loads(payload))
    return out


async def stream(
    http: httpx.AsyncClient, payload: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[httpx.Response, list[tuple[float, list[Any]]], float]:
    """POST a streaming request; return the response, each body piece with its arrival time
    (parsed into events), and when the response head arrived."""
    pieces: list[tuple[float, list[Any]]] = []
    async with http.stream("POST", "/chat/completions", json=payload, headers=headers) as response:
        head_at = trio.current_time()
        async for piece in response.aiter_raw():
            pieces.append((trio.current_time(), parse_sse(piece)))
    return response, pieces, head_at


async def read_lines(http: httpx.AsyncClient, payload: dict[str, Any], into: list[str]) -> None:
    """Stream ``payload``, appending each non-empty body line to ``into`` as it arrives."""
    async with http.stream("POST", "/chat/completions", json=payload) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line:
                into.append(line)


def text_of(events: list[Any]) -> str:
    return "".join(
        e["choices"][0]["delta"].get("content") or ""
        for e in events
        if e != "[DONE]" and e["choices"]
    )


async def test_stream_follows_ttft_and_tokens_per_second(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(10):
        config = SimulatorConfig(ttft=0.5, tokens_per_second=10, output_tokens=4)
        async with client(config) as http:
            payload = chat(stream=True, stream_options={"include_usage": True})
            response, pieces, head_at = await stream(http, payload)
        assert response.status_code == 200
        assert head_at == 0.5
        assert [at for at, _ in pieces] == [0.5, 0.6, 0.7, 0.8]
        assert [len(events) for _, events in pieces] == [2, 1, 1, 4]


async def test_unpaced_stream_is_one_piece_after_ttft(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(10):
        async with client(SimulatorConfig(ttft=0.25, output_tokens=50)) as http:
            _, pieces, head_at = await stream(http, chat(stream=True))
        assert head_at == 0.25
        assert len(pieces) == 1
        at, events = pieces[0]
        assert at == 0.25
        assert len(events) == 1 + 50 + 1 + 1  # opening, tokens, finish, [DONE]


async def test_tokens_per_chunk_groups_tokens_and_sets_the_pace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(10):
        config = SimulatorConfig(tokens_per_second=8, tokens_per_chunk=2, output_tokens=6)
        async with client(config) as http:
            _, pieces, _ = await stream(http, chat(stream=True))
        assert [at for at, _ in pieces] == [0.0, 0.25, 0.5]
        events = [e for _, evs in pieces for e in evs if e != "[DONE]" and e["choices"]]
        sizes = [len(e["choices"][0]["delta"].get("content", "").split()) for e in events]
        assert sizes == [0, 2, 2, 2, 0]  # opening, three chunks of two tokens, finish


async def test_stream_wire_format() -> None:
    with trio.fail_after(10):
        async with client() as http:
            payload = chat(stream=True, stream_options={"include_usage": True})
            response, pieces, _ = await stream(http, payload)
        assert response.headers["content-type"] == "text/event-stream"
        assert response.headers["x-request-id"] == "sim-req-1"
        events = [e for _, evs in pieces for e in evs]
        assert events[-1] == "[DONE]"
        first, *content, finish, usage, _ = events
        for chunk in events[:-1]:
            assert chunk["id"] == first["id"]
            assert chunk["object"] == "chat.completion.chunk"
            assert chunk["model"] == "sim-small"
            assert isinstance(chunk["created"], int)
        assert first["choices"][0]["delta"]["role"] == "assistant"
        assert len(content) == 24
        assert all(set(c["choices"][0]["delta"]) == {"content"} for c in content)
        assert finish["choices"][0]["finish_reason"] == "stop"
        assert usage["choices"] == []
        prompt = usage["usage"]["prompt_tokens"]
        assert usage["usage"] == {
            "prompt_tokens": prompt,
            "completion_tokens": 24,
            "total_tokens": prompt + 24,
        }
        assert prompt == 4  # "Tell me about rivers." is 4 tokens by the word rule


async def test_same_request_same_text_other_request_other_text() -> None:
    with trio.fail_after(10):
        async with client() as http:
            replies = []
            for messages in (MESSAGES, MESSAGES, [{"role": "user", "content": "Other."}]):
                r = await http.post("/chat/completions", json=chat(messages=messages))
                replies.append(r.json()["choices"][0]["message"]["content"])
            _, pieces, _ = await stream(http, chat(stream=True))
        assert replies[0] == replies[1] != replies[2]
        assert text_of([e for _, evs in pieces for e in evs]) == replies[0]


async def test_seed_changes_the_text() -> None:
    with trio.fail_after(10):
        texts = []
        for seed in (0, 1):
            async with client(SimulatorConfig(seed=seed)) as http:
                r = await http.post("/chat/completions", json=chat())
                texts.append(r.json()["choices"][0]["message"]["content"])
        assert texts[0] != texts[1]


async def test_a_reader_that_falls_behind_gets_due_chunks_together(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(10):
        app = SimulatorApp(SimulatorConfig(tokens_per_second=10, output_tokens=6))
        response = await app.handle(
            "POST", "/v1/chat/completions", [], orjson.dumps(chat(stream=True))
        )
        pieces = []
        async for piece in response.body:
            pieces.append((trio.current_time(), len(parse_sse(piece))))
            await trio.sleep(0.25)  # slower than the 0.1 s pace
        assert pieces == [(0.0, 2), (0.25, 2), (0.5, 5)]  # slots due at .1+.2, then .3+.4+.5


async def test_non_streaming_completion(autojump_clock: trio.testing.MockClock) -> None:
    with trio.fail_after(10):
        config = SimulatorConfig(ttft=0.5, tokens_per_second=10, output_tokens=4)
        async with client(config) as http:
            r = await http.post("/chat/completions", json=chat(max_tokens=3))
            assert trio.current_time() == 0.5 + 2 * 0.1  # the stream's last chunk time
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/json"
        assert r.headers["content-length"] == str(len(r.content))
        data = r.json()
        assert data["object"] == "chat.completion"
        assert data["id"].startswith("chatcmpl-")
        (choice,) = data["choices"]
        assert choice["index"] == 0
        assert choice["finish_reason"] == "length"
        assert choice["message"]["role"] == "assistant"
        assert len(choice["message"]["content"].split()) == 3
        assert data["usage"]["completion_tokens"] == 3
        assert data["usage"]["total_tokens"] == data["usage"]["prompt_tokens"] + 3


async def test_streamed_tool_call_has_valid_arguments() -> None:
    with trio.fail_after(10):
        async with client() as http:
            payload = chat(
                stream=True,
                tools=[WEATHER],
                messages=[{"role": "user", "content": "Use get_weather for Oslo."}],
            )
            _, pieces, _ = await stream(http, payload)
        first, *fragments, finish, done = [e for _, evs in pieces for e in evs]
        assert done == "[DONE]"
        (opening,) = first["choices"][0]["delta"]["tool_calls"]
        assert opening["index"] == 0
        assert opening["id"].startswith("call_")
        assert opening["type"] == "function"
        assert opening["function"] == {"name": "get_weather", "arguments": ""}
        arguments = ""
        for chunk in fragments:
            (call,) = chunk["choices"][0]["delta"]["tool_calls"]
            assert call.keys() == {"index", "function"}
            arguments += call["function"]["arguments"]
        args = orjson.loads(arguments)
        assert set(args) == {"city", "days", "units"}
        assert isinstance(args["city"], str)
        assert 1 <= args["days"] <= 7
        assert args["units"] in ("celsius", "fahrenheit")
        assert finish["choices"][0]["finish_reason"] == "tool_calls"


async def test_tool_choice_none_and_required() -> None:
    with trio.fail_after(10):
        async with client() as http:
            none = await http.post(
                "/chat/completions",
                json=chat(
                    tools=[WEATHER],
                    tool_choice="none",
                    messages=[{"role": "user", "content": "use the tool"}],
                ),
            )
            required = await http.post(
                "/chat/completions", json=chat(tools=[WEATHER], tool_choice="required")
            )
        assert none.json()["choices"][0]["finish_reason"] == "stop"
        message = required.json()["choices"][0]["message"]
        assert message["content"] is None
        assert message["tool_calls"][0]["function"]["name"] == "get_weather"


async def test_script_faults_apply_in_arrival_order(autojump_clock: trio.testing.MockClock) -> None:
    with trio.fail_after(10):
        config = SimulatorConfig(
            ttft=1.0, script=("429:retry_after=2", "500", "disconnect:3", "503", "529", "ok")
        )
        app = SimulatorApp(config)
        async with client(app) as http:
            limited = await http.post("/chat/completions", json=chat())
            assert trio.current_time() == 0.0  # faults answer at once
            failed = await http.post("/chat/completions", json=chat())
            received: list[str] = []
            with pytest.raises(httpx.RemoteProtocolError, match="simulated"):
                await read_lines(http, chat(stream=True), received)
            unavailable = await http.post("/chat/completions", json=chat())
            overloaded = await http.post("/chat/completions", json=chat())
            fine = await http.post("/chat/completions", json=chat())
            after = await http.post("/chat/completions", json=chat())
        assert limited.status_code == 429
        assert limited.headers["retry-after"] == "2"
        assert limited.json() == {
            "error": {
                "message": limited.json()["error"]["message"],
                "type": "requests",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        }
        assert failed.status_code == 500
        assert failed.json()["error"]["type"] == "server_error"
        assert len(received) == 3
        assert all(line.startswith("data: {") for line in received)
        assert unavailable.status_code == 503
        assert overloaded.status_code == 529
        assert overloaded.json()["error"]["type"] == "overloaded_error"
        assert (fine.status_code, after.status_code) == (200, 200)
        assert app.chat_requests_seen == 7


async def test_fault_header_wins_over_the_script() -> None:
    with trio.fail_after(10):
        async with client(SimulatorConfig(script=("500",))) as http:
            r = await http.post("/chat/completions", json=chat(), headers={"X-Sim-Fault": "429"})
            bad = await http.post("/chat/completions", json=chat(), headers={"x-sim-fault": "nope"})
            ok = await http.post("/chat/completions", json=chat())
        assert r.status_code == 429
        assert r.headers["retry-after"] == "1"
        assert r.headers["retry-after-ms"] == "1000"
        assert bad.status_code == 400
        assert bad.json()["error"]["param"] == "x-sim-fault"
        assert "expected ok, 429" in bad.json()["error"]["message"]
        assert ok.status_code == 200  # the script slots went to the first two requests


async def test_disconnect_cuts_a_non_streaming_body() -> None:
    with trio.fail_after(10):
        async with client() as http:
            with pytest.raises(httpx.RemoteProtocolError, match="peer closed connection"):
                await http.post(
                    "/chat/completions", json=chat(), headers={"x-sim-fault": "disconnect"}
                )


async def test_random_faults_repeat_for_a_fault_seed() -> None:
    async def statuses(seed: int) -> list[int]:
        config = SimulatorConfig(rate_429=0.3, rate_500=0.3, fault_seed=seed)
        async with client(config) as http:
            return [
                (await http.post("/chat/completions", json=chat())).status_code for _ in range(30)
            ]

    with trio.fail_after(10):
        first = await statuses(1)
        assert first == await statuses(1)
        assert first != await statuses(2)
        assert set(first) == {200, 429, 500}


async def test_rate_429_of_one_refuses_everything() -> None:
    with trio.fail_after(10):
        async with client(SimulatorConfig(rate_429=1.0, retry_after=0.4)) as http:
            r = await http.post("/chat/completions", json=chat())
        assert r.status_code == 429
        assert (r.headers["retry-after"], r.headers["retry-after-ms"]) == ("1", "400")


@pytest.mark.parametrize(
    ("method", "path", "payload", "status", "param"),
    [
        ("GET", "/nowhere", None, 404, None),
        ("GET", "/chat/completions", None, 404, None),
        ("POST", "/chat/completions", b"{oops", 400, None),
        ("POST", "/chat/completions", b'{"model": "m"}', 400, "messages"),
    ],
)
async def test_errors_have_openai_error_bodies(
    method: str, path: str, payload: bytes | None, status: int, param: str | None
) -> None:
    with trio.fail_after(10):
        async with client() as http:
            r = await http.request(method, path, content=payload)
        assert r.status_code == status
        error = r.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["type"] == "invalid_request_error"
        assert error["param"] == param


async def test_models_are_listed_and_retrievable() -> None:
    with trio.fail_after(10):
        async with client() as http:
            listed = (await http.get("/models")).json()
            one = (await http.get("/models/anything-goes")).json()
        assert listed["object"] == "list"
        assert [m["id"] for m in listed["data"]] == ["sim-small", "sim-large", "sim-echo"]
        assert all(m["object"] == "model" for m in listed["data"])
        assert one["id"] == "anything-goes"


async def test_concurrent_streams_do_not_wait_for_each_other(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(10):
        config = SimulatorConfig(ttft=1.0, tokens_per_second=2, output_tokens=3)
        finished: list[float] = []
        async with client(config) as http:

            async def one() -> None:
                await stream(http, chat(stream=True))
                finished.append(trio.current_time())

            async with trio.open_nursery() as nursery:
                for _ in range(5):
                    nursery.start_soon(one)
        assert finished == [2.0] * 5


async def test_request_ids_count_every_request() -> None:
    with trio.fail_after(10):
        app = SimulatorApp()
        async with client(app) as http:
            ids = [(await http.get("/models")).headers["x-request-id"] for _ in range(3)]
        assert ids == ["sim-req-1", "sim-req-2", "sim-req-3"]
        assert (app.requests_seen, app.chat_requests_seen) == (3, 0)
