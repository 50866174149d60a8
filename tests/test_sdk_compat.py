"""The official ``openai`` and ``anthropic`` Python SDKs complete streamed and non-streamed calls
and tool calls against the simulator over loopback."""

import json

import anthropic
import openai
import pytest

from .helpers import sim_process

QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather", "parameters": SCHEMA},
    }
]
ANTHROPIC_TOOLS = [{"name": "get_weather", "description": "Weather", "input_schema": SCHEMA}]


@pytest.fixture(scope="module")
def simulator():
    """``sluice sim`` on a free loopback port; yields its root URL (no /v1)."""
    with sim_process() as url:
        yield url.removesuffix("/v1")


@pytest.fixture
def openai_client(simulator):
    with openai.OpenAI(
        base_url=f"{simulator}/v1", api_key="sk-sdk-test", max_retries=0, timeout=20
    ) as c:
        yield c


@pytest.fixture
def anthropic_client(simulator):
    with anthropic.Anthropic(
        base_url=simulator, api_key="sk-ant-sdk-test", max_retries=0, timeout=20
    ) as c:
        yield c


def test_openai_non_streamed(openai_client):
    reply = openai_client.chat.completions.create(model="sim-small", messages=QUESTION)
    assert reply.choices[0].message.content
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage.completion_tokens > 0 and reply.usage.prompt_tokens > 0


def test_openai_streamed_with_usage(openai_client):
    stream = openai_client.chat.completions.create(
        model="sim-small", messages=QUESTION, stream=True, stream_options={"include_usage": True}
    )
    text, usage, finish = [], None, None
    for chunk in stream:
        if chunk.choices:
            text.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage is not None:
            usage = chunk.usage
    assert "".join(text) and finish == "stop"
    assert usage is not None and usage.completion_tokens > 0


def test_openai_tool_call(openai_client):
    reply = openai_client.chat.completions.create(
        model="sim-small",
        messages=QUESTION,
        tools=OPENAI_TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    (call,) = reply.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and call.id
    assert isinstance(json.loads(call.function.arguments)["city"], str)
    assert reply.choices[0].finish_reason == "tool_calls"


def test_openai_streamed_tool_call(openai_client):
    stream = openai_client.chat.completions.create(
        model="sim-small",
        messages=QUESTION,
        tools=OPENAI_TOOLS,
        tool_choice="required",
        stream=True,
    )
    names, arguments = [], []
    for chunk in stream:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            if delta.function.name:
                names.append(delta.function.name)
            arguments.append(delta.function.arguments or "")
    assert names == ["get_weather"]
    assert "city" in json.loads("".join(arguments))


def test_anthropic_non_streamed(anthropic_client):
    message = anthropic_client.messages.create(model="sim-small", max_tokens=64, messages=QUESTION)
    assert message.content[0].type == "text" and message.content[0].text
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.output_tokens > 0


def test_anthropic_streamed(anthropic_client):
    with anthropic_client.messages.stream(
        model="sim-small", max_tokens=64, messages=QUESTION
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.content[0].text == text
    assert final.usage.output_tokens > 0


def test_anthropic_tool_call(anthropic_client):
    message = anthropic_client.messages.create(
        model="sim-small",
        max_tokens=64,
        messages=QUESTION,
        tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    (block,) = [b for b in message.content if b.type == "tool_use"]
    assert block.name == "get_weather" and isinstance(block.input["city"], str)
    assert message.stop_reason == "tool_use"


def test_anthropic_streamed_tool_call(anthropic_client):
    with anthropic_client.messages.stream(
        model="sim-small",
        max_tokens=64,
        messages=QUESTION,
        tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "any"},
    ) as stream:
        final = stream.get_final_message()
    (block,) = [b for b in final.content if b.type == "tool_use"]
    assert block.name == "get_weather" and "city" in block.input
    assert final.stop_reason == "tool_use"
