"""The pieces of a conversation: content parts, messages, tools, the output format asked for.

Frozen attrs classes, like the rest of the data model (:mod:`sluice._messages`, which takes
them whole into a ``ChatRequest`` and re-exports them). They are the bottom of the model: the
OpenAI parsers (:mod:`sluice._openai_parse`) build them and ``ChatRequest`` builds on both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeAlias

import attrs
import orjson

from ._record import Value

__all__ = [
    "ContentPart",
    "FilePart",
    "ImagePart",
    "Message",
    "ReasoningPart",
    "ResponseFormat",
    "Role",
    "SpecificTool",
    "TemporaryMessage",
    "TextPart",
    "Tool",
    "ToolCall",
    "ToolChoice",
    "ToolResultPart",
    "is_temporary",
    "strip_temporary",
]

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]


@attrs.frozen(eq=False, repr=False)
class TextPart(Value):
    text: str
    type: Literal["text"] = "text"
    signature: str | None = attrs.field(default=None, kw_only=True)
    """An opaque provider signature to echo back with this part (Gemini's ``thoughtSignature``)."""
    cache_control: Mapping[str, Any] | None = attrs.field(default=None, kw_only=True)
    """A prompt-cache marker on this block, as the client wrote it (Anthropic's
    ``{"type": "ephemeral"}``, with a ``ttl`` or not): the Anthropic protocol sends it on this
    very block; protocols that cache prompts on their own (OpenAI) leave it out."""


@attrs.frozen(eq=False, kw_only=True, repr=False)
class ImagePart(Value):
    """An image, by URL (``https:`` or a ``data:`` URL)."""

    url: str
    media_type: str | None = None
    detail: Literal["auto", "low", "high"] | None = None
    type: Literal["image"] = "image"
    cache_control: Mapping[str, Any] | None = None
    """See :attr:`TextPart.cache_control`."""


@attrs.frozen(eq=False, kw_only=True, repr=False)
class FilePart(Value):
    """A document: base64 ``data`` with its media type, or a provider file id in ``file_id``."""

    data: str | None = None
    media_type: str | None = None
    name: str | None = None
    file_id: str | None = None
    type: Literal["file"] = "file"
    cache_control: Mapping[str, Any] | None = None
    """See :attr:`TextPart.cache_control`."""


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
    """See :attr:`TextPart.cache_control`."""

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
    """See :attr:`TextPart.cache_control`."""


@attrs.frozen(eq=False, kw_only=True, repr=False)
class ReasoningPart(Value):
    """Reasoning text the model showed; ``signature`` is echoed back where a provider needs it."""

    text: str
    signature: str | None = None
    type: Literal["reasoning"] = "reasoning"


ContentPart: TypeAlias = TextPart | ImagePart | FilePart | ToolCall | ToolResultPart | ReasoningPart


def _parts(content: str | Iterable[ContentPart]) -> tuple[ContentPart, ...]:
    if isinstance(content, str):
        return (TextPart(content),)
    return tuple(content)


@attrs.frozen(eq=False, repr=False)
class Message(Value):
    """One chat message: a role and its content parts.

    Build them with :meth:`system`, :meth:`user`, :meth:`assistant` and :meth:`tool`.
    """

    role: Role
    content: tuple[ContentPart, ...] = attrs.field(converter=_parts)

    @classmethod
    def system(cls, content: str | Iterable[ContentPart]) -> Message:
        return cls("system", _parts(content))

    @classmethod
    def user(cls, content: str | Iterable[ContentPart]) -> Message:
        return cls("user", _parts(content))

    @classmethod
    def assistant(cls, content: str | Iterable[ContentPart] = ()) -> Message:
        return cls("assistant", _parts(content))

    @classmethod
    def tool(cls, tool_call_id: str, content: str, *, is_error: bool = False) -> Message:
        return cls(
            "tool", (ToolResultPart(tool_call_id=tool_call_id, content=content, is_error=is_error),)
        )

    @property
    def text(self) -> str:
        """The text parts joined together."""
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    @property
    def reasoning(self) -> str:
        return "".join(p.text for p in self.content if isinstance(p, ReasoningPart))

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(p for p in self.content if isinstance(p, ToolCall))


@attrs.frozen(eq=False, repr=False)
class TemporaryMessage(Message):
    """A message added for one correction retry; it never belongs to the caller's history.

    It is a :class:`~sluice._messages.Message` in every other way, so codecs send it as usual.
    It never equals a plain ``Message`` with the same content.
    """


def is_temporary(message: Message) -> bool:
    return isinstance(message, TemporaryMessage)


def strip_temporary(messages: Iterable[Message]) -> tuple[Message, ...]:
    """``messages`` without the temporary ones, in the same order."""
    return tuple(m for m in messages if not isinstance(m, TemporaryMessage))


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
    """A prompt-cache marker on this tool definition (see :attr:`TextPart.cache_control`)."""


@attrs.frozen(eq=False, repr=False)
class SpecificTool(Value):
    """``tool_choice`` that forces one named tool."""

    name: str


ToolChoice: TypeAlias = Literal["auto", "required", "none"] | SpecificTool


@attrs.frozen(eq=False, kw_only=True, repr=False)
class ResponseFormat(Value):
    """Structured output: ``json_object``, or ``json_schema`` with a schema."""

    type: Literal["text", "json_object", "json_schema"] = "json_schema"
    schema: Mapping[str, Any] | None = None
    name: str = "response"
    strict: bool | None = None
