"""The data model a user sees: chat messages, requests, results, usage.

Every class is a frozen attrs class, so a value handed to the runtime cannot change under it,
and equality is free for tests. Serialization to and from JSON goes through
:mod:`sluice._serde` (one cattrs converter on orjson); the runtime itself passes these objects
between actors without serializing them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeAlias

import attrs
import orjson

from ._capabilities import ToolOptions
from ._errors import ConfigError
from ._record import Record

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
    "Role",
    "SpecificTool",
    "TemporaryMessage",
    "TextPart",
    "Timings",
    "Tool",
    "ToolCall",
    "ToolChoice",
    "ToolResultPart",
    "Usage",
    "is_temporary",
    "split_model",
    "strip_temporary",
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
    cache_control: Mapping[str, Any] | None = attrs.field(default=None, kw_only=True)
    """A prompt-cache marker on this block, as the client wrote it (Anthropic's
    ``{"type": "ephemeral"}``, with a ``ttl`` or not): the Anthropic protocol sends it on this
    very block; protocols that cache prompts on their own (OpenAI) leave it out."""


@attrs.frozen(kw_only=True, repr=False)
class ImagePart(Record):
    """An image, by URL (``https:`` or a ``data:`` URL)."""

    url: str
    media_type: str | None = None
    detail: Literal["auto", "low", "high"] | None = None
    type: Literal["image"] = "image"
    cache_control: Mapping[str, Any] | None = None
    """See :attr:`TextPart.cache_control`."""


@attrs.frozen(kw_only=True, repr=False)
class FilePart(Record):
    """A document: base64 ``data`` with its media type, or a provider file id in ``file_id``."""

    data: str | None = None
    media_type: str | None = None
    name: str | None = None
    file_id: str | None = None
    type: Literal["file"] = "file"
    cache_control: Mapping[str, Any] | None = None
    """See :attr:`TextPart.cache_control`."""


@attrs.frozen(kw_only=True, repr=False)
class ToolCall(Record):
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


@attrs.frozen(kw_only=True, repr=False)
class ToolResultPart(Record):
    """The result of a tool call, sent back to the model in a ``tool`` message."""

    tool_call_id: str
    content: str
    is_error: bool = False
    name: str | None = None
    type: Literal["tool_result"] = "tool_result"
    cache_control: Mapping[str, Any] | None = None
    """See :attr:`TextPart.cache_control`."""


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


@attrs.frozen(repr=False)
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


@attrs.frozen(kw_only=True, repr=False)
class Tool(Record):
    """A function the model may call. ``parameters`` is a JSON schema for its arguments."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}
    )
    strict: bool | None = None
    cache_control: Mapping[str, Any] | None = None
    """A prompt-cache marker on this tool definition (see :attr:`TextPart.cache_control`)."""


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
    if type(value) is list or type(value) is tuple:
        found = tuple(value)
        for message in found:
            if type(message) is not Message:
                break
        else:
            return found  # the common case: nothing to convert
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
            out.append(parse_message(item, f"ChatRequest.messages[{index}]"))
        else:
            raise TypeError(
                f"ChatRequest.messages[{index}]: expected a Message or an OpenAI chat message"
                f" dict, got {_type_name(item)}"
            )
    return tuple(out)


def _tools(value: Iterable[Tool | Mapping[str, Any]]) -> tuple[Tool, ...]:
    """Tools as given; an OpenAI-format tool dict is converted once, here."""
    if value == ():
        return ()  # the default: no tools
    if isinstance(value, str | Mapping) or not isinstance(value, Iterable):
        raise TypeError(f"ChatRequest.tools: expected a list of tools, got {_type_name(value)}")
    out: list[Tool] = []
    for index, item in enumerate(value):
        if isinstance(item, Tool):
            out.append(item)
        elif isinstance(item, Mapping):
            out.append(parse_tool(item, f"ChatRequest.tools[{index}]"))
        else:
            raise TypeError(
                f"ChatRequest.tools[{index}]: expected a Tool or an OpenAI tool dict"
                f' ({{"type": "function", "function": {{...}}}}), got {_type_name(item)}'
            )
    return tuple(out)


def _strings(value: str | Iterable[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


_NUMBER = (int, float)
_PRIORITIES = ("interactive", "batch", "background")
_ON_PARTIAL = ("restart", "fail")
_FAILURE_MODES = (None, "fail_fast", "wait")


def _is(value: Any, expected: type | tuple[type, ...]) -> bool:
    """``isinstance``, except that a bool is only a bool (never a number)."""
    if isinstance(value, bool):
        return expected is bool
    return isinstance(value, expected)


def _check_request(request: ChatRequest) -> None:
    """Raise naming the first field of ``request`` whose value has the wrong type.

    Raises:
        TypeError: a field holds a value of the wrong type.
        ValueError: ``priority`` or ``on_partial`` is not one of its choices.
    """
    checks: tuple[tuple[str, type | tuple[type, ...], str, bool], ...] = (
        ("model", str, "a 'provider:model' string", False),
        ("parallel_tool_calls", bool, "a bool", True),
        ("response_format", ResponseFormat, "a ResponseFormat", True),
        ("temperature", _NUMBER, "a number", True),
        ("top_p", _NUMBER, "a number", True),
        ("max_tokens", int, "an integer", True),
        ("seed", int, "an integer", True),
        ("stream", bool, "a bool", False),
        ("tag", str, "a string", True),
        ("deadlines", Deadlines, "a Deadlines", False),
        ("extra_body", Mapping, "a mapping", False),
        ("extra_headers", Mapping, "a mapping", False),
        ("response_cache", bool, "a bool", True),
        ("retry_visible", bool, "a bool", False),
        ("max_wait", _NUMBER, "a number of seconds", True),
    )
    for name, expected, what, optional in checks:
        value = getattr(request, name)
        if not (value is None and optional) and not _is(value, expected):
            raise TypeError(f"ChatRequest.{name}: expected {what}, got {_type_name(value)}")
    for name in ("stop", "fallbacks"):
        for index, item in enumerate(getattr(request, name)):
            if not isinstance(item, str):
                raise TypeError(
                    f"ChatRequest.{name}[{index}]: expected a string, got {_type_name(item)}"
                )
    for name, choices in (
        ("priority", _PRIORITIES),
        ("on_partial", _ON_PARTIAL),
        ("failure_mode", _FAILURE_MODES),
    ):
        value = getattr(request, name)
        if value not in choices:
            raise ValueError(
                f"ChatRequest.{name}: expected one of {', '.join(map(repr, choices))},"
                f" got {_type_name(value)}"
            )


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

    model: str
    messages: tuple[Message, ...] = attrs.field(converter=_messages)
    """Messages, a string (one user message), or OpenAI chat message dicts."""
    tools: tuple[Tool, ...] = attrs.field(default=(), converter=_tools)
    """:class:`Tool` objects or OpenAI-format tool dicts."""
    tool_choice: ToolChoice | None = attrs.field(default=None, converter=_tool_choice)
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    seed: int | None = None
    stream: bool = True
    tag: str | None = None
    priority: Literal["interactive", "batch", "background"] = "interactive"
    """Admission order within a quota: interactive before batch before background (with
    ageing, so lower classes still progress)."""
    deadlines: Deadlines = Deadlines()
    fallbacks: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    """Models (``provider:model``) to try in order when this one fails in a way a fallback can
    help (overloaded, context too long, circuit open, content filtered; see ``RetryConfig``)."""
    failure_mode: Literal["fail_fast", "wait"] | None = None
    """What an open circuit breaker, a spent retry budget or a cooldown does to this call:
    ``fail_fast`` fails it at once; ``wait`` delays it and retries retriable failures with no
    attempt limit (unless ``RetryConfig.wait_max_attempts`` sets one), so it ends only with a
    result, an error retrying cannot fix, or its deadline (``max_wait`` or the total deadline).
    None: ``wait`` for batch and background priority, ``fail_fast`` for interactive calls."""
    max_wait: float | None = None
    """In ``wait`` mode, seconds after submission past which the call stops waiting and fails
    with the error that kept it waiting (None: only the total deadline limits it)."""
    on_partial: Literal["restart", "fail"] = "restart"
    """After output was delivered, a failure restarts the request (the consumer gets a
    ``StreamReset``) or fails the call at once."""
    retry_visible: bool = True
    """Retry failures the caller could see and retry on its own: a 429, a 5xx, an overload, a
    timeout. False is for a proxy whose client has retry logic of its own (the gateway): such a
    failure ends the call at once, carrying the provider's ``retry_after``, a call made while
    the provider's 429 pause lasts is refused at once with what is left of it, and only a
    connection that failed before any reply byte is tried again, within
    ``RetryConfig.hidden_retry_window`` seconds of submission."""
    extra_body: Mapping[str, Any] = attrs.field(factory=dict)
    extra_headers: Mapping[str, str] = attrs.field(factory=dict)
    """HTTP headers added to this call's provider request (the gateway forwards a client's
    ``anthropic-beta`` here). The provider's configured headers win over these, and the
    headers that carry credentials or frame the request (``authorization``, ``x-api-key``,
    ``content-length``, ...) are never taken from here."""
    tool_options: ToolOptions | None = None
    """How this call's tool calls are prepared, checked and corrected (forcing through
    structured output, repair, the correction limit, a capability override for this call);
    None for the defaults. See :class:`sluice.ToolOptions`."""
    response_cache: bool | None = None
    """Whether this call uses the runtime's response cache: None follows
    ``RuntimeConfig.cache.enabled``; True uses it even when the config leaves it off; False
    neither reads nor stores (a fresh answer every time). See :mod:`sluice._cache`."""
    cache_breakpoints: frozenset[CacheBreakpoint] = attrs.field(
        default=_NO_BREAKPOINTS, converter=_breakpoints
    )
    """Prompt caching: ask the provider to cache the prompt up to these points -- the tool
    definitions (``tools``), the system prompt (``system``), and the last message of the
    request (``last_message``: the whole conversation so far, never a temporary correction
    message). ``True`` means ``{"system", "last_message"}``. Honoured by the Anthropic protocol
    (``cache_control`` blocks); ignored by protocols that cache prompts on their own (OpenAI)
    or not per request (Gemini, Ollama)."""
    affinity_key: str | None = None
    """For a model group with ``affinity = "key"``: calls with the same key go to the same
    deployment while it is usable (a conversation's turns hit one provider's prompt cache)."""

    def __attrs_post_init__(self) -> None:
        # The common case costs a few exact type tests; anything else gets the full check,
        # which accepts subclasses (a numpy float) and names the first wrong field.
        if not (
            type(self.model) is str
            and type(self.stream) is bool
            and (self.temperature is None or type(self.temperature) in _NUMBER)
            and (self.top_p is None or type(self.top_p) in _NUMBER)
            and (self.max_tokens is None or type(self.max_tokens) is int)
            and (self.seed is None or type(self.seed) is int)
            and (self.tag is None or type(self.tag) is str)
            and (self.parallel_tool_calls is None or type(self.parallel_tool_calls) is bool)
            and (self.response_cache is None or type(self.response_cache) is bool)
            and (self.response_format is None or type(self.response_format) is ResponseFormat)
            and self.priority in _PRIORITIES
            and self.on_partial in _ON_PARTIAL
            and type(self.retry_visible) is bool
            and self.failure_mode in _FAILURE_MODES
            and (self.max_wait is None or type(self.max_wait) in _NUMBER)
            and type(self.deadlines) is Deadlines
            and type(self.extra_body) is dict
            and type(self.extra_headers) is dict
            and (not self.stop or all(type(s) is str for s in self.stop))
            and (not self.fallbacks or all(type(f) is str for f in self.fallbacks))
        ):
            _check_request(self)

    @property
    def provider(self) -> str:
        return split_model(self.model)[0]

    @property
    def waits(self) -> bool:
        """Whether this call waits out open breakers and spent retry budgets (see
        ``failure_mode``)."""
        if self.failure_mode is not None:
            return self.failure_mode == "wait"
        return self.priority != "interactive"

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
    stop_sequence: str | None = None
    """The stop sequence that ended the reply, when the provider names it (Anthropic)."""
    logprobs: Mapping[str, Any] | None = None
    """Token log probabilities as the provider returned them (OpenAI's ``choices[0].logprobs``
    object, the pieces of a streamed reply joined), when the request asked for them."""
    system_fingerprint: str | None = None
    """The backend configuration the reply came from, as the provider names it (OpenAI)."""
    service_tier: str | None = None
    """The service tier that served the reply, as the provider names it (OpenAI)."""

    @property
    def text(self) -> str:
        return self.message.text

    @property
    def reasoning(self) -> str:
        return self.message.reasoning

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return self.message.tool_calls


# OpenAI-shaped input: chat messages and tools as the OpenAI API takes them, converted once.


def _fail(path: str, problem: str) -> ConfigError:
    return ConfigError(f"{path}: {problem}")


def _json_type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _expect_str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise _fail(path, f"expected a string, got {_json_type_name(value)}")
    return value


def _expect_dict(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _fail(path, f"expected an object, got {_json_type_name(value)}")
    return value


def _expect_list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(path, f"expected an array, got {_json_type_name(value)}")
    return value


def _number(value: Any, path: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(path, f"expected a number, got {_json_type_name(value)}")
    return float(value)


def _integer(value: Any, path: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(path, f"expected an integer, got {_json_type_name(value)}")
    return value


# ---- request body -> ChatRequest -------------------------------------------------------------


def _text_of(content: Any, path: str) -> str:
    """Content that may only hold text: a string or an array of ``text`` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for i, part in enumerate(_expect_list(content, path)):
        p = _expect_dict(part, f"{path}[{i}]")
        if p.get("type") != "text":
            raise _fail(
                f"{path}[{i}].type", f"only 'text' parts are allowed here, got {p.get('type')!r}"
            )
        texts.append(_expect_str(p.get("text"), f"{path}[{i}].text"))
    return "".join(texts)


def _cache_control(part: Mapping[str, Any], path: str) -> Mapping[str, Any] | None:
    """A part's ``cache_control`` (the marker LiteLLM and OpenRouter accept in this format)."""
    marker = part.get("cache_control")
    return None if marker is None else _expect_dict(marker, f"{path}.cache_control")


def _system_content(content: Any, path: str) -> tuple[TextPart, ...]:
    """A system message's text; one part per text item when an item has ``cache_control``."""
    if isinstance(content, list) and any(
        isinstance(p, dict) and p.get("cache_control") is not None for p in content
    ):
        _text_of(content, path)  # raises naming the first item that is no text part
        return tuple(
            TextPart(p["text"], cache_control=_cache_control(p, f"{path}[{i}]"))
            for i, p in enumerate(content)
        )
    return (TextPart(_text_of(content, path)),)


def _user_part(part: Any, path: str) -> ContentPart:
    p = _expect_dict(part, path)
    kind = p.get("type")
    if kind == "text":
        return TextPart(
            _expect_str(p.get("text"), f"{path}.text"), cache_control=_cache_control(p, path)
        )
    if kind == "image_url":
        image = p.get("image_url")
        if isinstance(image, str):  # some clients send the URL directly
            return ImagePart(url=image)
        img = _expect_dict(image, f"{path}.image_url")
        detail = img.get("detail")
        if detail not in (None, "auto", "low", "high"):
            raise _fail(f"{path}.image_url.detail", "expected 'auto', 'low' or 'high'")
        return ImagePart(
            url=_expect_str(img.get("url"), f"{path}.image_url.url"),
            detail=detail,
            cache_control=_cache_control(p, path),
        )
    if kind == "file":
        f = _expect_dict(p.get("file"), f"{path}.file")
        data, file_id = f.get("file_data"), f.get("file_id")
        if data is None and file_id is None:
            raise _fail(f"{path}.file", "needs 'file_data' or 'file_id'")
        media_type = None
        if isinstance(data, str) and data.startswith("data:") and ";base64," in data:
            header, _, data = data.partition(";base64,")
            media_type = header.removeprefix("data:") or None
        return FilePart(
            data=None if data is None else _expect_str(data, f"{path}.file.file_data"),
            media_type=media_type,
            name=None
            if f.get("filename") is None
            else _expect_str(f["filename"], f"{path}.file.filename"),
            file_id=None if file_id is None else _expect_str(file_id, f"{path}.file.file_id"),
        )
    raise _fail(f"{path}.type", f"unsupported content part type {kind!r}")


def _user_content(content: Any, path: str) -> tuple[ContentPart, ...]:
    if isinstance(content, str):
        return (TextPart(content),)
    return tuple(_user_part(p, f"{path}[{i}]") for i, p in enumerate(_expect_list(content, path)))


def _tool_call(value: Any, path: str) -> ToolCall:
    call = _expect_dict(value, path)
    if call.get("type", "function") != "function":
        raise _fail(
            f"{path}.type", f"only 'function' tool calls are supported, got {call.get('type')!r}"
        )
    fn = _expect_dict(call.get("function"), f"{path}.function")
    arguments = fn.get("arguments", "{}")
    if not isinstance(arguments, str):  # tolerate an already parsed object
        arguments = orjson.dumps(arguments).decode()
    return ToolCall(
        id=_expect_str(call.get("id"), f"{path}.id"),
        name=_expect_str(fn.get("name"), f"{path}.function.name"),
        arguments=arguments,
    )


def _assistant(msg: Mapping[str, Any], path: str) -> Message:
    parts: list[ContentPart] = []
    reasoning = msg.get("reasoning_content")
    if reasoning:
        parts.append(ReasoningPart(text=_expect_str(reasoning, f"{path}.reasoning_content")))
    content = msg.get("content")
    if isinstance(content, list):
        for i, part in enumerate(content):
            p = _expect_dict(part, f"{path}.content[{i}]")
            where = f"{path}.content[{i}]"
            if p.get("type") == "text":
                parts.append(TextPart(_expect_str(p.get("text"), f"{where}.text")))
            elif p.get("type") == "refusal":
                parts.append(TextPart(_expect_str(p.get("refusal"), f"{where}.refusal")))
            else:
                raise _fail(f"{where}.type", f"expected 'text' or 'refusal', got {p.get('type')!r}")
    elif content is not None:
        parts.append(TextPart(_expect_str(content, f"{path}.content")))
    calls = msg.get("tool_calls") or []
    for i, call in enumerate(_expect_list(calls, f"{path}.tool_calls")):
        parts.append(_tool_call(call, f"{path}.tool_calls[{i}]"))
    return Message("assistant", tuple(parts))


def parse_message(value: Any, path: str = "message") -> Message:
    """Read one OpenAI chat message dict.

    ``developer`` is read as ``system``. Unknown keys on a message (``name``) are ignored.

    Raises:
        ConfigError: the role is missing or unknown, or a field has the wrong shape.
    """
    msg = _expect_dict(value, path)
    role = msg.get("role")
    if role in ("system", "developer"):
        return Message("system", _system_content(msg.get("content"), f"{path}.content"))
    if role == "user":
        if "content" not in msg:
            raise _fail(f"{path}.content", "a user message needs content")
        return Message("user", _user_content(msg["content"], f"{path}.content"))
    if role == "assistant":
        return _assistant(msg, path)
    if role == "tool":
        return Message.tool(
            _expect_str(msg.get("tool_call_id"), f"{path}.tool_call_id"),
            _text_of(msg.get("content"), f"{path}.content"),
        )
    raise _fail(
        f"{path}.role",
        f"expected 'system', 'developer', 'user', 'assistant' or 'tool', got {role!r}",
    )


def parse_tool(value: Any, path: str = "tool") -> Tool:
    """Read one OpenAI-format tool (``{"type": "function", "function": {...}}``).

    Raises:
        ConfigError: naming the field whose shape is wrong.
    """
    t = _expect_dict(value, path)
    if t.get("type", "function") != "function":
        raise _fail(f"{path}.type", f"only 'function' tools are supported, got {t.get('type')!r}")
    fn = _expect_dict(t.get("function"), f"{path}.function")
    strict = fn.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise _fail(f"{path}.function.strict", "expected a boolean")
    parameters = fn.get("parameters", {"type": "object", "properties": {}})
    return Tool(
        name=_expect_str(fn.get("name"), f"{path}.function.name"),
        description=_expect_str(fn.get("description", ""), f"{path}.function.description"),
        parameters=_expect_dict(parameters, f"{path}.function.parameters"),
        strict=strict,
        cache_control=_cache_control(t, path),
    )
