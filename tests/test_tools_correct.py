"""Self-correcting retries: correction messages, temporary messages, the loop (§10.3).

The loop here is a pure stand-in for the Supervisor: prepare once, then per attempt apply the
corrections, take the next scripted reply, finalize, and on a ToolCallError add a correction
while the options allow one. Cases 23-26.
"""

from __future__ import annotations

import random
import re
from typing import Any

import attrs
import pytest

from sluice._errors import ToolCallError
from sluice._messages import ChatRequest, Message, SpecificTool, Tool, ToolCall
from sluice._protocols.base import AttemptOutput
from sluice._tools import (
    FULL,
    OLLAMA,
    Corrections,
    Prepared,
    TemporaryMessage,
    ToolCapabilities,
    ToolOptions,
    correction_messages,
    finalize,
    is_temporary,
    prepare,
    strip_temporary,
)
from sluice._tools.correct import EMPTY_REPLY_NUDGE

TOOL_ADD = Tool(
    name="tool_add",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)
NO_NATIVE_TOOLS = ToolCapabilities(native_tools=False)


def text(value: str) -> AttemptOutput:
    return AttemptOutput(message=Message.assistant(value), finish_reason="stop")


def attempt_loop(
    prepared: Prepared, replies: list[AttemptOutput]
) -> tuple[AttemptOutput, list[ChatRequest]]:
    """Run attempts until one finalizes; return it and every request that was sent."""
    sent: list[ChatRequest] = []
    corrections = Corrections()
    rng = random.Random(3)
    while True:
        sent.append(corrections.apply(prepared))
        output = replies[len(sent) - 1]
        try:
            return finalize(output, prepared, rng=rng), sent
        except ToolCallError as error:
            if not corrections.allows(error, prepared):
                raise
            corrections = corrections.add(error, prepared)


def test_bad_forced_reply_is_corrected_on_the_second_attempt() -> None:
    """Case 23: a model without native tools, one tool, required; two attempts."""
    req = ChatRequest(model="m:x", messages="add 1 and 2", tools=[TOOL_ADD], tool_choice="required")
    prepared = prepare(req, NO_NATIVE_TOOLS, ToolOptions(max_corrections=3))
    result, sent = attempt_loop(
        prepared,
        [text('{"bad": "data"}'), text('{"name": "tool_add", "parameters": {"a": 1, "b": 2}}')],
    )
    assert len(sent) == 2
    (call,) = result.message.tool_calls
    assert call.name == "tool_add" and call.parsed_arguments() == {"a": 1, "b": 2}
    assert re.fullmatch(r"call_[a-z0-9]{8}", call.id)


def test_without_corrections_the_first_bad_reply_fails() -> None:
    """Case 24: max_corrections=0 means one attempt."""
    req = ChatRequest(model="m:x", messages="hi", tools=[TOOL_ADD], tool_choice="required")
    prepared = prepare(req, NO_NATIVE_TOOLS, ToolOptions(max_corrections=0))
    with pytest.raises(ToolCallError) as info:
        attempt_loop(prepared, [text('{"bad": "data"}')])
    assert info.value.reason == "missing_arguments"


def test_retry_request_ends_with_the_temporary_correction() -> None:
    """Case 25: the bad reply and the correction, marked temporary; real tool names even
    though the backend has no native tools (upstream BUG: 'Available Tools: None'); the
    caller's request is untouched."""
    req = ChatRequest(model="m:x", messages="add", tools=[TOOL_ADD], tool_choice="required")
    before = attrs.evolve(req)
    prepared = prepare(req, NO_NATIVE_TOOLS)
    _, sent = attempt_loop(
        prepared,
        [text('{"bad": "data"}'), text('{"name": "tool_add", "parameters": {"a": 1, "b": 2}}')],
    )
    bad, correction = sent[1].messages[-2:]
    assert bad == TemporaryMessage("assistant", '{"bad": "data"}')
    assert correction.role == "user" and is_temporary(correction)
    assert correction.text.endswith("\nAvailable tools: tool_add.")
    assert "lacks required argument(s) 'a', 'b'" in correction.text
    assert req == before
    assert strip_temporary(sent[1].messages) == prepared.request.messages
    assert not any(is_temporary(m) for m in sent[0].messages)


def test_corrections_accumulate_over_attempts() -> None:
    """§10.3 NOTE: the third attempt sees both earlier corrections."""
    req = ChatRequest(model="m:x", messages="add", tools=[TOOL_ADD], tool_choice="required")
    prepared = prepare(req, OLLAMA)
    _, sent = attempt_loop(
        prepared,
        [
            text("no"),
            text("still no"),
            text('{"name": "tool_add", "parameters": {"a": 1, "b": 2}}'),
        ],
    )
    assert len(sent) == 3
    temporary = [m for m in sent[2].messages if is_temporary(m)]
    assert [m.role for m in temporary] == ["assistant", "user", "assistant", "user"]
    assert [m.text for m in temporary[::2]] == ["no", "still no"]


def test_the_correction_limit_ends_with_the_last_error() -> None:
    req = ChatRequest(model="m:x", messages="add", tools=[TOOL_ADD], tool_choice="required")
    prepared = prepare(req, OLLAMA, ToolOptions(max_corrections=1))
    with pytest.raises(ToolCallError) as info:
        attempt_loop(prepared, [text("no"), text("[]")])
    assert info.value.reason == "no_tool_call"


def test_uncorrectable_errors_are_not_retried() -> None:
    req = ChatRequest(model="m:x", messages="add", tools=[TOOL_ADD], tool_choice="required")
    prepared = prepare(req, OLLAMA)
    cut = AttemptOutput(message=Message.assistant('{"name": "tool_'), finish_reason="length")
    with pytest.raises(ToolCallError) as info:
        attempt_loop(prepared, [cut])
    assert info.value.reason == "truncated"


def test_empty_reply_gets_a_user_nudge_and_no_empty_assistant_message() -> None:
    """Case 26 and §10.2: Vertex AI and Mistral reject empty assistant messages."""
    req = ChatRequest(model="m:x", messages="hello")
    prepared = prepare(req, FULL)
    result, sent = attempt_loop(prepared, [text(""), text(""), text("Hi!")])
    assert result.message.text == "Hi!"
    added = [m for m in sent[2].messages if is_temporary(m)]
    assert added == [TemporaryMessage("user", EMPTY_REPLY_NUDGE)] * 2
    assert all(m.text.strip() for m in sent[2].messages)


def test_native_bad_calls_are_echoed_as_text_not_as_tool_calls() -> None:
    """A tool_calls message would need tool results after it; the echo is plain text."""
    req = ChatRequest(
        model="m:x", messages="go", tools=[TOOL_ADD], tool_choice=SpecificTool("tool_add")
    )
    prepared = prepare(req, FULL)
    output = AttemptOutput(
        message=Message.assistant([ToolCall(id="c", name="tool_sub", arguments='{"a": 1}')]),
        finish_reason="tool_calls",
    )
    with pytest.raises(ToolCallError) as info:
        finalize(output, prepared)
    bad, correction = correction_messages(info.value, prepared)
    assert bad.role == "assistant" and bad.tool_calls == ()
    assert bad.text == '{"name":"tool_sub","arguments":"{\\"a\\": 1}"}'
    assert correction.text == (
        "Your previous reply could not be used. You must call the tool 'tool_add', not "
        "'tool_sub'.\nAvailable tools: tool_add."
    )


def test_forced_correction_repeats_the_reply_form() -> None:
    tools = [TOOL_ADD, Tool(name="other")]
    req = ChatRequest(model="m:x", messages="go", tools=tools, tool_choice="required")
    prepared = prepare(req, OLLAMA)
    with pytest.raises(ToolCallError) as info:
        finalize(text('{"name": "nope", "parameters": {}}'), prepared)
    (_, correction) = correction_messages(info.value, prepared)
    assert correction.text == (
        "Your previous reply could not be used. There is no tool named 'nope'.\n"
        'Reply with JSON only, in this form: {"name": "<tool name>", "parameters": '
        "{<the arguments>}}\nAvailable tools: tool_add, other."
    )


def test_none_violation_correction_does_not_list_tools() -> None:
    req = ChatRequest(model="m:x", messages="go", tools=[TOOL_ADD], tool_choice="none")
    prepared = prepare(req, FULL)
    output = AttemptOutput(
        message=Message.assistant([ToolCall(id="c", name="tool_add", arguments="{}")]),
        finish_reason="tool_calls",
    )
    with pytest.raises(ToolCallError) as info:
        finalize(output, prepared)
    (_, correction) = correction_messages(info.value, prepared)
    assert "Available tools" not in correction.text
    assert "Do not call any tool" in correction.text


def test_temporary_messages_are_messages_but_never_equal_plain_ones() -> None:
    temp = TemporaryMessage("user", "x")
    assert isinstance(temp, Message)
    assert temp != Message.user("x")
    history: list[Any] = [Message.user("a"), temp, Message.assistant("b")]
    assert strip_temporary(history) == (Message.user("a"), Message.assistant("b"))


def test_corrections_are_values() -> None:
    req = ChatRequest(model="m:x", messages="hi")
    prepared = prepare(req, FULL)
    error = ToolCallError("m", reason="empty_reply")
    empty = Corrections()
    one = empty.add(error, prepared)
    assert empty == Corrections() and one.count == 1
    assert empty.apply(prepared) is prepared.request
    assert one.apply(prepared).messages[-1] == TemporaryMessage("user", EMPTY_REPLY_NUDGE)
