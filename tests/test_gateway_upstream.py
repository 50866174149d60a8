"""How ``sluice serve`` calls an upstream and what it lists (issue 27), checked with the
official ``openai`` and ``anthropic`` SDKs against an OpenAI-compatible server of the suite's
own (standard library only, not the simulator): forced tool choices go as native fields and the
upstream's tool calls come back as they were made; an upstream 429 or 503 reaches the client at
once with its ``Retry-After``; only a connection that failed before the reply began is retried;
``/v1/models`` and ``models.retrieve``. Loopback, real clock, behaviour only."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import openai
import pytest
import trio

import sluice
from sluice._gateway import GatewaySettings

SCHEMA: Any = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS: Any = [
    {"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}},
    {"type": "function", "function": {"name": "get_time", "parameters": SCHEMA}},
]
QUESTION: Any = [{"role": "user", "content": "Weather and time in Paris and London?"}]
MODEL = "up:model-x"
UPSTREAM_MODELS = ("model-x", "model-y")


class Upstream:
    """An OpenAI-compatible server: each chat request takes the next entry of ``script``
    (``("calls", [(id, name, arguments), ...])``, ``("error", status, headers)`` or
    ``("reset",)``); with the script spent it answers ``("calls", CALLS)``. It records every
    chat request's body, and lists :data:`UPSTREAM_MODELS` at ``GET /v1/models``."""

    CALLS = (("call_a", "get_weather", '{"city": "Paris"}'),)

    def __init__(self, script: list[tuple[Any, ...]] | None = None) -> None:
        self.script = list(script or ())
        self.bodies: list[dict[str, Any]] = []
        self.model_lists = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> Upstream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def _next(self, body: dict[str, Any]) -> tuple[Any, ...]:
        with self._lock:
            self.bodies.append(body)
            return self.script.pop(0) if self.script else ("calls", self.CALLS)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path != "/v1/models":
                    self._json(404, {"error": {"message": "no such path", "type": "not_found"}})
                    return
                upstream.model_lists += 1
                rows = [{"id": m, "object": "model", "owned_by": "up"} for m in UPSTREAM_MODELS]
                self._json(200, {"object": "list", "data": rows})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                step = upstream._next(body)
                if step[0] == "reset":
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    self.close_connection = True
                    self.connection.close()
                elif step[0] == "error":
                    _, status, headers = step
                    error = {"message": f"upstream says {status}", "type": "upstream_error"}
                    self._json(status, {"error": error}, headers)
                elif body.get("stream"):
                    self._stream(step[1])
                else:
                    self._json(200, _completion(step[1]))

            def _json(self, status: int, value: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, text in (headers or {}).items():
                    self.send_header(name, text)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, calls: list[tuple[str, str, str]]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                events: list[dict[str, Any]] = []
                for index, (call_id, name, arguments) in enumerate(calls):
                    function = {"name": name, "arguments": ""}
                    head = {"id": call_id, "type": "function", "function": function}
                    events.append({"tool_calls": [{"index": index, **head}]})
                    for piece in (arguments[:5], arguments[5:]):  # arguments in fragments
                        fragment = {"index": index, "function": {"arguments": piece}}
                        events.append({"tool_calls": [fragment]})
                for number, delta in enumerate(events):
                    first = {"role": "assistant"} if number == 0 else {}
                    self._event(_chunk({**first, **delta}, None))
                self._event(_chunk({}, "tool_calls"))
                usage = {"prompt_tokens": 9, "completion_tokens": 12, "total_tokens": 21}
                self._event(
                    {
                        "id": "up-1",
                        "object": "chat.completion.chunk",
                        "choices": [],
                        "usage": usage,
                        "created": 1,
                        "model": "model-x",
                    }
                )
                data = b"data: [DONE]\n\n"
                self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))

            def _event(self, value: dict[str, Any]) -> None:
                data = b"data: " + json.dumps(value).encode() + b"\n\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        return Handler


def _chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {
        "id": "up-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "model-x",
        "choices": [choice],
    }


def _completion(calls: list[tuple[str, str, str]]) -> dict[str, Any]:
    tool_calls = [
        {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls
    ]
    message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    return {
        "id": "up-1",
        "object": "chat.completion",
        "created": 1,
        "model": "model-x",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 12, "total_tokens": 21},
    }


async def _gateway(nursery: trio.Nursery, upstream_url: str, **settings: Any) -> str:
    config = sluice.load_config(
        {
            "ledger": {"persist": False},
            "providers": {"up": {"base_url": upstream_url, "api_key": "sk-upstream"}},
            "groups": {"fast": {"deployments": [{"model": "up:model-x"}]}},
        }
    )
    port = await nursery.start(
        lambda task_status: sluice.serve(
            config,
            port=0,
            settings=GatewaySettings(require_key=False, **settings),
            task_status=task_status,
        )
    )
    return f"http://127.0.0.1:{port}"


def _openai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=20)


def _anthropic(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=20)


# Forced tool choices --------------------------------------------------------------------------

PARALLEL = {
    "required": [
        ("call_a", "get_weather", '{"city": "Paris"}'),
        ("call_b", "get_time", '{"city": "London"}'),
    ],
    "named": [
        ("call_a", "get_weather", '{"city": "Paris"}'),
        ("call_b", "get_weather", '{"city": "London"}'),
    ],
}
NAMED = {"type": "function", "function": {"name": "get_weather"}}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["required", "named"])
async def test_forced_tool_choices_reach_a_compatible_upstream_as_native_fields(choice, stream):
    """The upstream gets the client's tools, tool_choice and messages as they were sent, with
    nothing added (no parallel_tool_calls, no response_format, no system prompt), in exactly
    one request; the client gets both of the upstream's parallel calls, ids included."""
    calls = PARALLEL[choice]
    tool_choice: Any = "required" if choice == "required" else NAMED
    with Upstream([("calls", calls)]) as upstream:
        async with trio.open_nursery() as nursery:
            url = await _gateway(nursery, upstream.url)

            def run() -> list[tuple[str, str, str]]:
                with _openai(url) as client:
                    if not stream:
                        reply = client.chat.completions.create(
                            model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice=tool_choice
                        )
                        assert reply.choices[0].finish_reason == "tool_calls"
                        got: Any = reply.choices[0].message.tool_calls or []
                        return [(c.id, c.function.name, c.function.arguments) for c in got]
                    chunks = list(
                        client.chat.completions.create(
                            model=MODEL,
                            messages=QUESTION,
                            tools=TOOLS,
                            tool_choice=tool_choice,
                            stream=True,
                        )
                    )
                    assert chunks[-1].choices[0].finish_reason == "tool_calls"
                    merged: dict[int, list[str]] = {}
                    for chunk in chunks:
                        for delta in chunk.choices[0].delta.tool_calls or []:
                            entry = merged.setdefault(delta.index, ["", "", ""])
                            entry[0] += delta.id or ""
                            entry[1] += (delta.function and delta.function.name) or ""
                            entry[2] += (delta.function and delta.function.arguments) or ""
                    return [(i, n, a) for i, n, a in (merged[k] for k in sorted(merged))]

            got = await trio.to_thread.run_sync(run)
            nursery.cancel_scope.cancel()
    assert [(i, n, json.loads(a)) for i, n, a in got] == [
        (i, n, json.loads(a)) for i, n, a in calls
    ]
    (sent,) = upstream.bodies
    assert sent["tools"] == TOOLS
    assert sent["tool_choice"] == tool_choice
    assert sent["messages"] == QUESTION
    assert "parallel_tool_calls" not in sent and "response_format" not in sent


async def test_a_clients_own_parallel_tool_calls_goes_through_as_given():
    with Upstream([("calls", PARALLEL["named"][:1])]) as upstream:
        async with trio.open_nursery() as nursery:
            url = await _gateway(nursery, upstream.url)

            def run() -> Any:
                with _openai(url) as client:
                    return client.chat.completions.create(
                        model=MODEL,
                        messages=QUESTION,
                        tools=TOOLS,
                        tool_choice="required",
                        parallel_tool_calls=False,
                    )

            reply = await trio.to_thread.run_sync(run)
            nursery.cancel_scope.cancel()
    assert len(reply.choices[0].message.tool_calls) == 1
    (sent,) = upstream.bodies
    assert sent["parallel_tool_calls"] is False and sent["tool_choice"] == "required"


async def test_a_provider_configured_without_required_still_gets_it_emulated():
    """Forcing through structured output stays where the config says the server lacks it."""
    forced_reply = [("call_x", "get_weather", '{"city": "Paris"}')]
    with Upstream([("calls", forced_reply)]) as upstream:
        config = sluice.load_config(
            {
                "ledger": {"persist": False},
                "providers": {
                    "up": {
                        "base_url": upstream.url,
                        "api_key": "sk-upstream",
                        "tools": {"tool_choice": ["auto", "none", "specific"]},
                    }
                },
            }
        )
        async with trio.open_nursery() as nursery:
            port = await nursery.start(
                lambda task_status: sluice.serve(
                    config,
                    port=0,
                    settings=GatewaySettings(require_key=False),
                    task_status=task_status,
                )
            )

            def run() -> Any:
                with _openai(f"http://127.0.0.1:{port}") as client:
                    return client.chat.completions.create(
                        model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice="required"
                    )

            reply = await trio.to_thread.run_sync(run)
            nursery.cancel_scope.cancel()
    (sent,) = upstream.bodies
    assert "tools" not in sent and "tool_choice" not in sent
    assert sent["response_format"]["type"] == "json_schema"
    # The server answered natively anyway: its call is used as it is.
    assert reply.choices[0].message.tool_calls[0].function.name == "get_weather"


# Upstream refusals go back at once ---------------------------------------------------------


WARM_THEN_429: list[tuple[Any, ...]] = [
    ("calls", Upstream.CALLS),
    ("error", 429, {"retry-after": "7"}),
]


@pytest.mark.parametrize("stream", [False, True])
async def test_an_upstream_429_reaches_the_openai_sdk_at_once_with_its_retry_after(stream):
    """The gateway's own answer time: the upstream answers at once, so a retry or a backoff
    on the gateway's side would show (it took 22 s before issue 27)."""
    with Upstream(WARM_THEN_429) as upstream:
        async with trio.open_nursery() as nursery:
            url = await _gateway(nursery, upstream.url)

            def run() -> tuple[openai.RateLimitError, float]:
                with _openai(url) as client:
                    # A first call starts the provider and the SDK's client: not measured.
                    client.chat.completions.create(model=MODEL, messages=QUESTION)
                    started = time.monotonic()
                    try:
                        client.chat.completions.create(
                            model=MODEL, messages=QUESTION, stream=stream
                        )
                    except openai.RateLimitError as exc:
                        return exc, time.monotonic() - started
                raise AssertionError("no RateLimitError")

            error, elapsed = await trio.to_thread.run_sync(run)
            nursery.cancel_scope.cancel()
    assert error.response.headers["retry-after"] == "7"
    assert error.response.headers["retry-after-ms"] == "7000"
    assert "upstream says 429" in error.message
    assert len(upstream.bodies) == 2  # the warm-up call and the refused one
    assert elapsed < 1.0


async def test_calls_during_the_upstreams_pause_get_a_429_at_once_without_reaching_it():
    """After an upstream 429 with Retry-After: 7, the next client is told to come back when
    the pause ends instead of being held in the gateway for it (and the upstream is not asked)."""
    with Upstream(WARM_THEN_429) as upstream:
        async with trio.open_nursery() as nursery:
            url = await _gateway(nursery, upstream.url)

            def run() -> tuple[openai.RateLimitError, float]:
                with _openai(url) as client:
                    client.chat.completions.create(model=MODEL, messages=QUESTION)
                    with pytest.raises(openai.RateLimitError):
                        client.chat.completions.create(model=MODEL, messages=QUESTION)
                    started = time.monotonic()
                    try:
                        client.chat.completions.create(model=MODEL, messages=QUESTION)
                    except openai.RateLimitError as exc:
                        return exc, time.monotonic() - started
                raise AssertionError("no RateLimitError")

            error, elapsed = await trio.to_thread.run_sync(run)
            nursery.cancel_scope.cancel()
    assert error.response.headers["retry-after"] in ("6", "7")  # what is left of the pause
    assert len(upstream.bodies) == 2
    assert elapsed < 1.0


async def test_an_upstream_429_reaches_the_anthropic_sdk_at_once_with_its_retry_after():
    with Upstream(WARM_THEN_429) as upstream:
        async with trio.open_nursery() as nursery:
            url = await _gateway(nursery, upstream.url)

            def run() -> tuple[anthropic.RateLimitError, float]:
                with _anthropic(url) as client:
                    hi: Any = [{"role": "user", "content": "hi"}]
                    client.messages.create(model=MODEL, max_tokens=64, messages=hi)
                    started = time.monotonic()
                    try:
                        client.messages.create(
                            model=MODEL,
                            max_tokens=64,
                            messages=hi,
                        )
                    except anthropic.RateLimitError as exc:
                        return exc, time.monotonic() - started
                raise AssertionError("no RateLimitError")

            error, elapsed = await trio.to_thread.run_sync(run)
            nursery.cancel_scope.cancel()
    assert error.response.headers["retry-after"] == "7"
    assert error.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert len(upstream.bodies) == 2  # the warm-up call and the refused one
    assert elapsed < 1.0


async def test_an_upstream_503_goes_back_as_503_with_its_retry_after():
    with Upstream([("error", 503, {"retry-after": "3"})]) as upstream:
        async with trio.open_nursery() as nursery:
            url = await _gateway(nursery, upstream.url)

            def run() -> openai.InternalServerError:
                with _openai(url) as client:
                    try:
                        client.chat.completions.create(model=MODEL, messages=QUESTION)
                    except openai.InternalServerError as exc:
                        return exc
                raise AssertionError("no InternalServerError")

            error = await trio.to_thread.run_sync(run)
            nursery.cancel_scope.cancel()
    assert error.status_code == 503
    assert error.response.headers["retry-after"] == "3"
    assert len(upstream.bodies) == 1


async def test_a_connection_reset_before_the_reply_is_retried_by_the_gateway():
    """The client cannot see a connection that died before any reply byte: the gateway tries
    again (within its short window) and the client gets the answer."""
    with Upstream([("reset",)]) as upstream:
        async with trio.open_nursery() as nursery:
            url = await _gateway(nursery, upstream.url)

            def run() -> Any:
                with _openai(url) as client:
                    return client.chat.completions.create(
                        model=MODEL, messages=QUESTION, tools=TOOLS
                    )

            reply = await trio.to_thread.run_sync(run)
            nursery.cancel_scope.cancel()
    assert reply.choices[0].message.tool_calls[0].id == "call_a"
    assert len(upstream.bodies) == 2


# Models ---------------------------------------------------------------------------------------


async def test_models_list_aliases_groups_configured_and_discovered_models():
    with Upstream() as upstream:
        async with trio.open_nursery() as nursery:
            url = await _gateway(
                nursery, upstream.url, aliases={"smart": "up:model-x"}, default_provider="up"
            )

            def run() -> tuple[list[Any], list[Any], Any, Any]:
                with _openai(url) as client:
                    first = list(client.models.list())
                    again = list(client.models.list())
                    one = client.models.retrieve("smart")
                    discovered = client.models.retrieve("model-y")
                    return first, again, one, discovered

            listed, again, smart, discovered = await trio.to_thread.run_sync(run)
            nursery.cancel_scope.cancel()
    assert [m.id for m in listed] == ["fast", "model-x", "model-y", "smart"]
    assert [m.id for m in again] == [m.id for m in listed]
    assert upstream.model_lists == 1  # discovered once, then reused
    owners = {m.id: m.owned_by for m in listed}
    assert owners == {"fast": "sluice", "model-x": "up", "model-y": "up", "smart": "up"}
    assert (smart.id, smart.object) == ("smart", "model")
    assert discovered.id == "model-y"


async def test_models_retrieve_of_an_unknown_model_is_a_404_in_each_clients_format():
    with Upstream() as upstream:
        async with trio.open_nursery() as nursery:
            url = await _gateway(nursery, upstream.url)

            def run() -> tuple[openai.NotFoundError, anthropic.NotFoundError, Any]:
                with _openai(url) as client:
                    try:
                        client.models.retrieve("nope")
                    except openai.NotFoundError as exc:
                        from_openai = exc
                    listed = [m.id for m in client.models.list()]
                with _anthropic(url) as other:
                    try:
                        other.models.retrieve("nope")
                    except anthropic.NotFoundError as exc:
                        return from_openai, exc, listed
                raise AssertionError("no NotFoundError")

            from_openai, from_anthropic, listed = await trio.to_thread.run_sync(run)
            nursery.cancel_scope.cancel()
    assert from_openai.code == "model_not_found"
    assert from_anthropic.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    assert listed == ["fast"]  # no default provider: nothing discovered
    assert upstream.model_lists == 0


async def test_a_group_is_called_by_its_listed_name():
    with Upstream() as upstream:
        async with trio.open_nursery() as nursery:
            url = await _gateway(nursery, upstream.url)

            def run() -> Any:
                with _openai(url) as client:
                    return client.chat.completions.create(
                        model="fast", messages=QUESTION, tools=TOOLS
                    )

            reply = await trio.to_thread.run_sync(run)
            nursery.cancel_scope.cancel()
    assert reply.model == "fast"
    assert reply.choices[0].message.tool_calls[0].function.name == "get_weather"
    assert upstream.bodies[0]["model"] == "model-x"
