"""Prompt-cache breakpoints: ``cache_control`` where the Anthropic protocol wants it, and
nowhere else."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

import sluice
from sluice import ChatRequest, Message, ProviderConfig, RuntimeConfig, Secret, Tool, ToolCall
from sluice._messages import ReasoningPart, TextPart
from sluice._protocols import codec_for
from sluice._protocols.anthropic_request import build_request
from sluice._tools import TemporaryMessage
from sluice.simulator import SimulatorConfig, mock_transport

from .helpers import virtual_deadline

EPHEMERAL = {"type": "ephemeral"}
TOOL = Tool(name="lookup", parameters={"type": "object", "properties": {}})
CONVERSATION = (
    Message.system("You are terse."),
    Message.user("Hello"),
    Message.assistant("Hi."),
    Message.user("What now?"),
)


def body(request: ChatRequest) -> dict:
    """The request body exactly as it goes on the wire."""
    built = build_request(request, base_url="https://api.anthropic.com/v1", api_key="k")
    body: dict[Any, Any] = orjson.loads(built.body)
    return body


def request(messages=CONVERSATION, **fields) -> ChatRequest:
    return ChatRequest(model="anthropic:claude-x", messages=messages, **fields)


def marked(wire: dict) -> list[tuple[str, object]]:
    """Where the breakpoints are: (place, block) pairs, in body order."""
    found: list[tuple[str, object]] = []
    for tool in wire.get("tools", []):
        if "cache_control" in tool:
            found.append(("tools", tool["name"]))
    system = wire.get("system")
    if isinstance(system, list):
        found += [("system", b["text"]) for b in system if "cache_control" in b]
    for index, message in enumerate(wire["messages"]):
        for block in message["content"]:
            if "cache_control" in block:
                found.append((f"messages.{index}", block.get("text", block["type"])))
    return found


def test_no_breakpoints_leaves_the_body_as_it_was():
    wire = body(request())
    assert wire["system"] == "You are terse."
    assert marked(wire) == []
    assert b"cache_control" not in build_request(request(), base_url="http://x", api_key=None).body


def test_true_marks_the_system_prompt_and_the_last_message():
    wire = body(request(cache_breakpoints=True))
    assert wire["system"] == [
        {"type": "text", "text": "You are terse.", "cache_control": EPHEMERAL}
    ]
    assert wire["messages"][-1] == {
        "role": "user",
        "content": [{"type": "text", "text": "What now?", "cache_control": EPHEMERAL}],
    }
    assert marked(wire) == [("system", "You are terse."), ("messages.2", "What now?")]


def test_each_point_on_its_own():
    assert marked(body(request(cache_breakpoints=["system"]))) == [("system", "You are terse.")]
    assert marked(body(request(cache_breakpoints={"last_message"}))) == [
        ("messages.2", "What now?")
    ]
    other = Tool(name="other", parameters={"type": "object", "properties": {}})
    wire = body(request(tools=[TOOL, other], cache_breakpoints=["tools"]))
    assert marked(wire) == [("tools", "other")]
    assert wire["tools"][-1]["cache_control"] == EPHEMERAL


def test_several_system_messages_mark_the_last_block():
    messages = (Message.system("One."), Message.system("Two."), Message.user("Go"))
    wire = body(request(messages, cache_breakpoints=["system"]))
    assert wire["system"] == [
        {"type": "text", "text": "One."},
        {"type": "text", "text": "Two.", "cache_control": EPHEMERAL},
    ]


def test_temporary_correction_messages_are_never_marked():
    """A correction retry reuses the cache of the conversation it corrects."""
    messages = (
        *CONVERSATION,
        TemporaryMessage("assistant", "{broken"),
        TemporaryMessage("user", "Your previous reply could not be used."),
    )
    wire = body(request(messages, cache_breakpoints=True))
    assert marked(wire) == [("system", "You are terse."), ("messages.2", "What now?")]
    assert len(wire["messages"]) == 5


def test_a_tool_result_can_carry_the_breakpoint():
    call = ToolCall(id="toolu_1", name="lookup", arguments="{}")
    messages = (
        Message.user("Look it up"),
        Message.assistant([TextPart("Looking."), call]),
        Message.tool("toolu_1", "found it"),
    )
    wire = body(request(messages, tools=[TOOL], cache_breakpoints=["last_message"]))
    (result,) = wire["messages"][-1]["content"]
    assert result == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": "found it",
        "cache_control": EPHEMERAL,
    }


def test_a_thinking_block_is_never_marked():
    messages = (
        Message.user("Think"),
        Message("assistant", (TextPart("Answer."), ReasoningPart(text="hmm", signature="sig"))),
    )
    wire = body(request(messages, cache_breakpoints=["last_message"]))
    text, thinking = wire["messages"][-1]["content"]
    assert thinking["type"] == "thinking" and "cache_control" not in thinking
    assert text["cache_control"] == EPHEMERAL


def test_the_option_takes_only_known_points():
    with pytest.raises(ValueError, match="unknown cache breakpoint"):
        request(cache_breakpoints=["everything"])
    assert request(cache_breakpoints=False).cache_breakpoints == frozenset()


@pytest.mark.parametrize("protocol", ["openai", "gemini", "ollama"])
def test_other_protocols_ignore_the_option(protocol):
    codec = codec_for(protocol)
    plain = ChatRequest(model=f"{protocol}:m", messages=CONVERSATION)
    marked_request = ChatRequest(
        model=f"{protocol}:m", messages=CONVERSATION, cache_breakpoints=True
    )
    one = codec.build_request(plain, base_url="http://x/v1", api_key="k")
    two = codec.build_request(marked_request, base_url="http://x/v1", api_key="k")
    assert one.body == two.body


@virtual_deadline(60)
async def test_the_simulator_accepts_marked_requests(autojump_clock):
    seen: list[dict] = []
    sim = mock_transport(SimulatorConfig())

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(orjson.loads(await request.aread()))
        return await sim.handle_async_request(request)

    config = RuntimeConfig(
        providers={
            "claude": ProviderConfig(
                protocol="anthropic", base_url="http://sim.invalid/v1", api_key=Secret("k")
            )
        }
    )
    async with sluice.open_runtime(config, transport=httpx.MockTransport(handler)) as rt:
        result = await rt.chat(
            ChatRequest(model="claude:sim-small", messages=CONVERSATION, cache_breakpoints=True)
        )
    assert result.text
    assert marked(seen[0]) == [("system", "You are terse."), ("messages.2", "What now?")]
