"""What a provider (or one of its models) can do with tools, and the per-call tool options.

A :class:`ToolCapabilities` value describes a backend; :func:`capabilities_for` gives the known
defaults for a provider, and :meth:`ToolCapabilities.merged` applies overrides in order
(provider default, then the model's entry in the config, then the call's
:attr:`ToolOptions.capabilities`). Every class here is frozen and can be loaded with
:mod:`sluice._serde` (sets load from JSON lists).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal, TypeAlias, get_args

import attrs
from attrs.validators import ge

from ._record import Value

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._conversation import ToolChoice

__all__ = [
    "ALL_MODES",
    "ANTHROPIC",
    "FULL",
    "GEMINI",
    "OLLAMA",
    "OPENAI",
    "OPENAI_COMPATIBLE_CUSTOM",
    "WITHOUT_TOOLS",
    "CapabilityOverride",
    "StructuredOutput",
    "ToolCapabilities",
    "ToolChoiceMode",
    "ToolOptions",
    "capabilities_for",
    "choice_mode",
    "override_hint",
]

ToolChoiceMode: TypeAlias = Literal["auto", "required", "none", "specific"]
"""``specific`` is a :class:`~sluice._messages.SpecificTool` choice (one named tool)."""
StructuredOutput: TypeAlias = Literal["json_schema", "json_object", "none"]

ALL_MODES: Final[frozenset[ToolChoiceMode]] = frozenset(get_args(ToolChoiceMode))
_MODE_ORDER: Final = ("auto", "required", "none", "specific")


def _modes(value: Iterable[str]) -> frozenset[ToolChoiceMode]:
    if isinstance(value, str):
        raise TypeError(f"tool_choice modes must be a set of names, not the string {value!r}")
    modes = frozenset(value)
    unknown = sorted(m for m in modes if m not in ALL_MODES)
    if unknown:
        raise ValueError(
            f"unknown tool_choice mode(s) {', '.join(map(repr, unknown))}; "
            f"known modes are {', '.join(map(repr, _MODE_ORDER))}"
        )
    return modes  # type: ignore[return-value]


def _optional_modes(value: Iterable[str] | None) -> frozenset[ToolChoiceMode] | None:
    return None if value is None else _modes(value)


def choice_mode(choice: ToolChoice) -> ToolChoiceMode:
    """The mode a ``tool_choice`` value uses (``specific`` for a named tool)."""
    # A named tool is the one choice that is not a plain string (a SpecificTool): testing for
    # the string keeps this module free of the chat model, which imports it.
    return choice if isinstance(choice, str) else "specific"


@attrs.frozen(eq=False, kw_only=True, repr=False)
class ToolCapabilities(Value):
    """What a backend does with tools. The defaults describe a backend that can do everything."""

    native_tools: bool = True
    """Tools can be sent as tool definitions and come back as tool calls. When false, tools are
    never sent; a forced call goes through structured output or the prompt instead."""
    tool_choice: frozenset[ToolChoiceMode] = attrs.field(default=ALL_MODES, converter=_modes)
    """The ``tool_choice`` modes the backend honours. Others are downgraded or emulated."""
    parallel_calls: bool = True
    """The backend accepts ``parallel_tool_calls`` (and so can be held to one call per reply)."""
    structured_output: StructuredOutput = "json_schema"
    """How the backend constrains a reply to JSON: a JSON schema (Ollama's ``format`` counts),
    any JSON object, or not at all."""
    top_level_unions: bool = True
    """A structured-output schema may have ``anyOf`` or an array at its root; when false the
    tool union is wrapped in an object with one property, ``item``."""
    strict_schema: bool = False
    """Send the tool-union schema in strict form with ``strict: true`` (OpenAI's strict
    structured outputs). Off by default: strict mode rejects some schema keywords."""

    def supports(self, choice: ToolChoice) -> bool:
        """Whether ``choice`` can be sent natively as it is."""
        return self.native_tools and choice_mode(choice) in self.tool_choice

    def merged(self, *overrides: CapabilityOverride | None) -> ToolCapabilities:
        """A copy with every field that an override sets replaced; later overrides win."""
        result = self
        for override in overrides:
            if override is None:
                continue
            changes = {
                a.name: getattr(override, a.name)
                for a in attrs.fields(CapabilityOverride)
                if getattr(override, a.name) is not None
            }
            if changes:
                result = attrs.evolve(result, **changes)
        return result


@attrs.frozen(eq=False, kw_only=True, repr=False)
class CapabilityOverride(Value):
    """Changes to a :class:`ToolCapabilities`: every field left None keeps the value it had.

    ``tool_choice`` accepts any iterable of mode names, so a set literal is fine::

        CapabilityOverride(tool_choice={"auto", "none", "specific"})
    """

    native_tools: bool | None = None
    tool_choice: frozenset[ToolChoiceMode] | None = attrs.field(
        default=None, converter=_optional_modes
    )
    parallel_calls: bool | None = None
    structured_output: StructuredOutput | None = None
    top_level_unions: bool | None = None
    strict_schema: bool | None = None


FULL: Final = ToolCapabilities()
"""Everything supported, top-level unions included."""
OPENAI: Final = ToolCapabilities(top_level_unions=False)
"""OpenAI's API: every mode; a structured-output schema needs an object at its root."""
OPENAI_COMPATIBLE_CUSTOM: Final = ToolCapabilities(top_level_unions=False)
"""An OpenAI-compatible server at a custom base URL (vLLM, llama.cpp, a hosted compatible API):
assumed to honour every ``tool_choice`` mode natively, as the protocol defines them, so what the
caller asked for is sent as it is. One that rejects a mode is told so in the config, for the
provider (``providers.NAME.tools``) or one model (``providers.NAME.models.MODEL.tools``), and
sluice then emulates that mode."""
ANTHROPIC: Final = ToolCapabilities(structured_output="none", top_level_unions=False)
"""Anthropic's Messages API: every mode natively; no structured output is assumed."""
GEMINI: Final = ToolCapabilities(top_level_unions=False)
"""Gemini: every mode (AUTO, ANY, NONE, allowed function names); object-rooted schemas."""
OLLAMA: Final = ToolCapabilities(tool_choice=frozenset(), parallel_calls=False)
"""Ollama honours no ``tool_choice`` mode and rejects nothing: forced calls go through its
``format`` structured output (a JSON schema)."""
WITHOUT_TOOLS: Final = ToolCapabilities(
    native_tools=False, tool_choice=frozenset(), parallel_calls=False
)
"""A server that ignores ``tools`` and ``tool_choice`` but honours a ``response_format`` schema
(the simulator's ``...notools`` models, and every model of one with ``ignore_tool_choice``)."""

_BY_PROVIDER: Final = {
    "openai": OPENAI,
    "anthropic": ANTHROPIC,
    "gemini": GEMINI,
    "ollama": OLLAMA,
    "sim": FULL,
}


def capabilities_for(provider: str, *, custom_base_url: bool = False) -> ToolCapabilities:
    """The known defaults for ``provider``.

    ``openai`` at a custom base URL, and any provider without an entry, is taken to be an
    OpenAI-compatible server (:data:`OPENAI_COMPATIBLE_CUSTOM`), which honours every mode until
    the config says otherwise.
    """
    if provider == "openai" and custom_base_url:
        return OPENAI_COMPATIBLE_CUSTOM
    return _BY_PROVIDER.get(provider, OPENAI_COMPATIBLE_CUSTOM)


@attrs.frozen(eq=False, kw_only=True, repr=False)
class ToolOptions(Value):
    """How one call's tool calls are prepared, checked and corrected."""

    capabilities: CapabilityOverride | None = None
    """Applied last, over the provider's and the model's capabilities."""
    fallback_tool: str | None = None
    """The tool a forced reply without a tool name is taken to call (a final-answer tool).
    When None and ``tool_choice`` names a tool, that tool is the fallback."""
    allow_parallel: bool = False
    """Whether several calls per reply are allowed when the request leaves
    ``parallel_tool_calls`` unset and forces a tool call."""
    keep_first_call: bool = False
    """Keep only the first call of a reply with several, instead of failing."""
    emulate: bool = True
    """Force a tool call through structured output when the backend cannot force it."""
    instruct: bool = True
    """Tell the model in a system message what the emulated or downgraded choice requires."""
    repair: bool = True
    """Repair broken argument JSON and fill in missing call ids."""
    max_corrections: int = attrs.field(default=2, validator=ge(0))
    """Correction retries after a :class:`~sluice._errors.ToolCallError`, separate from
    transport retries."""


def _set_literal(modes: Iterable[str]) -> str:
    ordered = [m for m in _MODE_ORDER if m in set(modes)]
    return "{" + ", ".join(f'"{m}"' for m in ordered) + "}" if ordered else "set()"


def override_hint(model: str, caps: ToolCapabilities, mode: ToolChoiceMode) -> str:
    """Text naming the override that stops sending ``mode`` to ``model`` natively.

    ``model`` is ``provider:model``. The three forms shown are the per-call option, the
    model's entry and the provider's entry in the JSON config; each is copyable as it is.
    """
    provider, _, name = model.partition(":")
    remaining = [m for m in _MODE_ORDER if m in caps.tool_choice and m != mode]
    as_json = "[" + ", ".join(f'"{m}"' for m in remaining) + "]"
    return (
        f"If {model} does not honour tool_choice mode {mode!r}, say so and sluice will "
        "emulate it (through structured output where the backend has it):\n"
        f"  per call:  ToolOptions(capabilities=CapabilityOverride("
        f"tool_choice={_set_literal(remaining)}))\n"
        f'  per model: {{"providers": {{"{provider}": {{"models": {{"{name}": '
        f'{{"tools": {{"tool_choice": {as_json}}}}}}}}}}}}}\n'
        f'  per provider: {{"providers": {{"{provider}": '
        f'{{"tools": {{"tool_choice": {as_json}}}}}}}}}'
    )
