"""``User-Agent: sluice/<version>`` on every request sluice sends to a provider, in every
protocol and over both transports, unless the caller names its own (issue 30). Over
httpx.MockTransport for the exact headers, and over loopback against a server of the suite's
own (:mod:`tests.recording_upstream`) for what really goes on the wire."""

from __future__ import annotations

import queue
import threading
from importlib import metadata

import httpx
import orjson
import pytest
import trio

import sluice
from sluice import ChatRequest, ProviderConfig, RuntimeConfig, Secret
from sluice._cli import main
from sluice._version import USER_AGENT, VERSION

from .recording_upstream import RecordingUpstream, json_reply

GUARD = 30

OPENAI = {
    "id": "c",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
REPLIES = {
    "openai": ("http://up.test/v1", OPENAI),
    "anthropic": (
        "http://up.test/v1",
        {
            "id": "msg",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        },
    ),
    "gemini": (
        "http://up.test/v1beta",
        {
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"text": "ok"}]},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1},
        },
    ),
    "ollama": (
        "http://up.test",
        {
            "model": "m",
            "created_at": "2026-12-01T00:00:00Z",
            "message": {"role": "assistant", "content": "ok"},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 1,
            "eval_count": 1,
        },
    ),
}


def test_the_user_agent_names_the_installed_version():
    assert metadata.version("sluice") == VERSION
    assert USER_AGENT.split("/") == ["sluice", VERSION]


async def chat_through(
    protocol: str, provider_headers: dict[str, str] | None = None, **request: object
) -> list[httpx.Headers]:
    """One call to a ``protocol`` provider over httpx.MockTransport; the headers it sent."""
    base_url, body = REPLIES[protocol]
    seen: list[httpx.Headers] = []

    def handler(sent: httpx.Request) -> httpx.Response:
        seen.append(sent.headers)
        return httpx.Response(200, json=body)

    provider = ProviderConfig(
        protocol=protocol,  # type: ignore[arg-type]
        base_url=base_url,
        api_key=Secret("k"),
        headers=provider_headers or {},
    )
    config = RuntimeConfig(providers={"up": provider})
    with trio.fail_after(GUARD):
        async with sluice.open_runtime(config, transport=httpx.MockTransport(handler)) as rt:
            result = await rt.chat(ChatRequest(model="up:m", messages="hi", **request))  # type: ignore[arg-type]
    assert result.text == "ok"
    return seen


@pytest.mark.parametrize("protocol", sorted(REPLIES))
async def test_every_protocol_sends_sluices_user_agent(protocol):
    (headers,) = await chat_through(protocol, stream=False)
    assert headers.get_list("user-agent") == [USER_AGENT]  # ours, once, not httpx's


async def test_a_user_agent_the_caller_sets_wins():
    (configured,) = await chat_through("openai", {"User-Agent": "acme-batch/2"}, stream=False)
    assert configured.get_list("user-agent") == ["acme-batch/2"]
    (per_call,) = await chat_through(
        "anthropic", stream=False, extra_headers={"User-Agent": "acme-call/3"}
    )
    assert per_call.get_list("user-agent") == ["acme-call/3"]


@pytest.mark.parametrize("transport", ["fast", "httpx"])
async def test_the_user_agent_goes_on_the_wire_over_loopback(nursery, transport):
    upstream = RecordingUpstream()
    port = await nursery.start(upstream.serve)
    upstream.reply(json_reply(orjson.dumps(OPENAI)))
    provider = ProviderConfig(
        protocol="openai",
        base_url=f"http://127.0.0.1:{port}/v1",
        api_key=Secret("k"),
        transport=transport,
    )
    with trio.fail_after(GUARD):
        async with sluice.open_runtime(RuntimeConfig(providers={"up": provider})) as rt:
            result = await rt.chat(ChatRequest(model="up:m", messages="hi", stream=False))
    assert result.text == "ok"
    (received,) = upstream.received
    assert received.headers["user-agent"] == USER_AGENT


def test_the_load_tester_sends_it_on_its_direct_requests(tmp_path):
    """``sluice loadtest --endpoint embeddings`` calls the provider with its own httpx client
    (not through the runtime): over loopback, every request it sent carries the header."""
    upstream = RecordingUpstream()
    embedding = {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.5]}],
        "model": "m",
        "usage": {"prompt_tokens": 3, "total_tokens": 3},
    }
    upstream.reply(*[json_reply(orjson.dumps(embedding))] * 8)
    started: queue.Queue[tuple[int, trio.lowlevel.TrioToken, trio.CancelScope]] = queue.Queue()

    async def host() -> None:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                port = await nursery.start(upstream.serve)
                started.put((port, trio.lowlevel.current_trio_token(), scope))

    server = threading.Thread(target=trio.run, args=(host,), daemon=True)
    server.start()
    port, token, scope = started.get(timeout=GUARD)
    try:
        code = main(
            [
                "loadtest",
                *("--endpoint", "embeddings", "--base-url", f"http://127.0.0.1:{port}/v1"),
                *("--api-key", "sk-test", "--model", "up:m", "--rate", "5", "--requests", "2"),
                *("--warmup", "0", "--input-tokens", "3", "--max-lag", "30s"),
                *("--out", str(tmp_path / "r.json")),
            ]
        )
    finally:
        trio.from_thread.run_sync(scope.cancel, trio_token=token)
        server.join(timeout=GUARD)
    assert code == 0
    assert len(upstream.received) >= 2
    assert {r.headers.get("user-agent") for r in upstream.received} == {USER_AGENT}


@pytest.mark.parametrize("protocol", sorted(REPLIES))
async def test_listing_models_sends_it_too(tmp_path, protocol):
    """``sluice providers models`` / ``check``: the operations build their headers with the
    same codec, so they carry it as well."""
    from sluice.providers._keys import KeyStore
    from sluice.providers._operations import list_models
    from sluice.providers._plugins import PluginProviders
    from sluice.providers._registry import resolve_provider
    from sluice.transport import HttpxTransport

    seen: list[httpx.Headers] = []

    def handler(sent: httpx.Request) -> httpx.Response:
        seen.append(sent.headers)
        return httpx.Response(200, json={"data": [], "models": []})

    base_url, _ = REPLIES[protocol]
    provider = ProviderConfig(protocol=protocol, base_url=base_url, api_key=Secret("k"))
    store = KeyStore(tmp_path / "k", tmp_path / "m", {})
    spec = resolve_provider(
        "up",
        RuntimeConfig(providers={"up": provider}),
        {},
        plugins=PluginProviders(),
        key_store=store,
    )
    client = HttpxTransport(httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    with trio.fail_after(GUARD):
        await list_models(spec, client)
    assert seen
    assert all(h.get_list("user-agent") == [USER_AGENT] for h in seen)
