"""A Responses client in front of recorded upstreams (real HTTP over loopback on both sides:
``sluice.serve`` and :class:`RecordingUpstream`, the suite's own provider stand-in replaying
recorded bytes; real clock, behaviour only). An Anthropic upstream that thinks: the thinking
comes back as a ``reasoning`` item (its text the summary, its signature ``encrypted_content``),
streamed and not, and a later turn that sends the item back gives the upstream its thinking
block, signature and all. A chat-completions upstream gets chat's own parameter names, and its
parallel tool calls come back as items; a Gemini upstream's function call does too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import trio
from openai.types.responses import Response

import sluice
from sluice._gateway import GatewaySettings

from .recording_upstream import RecordingUpstream, sse_reply

RAW = Path(__file__).parent / "conformance_data" / "raw" / "anthropic"
THINKING_SSE = (RAW / "messages_stream_thinking_signature_then_text.sse").read_bytes()


def _recorded() -> tuple[str, str, str]:
    """The recorded stream's thinking text, signature and answer text."""
    thinking, signature, text = [], "", []
    for block in THINKING_SSE.replace(b"\r\n", b"\n").split(b"\n\n"):
        for line in block.split(b"\n"):
            if not line.startswith(b"data: "):
                continue
            event = orjson.loads(line[6:])
            delta = event.get("delta", {})
            if delta.get("type") == "thinking_delta":
                thinking.append(delta["thinking"])
            elif delta.get("type") == "signature_delta":
                signature = delta["signature"]
            elif delta.get("type") == "text_delta":
                text.append(delta["text"])
    return "".join(thinking), signature, "".join(text)


THINKING, SIGNATURE, ANSWER = _recorded()


async def _start(nursery: trio.Nursery) -> tuple[RecordingUpstream, str]:
    upstream = RecordingUpstream()
    up_port = await nursery.start(upstream.serve)
    config = sluice.load_config(
        {
            "ledger": {"persist": False},
            "providers": {
                "ant": {
                    "protocol": "anthropic",
                    "base_url": f"http://127.0.0.1:{up_port}/v1",
                    "api_key": "sk-up",
                }
            },
        }
    )
    port = await nursery.start(
        lambda task_status: sluice.serve(
            config, port=0, settings=GatewaySettings(require_key=False), task_status=task_status
        )
    )
    return upstream, f"http://127.0.0.1:{port}"


async def _post(url: str, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.post(f"{url}/v1/responses", json=body)


def _events(raw: bytes) -> list[dict[str, Any]]:
    return [
        orjson.loads(line[6:])
        for block in raw.split(b"\n\n")
        for line in block.split(b"\n")
        if line.startswith(b"data: ")
    ]


async def test_thinking_comes_back_as_a_reasoning_item_and_goes_back_upstream():
    assert THINKING and SIGNATURE and ANSWER
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            upstream, url = await _start(nursery)
            upstream.reply(sse_reply(THINKING_SSE), sse_reply(THINKING_SSE))
            plain = await _post(url, {"model": "ant:claude", "input": "What is 5 + 3?"})
            streamed = await _post(
                url, {"model": "ant:claude", "input": "What is 5 + 3?", "stream": True}
            )
            reply = plain.json()
            Response.model_validate(reply, strict=True)
            reasoning, message = reply["output"]
            assert reasoning["type"] == "reasoning"
            assert reasoning["summary"] == [{"type": "summary_text", "text": THINKING}]
            assert reasoning["encrypted_content"] == SIGNATURE
            assert message["content"][0]["text"] == ANSWER
            assert reply["usage"]["input_tokens"] == 50  # as recorded

            events = _events(streamed.content)
            summary = "".join(
                e["delta"] for e in events if e["type"] == "response.reasoning_summary_text.delta"
            )
            assert summary == THINKING
            final = events[-1]
            assert final["type"] == "response.completed"
            assert [{**i, "id": None} for i in final["response"]["output"]] == [
                {**i, "id": None} for i in reply["output"]
            ]

            # The next turn hands the reasoning item back: the upstream gets its thinking.
            upstream.reply(sse_reply(THINKING_SSE))
            follow = await _post(
                url,
                {
                    "model": "ant:claude",
                    "input": [
                        {"role": "user", "content": "What is 5 + 3?"},
                        reasoning,
                        message,
                        {"role": "user", "content": "And 6 + 3?"},
                    ],
                },
            )
            assert follow.status_code == 200
            sent = upstream.received[-1].body["messages"]
            assert sent[1]["role"] == "assistant"
            assert sent[1]["content"][0] == {
                "type": "thinking",
                "thinking": THINKING,
                "signature": SIGNATURE,
            }
            assert sent[1]["content"][1]["text"] == ANSWER
            nursery.cancel_scope.cancel()


OPENAI_RAW = RAW.parent / "openai"
PARALLEL_SSE = (OPENAI_RAW / "chat_stream_parallel_tool_calls_usage.sse").read_bytes()


def _recorded_calls() -> dict[str, list[str]]:
    """Each recorded tool call's id, name and arguments."""
    calls: dict[int, list[str]] = {}
    for line in PARALLEL_SSE.split(b"\n"):
        if not line.startswith(b"data: {"):
            continue
        for choice in orjson.loads(line[6:])["choices"]:
            for delta in choice["delta"].get("tool_calls") or []:
                call = calls.setdefault(delta["index"], ["", "", ""])
                call[0] = delta.get("id") or call[0]
                call[1] = delta["function"].get("name") or call[1]
                call[2] += delta["function"].get("arguments") or ""
    return {call[0]: call[1:] for call in calls.values()}


async def test_a_chat_upstream_gets_chats_names_and_its_parallel_calls_come_back_as_items():
    weather = {
        "type": "function",
        "name": "getCurrentWeather",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
    }
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            upstream = RecordingUpstream()
            up_port = await nursery.start(upstream.serve)
            config = sluice.load_config(
                {
                    "ledger": {"persist": False},
                    "providers": {
                        "oai": {
                            "protocol": "openai",
                            "base_url": f"http://127.0.0.1:{up_port}/v1",
                            "api_key": "sk-up",
                        }
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
            upstream.reply(sse_reply(PARALLEL_SSE))
            reply = await _post(
                f"http://127.0.0.1:{port}",
                {
                    "model": "oai:gpt-4.1",
                    "instructions": "Use tools.",
                    "input": "Weather in Paris and Lyon?",
                    "tools": [weather, {"type": "function", "name": "getCurrentTime"}],
                    "reasoning": {"effort": "low", "summary": "auto"},
                    "text": {"verbosity": "low"},
                    "user": "u-1",
                    "store": False,
                    "include": ["reasoning.encrypted_content"],
                    "metadata": {"k": "v"},
                    "max_output_tokens": 300,
                    "stream": True,
                },
            )
            nursery.cancel_scope.cancel()
    sent = upstream.received[0]
    assert sent.path == "/v1/chat/completions"
    body = sent.body
    assert body["messages"] == [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris and Lyon?"},
    ]
    assert body["tools"][0]["function"]["name"] == "getCurrentWeather"
    assert body["reasoning_effort"] == "low" and body["verbosity"] == "low"
    assert body["user"] == "u-1"
    for only_responses in ("store", "include", "metadata", "reasoning", "text", "input"):
        assert only_responses not in body
    events = _events(reply.content)
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.completed"
    items = {i["call_id"]: [i["name"], i["arguments"]] for i in final["output"]}
    assert items == _recorded_calls() and len(items) == 2
    assert final["usage"]["input_tokens"] == 121 and final["usage"]["output_tokens"] == 50
    assert final["metadata"] == {"k": "v"}


GEMINI_SSE = (RAW.parent / "gemini" / "stream_function_call_thought_signature.sse").read_bytes()


async def test_a_gemini_model_answers_a_responses_client_with_a_function_call():
    country = {"type": "function", "name": "get_country", "parameters": {"type": "object"}}
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            upstream = RecordingUpstream()
            up_port = await nursery.start(upstream.serve)
            config = sluice.load_config(
                {
                    "ledger": {"persist": False},
                    "providers": {
                        "gem": {
                            "protocol": "gemini",
                            "base_url": f"http://127.0.0.1:{up_port}/v1beta",
                            "api_key": "gm-up",
                        }
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
            upstream.reply(sse_reply(GEMINI_SSE))
            reply = await _post(
                f"http://127.0.0.1:{port}",
                {
                    "model": "gem:gemini-3-pro-preview",
                    "input": "What is the capital of the user country? Call the tool",
                    "tools": [country],
                    "stream": True,
                },
            )
            nursery.cancel_scope.cancel()
    sent = upstream.received[0]
    assert "streamGenerateContent" in sent.path
    declared = sent.body["tools"][0]["functionDeclarations"][0]
    assert declared["name"] == "get_country"
    events = _events(reply.content)
    assert events[-1]["type"] == "response.completed"
    final = events[-1]["response"]
    (call,) = final["output"]
    assert call["type"] == "function_call" and call["name"] == "get_country"
    assert orjson.loads(call["arguments"]) == {}
    assert final["usage"]["input_tokens"] == 29
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] == 110
