"""What a provider (or one of its models) can do with tools.

A :class:`ToolCapabilities` value describes a backend; :func:`capabilities_for` gives the known
defaults for a provider, and :meth:`ToolCapabilities.merged` applies overrides in order
(provider default, then the model's entry in the config, then the call's
:attr:`~sluice._capabilities.ToolOptions.capabilities`). Every class here is frozen and can be
loaded with :mod:`sluice._serde` (sets load from JSON lists).

The overrides (:class:`~sluice._capabilities.CapabilityOverride`) and the per-call tool options
(:class:`~sluice._capabilities.ToolOptions`) are in :mod:`sluice._capabilities`, which re-exports
everything here: a plain chat builds neither, so every call's path imports this module and not
that one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal, TypeAlias, get_args

import attrs

from ._record import Value

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._capabilities import CapabilityOverride
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
    "StructuredOutput",
    "ToolCapabilities",
    "ToolChoiceMode",
    "capabilities_for",
    "choice_mode",
    "choice_modes",
    "override_hint",
]

ToolChoiceMode: TypeAlias = Literal["auto", "required", "none", "specific"]
"""``specific`` is a :class:`~sluice._messages.SpecificTool` choice (one named tool)."""
StructuredOutput: TypeAlias = Literal["json_schema", "json_object", "none"]

ALL_MODES: Final[frozenset[ToolChoiceMode]] = frozenset(get_args(ToolChoiceMode))
_MODE_ORDER: Final = ("auto", "required", "none", "specific")


def choice_modes(value: Iterable[str]) -> frozenset[ToolChoiceMode]:
    """``value`` as a set of ``tool_choice`` modes.

    Raises:
        TypeError: ``value`` is a string (a set of names is meant).
        ValueError: a name is not a mode.
    """
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
    tool_choice: frozenset[ToolChoiceMode] = attrs.field(default=ALL_MODES, converter=choice_modes)
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
                for a in attrs.fields(type(override))
                if getattr(override, a.name) is not None
            }
            if changes:
                result = attrs.evolve(result, **changes)
        return result


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
