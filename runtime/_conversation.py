"""The pieces of a conversation: content parts, messages, tools, the output format asked for.

Frozen attrs classes, like the rest of the data model (:mod:`sluice._messages`, which takes
them whole into a ``ChatRequest`` and re-exports them). They are the bottom of the model: the
OpenAI parsers (:mod:`sluice._openai_parse`) build them and ``ChatRequest`` builds on both.

Text, reasoning and messages are defined here. The parts a plain text chat never builds
(images, files, tool calls and results, tools, a named tool choice, a response format) are in
:mod:`sluice._conversation_rare`, which this module serves (PEP 562) with the ``ContentPart``
and ``ToolChoice`` unions that name them; once loaded they are names of this module, so
annotations that name them resolve (``typing.get_type_hints``, cattrs). Code on every call's
path tests for text first and asks this module for the others only past that test
(``_conversation.ToolCall``), which loads them with the first one met.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import attrs

from ._record import Value, late_names

if TYPE_CHECKING:  # each served below (PEP 562)
    from ._conversation_rare import FilePart as FilePart
    from ._conversation_rare import ImagePart as ImagePart
    from ._conversation_rare import ResponseFormat as ResponseFormat
    from ._conversation_rare import SpecificTool as SpecificTool
    from ._conversation_rare import Tool as Tool
    from ._conversation_rare import ToolCall as ToolCall
    from ._conversation_rare import ToolResultPart as ToolResultPart

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
class ReasoningPart(Value):
    """Reasoning text the model showed; ``signature`` is echoed back where a provider needs it."""

    text: str
    signature: str | None = None
    type: Literal["reasoning"] = "reasoning"


if TYPE_CHECKING:
    ContentPart: TypeAlias = (
        TextPart | ImagePart | FilePart | ToolCall | ToolResultPart | ReasoningPart
    )
    ToolChoice: TypeAlias = Literal["auto", "required", "none"] | SpecificTool

LATER_NAMES = frozenset(
    {
        "ContentPart",
        "FilePart",
        "ImagePart",
        "ResponseFormat",
        "SpecificTool",
        "Tool",
        "ToolCall",
        "ToolChoice",
        "ToolResultPart",
    }
)
"""The names served from :mod:`sluice._conversation_rare` on first use (and bound here then);
:mod:`sluice._messages` serves the same ones."""


def __getattr__(name: str) -> Any:
    if name in LATER_NAMES:
        from . import _conversation_rare as rare

        names = {n: getattr(rare, n) for n in rare.__all__}
        names["ContentPart"] = (
            TextPart
            | rare.ImagePart
            | rare.FilePart
            | rare.ToolCall
            | rare.ToolResultPart
            | ReasoningPart
        )
        names["ToolChoice"] = Literal["auto", "required", "none"] | rare.SpecificTool
        globals().update(names)
        return names[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _parts(content: str | Iterable[ContentPart]) -> tuple[ContentPart, ...]:
    if isinstance(content, str):
        return (TextPart(content),)
    return tuple(content)


@late_names("ContentPart")
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
        from ._conversation_rare import ToolResultPart

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
        for p in self.content:
            if type(p) is not TextPart and type(p) is not ReasoningPart:
                break
        else:
            return ()  # text and reasoning only (a plain reply): no need to load ToolCall
        from ._conversation_rare import ToolCall

        return tuple(p for p in self.content if isinstance(p, ToolCall))


@late_names("ContentPart")
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
