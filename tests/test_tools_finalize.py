"""Finalization of an attempt: forced replies, repair, and the contract checks.

Spec §4.5, §5.3, §8, §9.2; cases 26, 32-38, 46, 55, 57-61.
"""

from __future__ import annotations

import random
import re
from typing import Any

import attrs
import pytest

from sluice._errors import FatalError, ToolCallError
from sluice._messages import (
    ChatRequest,
    ContentPart,
    FinishReason,
    Message,
    ReasoningPart,
    SpecificTool,
    TextPart,
    Tool,
    ToolCall,
)
from sluice._protocols.base import AttemptOutput
from sluice._tools import (
    FULL,
    OLLAMA,
    OPENAI,
    Prepared,
    ToolCapabilities,
    ToolOptions,
    finalize,
    prepare,
)

CALL_ID = re.compile(r"^call_[a-z0-9]{8}$")
SEARCH = Tool(
    name="search",
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["query"],
    },
)
WEATHER = Tool(
    name="get_weather",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
TOOLS = (WEATHER, SEARCH)


def prepared_for(
    choice: Any = "required",
    caps: ToolCapabilities = OLLAMA,
    tools: tuple[Tool, ...] = TOOLS,
    parallel: bool | None = None,
    **options: Any,
) -> Prepared:
    req = ChatRequest(
        model="ollama:llama3.1",
        messages="hi",
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=parallel,
    )
    return prepare(req, caps, ToolOptions(**options))


def reply(*parts: ContentPart | str, finish: FinishReason = "stop") -> AttemptOutput:
    content = tuple(TextPart(p) if isinstance(p, str) else p for p in parts)
    return AttemptOutput(message=Message("assistant", content), finish_reason=finish)


def run(output: AttemptOutput, prepared: Prepared) -> AttemptOutput:
    return finalize(output, prepared, rng=random.Random(7))


def calls(output: AttemptOutput) -> list[tuple[str, str]]:
    return [(c.name, c.arguments) for c in output.message.tool_calls]


def failure(output: AttemptOutput, prepared: Prepared) -> ToolCallError:
    with pytest.raises(ToolCallError) as info:
        run(output, prepared)
    return info.value


# Forced replies (§8 step 4).
def test_fenced_forced_reply_becomes_one_tool_call() -> None:
    """Case 57: the output is exactly one assistant message holding only the call."""
    out = run(
        reply('```json\n{"name":"get_weather","parameters":{"city":"Oslo"}}\n```'), prepared_for()
    )
    assert calls(out) == [("get_weather", '{"city":"Oslo"}')]
    assert len(out.message.content) == 1
    assert out.message.role == "assistant"
    assert out.finish_reason == "tool_calls"
    assert CALL_ID.match(out.message.tool_calls[0].id)


def test_list_reply_with_keep_first_call_uses_the_first_element() -> None:
    """Case 58."""
    text = '[{"name":"search","parameters":{"query":"a"}},{"name":"get_weather","parameters":{}}]'
    out = run(reply(text), prepared_for(keep_first_call=True))
    assert calls(out) == [("search", '{"query":"a"}')]


def test_empty_list_reply_is_a_tool_call_error() -> None:
    """Case 59 (ours: a ToolCallError, not an IndexError)."""
    error = failure(reply("[]"), prepared_for(keep_first_call=True))
    assert error.reason == "no_tool_call" and error.correctable


def test_forced_named_tool_wraps_a_bare_object() -> None:
    """Case 60 (ours): with the single-tool schema the forced tool is still the fallback."""
    out = run(reply('{"query": "bees"}'), prepared_for(SpecificTool("search")))
    assert calls(out) == [("search", '{"query":"bees"}')]


def test_forced_reply_drops_reasoning_and_text() -> None:
    """Case 61."""
    out = run(
        reply(ReasoningPart(text="thinking"), '{"name":"search","parameters":{"query":"x"}}'),
        prepared_for(),
    )
    assert [type(p) for p in out.message.content] == [ToolCall]


def test_native_calls_are_used_even_when_forcing() -> None:
    """§8 step 4 runs only when the reply has no native tool call."""
    native = ToolCall(id="c1", name="search", arguments='{"query": "x"}')
    out = run(reply(native), prepared_for())
    assert out.message.tool_calls == (native,)


def test_forced_reply_that_is_not_json_is_unparseable() -> None:
    error = failure(reply("I would rather chat."), prepared_for())
    assert error.reason == "unparseable"
    assert '{"name": "<tool name>"' in error.feedback
    assert error.generated == "I would rather chat."


def test_arguments_alias_and_double_encoded_parameters_are_accepted() -> None:
    """Ours: {"name", "arguments"} (the wire's own spelling) and JSON-string parameters."""
    prepared = prepared_for()
    out = run(reply('{"name": "search", "arguments": {"query": "x"}}'), prepared)
    assert calls(out) == [("search", '{"query":"x"}')]
    out = run(reply('{"name": "search", "parameters": "{\\"query\\": \\"y\\"}"}'), prepared)
    assert calls(out) == [("search", '{"query":"y"}')]


def test_strict_forcing_drops_nulls_of_optional_parameters() -> None:
    """Strict schemas make optionals required-but-nullable; null means the model left it out."""
    caps = ToolCapabilities(tool_choice=set(), strict_schema=True)
    text = '{"name": "search", "parameters": {"query": "x", "limit": null}}'
    assert calls(run(reply(text), prepared_for(caps=caps))) == [("search", '{"query":"x"}')]


def test_forced_reply_cut_off_by_max_tokens_is_not_correctable() -> None:
    """Ours: a truncated call is not silently completed; upstream asks for more tokens too."""
    error = failure(
        reply('{"name": "search", "parameters": {"query": "bee', finish="length"), prepared_for()
    )
    assert error.reason == "truncated" and not error.correctable
    assert "max_tokens" in error.message


# Case 46: the validation table of §5.3 (2 tools, parallel off), each row a test.
ROWS = [
    ('{"name":"search","parameters":{"query":"x"}}', True, True, True, True),
    ('{"query":"x"}', True, True, False, False),
    ('{"name":"search","query":"x"}', True, True, True, True),
    ('{"item":{"name":"search","parameters":{"query":"x"}}}', True, True, True, True),
    ('"hello"', False, False, False, False),
    ('[{"name":"search","parameters":{"query":"x"}}]', True, True, True, True),
]


@pytest.mark.parametrize(
    ("text", "top_fb", "wrapped_fb", "top", "wrapped"),
    ROWS,
)
@pytest.mark.parametrize("wrapped_caps", [False, True])
@pytest.mark.parametrize("fallback", ["search", None])
def test_validation_table_row(
    text: str,
    top_fb: bool,
    wrapped_fb: bool,
    top: bool,
    wrapped: bool,
    wrapped_caps: bool,
    fallback: str | None,
) -> None:
    """Case 46. Ours where upstream is strict about the envelope but the intent is clear:
    name plus stray fields without a fallback, an ``item`` wrapper in either mode, and a
    one-element list when parallel calls are off are all accepted."""
    caps = ToolCapabilities(tool_choice=set(), top_level_unions=not wrapped_caps)
    prepared = prepared_for(caps=caps, fallback_tool=fallback)
    expected = {
        (False, "search"): top_fb,
        (True, "search"): wrapped_fb,
        (False, None): top,
        (True, None): wrapped,
    }[(wrapped_caps, fallback)]
    if expected:
        assert calls(run(reply(text), prepared)) == [("search", '{"query":"x"}')]
    else:
        assert failure(reply(text), prepared).correctable


def test_parallel_with_fallback_accepts_a_list_of_calls() -> None:
    """Case 46 (ours; upstream BUG §5.3 wraps the whole list as the fallback's parameters)."""
    prepared = prepared_for(parallel=True, fallback_tool="search")
    text = '[{"name":"get_weather","parameters":{"city":"Oslo"}},{"query":"x"}]'
    out = run(reply(text), prepared)
    assert calls(out) == [("get_weather", '{"city":"Oslo"}'), ("search", '{"query":"x"}')]
    assert len({c.id for c in out.message.tool_calls}) == 2


def test_parallel_with_fallback_accepts_a_bare_object() -> None:
    """Case 46 (ours): a single object is one call."""
    out = run(reply('{"query":"x"}'), prepared_for(parallel=True, fallback_tool="search"))
    assert calls(out) == [("search", '{"query":"x"}')]


def test_wrapped_parallel_list_under_item() -> None:
    caps = ToolCapabilities(tool_choice=set(), top_level_unions=False)
    text = '{"item": [{"name":"search","parameters":{"query":"x"}}, {"name":"get_weather"}]}'
    out = run(reply(text), prepared_for(caps=caps, parallel=True))
    assert calls(out) == [("search", '{"query":"x"}'), ("get_weather", "{}")]


def test_tool_parameter_named_name_goes_to_the_fallback() -> None:
    """Ours: {"name": "Bob"} for a fallback tool with a 'name' argument is its arguments."""
    greet = Tool(name="greet", parameters={"type": "object", "properties": {"name": {}}})
    prepared = prepared_for(SpecificTool("greet"), tools=(greet, SEARCH))
    assert calls(run(reply('{"name": "Bob"}'), prepared)) == [("greet", '{"name":"Bob"}')]


# The checks (§4.5).
def test_none_with_a_call_is_an_error() -> None:
    """Case 32."""
    prepared = prepared_for("none", caps=FULL)
    error = failure(reply(ToolCall(id="c", name="search", arguments="{}")), prepared)
    assert error.reason == "tool_choice_none"
    assert "tool_choice was 'none' but the model called 'search'" in error.message
    assert 'CapabilityOverride(tool_choice={"auto", "required", "specific"})' in error.message


def test_named_tool_but_another_called() -> None:
    """Case 33."""
    prepared = prepared_for(SpecificTool("search"), caps=FULL)
    error = failure(reply(ToolCall(id="c", name="get_weather", arguments="{}")), prepared)
    assert error.reason == "wrong_tool" and error.tool_name == "get_weather"
    assert "named the tool 'search' but the model called 'get_weather' instead" in error.message


def test_named_tool_but_no_call() -> None:
    error = failure(reply("just text"), prepared_for(SpecificTool("search"), caps=FULL))
    assert error.reason == "no_tool_call"
    assert error.feedback == "You must call the tool 'search'."


def test_required_but_only_text_names_the_capability_fix() -> None:
    """Cases 34/35: the fix is a working per-call and per-model override."""
    error = failure(reply("no tools for you"), prepared_for(caps=OPENAI))
    assert error.reason == "no_tool_call"
    assert "tool_choice was 'required' but the model made no tool call" in error.message
    assert (
        'ToolOptions(capabilities=CapabilityOverride(tool_choice={"auto", "none", "specific"}))'
        in error.message
    )
    assert '"providers": {"ollama": {"models": {"llama3.1"' in error.message
    assert isinstance(error, FatalError) and error.provider == "ollama"


def test_required_but_no_call_when_emulation_is_off_names_that_fix() -> None:
    error = failure(reply("text"), prepared_for(emulate=False))
    assert "ToolOptions(emulate=True)" in error.message


def test_unknown_tool_is_caught_with_auto_too() -> None:
    """Case 36 (ours: upstream skips every check for auto; unknown names are always caught)."""
    prepared = prepared_for("auto", caps=FULL)
    error = failure(reply(ToolCall(id="c", name="foo", arguments="{}")), prepared)
    assert error.reason == "unknown_tool"


def test_unknown_tool_lists_the_tools_in_declaration_order() -> None:
    """Case 37 (ours: declaration order, so the text is deterministic)."""
    error = failure(reply(ToolCall(id="c", name="foo", arguments="{}")), prepared_for(caps=FULL))
    assert error.reason == "unknown_tool" and error.tool_name == "foo"
    assert "the model called 'foo', which is not one of the request's tools " in error.message
    assert "(get_weather, search)" in error.message
    assert error.available_tools == ("get_weather", "search")
    assert error.generated == '{"name":"foo","arguments":"{}"}'


def test_unknown_tool_when_the_request_had_no_tools() -> None:
    prepared = prepared_for(None, caps=FULL, tools=())
    error = failure(reply(ToolCall(id="c", name="foo", arguments="{}")), prepared)
    assert error.reason == "unknown_tool"


def test_two_calls_with_parallel_off() -> None:
    """Case 38: an error by default, only the first kept with keep_first_call."""
    two = reply(
        ToolCall(id="c1", name="search", arguments='{"query":"a"}'),
        ToolCall(id="c2", name="get_weather", arguments="{}"),
    )
    error = failure(two, prepared_for(caps=FULL))
    assert error.reason == "too_many_calls"
    assert "parallel_tool_calls=True" in error.message
    assert "keep_first_call=True" in error.message
    out = run(two, prepared_for(caps=FULL, keep_first_call=True))
    assert [c.id for c in out.message.tool_calls] == ["c1"]


def test_two_calls_allowed_when_parallel_is_on() -> None:
    two = reply(
        ToolCall(id="c1", name="search", arguments='{"query":"a"}'),
        ToolCall(id="c2", name="get_weather", arguments="{}"),
    )
    assert len(run(two, prepared_for(caps=FULL, parallel=True)).message.tool_calls) == 2
    assert len(run(two, prepared_for("auto", caps=FULL)).message.tool_calls) == 2


def test_missing_required_argument_is_an_error() -> None:
    error = failure(reply(ToolCall(id="c", name="search", arguments="{}")), prepared_for(caps=FULL))
    assert error.reason == "missing_arguments" and error.tool_name == "search"
    assert "'query'" in error.feedback


# Repair of native calls (§9.2, case 55).
@pytest.mark.parametrize(
    ("arguments", "fixed"),
    [
        ('{"query": "a",}', '{"query":"a"}'),
        ('"{\\"query\\": \\"bee\\"}"', '{"query":"bee"}'),
        ("{'query': 'x'}", '{"query":"x"}'),
        ('{"query": "a"', '{"query":"a"}'),
        ('```json\n{"query": "a"}\n```', '{"query":"a"}'),
    ],
)
def test_broken_arguments_are_repaired(arguments: str, fixed: str) -> None:
    """Case 55 and 56."""
    out = run(reply(ToolCall(id="c", name="search", arguments=arguments)), prepared_for(caps=FULL))
    assert calls(out) == [("search", fixed)]


def test_empty_arguments_mean_an_empty_object() -> None:
    """Case 55 (ours: upstream turns '' into '""' and fails)."""
    out = run(reply(ToolCall(id="c", name="get_weather", arguments="")), prepared_for(caps=FULL))
    assert calls(out) == [("get_weather", "{}")]


def test_valid_arguments_keep_their_text() -> None:
    call = ToolCall(id="c", name="search", arguments='{"query": "a", "limit": 3}')
    output = reply("Let me look.", call)
    assert run(output, prepared_for(caps=FULL)) is output


@pytest.mark.parametrize("arguments", ["hello", "[1, 2]", "42"])
def test_arguments_that_cannot_be_an_object_are_an_error(arguments: str) -> None:
    """Case 55: 'hello' fails; ours also fails lists and scalars."""
    error = failure(
        reply(ToolCall(id="c", name="search", arguments=arguments)), prepared_for(caps=FULL)
    )
    assert error.reason == "malformed_arguments" and error.tool_name == "search"
    assert "The arguments of your call to 'search' must be one JSON object" in error.feedback


def test_missing_and_repeated_ids_are_replaced() -> None:
    """Case 55: a missing id becomes call_ and 8 characters; ours also fixes repeated ids."""
    output = reply(
        ToolCall(id="", name="search", arguments='{"query":"a"}'),
        ToolCall(id="same", name="search", arguments='{"query":"b"}'),
        ToolCall(id="same", name="search", arguments='{"query":"c"}'),
    )
    out = run(output, prepared_for("auto", caps=FULL))
    ids = [c.id for c in out.message.tool_calls]
    assert CALL_ID.match(ids[0]) and ids[1] == "same" and CALL_ID.match(ids[2])
    assert len(set(ids)) == 3


def test_repair_off_still_checks_the_arguments() -> None:
    prepared = prepared_for("auto", caps=FULL, repair=False)
    error = failure(reply(ToolCall(id="c", name="search", arguments='{"query": 1,}')), prepared)
    assert error.reason == "malformed_arguments"
    out = run(reply(ToolCall(id="", name="get_weather", arguments="")), prepared)
    assert out.message.tool_calls[0].id == ""


def test_arguments_cut_off_by_max_tokens_are_truncated() -> None:
    output = reply(ToolCall(id="c", name="search", arguments='{"query": "be'), finish="length")
    assert failure(output, prepared_for(caps=FULL)).reason == "truncated"


def test_malformed_call_dropped_by_keep_first_does_not_fail() -> None:
    output = reply(
        ToolCall(id="c1", name="search", arguments='{"query":"a"}'),
        ToolCall(id="c2", name="search", arguments="nonsense"),
    )
    out = run(output, prepared_for(caps=FULL, keep_first_call=True))
    assert calls(out) == [("search", '{"query":"a"}')]


# Empty replies (§10.2 BUG, case 26).
def test_empty_reply_is_a_correctable_error() -> None:
    """Case 26 (ours: retried with a nudge; upstream fails at once)."""
    for output in (reply(), reply("   ")):
        error = failure(output, prepared_for("auto", caps=FULL))
        assert error.reason == "empty_reply" and error.correctable
    assert failure(reply(), prepared_for(None, caps=FULL, tools=())).reason == "empty_reply"


def test_empty_reply_cut_off_or_filtered_passes_unless_a_call_was_required() -> None:
    output = reply(finish="length")
    assert run(output, prepared_for("auto", caps=FULL)) is output
    assert run(reply(finish="content_filter"), prepared_for(caps=FULL)).message.content == ()
    assert failure(output, prepared_for(caps=FULL)).reason == "truncated"


def test_plain_text_reply_without_tools_is_returned_unchanged() -> None:
    output = reply("Hello!")
    assert run(output, prepared_for(None, caps=FULL, tools=())) is output


def test_output_is_a_new_value_with_the_other_fields_kept() -> None:
    output = attrs.evolve(
        reply('{"name":"search","parameters":{"query":"x"}}'),
        response_id="r1",
        raw_finish_reason="stop",
    )
    out = run(output, prepared_for())
    assert out.response_id == "r1" and out.raw_finish_reason == "stop"
    assert output.message.text  # the input is untouched


def test_ids_come_from_the_given_random_source() -> None:
    output = reply('{"name":"search","parameters":{"query":"x"}}')
    prepared = prepared_for()
    first = finalize(output, prepared, rng=random.Random(1)).message.tool_calls[0].id
    again = finalize(output, prepared, rng=random.Random(1)).message.tool_calls[0].id
    assert first == again
    assert CALL_ID.match(finalize(output, prepared).message.tool_calls[0].id)
