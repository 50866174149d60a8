"""The parts of a conversation a plain text chat never builds: images, files, tool calls and
their results, tools, a named tool choice and a structured-output format.

:mod:`sluice._conversation` serves them (PEP 562), and :mod:`sluice._messages` re-exports them
as before; they load with the first one built or asked for: a request that holds one, a reply
with a tool call, a codec's encoder meeting a part that is not text. Code on every call's path
tests for text first and names these only past that test.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs
import orjson

from ._record import Value

__all__ = [
    "FilePart",
    "ImagePart",
    "ResponseFormat",
    "SpecificTool",
    "Tool",
    "ToolCall",
    "ToolResultPart",
]


@attrs.frozen(eq=False, kw_only=True, repr=False)
class ImagePart(Value):
    """An image, by URL (``https:`` or a ``data:`` URL)."""

    url: str
    media_type: str | None = None
    detail: Literal["auto", "low", "high"] | None = None
    type: Literal["image"] = "image"
    cache_control: Mapping[str, Any] | None = None
    """See :attr:`~sluice._conversation.TextPart.cache_control`."""


@attrs.frozen(eq=False, kw_only=True, repr=False)
class FilePart(Value):
    """A document: base64 ``data`` with its media type, or a provider file id in ``file_id``."""

    data: str | None = None
    media_type: str | None = None
    name: str | None = None
    file_id: str | None = None
    type: Literal["file"] = "file"
    cache_control: Mapping[str, Any] | None = None
    """See :attr:`~sluice._conversation.TextPart.cache_control`."""


@attrs.frozen(eq=False, kw_only=True, repr=False)
class ToolCall(Value):
    """A tool call the model made. ``arguments`` is the JSON text as the model produced it."""

    id: str
    name: str
    arguments: str = "{}"
    type: Literal["tool_call"] = "tool_call"
    signature: str | None = None
    """An opaque provider signature to echo back with this call (Gemini's ``thoughtSignature``)."""
    cache_control: Mapping[str, Any] | None = None
    """See :attr:`~sluice._conversation.TextPart.cache_control`."""

    def parsed_arguments(self) -> Any:
        """The arguments as a JSON value; empty text means ``{}``.

        Raises:
            ValueError: the text is not JSON (the tool layer repairs that before it gets here).
        """
        if not self.arguments.strip():
            return {}
        return orjson.loads(self.arguments)


@attrs.frozen(eq=False, kw_only=True, repr=False)
class ToolResultPart(Value):
    """The result of a tool call, sent back to the model in a ``tool`` message."""

    tool_call_id: str
    content: str
    is_error: bool = False
    name: str | None = None
    type: Literal["tool_result"] = "tool_result"
    cache_control: Mapping[str, Any] | None = None
    """See :attr:`~sluice._conversation.TextPart.cache_control`."""


@attrs.frozen(eq=False, kw_only=True, repr=False)
class Tool(Value):
    """A function the model may call. ``parameters`` is a JSON schema for its arguments."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}
    )
    strict: bool | None = None
    cache_control: Mapping[str, Any] | None = None
    """A prompt-cache marker on this tool definition (see
    :attr:`~sluice._conversation.TextPart.cache_control`)."""


@attrs.frozen(eq=False, repr=False)
class SpecificTool(Value):
    """``tool_choice`` that forces one named tool."""

    name: str


@attrs.frozen(eq=False, kw_only=True, repr=False)
class ResponseFormat(Value):
    """Structured output: ``json_object``, or ``json_schema`` with a schema."""

    type: Literal["text", "json_object", "json_schema"] = "json_schema"
    schema: Mapping[str, Any] | None = None
    name: str = "response"
    strict: bool | None = None
