"""The per-call tool options (:class:`ToolOptions`) and the overrides of what a provider or model
can do with tools (:class:`CapabilityOverride`), in a config or a call.

A plain chat builds neither, so nothing on every call's path imports this module: they load
with the first one built or asked for. What describes a backend (:class:`ToolCapabilities`,
the known defaults, :func:`capabilities_for`) is in :mod:`sluice._tool_capabilities`, which
every call's path imports; this module re-exports it, its old address.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
from attrs.validators import ge

from ._record import Value
from ._tool_capabilities import ALL_MODES as ALL_MODES
from ._tool_capabilities import ANTHROPIC as ANTHROPIC
from ._tool_capabilities import FULL as FULL
from ._tool_capabilities import GEMINI as GEMINI
from ._tool_capabilities import OLLAMA as OLLAMA
from ._tool_capabilities import OPENAI as OPENAI
from ._tool_capabilities import OPENAI_COMPATIBLE_CUSTOM as OPENAI_COMPATIBLE_CUSTOM
from ._tool_capabilities import WITHOUT_TOOLS as WITHOUT_TOOLS
from ._tool_capabilities import StructuredOutput as StructuredOutput
from ._tool_capabilities import ToolCapabilities as ToolCapabilities
from ._tool_capabilities import ToolChoiceMode as ToolChoiceMode
from ._tool_capabilities import choice_modes

if TYPE_CHECKING:
    from collections.abc import Iterable
from ._tool_capabilities import capabilities_for as capabilities_for
from ._tool_capabilities import choice_mode as choice_mode
from ._tool_capabilities import override_hint as override_hint

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


def _optional_modes(value: Iterable[str] | None) -> frozenset[ToolChoiceMode] | None:
    return None if value is None else choice_modes(value)


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
