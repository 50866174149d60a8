"""What a client sends and the upstream returns passes through the gateway unchanged, unless a
translation between protocols needs a change (issue 27, "Transparency as the rule").

Real HTTP over loopback on both sides: a client (httpx, or the official SDKs where their
accumulators matter) talks to ``sluice.serve``, which talks to :class:`RecordingUpstream`, a
provider stand-in of the suite's own that records what it received and replays recorded
provider bytes (``tests/conformance_data``) or bytes in a provider's exact shape. Real clock,
behaviour only.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
import trio

import sluice
from sluice._gateway import GatewaySettings

from .recording_upstream import RecordingUpstream, Reply, json_reply, sse_reply

RAW = Path(__file__).parent / "conformance_data" / "raw"
THINKING_SSE = (RAW / "anthropic" / "messages_stream_thinking_signature_then_text.sse").read_bytes()
OPENAI_TEXT_SSE = (RAW / "openai" / "chat_stream_text_after_tool_result.sse").read_bytes()
OPENAI_400 = (RAW / "openai" / "error_400_invalid_request_error.json").read_bytes()
UPSTREAM_KEY = "sk-upstream-secret"
CLIENT_KEY = "sk-client-should-never-travel"
ANTHROPIC_HEADERS = {
    "anthropic-version": "2023-01-01",
    "anthropic-beta": "prompt-caching-2024-07-31,interleaved-thinking-2025-05-14",
    "x-api-key": CLIENT_KEY,
    "authorization": f"Bearer {CLIENT_KEY}",
}
EPHEMERAL = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}


class Setup:
    def __init__(self, upstream: RecordingUpstream, url: str) -> None:
        self.upstream = upstream
        self.url = url

    async def post(
        self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> httpx.Response:
        async with httpx.AsyncClient(timeout=10) as client:
            return await client.post(self.url + path, json=body, headers=headers or {})


async def _start(nursery: trio.Nursery) -> Setup:
    upstream = RecordingUpstream()
    up_port = await nursery.start(upstream.serve)
    base = f"http://127.0.0.1:{up_port}/v1"
    config = sluice.load_config(
        {
            "ledger": {"persist": False},
            "providers": {
                "ant": {"protocol": "anthropic", "base_url": base, "api_key": UPSTREAM_KEY},
                "oai": {"protocol": "openai", "base_url": base, "api_key": UPSTREAM_KEY},
            },
        }
    )
    port = await nursery.start(
        lambda task_status: sluice.serve(
            config,
            port=0,
            settings=GatewaySettings(require_key=False),
            task_status=task_status,
        )
    )
    return Setup(upstream, f"http://127.0.0.1:{port}")


def events_of(body: bytes) -> list[dict[str, Any]]:
    """The JSON payloads of an SSE body, ``[DONE]`` left out."""
    out = []
    for event in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        for line in event.split(b"\n"):
            if line.startswith(b"data: ") and line[6:].strip() != b"[DONE]":
                out.append(orjson.loads(line[6:]))
    return out


def anthropic_sse(*events: dict[str, Any]) -> bytes:
    return b"".join(
        b"event: %s\ndata: %s\n\n" % (e["type"].encode(), orjson.dumps(e)) for e in events
    )


def _message_start(input_tokens: int = 21) -> dict[str, Any]:
    return {
        "type": "message_start",
        "message": {
            "model": "claude-sonnet-4-5-20250929",
            "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
            "type": "message",
            "role": "assistant",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": input_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": 1,
                "service_tier": "standard",
            },
        },
    }


def _text_reply(stop_reason: str = "end_turn", stop_sequence: str | None = None) -> bytes:
    return anthropic_sse(
        _message_start(),
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "1, 2, 3, "},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    )


# ---- what reaches the upstream --------------------------------------------------------------

CACHED_SYSTEM = [
    {"type": "text", "text": "You are a careful assistant."},
    {"type": "text", "text": "Here is a long reference document ...", "cache_control": HOUR},
]
CACHED_TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
    {
        "name": "get_time",
        "description": "Time",
        "input_schema": {"type": "object", "properties": {}},
        "cache_control": EPHEMERAL,
    },
]
CACHED_MESSAGES = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Weather in Paris?", "cache_control": EPHEMERAL},
            {"type": "text", "text": "Be brief."},
        ],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Paris, so weather.", "signature": "EqQBCkYIBxgCKkA"},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
            {
                "type": "tool_use",
                "id": "toolu_01",
                "name": "get_weather",
                "input": {"city": "Paris"},
                "cache_control": EPHEMERAL,
            },
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01",
                "content": "sunny",
                "cache_control": EPHEMERAL,
            },
            {"type": "text", "text": "And tomorrow?"},
        ],
    },
]


async def test_cache_control_and_beta_headers_reach_an_anthropic_upstream_where_put():
    async with trio.open_nursery() as nursery:
        setup = await _start(nursery)
        setup.upstream.reply(sse_reply(_text_reply()))
        body = {
            "model": "ant:claude-sonnet-4-5",
            "max_tokens": 64,
            "system": CACHED_SYSTEM,
            "messages": CACHED_MESSAGES,
            "tools": CACHED_TOOLS,
        }
        reply = await setup.post("/v1/messages", body, ANTHROPIC_HEADERS)
        assert reply.status_code == 200, reply.text
        sent = setup.upstream.received[0]
        assert sent.path == "/v1/messages"
        assert sent.body["system"] == CACHED_SYSTEM
        assert sent.body["messages"] == CACHED_MESSAGES
        assert sent.body["tools"] == CACHED_TOOLS
        headers = sent.headers
        assert headers["anthropic-beta"] == ANTHROPIC_HEADERS["anthropic-beta"]
        assert headers["anthropic-version"] == "2023-06-01"  # the provider's own
        assert headers["x-api-key"] == UPSTREAM_KEY
        assert "authorization" not in headers
        assert CLIENT_KEY not in repr(headers)
        nursery.cancel_scope.cancel()


async def test_cache_control_from_an_openai_client_reaches_an_anthropic_upstream():
    """LiteLLM and OpenRouter accept ``cache_control`` on OpenAI content parts and tools."""
    async with trio.open_nursery() as nursery:
        setup = await _start(nursery)
        setup.upstream.reply(sse_reply(_text_reply()))
        body = {
            "model": "ant:claude-sonnet-4-5",
            "messages": [
                {
                    "role": "system",
                    "content": [
                        {"type": "text", "text": "Rules."},
                        {"type": "text", "text": "Long document.", "cache_control": EPHEMERAL},
                    ],
                },
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "Hi", "cache_control": HOUR}],
                },
            ],
            "tools": [
                {
                    "type": "function",
                    "function": {"name": "f", "parameters": {"type": "object"}},
                    "cache_control": EPHEMERAL,
                }
            ],
        }
        reply = await setup.post("/v1/chat/completions", body, {"anthropic-beta": "x-1"})
        assert reply.status_code == 200, reply.text
        sent = setup.upstream.received[0].body
        assert sent["system"] == [
            {"type": "text", "text": "Rules."},
            {"type": "text", "text": "Long document.", "cache_control": EPHEMERAL},
        ]
        assert sent["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": HOUR}]}
        ]
        assert sent["tools"][0]["cache_control"] == EPHEMERAL
        assert setup.upstream.received[0].headers["anthropic-beta"] == "x-1"
        nursery.cancel_scope.cancel()


async def test_cache_control_and_beta_headers_stay_away_from_an_openai_upstream():
    async with trio.open_nursery() as nursery:
        setup = await _start(nursery)
        setup.upstream.reply(sse_reply(OPENAI_TEXT_SSE))
        body = {
            "model": "oai:gpt-4o-mini",
            "max_tokens": 64,
            "system": CACHED_SYSTEM,
            "messages": CACHED_MESSAGES,
            "tools": CACHED_TOOLS,
        }
        reply = await setup.post("/v1/messages", body, ANTHROPIC_HEADERS)
        assert reply.status_code == 200, reply.text
        sent = setup.upstream.received[0]
        assert b"cache_control" not in orjson.dumps(sent.body)
        assert not any(name.startswith("anthropic-") for name in sent.headers)
        assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
        assert sent.body["messages"][0]["content"] == "You are a careful assistant." + (
            "Here is a long reference document ..."
        )
        nursery.cancel_scope.cancel()


# ---- thinking signatures, stop sequences, input tokens --------------------------------------

RECORDED_SIGNATURE = next(
    e["delta"]["signature"]
    for e in events_of(THINKING_SSE)
    if e.get("type") == "content_block_delta" and e["delta"]["type"] == "signature_delta"
)
THINKING_BODY: dict[str, Any] = {
    "model": "ant:claude-sonnet-4-5",
    "max_tokens": 2048,
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "messages": [{"role": "user", "content": "What is 5 + 3?"}],
}


async def test_a_streamed_thinking_block_keeps_its_signature_and_the_prompt_count():
    async with trio.open_nursery() as nursery:
        setup = await _start(nursery)
        setup.upstream.reply(sse_reply(THINKING_SSE))
        reply = await setup.post(
            "/v1/messages", {**THINKING_BODY, "stream": True}, ANTHROPIC_HEADERS
        )
        events = events_of(reply.content)
        assert setup.upstream.received[0].body["thinking"] == THINKING_BODY["thinking"]
        start = events[0]
        assert start["type"] == "message_start"
        assert start["message"]["usage"]["input_tokens"] == 50  # as recorded
        signatures = [
            e["delta"]["signature"]
            for e in events
            if e["type"] == "content_block_delta" and e["delta"]["type"] == "signature_delta"
        ]
        assert signatures == [RECORDED_SIGNATURE]
        kinds = [(e["type"], e.get("index")) for e in events if "content_block" in e["type"]]
        # the signature belongs to the thinking block (index 0), before it closes
        at = next(
            i for i, e in enumerate(events) if e.get("delta", {}).get("type") == "signature_delta"
        )
        assert events[at]["index"] == 0 and events[at + 1] == {
            "type": "content_block_stop",
            "index": 0,
        }
        assert kinds[0] == ("content_block_start", 0)
        nursery.cancel_scope.cancel()


async def test_the_anthropic_sdk_gets_the_signature_streamed_and_not():
    async with trio.open_nursery() as nursery:
        setup = await _start(nursery)
        setup.upstream.reply(sse_reply(THINKING_SSE), sse_reply(THINKING_SSE))

        def run() -> tuple[Any, Any]:
            with anthropic.Anthropic(
                base_url=setup.url, api_key=CLIENT_KEY, max_retries=0, timeout=10
            ) as client:
                with client.messages.stream(
                    model="ant:claude-sonnet-4-5",
                    max_tokens=2048,
                    thinking={"type": "enabled", "budget_tokens": 1024},
                    messages=[{"role": "user", "content": "What is 5 + 3?"}],
                ) as stream:
                    streamed = stream.get_final_message()
                whole = client.messages.create(
                    model="ant:claude-sonnet-4-5",
                    max_tokens=2048,
                    thinking={"type": "enabled", "budget_tokens": 1024},
                    messages=[{"role": "user", "content": "What is 5 + 3?"}],
                )
            return streamed, whole

        streamed, whole = await trio.to_thread.run_sync(run)
        for message in (streamed, whole):
            assert message.content[0].type == "thinking"
            assert message.content[0].signature == RECORDED_SIGNATURE
            assert message.content[1].text.endswith("5 + 3 = 8**")
            assert message.usage.input_tokens == 50
        nursery.cancel_scope.cancel()


REDACTED = (
    "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7v"
)


async def test_a_redacted_thinking_block_passes_streamed_and_not():
    stream = anthropic_sse(
        _message_start(),
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "redacted_thinking", "data": REDACTED},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "8"}},
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 40},
        },
        {"type": "message_stop"},
    )
    async with trio.open_nursery() as nursery:
        setup = await _start(nursery)
        setup.upstream.reply(sse_reply(stream), sse_reply(stream))
        streamed = await setup.post(
            "/v1/messages", {**THINKING_BODY, "stream": True}, ANTHROPIC_HEADERS
        )
        starts = [e["content_block"] for e in events_of(streamed.content) if "content_block" in e]
        assert starts == [
            {"type": "redacted_thinking", "data": REDACTED},
            {"type": "text", "text": ""},
        ]
        whole = (await setup.post("/v1/messages", THINKING_BODY, ANTHROPIC_HEADERS)).json()
        assert whole["content"] == [
            {"type": "redacted_thinking", "data": REDACTED},
            {"type": "text", "text": "8"},
        ]
        nursery.cancel_scope.cancel()


async def test_stop_sequence_survives_and_maps_to_stop_for_openai_clients():
    reply = sse_reply(_text_reply("stop_sequence", "4"))
    async with trio.open_nursery() as nursery:
        setup = await _start(nursery)
        setup.upstream.reply(reply, reply, reply, reply)
        body = {
            "model": "ant:claude-sonnet-4-5",
            "max_tokens": 64,
            "stop_sequences": ["4"],
            "messages": [{"role": "user", "content": "Count."}],
        }
        whole = (await setup.post("/v1/messages", body, ANTHROPIC_HEADERS)).json()
        assert (whole["stop_reason"], whole["stop_sequence"]) == ("stop_sequence", "4")
        streamed = await setup.post("/v1/messages", {**body, "stream": True}, ANTHROPIC_HEADERS)
        delta = next(e for e in events_of(streamed.content) if e["type"] == "message_delta")
        assert delta["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "4"}
        assert setup.upstream.received[0].body["stop_sequences"] == ["4"]

        chat = {
            "model": "ant:claude-sonnet-4-5",
            "stop": ["4"],
            "messages": [{"role": "user", "content": "Count."}],
        }
        plain = (await setup.post("/v1/chat/completions", chat)).json()
        assert plain["choices"][0]["finish_reason"] == "stop"
        streamed = await setup.post("/v1/chat/completions", {**chat, "stream": True})
        chunks = events_of(streamed.content)
        assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
        nursery.cancel_scope.cancel()


# ---- OpenAI: logprobs, fingerprint, tier, error details -------------------------------------


def _token(text: str, logprob: float) -> dict[str, Any]:
    return {
        "token": text,
        "logprob": logprob,
        "bytes": list(text.encode()),
        "top_logprobs": [{"token": text, "logprob": logprob, "bytes": list(text.encode())}],
    }


def _with_logprobs(sse: bytes) -> tuple[bytes, list[dict[str, Any]]]:
    """The recorded stream with each content chunk's ``logprobs`` filled in, as OpenAI sends
    them when asked (``logprobs: true, top_logprobs: 1``), and the per-chunk values."""
    out = []
    per_chunk: list[dict[str, Any]] = []
    for chunk in events_of(sse):
        chunk = copy.deepcopy(chunk)
        choices = chunk["choices"]
        if choices and choices[0]["delta"].get("content"):
            value = {
                "content": [_token(choices[0]["delta"]["content"], -0.25 * (len(per_chunk) + 1))],
                "refusal": None,
            }
            choices[0]["logprobs"] = value
            per_chunk.append(value)
        out.append(b"data: " + orjson.dumps(chunk) + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return b"".join(out), per_chunk


LOGPROBS_SSE, LOGPROBS = _with_logprobs(OPENAI_TEXT_SSE)
CHAT: dict[str, Any] = {
    "model": "oai:gpt-4o-mini",
    "messages": [{"role": "user", "content": "Capital of France?"}],
    "logprobs": True,
    "top_logprobs": 1,
}


async def test_logprobs_fingerprint_and_tier_survive_streamed():
    async with trio.open_nursery() as nursery:
        setup = await _start(nursery)
        setup.upstream.reply(sse_reply(LOGPROBS_SSE))
        reply = await setup.post(
            "/v1/chat/completions",
            {**CHAT, "stream": True, "stream_options": {"include_usage": True}},
        )
        sent = setup.upstream.received[0].body
        assert (sent["logprobs"], sent["top_logprobs"]) == (True, 1)
        chunks = events_of(reply.content)
        with_text = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
        assert [c["choices"][0]["logprobs"] for c in with_text] == LOGPROBS
        finish = next(c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"])
        assert finish["system_fingerprint"] == "fp_d0469e1700"  # as recorded
        assert finish["service_tier"] == "default"
        assert chunks[-1]["choices"] == [] and chunks[-1]["system_fingerprint"] == "fp_d0469e1700"
        nursery.cancel_scope.cancel()


async def test_logprobs_fingerprint_and_tier_survive_non_streamed_and_the_sdk_reads_them():
    async with trio.open_nursery() as nursery:
        setup = await _start(nursery)
        setup.upstream.reply(sse_reply(LOGPROBS_SSE), sse_reply(LOGPROBS_SSE))
        reply = (await setup.post("/v1/chat/completions", CHAT)).json()
        joined = [token for value in LOGPROBS for token in value["content"]]
        assert reply["choices"][0]["logprobs"] == {"content": joined, "refusal": None}
        assert reply["system_fingerprint"] == "fp_d0469e1700"
        assert reply["service_tier"] == "default"

        def run() -> Any:
            with openai.OpenAI(
                base_url=f"{setup.url}/v1", api_key="k", max_retries=0, timeout=10
            ) as client:
                return client.chat.completions.create(
                    model="oai:gpt-4o-mini",
                    messages=[{"role": "user", "content": "Capital of France?"}],
                    logprobs=True,
                    top_logprobs=1,
                )

        completion = await trio.to_thread.run_sync(run)
        assert [t.token for t in completion.choices[0].logprobs.content] == [
            t["token"] for t in joined
        ]
        assert completion.system_fingerprint == "fp_d0469e1700"
        assert completion.service_tier == "default"
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        (OPENAI_400, "web_search_options", None),  # as recorded
        (
            orjson.dumps(
                {
                    "error": {
                        "message": "Invalid 'messages[0].content': string too long.",
                        "type": "invalid_request_error",
                        "param": "messages[0].content",
                        "code": "string_above_max_length",
                    }
                }
            ),
            "messages[0].content",
            "string_above_max_length",
        ),
    ],
)
async def test_an_upstream_400_keeps_its_param_and_code(body, param, code):
    async with trio.open_nursery() as nursery:
        setup = await _start(nursery)
        setup.upstream.reply(json_reply(body, 400), json_reply(body, 400))
        for stream in (False, True):
            reply = await setup.post("/v1/chat/completions", {**CHAT, "stream": stream})
            assert reply.status_code == 400
            error = reply.json()["error"]
            upstream = orjson.loads(body)["error"]
            assert error["message"] == upstream["message"]
            assert (error["type"], error["param"], error["code"]) == (
                "invalid_request_error",
                param,
                code,
            )
        assert len(setup.upstream.received) == 2  # a 400 is not retried
        nursery.cancel_scope.cancel()


async def test_an_upstream_400_reaches_the_openai_sdk_with_its_param_and_code():
    body = orjson.dumps(
        {
            "error": {
                "message": "Unsupported value: 'temperature'.",
                "type": "invalid_request_error",
                "param": "temperature",
                "code": "unsupported_value",
            }
        }
    )
    async with trio.open_nursery() as nursery:
        setup = await _start(nursery)
        setup.upstream.reply(Reply(400, (("content-type", "application/json"),), (body,)))

        def run() -> openai.BadRequestError:
            with openai.OpenAI(
                base_url=f"{setup.url}/v1", api_key="k", max_retries=0, timeout=10
            ) as client:
                try:
                    client.chat.completions.create(
                        model="oai:gpt-4o-mini",
                        messages=[{"role": "user", "content": "Hi"}],
                        temperature=2,
                    )
                except openai.BadRequestError as exc:
                    return exc
            raise AssertionError("no error")

        error = await trio.to_thread.run_sync(run)
        assert (error.param, error.code) == ("temperature", "unsupported_value")
        nursery.cancel_scope.cancel()
