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
    from .._capabilities import CapabilityOverride as CapabilityOverride
    from .._capabilities import ToolOptions as ToolOptions
    from .._tool_capabilities import ALL_MODES as ALL_MODES
    from .._tool_capabilities import ANTHROPIC as ANTHROPIC
    from .._tool_capabilities import FULL as FULL
    from .._tool_capabilities import GEMINI as GEMINI
    from .._tool_capabilities import OLLAMA as OLLAMA
    from .._tool_capabilities import OPENAI as OPENAI
    from .._tool_capabilities import OPENAI_COMPATIBLE_CUSTOM as OPENAI_COMPATIBLE_CUSTOM
    from .._tool_capabilities import ToolCapabilities as ToolCapabilities
    from .._tool_capabilities import capabilities_for as capabilities_for
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
    "ALL_MODES": "sluice._tool_capabilities",
    "ANTHROPIC": "sluice._tool_capabilities",
    "FULL": "sluice._tool_capabilities",
    "GEMINI": "sluice._tool_capabilities",
    "OLLAMA": "sluice._tool_capabilities",
    "OPENAI": "sluice._tool_capabilities",
    "OPENAI_COMPATIBLE_CUSTOM": "sluice._tool_capabilities",
    "CapabilityOverride": "sluice._capabilities",
    "ToolCapabilities": "sluice._tool_capabilities",
    "ToolOptions": "sluice._capabilities",
    "ToolSchemaError": "sluice._tools.schema",
    "capabilities_for": "sluice._tool_capabilities",
    "Corrections": "sluice._tools.correct",
    "TemporaryMessage": "sluice._tools.correct",
    "correction_messages": "sluice._tools.correct",
    "is_temporary": "sluice._tools.correct",
    "strip_temporary": "sluice._tools.correct",
    "finalize": "sluice._tools.finalization",
    "ForcePlan": "sluice._tools.preparation",
    "Prepared": "sluice._tools.preparation",
    "prepare": "sluice._tools.preparation",
    "PartialJson": "sluice._tools.repair",
    "Repaired": "sluice._tools.repair",
    "RepairError": "sluice._tools.repair",
    "parse_partial": "sluice._tools.repair",
    "repair_arguments": "sluice._tools.repair",
    "repair_json": "sluice._tools.repair",
    "inline_refs": "sluice._tools.schema",
    "strict_schema": "sluice._tools.schema",
    "tool_union_schema": "sluice._tools.schema",
    "StreamingArguments": "sluice._tools.streaming",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
