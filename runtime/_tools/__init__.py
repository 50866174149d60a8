"""The tool-calling layer: pure functions the actors call around each attempt.

* :func:`prepare` (at submit) decides how a request's tools reach a backend with given
  :class:`ToolCapabilities`: as they are, downgraded, or forced through structured output.
* :func:`finalize` (at the end of each attempt) turns the reply back into tool calls, repairs
  them and checks them against the request, raising :class:`~sluice._errors.ToolCallError`.
* :class:`Corrections` (in the Supervisor) builds the temporary messages of a correction retry.

Nothing here does I/O or touches trio.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .capabilities import ALL_MODES as ALL_MODES
    from .capabilities import ANTHROPIC as ANTHROPIC
    from .capabilities import FULL as FULL
    from .capabilities import GEMINI as GEMINI
    from .capabilities import OLLAMA as OLLAMA
    from .capabilities import OPENAI as OPENAI
    from .capabilities import OPENAI_COMPATIBLE_CUSTOM as OPENAI_COMPATIBLE_CUSTOM
    from .capabilities import CapabilityOverride as CapabilityOverride
    from .capabilities import ToolCapabilities as ToolCapabilities
    from .capabilities import ToolOptions as ToolOptions
    from .capabilities import capabilities_for as capabilities_for
    from .correct import Corrections as Corrections
    from .correct import TemporaryMessage as TemporaryMessage
    from .correct import correction_messages as correction_messages
    from .correct import is_temporary as is_temporary
    from .correct import strip_temporary as strip_temporary
    from .finalization import finalize as finalize
    from .preparation import ForcePlan as ForcePlan
    from .preparation import Prepared as Prepared
    from .preparation import prepare as prepare
    from .repair import PartialJson as PartialJson
    from .repair import Repaired as Repaired
    from .repair import RepairError as RepairError
    from .repair import parse_partial as parse_partial
    from .repair import repair_arguments as repair_arguments
    from .repair import repair_json as repair_json
    from .schema import ToolSchemaError as ToolSchemaError
    from .schema import inline_refs as inline_refs
    from .schema import strict_schema as strict_schema
    from .schema import tool_union_schema as tool_union_schema
    from .streaming import StreamingArguments as StreamingArguments

__all__ = [
    "ALL_MODES",
    "ANTHROPIC",
    "FULL",
    "GEMINI",
    "OLLAMA",
    "OPENAI",
    "OPENAI_COMPATIBLE_CUSTOM",
    "CapabilityOverride",
    "Corrections",
    "ForcePlan",
    "PartialJson",
    "Prepared",
    "RepairError",
    "Repaired",
    "StreamingArguments",
    "TemporaryMessage",
    "ToolCapabilities",
    "ToolOptions",
    "ToolSchemaError",
    "capabilities_for",
    "correction_messages",
    "finalize",
    "inline_refs",
    "is_temporary",
    "parse_partial",
    "prepare",
    "repair_arguments",
    "repair_json",
    "strict_schema",
    "strip_temporary",
    "tool_union_schema",
]

# Each name is imported from its module on first use, so `import sluice` does not load this
# package's heavier modules (schemas, repair, storage) until a call needs them.
_HOMES = {
    "ALL_MODES": "capabilities",
    "ANTHROPIC": "capabilities",
    "FULL": "capabilities",
    "GEMINI": "capabilities",
    "OLLAMA": "capabilities",
    "OPENAI": "capabilities",
    "OPENAI_COMPATIBLE_CUSTOM": "capabilities",
    "CapabilityOverride": "capabilities",
    "ToolCapabilities": "capabilities",
    "ToolOptions": "capabilities",
    "ToolSchemaError": "schema",
    "capabilities_for": "capabilities",
    "Corrections": "correct",
    "TemporaryMessage": "correct",
    "correction_messages": "correct",
    "is_temporary": "correct",
    "strip_temporary": "correct",
    "finalize": "finalization",
    "ForcePlan": "preparation",
    "Prepared": "preparation",
    "prepare": "preparation",
    "PartialJson": "repair",
    "Repaired": "repair",
    "RepairError": "repair",
    "parse_partial": "repair",
    "repair_arguments": "repair",
    "repair_json": "repair",
    "inline_refs": "schema",
    "strict_schema": "schema",
    "tool_union_schema": "schema",
    "StreamingArguments": "streaming",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
