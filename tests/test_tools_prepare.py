"""Capabilities and request preparation (spec §3, §4.3, §4.4; cases 30, 31, 39, 77, 79)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from sluice._capabilities import override_hint
from sluice._errors import ConfigError
from sluice._messages import ChatRequest, Message, ResponseFormat, SpecificTool, TextPart, Tool
from sluice._protocols.openai_request import build_body
from sluice._serde import converter
from sluice._tools import (
    ANTHROPIC,
    FULL,
    OLLAMA,
    OPENAI,
    OPENAI_COMPATIBLE_CUSTOM,
    CapabilityOverride,
    ToolCapabilities,
    ToolOptions,
    capabilities_for,
    prepare,
)
from sluice._tools.schema import tool_union_schema

A = Tool(name="a", description="Adds.", parameters={"type": "object", "properties": {}})
B = Tool(name="b", parameters={"type": "object", "properties": {"x": {"type": "integer"}}})
NO_REQUIRED = ToolCapabilities(tool_choice={"none", "specific", "auto"})


def request(choice: Any = None, tools: tuple[Tool, ...] = (A, B), **kw: Any) -> ChatRequest:
    return ChatRequest(model="p:m", messages="hi", tools=tools, tool_choice=choice, **kw)


# Case 30: the decision table of §4.3, one test per row (our "forced" = a ForcePlan).
@pytest.mark.parametrize("choice", ["required", SpecificTool("b")])
def test_all_modes_supported_sends_the_choice_natively(choice: Any) -> None:
    """Case 30, row 1."""
    prepared = prepare(request(choice), FULL)
    assert prepared.plan is None
    assert prepared.request.tool_choice == choice
    assert prepared.request.tools == (A, B)


@pytest.mark.parametrize("choice", ["required", SpecificTool("b")])
def test_no_supported_modes_forces_through_structured_output(choice: Any) -> None:
    """Case 30, row 2 (Ollama)."""
    prepared = prepare(request(choice), OLLAMA)
    assert prepared.plan is not None and prepared.plan.method == "json_schema"
    assert prepared.request.tools == ()
    assert prepared.request.tool_choice is None
    assert prepared.request.response_format is not None
    assert prepared.request.response_format.name == "ToolCall"


def test_required_without_support_is_forced() -> None:
    """Case 30, row 3 (watsonx, OpenAI-compatible at a custom base URL)."""
    prepared = prepare(request("required"), NO_REQUIRED)
    assert prepared.plan is not None
    assert prepared.plan.tools == ("a", "b")


def test_named_tool_with_support_is_sent_natively_without_required() -> None:
    """Case 30, row 4."""
    prepared = prepare(request(SpecificTool("a")), NO_REQUIRED)
    assert prepared.plan is None
    assert prepared.request.tool_choice == SpecificTool("a")


@pytest.mark.parametrize("choice", ["required", SpecificTool("a")])
def test_backend_without_native_tools_is_always_forced(choice: Any) -> None:
    """Case 30, row 5 (model_supports_tool_calling=False)."""
    prepared = prepare(request(choice), attrs.evolve(FULL, native_tools=False))
    assert prepared.plan is not None
    assert prepared.request.tools == ()


@pytest.mark.parametrize("caps", [FULL, OLLAMA, NO_REQUIRED])
@pytest.mark.parametrize("choice", ["auto", "none", None])
def test_unforced_choices_are_never_forced(caps: ToolCapabilities, choice: Any) -> None:
    """Case 30, row 6."""
    assert prepare(request(choice), caps).plan is None


def test_a_request_with_its_own_response_format_is_downgraded_not_forced() -> None:
    """§4.3: a custom response_format disables forcing; ours keeps it and states the rule."""
    fmt = ResponseFormat(schema={"type": "object"})
    prepared = prepare(request("required", response_format=fmt), OLLAMA)
    assert prepared.plan is None
    assert prepared.request.response_format == fmt
    assert prepared.request.tool_choice is None
    assert prepared.request.tools == (A, B)
    assert "You must call one of the available tools" in prepared.request.messages[0].text


def test_emulation_off_downgrades_without_instruction_when_asked() -> None:
    """§2.1 tool_call_fallback_via_response_format=False."""
    prepared = prepare(request("required"), OLLAMA, ToolOptions(emulate=False, instruct=False))
    assert prepared.plan is None
    assert prepared.request.tool_choice is None
    assert prepared.request.messages == (Message.user("hi"),)


def test_named_tool_without_support_but_with_required_sends_only_that_tool() -> None:
    """Ours: a named tool on a backend that honours only 'required' needs no emulation."""
    caps = ToolCapabilities(tool_choice={"auto", "required", "none"})
    prepared = prepare(request(SpecificTool("b")), caps)
    assert prepared.plan is None
    assert prepared.request.tools == (B,)
    assert prepared.request.tool_choice == "required"


# Case 31 (ours): the request is checked at submit; errors are ConfigErrors.
def test_named_tool_must_be_among_the_tools() -> None:
    with pytest.raises(ConfigError, match="'zzz', which is not among the request's tools"):
        prepare(request(SpecificTool("zzz")), FULL)


def test_unknown_choice_string_names_no_tool() -> None:
    """Case 31: "bogus" is read as a tool name by ChatRequest, so it fails the same way."""
    with pytest.raises(ConfigError, match="'bogus'"):
        prepare(request("bogus"), FULL)


def test_required_needs_tools() -> None:
    with pytest.raises(ConfigError, match="needs at least one tool"):
        prepare(request("required", tools=()), FULL)


def test_tool_names_must_be_unique() -> None:
    with pytest.raises(ConfigError, match="repeated: a"):
        prepare(request(tools=(A, A)), FULL)


def test_fallback_tool_must_be_among_the_tools() -> None:
    with pytest.raises(ConfigError, match="fallback_tool 'final'"):
        prepare(request("required"), OLLAMA, ToolOptions(fallback_tool="final"))


def test_choice_without_tools_is_left_out() -> None:
    prepared = prepare(request("auto", tools=(), parallel_tool_calls=True), FULL)
    assert prepared.request.tool_choice is None
    assert prepared.request.parallel_tool_calls is None
    assert prepared.notes


# Case 39: what reaches the wire (built with the OpenAI codec).
def wire(req: ChatRequest, caps: ToolCapabilities, options: ToolOptions | None = None) -> Any:
    return build_body(prepare(req, caps, options).request)


def test_ollama_auto_sends_tools_without_tool_choice() -> None:
    body = wire(request("auto"), OLLAMA)
    assert "tool_choice" not in body
    assert [t["function"]["name"] for t in body["tools"]] == ["a", "b"]


def test_ollama_none_sends_no_tools() -> None:
    body = wire(request("none"), OLLAMA)
    assert "tools" not in body and "tool_choice" not in body


def test_named_tool_on_a_backend_without_required_is_a_function_choice() -> None:
    body = wire(request(SpecificTool("b")), NO_REQUIRED)
    assert body["tool_choice"] == {"type": "function", "function": {"name": "b"}}


def test_openai_required_is_sent_as_required() -> None:
    body = wire(request("required"), OPENAI)
    assert body["tool_choice"] == "required"


@pytest.mark.parametrize("choice", ["required", SpecificTool("b")])
def test_openai_compatible_custom_base_url_sends_forced_choices_natively(choice: Any) -> None:
    """Issue 27 (changed from case 77): a server at a custom base URL speaking the OpenAI
    protocol is taken to honour every mode, so the caller's tools and choice go as they are."""
    caps = capabilities_for("openai", custom_base_url=True)
    body = wire(request(choice), caps, ToolOptions(allow_parallel=True))
    assert [t["function"]["name"] for t in body["tools"]] == ["a", "b"]
    named = {"type": "function", "function": {"name": "b"}}
    assert body["tool_choice"] == ("required" if choice == "required" else named)
    assert "response_format" not in body and "parallel_tool_calls" not in body
    assert body["messages"] == [{"role": "user", "content": "hi"}]


def test_a_server_configured_without_required_forces_it_through_the_union() -> None:
    caps = capabilities_for("openai", custom_base_url=True).merged(
        CapabilityOverride(tool_choice={"auto", "none", "specific"})
    )
    body = wire(request("required"), caps)
    assert "tools" not in body and "tool_choice" not in body
    schema = tool_union_schema([A, B], top_level_union=False)
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "ToolCall", "schema": schema},
    }


def test_forced_choice_sends_parallel_false_when_unspecified() -> None:
    """Case 39 last row, for forced choices (ours: auto and unset choices keep the caller's)."""
    assert wire(request("required"), OPENAI)["parallel_tool_calls"] is False
    # Allowing several calls is the backends' default: said only when the caller said it.
    allowed = ToolOptions(allow_parallel=True)
    assert "parallel_tool_calls" not in wire(request("required"), OPENAI, allowed)
    assert wire(request("required", parallel_tool_calls=True), OPENAI)["parallel_tool_calls"]
    assert "parallel_tool_calls" not in wire(request("auto"), OPENAI)
    assert wire(request("auto", parallel_tool_calls=False), OPENAI)["parallel_tool_calls"] is False


def test_parallel_parameter_is_left_out_where_the_backend_rejects_it() -> None:
    caps = attrs.evolve(FULL, parallel_calls=False)
    prepared = prepare(request("auto", parallel_tool_calls=True), caps)
    assert prepared.request.parallel_tool_calls is None
    assert prepared.parallel is True


def test_keep_first_call_turns_parallel_off() -> None:
    """§3 step 3: the parallel flag is and-ed with not ignore_parallel_tool_calls."""
    prepared = prepare(
        request("required", parallel_tool_calls=True), OLLAMA, ToolOptions(keep_first_call=True)
    )
    assert prepared.parallel is False
    assert prepared.plan is not None and prepared.plan.parallel is False


# Forcing details.
def test_forced_named_tool_union_holds_only_that_tool_which_is_the_fallback() -> None:
    """§3 step 1 and case 60: the forced tool is the fallback tool."""
    prepared = prepare(request(SpecificTool("b")), OLLAMA)
    plan = prepared.plan
    assert plan is not None
    assert plan.tools == ("b",) and plan.fallback_tool == "b"
    assert plan.schema["title"] == "b"


def test_forced_required_uses_the_explicit_fallback_tool() -> None:
    plan = prepare(request("required"), OLLAMA, ToolOptions(fallback_tool="a")).plan
    assert plan is not None and plan.fallback_tool == "a"


def test_forced_schema_follows_the_capabilities() -> None:
    caps = ToolCapabilities(tool_choice=set(), top_level_unions=False, strict_schema=True)
    prepared = prepare(request("required", parallel_tool_calls=True), caps)
    plan = prepared.plan
    assert plan is not None and plan.wrapped and plan.parallel and plan.strict
    assert plan.schema == tool_union_schema(
        [A, B], parallel=True, top_level_union=False, strict=True
    )
    assert prepared.request.response_format is not None
    assert prepared.request.response_format.strict is True


def test_forcing_adds_an_instruction_to_the_leading_system_message() -> None:
    req = ChatRequest(
        model="p:m",
        messages=[Message.system("Be brief."), Message.user("hi")],
        tools=(A, B),
        tool_choice="required",
    )
    messages = prepare(req, OLLAMA).request.messages
    assert len(messages) == 2
    text = messages[0].text
    assert text.startswith("Be brief.\n\nYou must call one of the tools below.")
    assert '{"name": "<tool name>", "parameters": {<the arguments>}}' in text
    assert "- a: Adds." in text and "- b" in text
    assert messages[1] == Message.user("hi")


def test_forcing_without_a_system_message_inserts_one() -> None:
    messages = prepare(request(SpecificTool("a")), OLLAMA).request.messages
    assert messages[0].role == "system"
    assert "You must call the tool 'a'." in messages[0].text
    assert '{"name": "a", "parameters": {<the arguments>}}' in messages[0].text
    assert messages[1:] == (Message.user("hi"),)


def test_json_object_backend_gets_the_schemas_in_the_instruction() -> None:
    caps = ToolCapabilities(tool_choice=set(), structured_output="json_object")
    prepared = prepare(request("required"), caps, ToolOptions(instruct=False))
    assert prepared.plan is not None and prepared.plan.method == "json_object"
    assert prepared.request.response_format == ResponseFormat(type="json_object")
    assert 'parameters (JSON schema): {"type":"object"' in prepared.request.messages[0].text


def test_backend_with_neither_tools_nor_structured_output_is_forced_through_the_prompt() -> None:
    caps = ToolCapabilities(native_tools=False, structured_output="none")
    prepared = prepare(request("required"), caps)
    assert prepared.plan is not None and prepared.plan.method == "prompt"
    assert prepared.request.response_format is None
    assert prepared.request.tools == ()


def test_backend_with_tools_but_no_structured_output_is_downgraded() -> None:
    caps = ToolCapabilities(tool_choice={"auto"}, structured_output="none")
    prepared = prepare(request("required"), caps)
    assert prepared.plan is None
    assert prepared.request.tools == (A, B) and prepared.request.tool_choice is None


def test_system_message_with_other_parts_gets_a_new_text_part() -> None:
    from sluice._messages import ImagePart

    first = Message("system", (TextPart("x"), ImagePart(url="https://e/i.png")))
    req = attrs.evolve(request("required"), messages=(first, Message.user("hi")))
    messages = prepare(req, OLLAMA).request.messages
    assert messages[0].content[:2] == first.content
    assert isinstance(messages[0].content[2], TextPart)


def test_preparation_is_deterministic_and_keeps_the_original() -> None:
    req = request("required")
    one, two = prepare(req, OLLAMA), prepare(req, OLLAMA)
    assert one == two
    assert one.original is req
    assert one.tool_names == ("a", "b")


# Capabilities.
def test_known_defaults() -> None:
    """Case 77, changed by issue 27: OpenAI at a custom base URL is assumed to honour every
    mode (the config says otherwise for a server that does not); OpenAI needs object roots."""
    assert capabilities_for("openai") == OPENAI
    assert capabilities_for("openai", custom_base_url=True) == OPENAI_COMPATIBLE_CUSTOM
    assert OPENAI_COMPATIBLE_CUSTOM.tool_choice == {"auto", "required", "none", "specific"}
    assert not OPENAI.top_level_unions
    assert OLLAMA.tool_choice == frozenset()
    assert OLLAMA.structured_output == "json_schema"
    assert capabilities_for("anthropic") == ANTHROPIC
    assert capabilities_for("some-vllm") == OPENAI_COMPATIBLE_CUSTOM


def test_overrides_apply_in_order_and_leave_the_original_alone() -> None:
    """Case 79 (ours): capabilities are values, an override never changes the one it starts from."""
    per_model = CapabilityOverride(tool_choice=set())
    per_call = CapabilityOverride(tool_choice={"auto"}, strict_schema=True)
    merged = OPENAI.merged(per_model, None, per_call)
    assert merged.tool_choice == {"auto"}
    assert merged.strict_schema and not merged.top_level_unions
    assert OPENAI.tool_choice == frozenset({"auto", "required", "none", "specific"})


def test_per_call_override_in_options_is_applied_by_prepare() -> None:
    options = ToolOptions(capabilities=CapabilityOverride(tool_choice={"auto", "none", "specific"}))
    prepared = prepare(request("required"), OPENAI, options)
    assert prepared.plan is not None
    assert prepared.capabilities.tool_choice == {"auto", "none", "specific"}


def test_override_loads_from_config_json() -> None:
    override = converter.structure(
        {"tool_choice": ["auto", "none"], "parallel_calls": False}, CapabilityOverride
    )
    assert override == CapabilityOverride(tool_choice={"auto", "none"}, parallel_calls=False)


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown tool_choice mode"):
        CapabilityOverride(tool_choice={"sometimes"})
    with pytest.raises(TypeError):
        ToolCapabilities(tool_choice="auto")


def test_override_hint_is_copyable_code() -> None:
    """Cases 34/35: the fix names a working per-call and per-model override; empty is set()."""
    hint = override_hint("ollama:llama3.1", ToolCapabilities(tool_choice={"required"}), "required")
    assert "ToolOptions(capabilities=CapabilityOverride(tool_choice=set()))" in hint
    assert (
        '{"providers": {"ollama": {"models": {"llama3.1": {"tools": {"tool_choice": []}}}}}}'
        in (hint)
    )
    line = next(
        x for x in override_hint("openai:g", OPENAI, "required").splitlines() if "per call" in x
    )
    code = line.split("per call:", 1)[1].strip()
    evaluated = eval(code, {"ToolOptions": ToolOptions, "CapabilityOverride": CapabilityOverride})
    assert OPENAI.merged(evaluated.capabilities).tool_choice == {"auto", "none", "specific"}
