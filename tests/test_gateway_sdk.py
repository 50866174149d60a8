"""The official ``openai`` and ``anthropic`` SDKs complete calls through ``sluice.serve`` to the
simulator, streamed and not, with tools, and across protocols (an Anthropic client reaching an
OpenAI-protocol backend and the other way round). Loopback, real clock, behaviour only."""

import json

import anthropic
import openai
import pytest
import trio

import sluice
from sluice._gateway import GatewaySettings, KeyRing, issue_key
from sluice.simulator import serve_simulator

QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather", "parameters": SCHEMA},
    }
]
ANTHROPIC_TOOLS = [{"name": "get_weather", "description": "Weather", "input_schema": SCHEMA}]

# sim: the runtime's own simulator over the OpenAI protocol; simant: a simulator reached over
# the Anthropic protocol; simoa: the same simulator over the OpenAI protocol.
OPENAI_BACKEND = "simoa:sim-small"
ANTHROPIC_BACKEND = "simant:sim-small"


async def _start(nursery):
    """Start a simulator and a gateway in front of it; return (gateway URL, token)."""
    sim_port = await nursery.start(serve_simulator)
    sim_url = f"http://127.0.0.1:{sim_port}/v1"
    config = sluice.load_config(
        {
            "ledger": {"persist": False},
            "providers": {
                "simant": {"protocol": "anthropic", "base_url": sim_url, "api_key": "sk-up"},
                "simoa": {"protocol": "openai", "base_url": sim_url, "api_key": "sk-up"},
            },
        }
    )
    key, token = issue_key({}, "sdk-tests", now=0.0)
    ring = KeyRing(None, {key.name: key})
    port = await nursery.start(
        lambda task_status: sluice.serve(
            config, port=0, keys=ring, settings=GatewaySettings(), task_status=task_status
        )
    )
    return f"http://127.0.0.1:{port}", token


def _openai(url, token):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0, timeout=20)


def _anthropic(url, token):
    return anthropic.Anthropic(base_url=url, api_key=token, max_retries=0, timeout=20)


async def _in_thread(fn):
    return await trio.to_thread.run_sync(fn)


@pytest.mark.parametrize("model", [OPENAI_BACKEND, ANTHROPIC_BACKEND])
async def test_openai_sdk_non_streamed(model):
    async with trio.open_nursery() as nursery:
        url, token = await _start(nursery)
        with _openai(url, token) as client:
            reply = await _in_thread(
                lambda: client.chat.completions.create(model=model, messages=QUESTION)
            )
        assert reply.model == model
        assert reply.choices[0].message.content
        assert reply.choices[0].finish_reason == "stop"
        assert reply.usage.completion_tokens > 0
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("model", [OPENAI_BACKEND, ANTHROPIC_BACKEND])
async def test_openai_sdk_streamed_with_usage(model):
    async with trio.open_nursery() as nursery:
        url, token = await _start(nursery)

        def run():
            with _openai(url, token) as client:
                stream = client.chat.completions.create(
                    model=model,
                    messages=QUESTION,
                    stream=True,
                    stream_options={"include_usage": True},
                )
                return list(stream)

        chunks = await _in_thread(run)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
        assert text and finishes[-1] == "stop"
        assert chunks[0].choices[0].delta.role == "assistant"
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
        assert all(c.usage is None for c in chunks[:-1])
        assert len({c.id for c in chunks}) == 1
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("model", [OPENAI_BACKEND, ANTHROPIC_BACKEND])
async def test_openai_sdk_tool_call(model):
    async with trio.open_nursery() as nursery:
        url, token = await _start(nursery)
        with _openai(url, token) as client:
            reply = await _in_thread(
                lambda: client.chat.completions.create(
                    model=model,
                    messages=QUESTION,
                    tools=OPENAI_TOOLS,
                    tool_choice={"type": "function", "function": {"name": "get_weather"}},
                )
            )
            (call,) = reply.choices[0].message.tool_calls
            assert call.function.name == "get_weather" and call.id
            assert "city" in json.loads(call.function.arguments)
            assert reply.choices[0].finish_reason == "tool_calls"

            def streamed():
                return list(
                    client.chat.completions.create(
                        model=model,
                        messages=QUESTION,
                        tools=OPENAI_TOOLS,
                        tool_choice="required",
                        stream=True,
                    )
                )

            chunks = await _in_thread(streamed)
        calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
        assert calls[0].function.name == "get_weather" and calls[0].id
        arguments = "".join(tc.function.arguments or "" for tc in calls)
        assert "city" in json.loads(arguments)
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        nursery.cancel_scope.cancel()


async def test_openai_sdk_response_format():
    async with trio.open_nursery() as nursery:
        url, token = await _start(nursery)
        with _openai(url, token) as client:
            reply = await _in_thread(
                lambda: client.chat.completions.create(
                    model=OPENAI_BACKEND,
                    messages=QUESTION,
                    response_format={
                        "type": "json_schema",
                        "json_schema": {"name": "weather", "schema": SCHEMA},
                    },
                )
            )
        assert "city" in json.loads(reply.choices[0].message.content)
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("model", [ANTHROPIC_BACKEND, OPENAI_BACKEND])
async def test_anthropic_sdk_non_streamed(model):
    async with trio.open_nursery() as nursery:
        url, token = await _start(nursery)
        with _anthropic(url, token) as client:
            reply = await _in_thread(
                lambda: client.messages.create(model=model, max_tokens=64, messages=QUESTION)
            )
        assert reply.model == model
        assert reply.content[0].type == "text" and reply.content[0].text
        assert reply.stop_reason in ("end_turn", "max_tokens")
        assert reply.usage.output_tokens > 0
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("model", [ANTHROPIC_BACKEND, OPENAI_BACKEND])
async def test_anthropic_sdk_streamed(model):
    async with trio.open_nursery() as nursery:
        url, token = await _start(nursery)

        def run():
            with (
                _anthropic(url, token) as client,
                client.messages.stream(model=model, max_tokens=64, messages=QUESTION) as stream,
            ):
                text = "".join(stream.text_stream)
                return text, stream.get_final_message()

        text, final = await _in_thread(run)
        assert text and final.content[0].text == text
        assert final.usage.output_tokens > 0 and final.usage.input_tokens > 0
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("model", [ANTHROPIC_BACKEND, OPENAI_BACKEND])
async def test_anthropic_sdk_tool_call(model):
    async with trio.open_nursery() as nursery:
        url, token = await _start(nursery)
        with _anthropic(url, token) as client:
            reply = await _in_thread(
                lambda: client.messages.create(
                    model=model,
                    max_tokens=256,
                    messages=QUESTION,
                    tools=ANTHROPIC_TOOLS,
                    tool_choice={"type": "tool", "name": "get_weather"},
                )
            )
            (block,) = [b for b in reply.content if b.type == "tool_use"]
            assert block.name == "get_weather" and "city" in block.input
            assert reply.stop_reason == "tool_use"

            def streamed():
                with client.messages.stream(
                    model=model,
                    max_tokens=256,
                    messages=QUESTION,
                    tools=ANTHROPIC_TOOLS,
                    tool_choice={"type": "any"},
                ) as stream:
                    return stream.get_final_message()

            final = await _in_thread(streamed)
        (block,) = [b for b in final.content if b.type == "tool_use"]
        assert block.name == "get_weather" and "city" in block.input
        # A tool result goes back through the gateway and the conversation continues.
        with _anthropic(url, token) as client:
            follow = await _in_thread(
                lambda: client.messages.create(
                    model=model,
                    max_tokens=64,
                    messages=[
                        *QUESTION,
                        {"role": "assistant", "content": [b.model_dump() for b in final.content]},
                        {
                            "role": "user",
                            "content": [
                                {"type": "tool_result", "tool_use_id": block.id, "content": "sunny"}
                            ],
                        },
                    ],
                    tools=ANTHROPIC_TOOLS,
                )
            )
        assert follow.content[0].type == "text"
        nursery.cancel_scope.cancel()


async def test_models_and_health():
    async with trio.open_nursery() as nursery:
        url, token = await _start(nursery)
        with _openai(url, token) as client:
            models = await _in_thread(lambda: client.models.list())
        assert {m.id for m in models.data} == set()  # no models configured by name
        with _openai(url, "sk-sluice-wrong") as client, pytest.raises(openai.AuthenticationError):
            await _in_thread(
                lambda: client.chat.completions.create(model=OPENAI_BACKEND, messages=QUESTION)
            )
        with (
            _anthropic(url, "sk-sluice-wrong") as client,
            pytest.raises(anthropic.AuthenticationError),
        ):
            await _in_thread(
                lambda: client.messages.create(
                    model=ANTHROPIC_BACKEND, max_tokens=8, messages=QUESTION
                )
            )
        nursery.cancel_scope.cancel()
