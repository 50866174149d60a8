"""The data model a user sees: chat messages, requests, results, usage.

Every class is a frozen attrs class, so a value handed to the runtime cannot change under it,
and equality is free for tests. Serialization to and from JSON goes through
:mod:`sluice.serde` (one cattrs converter on orjson); the runtime itself passes these objects
between actors without serializing them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeAlias

import attrs
import orjson

from .record import Record

__all__ = [
    "CacheBreakpoint",
    "ChatRequest",
    "ChatResult",
    "ContentPart",
    "Deadlines",
    "FilePart",
    "FinishReason",
    "ImagePart",
    "Message",
    "ReasoningPart",
    "ResponseFormat",
    "SpecificTool",
    "Role",
    "TextPart",
    "Timings",
    "Tool",
    "ToolCall",
    "ToolChoice",
    "ToolResultPart",
    "Usage",
    "split_model",
]

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
CacheBreakpoint: TypeAlias = Literal["tools", "system", "last_message"]
"""Where a request asks the provider to cache the prompt up to (see
``ChatRequest.cache_breakpoints``)."""
FinishReason: TypeAlias = Literal["stop", "length", "tool_calls", "content_filter", "other"]


@attrs.frozen(repr=False)
class TextPart(Record):
    text: str
    type: Literal["text"] = "text"
    signature: str | None = attrs.field(default=None, kw_only=True)
    """An opaque provider signature to echo back with this part (Gemini's ``thoughtSignature``)."""


@attrs.frozen(kw_only=True, repr=False)
class ImagePart(Record):
    """An image, by URL (``https:`` or a ``data:`` URL)."""

    url: str
    media_type: str | None = None
    detail: Literal["auto", "low", "high"] | None = None
    type: Literal["image"] = "image"


@attrs.frozen(kw_only=True, repr=False)
class FilePart(Record):
    """A document: base64 ``data`` with its media type, or a provider file id in ``file_id``."""

    data: str | None = None
    media_type: str | None = None
    name: str | None = None
    file_id: str | None = None
    type: Literal["file"] = "file"


@attrs.frozen(kw_only=True, repr=False)
class ToolCall(Record):
    """A tool call the model made. ``arguments`` is the JSON text as the model produced it."""

    id: str
    name: str
    arguments: str = "{}"
    type: Literal["tool_call"] = "tool_call"
    signature: str | None = None
    """An opaque provider signature to echo back with this call (Gemini's ``thoughtSignature``)."""

    def parsed_arguments(self) -> Any:
        """The arguments as a JSON value; empty text means ``{}``.

        Raises:
            ValueError: the text is not JSON (the tool layer repairs that before it gets here).
        """
        if not self.arguments.strip():
            return {}
        return orjson.loads(self.arguments)


@attrs.frozen(kw_only=True, repr=False)
class ToolResultPart(Record):
    """The result of a tool call, sent back to the model in a ``tool`` message."""

    tool_call_id: str
    content: str
    is_error: bool = False
    name: str | None = None
    type: Literal["tool_result"] = "tool_result"


@attrs.frozen(kw_only=True, repr=False)
class ReasoningPart(Record):
    """Reasoning text the model showed; ``signature`` is echoed back where a provider needs it."""

    text: str
    signature: str | None = None
    type: Literal["reasoning"] = "reasoning"


ContentPart: TypeAlias = TextPart | ImagePart | FilePart | ToolCall | ToolResultPart | ReasoningPart


def _parts(content: str | Iterable[ContentPart]) -> tuple[ContentPart, ...]:
    if isinstance(content, str):
        return (TextPart(content),)
    return tuple(content)


@attrs.frozen(repr=False)
class Message(Record):
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


@attrs.frozen(kw_only=True, repr=False)
class Tool(Record):
    """A function the model may call. ``parameters`` is a JSON schema for its arguments."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}
    )
    strict: bool | None = None


@attrs.frozen(repr=False)
class SpecificTool(Record):
    """``tool_choice`` that forces one named tool."""

    name: str


ToolChoice: TypeAlias = Literal["auto", "required", "none"] | SpecificTool


@attrs.frozen(kw_only=True, repr=False)
class ResponseFormat(Record):
    """Structured output: ``json_object``, or ``json_schema`` with a schema."""

    type: Literal["text", "json_object", "json_schema"] = "json_schema"
    schema: Mapping[str, Any] | None = None
    name: str = "response"
    strict: bool | None = None


@attrs.frozen(kw_only=True, repr=False)
class Deadlines(Record):
    """Per-call time limits in seconds; None means no limit of that kind.

    ``first_token`` and ``idle`` apply to each attempt; ``total`` covers the whole call,
    retries and queueing included.
    """

    total: float | None = None
    first_token: float | None = None
    idle: float | None = None


def split_model(model: str) -> tuple[str, str]:
    """Split ``"provider:model"`` into its two parts.

    Raises:
        ValueError: no provider prefix, or an empty part.
    """
    provider, sep, name = model.partition(":")
    if not sep or not provider or not name:
        raise ValueError(
            f"model {model!r} must be written as 'provider:model', for example 'sim:echo' "
            "or 'openai:gpt-4o-mini'"
        )
    return provider, name


def _type_name(value: object) -> str:
    return "None" if value is None else f"{type(value).__name__} {value!r:.60}"


def _messages(value: str | Iterable[Message | Mapping[str, Any]]) -> tuple[Message, ...]:
    """Messages as given; an OpenAI chat message dict (text, image parts, assistant tool
    calls, tool results) is converted once, here."""
    if isinstance(value, str):
        return (Message.user(value),)
    if isinstance(value, Mapping) or not isinstance(value, Iterable):
        raise TypeError(
            "ChatRequest.messages: expected a string or a list of messages, got "
            + _type_name(value)
        )
    out: list[Message] = []
    for index, item in enumerate(value):
        if isinstance(item, Message):
            out.append(item)
        elif isinstance(item, Mapping):
            from .jobs.openai_format import parse_message  # only for dict input

            out.append(parse_message(item, f"ChatRequest.messages[{index}]"))
        else:
            raise TypeError(
                f"ChatRequest.messages[{index}]: expected a Message or an OpenAI chat message"
                f" dict, got {_type_name(item)}"
            )
    return tuple(out)


def _tools(value: Iterable[Tool | Mapping[str, Any]]) -> tuple[Tool, ...]:
    """Tools as given; an OpenAI-format tool dict is converted once, here."""
    if isinstance(value, str | Mapping) or not isinstance(value, Iterable):
        raise TypeError(f"ChatRequest.tools: expected a list of tools, got {_type_name(value)}")
    out: list[Tool] = []
    for index, item in enumerate(value):
        if isinstance(item, Tool):
            out.append(item)
        elif isinstance(item, Mapping):
            from .jobs.openai_format import parse_tool  # only for dict input

            out.append(parse_tool(item, f"ChatRequest.tools[{index}]"))
        else:
            raise TypeError(
                f"ChatRequest.tools[{index}]: expected a Tool or an OpenAI tool dict"
                f' ({{"type": "function", "function": {{...}}}}), got {_type_name(item)}'
            )
    return tuple(out)


def _strings(value: str | Iterable[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _all_strings(_: Any, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise TypeError(
                f"ChatRequest.{attribute.name}[{index}]: expected a string, got {_type_name(item)}"
            )


def _kind(expected: type | tuple[type, ...], what: str, *, optional: bool = True) -> Any:
    """An attrs validator: the value is of ``expected`` (a bool is not a number), or None."""

    def check(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) and bool not in (
            expected if isinstance(expected, tuple) else (expected,)
        ):
            ok = False
        else:
            ok = isinstance(value, expected)
        if not ok:
            raise TypeError(
                f"ChatRequest.{attribute.name}: expected {what}, got {_type_name(value)}"
            )

    return check


def _one_of(*choices: str) -> Any:
    def check(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value not in choices:
            raise ValueError(
                f"ChatRequest.{attribute.name}: expected one of {', '.join(map(repr, choices))},"
                f" got {_type_name(value)}"
            )

    return check


_NO_BREAKPOINTS: frozenset[CacheBreakpoint] = frozenset()


def _breakpoints(value: bool | Iterable[CacheBreakpoint]) -> frozenset[CacheBreakpoint]:
    if value is True:
        return frozenset(("system", "last_message"))
    if not value:  # the default: nothing to check
        return _NO_BREAKPOINTS
    points = frozenset(value)
    unknown = points - {"tools", "system", "last_message"}
    if unknown:
        raise ValueError(
            f"unknown cache breakpoint(s) {sorted(unknown)}; use 'tools', 'system' and "
            "'last_message'"
        )
    return points


def _tool_choice(value: str | SpecificTool | None) -> ToolChoice | None:
    if value is None or isinstance(value, SpecificTool):
        return value
    if value in ("auto", "required", "none"):
        return value  # type: ignore[return-value]
    return SpecificTool(value)


@attrs.frozen(kw_only=True, repr=False)
class ChatRequest(Record):
    """Everything one chat call needs. ``model`` is ``provider:model``.

    ``messages`` accepts a plain string as one user message; ``tool_choice`` accepts a tool
    name for :class:`SpecificTool`. ``extra_body`` is merged into the provider's request body
    as-is, for parameters sluice does not model.
    """

    model: str = attrs.field(validator=_kind(str, "a 'provider:model' string", optional=False))
    messages: tuple[Message, ...] = attrs.field(converter=_messages)
    """Messages, a string (one user message), or OpenAI chat message dicts."""
    tools: tuple[Tool, ...] = attrs.field(default=(), converter=_tools)
    """:class:`Tool` objects or OpenAI-format tool dicts."""
    tool_choice: ToolChoice | None = attrs.field(default=None, converter=_tool_choice)
    parallel_tool_calls: bool | None = attrs.field(default=None, validator=_kind(bool, "a bool"))
    response_format: ResponseFormat | None = attrs.field(
        default=None, validator=_kind(ResponseFormat, "a ResponseFormat")
    )
    temperature: float | None = attrs.field(default=None, validator=_kind((int, float), "a number"))
    top_p: float | None = attrs.field(default=None, validator=_kind((int, float), "a number"))
    max_tokens: int | None = attrs.field(default=None, validator=_kind(int, "an integer"))
    stop: tuple[str, ...] = attrs.field(default=(), converter=_strings, validator=_all_strings)
    seed: int | None = attrs.field(default=None, validator=_kind(int, "an integer"))
    stream: bool = attrs.field(default=True, validator=_kind(bool, "a bool", optional=False))
    tag: str | None = attrs.field(default=None, validator=_kind(str, "a string"))
    priority: Literal["interactive", "batch", "background"] = attrs.field(
        default="interactive", validator=_one_of("interactive", "batch", "background")
    )
    """Admission order within a quota: interactive before batch before background (with
    ageing, so lower classes still progress)."""
    deadlines: Deadlines = attrs.field(
        default=Deadlines(), validator=_kind(Deadlines, "a Deadlines", optional=False)
    )
    fallbacks: tuple[str, ...] = attrs.field(default=(), converter=_strings, validator=_all_strings)
    """Models (``provider:model``) to try in order when this one fails in a way a fallback can
    help (overloaded, context too long, circuit open, content filtered; see ``RetryConfig``)."""
    on_partial: Literal["restart", "fail"] = attrs.field(
        default="restart", validator=_one_of("restart", "fail")
    )
    """After output was delivered, a failure restarts the request (the consumer gets a
    ``StreamReset``) or fails the call at once."""
    extra_body: Mapping[str, Any] = attrs.field(
        factory=dict, validator=_kind(Mapping, "a mapping", optional=False)
    )
    tool_options: ToolOptions | None = None
    """How this call's tool calls are prepared, checked and corrected (forcing through
    structured output, repair, the correction limit, a capability override for this call);
    None for the defaults. See :class:`sluice.tools.ToolOptions`."""
    response_cache: bool | None = attrs.field(default=None, validator=_kind(bool, "a bool"))
    """Whether this call uses the runtime's response cache: None follows
    ``RuntimeConfig.cache.enabled``; True uses it even when the config leaves it off; False
    neither reads nor stores (a fresh answer every time). See :mod:`sluice.cache`."""
    cache_breakpoints: frozenset[CacheBreakpoint] = attrs.field(
        default=_NO_BREAKPOINTS, converter=_breakpoints
    )
    """Prompt caching: ask the provider to cache the prompt up to these points -- the tool
    definitions (``tools``), the system prompt (``system``), and the last message of the
    request (``last_message``: the whole conversation so far, never a temporary correction
    message). ``True`` means ``{"system", "last_message"}``. Honoured by the Anthropic protocol
    (``cache_control`` blocks); ignored by protocols that cache prompts on their own (OpenAI)
    or not per request (Gemini, Ollama)."""

    @property
    def provider(self) -> str:
        return split_model(self.model)[0]

    @property
    def model_name(self) -> str:
        return split_model(self.model)[1]


@attrs.frozen(repr=False)
class Usage(Record):
    """Token counts, normalized across providers.

    ``input_tokens`` counts every prompt token the provider processed, cached ones included;
    ``output_tokens`` every generated token, reasoning included.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@attrs.frozen(kw_only=True, repr=False)
class Timings(Record):
    """Seconds on trio's clock, measured from the moment the call was submitted."""

    queued: float = 0.0
    """Submit until the RateLimiter admitted the winning attempt."""
    time_to_first_token: float | None = None
    """Submit until the winning attempt's first chunk."""
    total: float = 0.0


@attrs.frozen(kw_only=True, repr=False)
class ChatResult(Record):
    """The finished call: the winning attempt's assistant message, usage and timings."""

    call_id: str
    provider: str
    model: str
    message: Message
    finish_reason: FinishReason
    usage: Usage = Usage()
    attempts: int = 1
    timings: Timings = Timings()
    request_id: str | None = None
    raw_finish_reason: str | None = None
    """The provider's own finish reason, before normalization."""
    models_tried: tuple[str, ...] = ()
    """Every model the call went to, in order (more than one when it fell back); the last one
    gave this result."""
    corrections: int = 0
    """Correction retries the call needed: attempts re-sent with a note to the model about a
    tool-call error in its previous reply (counted in ``attempts`` too)."""
    cached: bool = False
    """The result came from the response cache: nothing was sent, no quota or tokens were
    used (``usage`` is zero and ``attempts`` 0), and ``message`` is the stored reply."""

    @property
    def text(self) -> str:
        return self.message.text

    @property
    def reasoning(self) -> str:
        return self.message.reasoning

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return self.message.tool_calls


# The tool layer imports this module (for SpecificTool and ToolChoice), so ToolOptions is bound
# last, once every name above exists; ChatRequest's annotation resolves through it (cattrs).
from .tools.capabilities import ToolOptions  # noqa: E402
