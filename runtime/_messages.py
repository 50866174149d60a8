"""The data model a user sees: chat requests, results, usage (and, re-exported from
:mod:`sluice._conversation`, the messages, parts and tools a request holds).

Every class is a frozen attrs class, so a value handed to the runtime cannot change under it,
and equality is free for tests. Serialization to and from JSON goes through
:mod:`sluice._serde` (one cattrs converter on orjson); the runtime itself passes these objects
between actors without serializing them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import attrs

from . import _conversation
from ._conversation import (
    Message,
    ReasoningPart,
    Role,
    TemporaryMessage,
    TextPart,
    is_temporary,
    strip_temporary,
)
from ._record import Value, late_names

if TYPE_CHECKING:  # each served below (PEP 562)
    from ._capabilities import ToolOptions as ToolOptions  # noqa: TC004
    from ._conversation import ContentPart as ContentPart
    from ._conversation import FilePart as FilePart
    from ._conversation import ImagePart as ImagePart
    from ._conversation import ResponseFormat as ResponseFormat  # noqa: TC004
    from ._conversation import SpecificTool as SpecificTool
    from ._conversation import Tool as Tool  # noqa: TC004
    from ._conversation import ToolCall as ToolCall
    from ._conversation import ToolChoice as ToolChoice  # noqa: TC004
    from ._conversation import ToolResultPart as ToolResultPart

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
    "as_request",
    "is_temporary",
    "split_model",
    "strip_temporary",
]


def __getattr__(name: str) -> Any:
    # The parts a plain text chat never builds load with the first one asked for (see
    # :mod:`sluice._conversation`) and stay names here, so ChatRequest's annotations resolve.
    if name in _conversation.LATER_NAMES:
        globals().update({n: getattr(_conversation, n) for n in _conversation.LATER_NAMES})
        return globals()[name]
    if name == "ToolOptions":  # and the tool options a plain call leaves unset
        from ._capabilities import ToolOptions

        globals()[name] = ToolOptions
        return ToolOptions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


CacheBreakpoint: TypeAlias = Literal["tools", "system", "last_message"]
"""Where a request asks the provider to cache the prompt up to (see
``ChatRequest.cache_breakpoints``)."""
FinishReason: TypeAlias = Literal["stop", "length", "tool_calls", "content_filter", "other"]


@attrs.frozen(eq=False, kw_only=True, repr=False)
class Deadlines(Value):
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
            from ._openai_parse import parse_message  # only for OpenAI-format dicts

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
        if isinstance(item, _conversation.Tool):
            out.append(item)
        elif isinstance(item, Mapping):
            from ._openai_parse import parse_tool  # only for OpenAI-format dicts

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
    # A class named as text is one of _conversation's loaded on first use, looked up only for
    # a value to check (a request without a response format does not load ResponseFormat).
    checks: tuple[tuple[str, type | tuple[type, ...] | str, str, bool], ...] = (
        ("model", str, "a 'provider:model' string", False),
        ("parallel_tool_calls", bool, "a bool", True),
        ("response_format", "ResponseFormat", "a ResponseFormat", True),
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
        if value is None and optional:
            continue
        if isinstance(expected, str):
            expected = getattr(_conversation, expected)
        if not _is(value, expected):
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


_CHOICES = ("auto", "required", "none")


def _tool_choice(value: str | SpecificTool | None) -> ToolChoice | None:
    if value is None or (type(value) is str and value in _CHOICES):
        return value  # type: ignore[return-value]
    if isinstance(value, _conversation.SpecificTool) or value in _CHOICES:
        return value  # type: ignore[return-value]
    return _conversation.SpecificTool(value)


@late_names("Tool", "ToolOptions")
@attrs.frozen(eq=False, kw_only=True, repr=False)
class ChatRequest(Value):
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
            and self.response_format is None  # else the full check, which loads ResponseFormat
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


@attrs.frozen(eq=False, repr=False)
class Usage(Value):
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


@attrs.frozen(eq=False, kw_only=True, repr=False)
class Timings(Value):
    """Seconds on trio's clock, measured from the moment the call was submitted."""

    queued: float = 0.0
    """Submit until the RateLimiter admitted the winning attempt."""
    time_to_first_token: float | None = None
    """Submit until the winning attempt's first chunk."""
    total: float = 0.0


@attrs.frozen(eq=False, kw_only=True, repr=False)
class ChatResult(Value):
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


def as_request(
    request: ChatRequest | str, messages: str | Iterable[Message] | None, fields: Mapping[str, Any]
) -> ChatRequest:
    """The request that ``chat(request, messages, **fields)`` and ``stream(...)`` mean: a
    :class:`ChatRequest` with ``messages`` and ``fields`` replaced, or one built from a
    ``provider:model`` string. For the doors too, which build it on the caller's side.

    Raises:
        TypeError: a model string came without messages.
    """
    if isinstance(request, ChatRequest):
        changes: dict[str, Any] = dict(fields)
        if messages is not None:
            changes["messages"] = messages
        return attrs.evolve(request, **changes) if changes else request
    if messages is None:
        raise TypeError("give the messages (or a prompt string) after the model")
    return ChatRequest(model=request, messages=messages, **fields)
