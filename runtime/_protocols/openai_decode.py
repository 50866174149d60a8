"""Replies of the OpenAI chat-completions protocol: streamed chunks, whole bodies, error payloads.

What the decoders accept beyond OpenAI's own replies, for the servers that copy the protocol:

* reasoning text in ``reasoning_content`` (DeepSeek, xAI, Moonshot, vLLM) or ``reasoning``
  (OpenRouter); a chunk carrying both holds the same text twice, so ``reasoning_content`` wins
  and ``reasoning`` is read only when it is absent or empty;
* a tool call cut into fragments merged by ``index``, or sent whole in one chunk; an ``id`` or
  ``name`` repeated on later fragments is reported once; a fragment without ``index`` joins the
  call with its ``id``, or else the latest call; a call that never got an ``id`` is given
  ``call_<index>``, and arguments that never came are ``"{}"``;
* usage on a last chunk with empty ``choices`` (OpenAI, xAI), on the finish chunk (DeepSeek) or
  on a chunk after it (OpenRouter); ``usage: null`` is ignored and the last usage wins;
* a ``refusal`` is the model's answer in words, so it is kept as text;
* a choice's ``logprobs`` go out with the chunk's :class:`TextDelta` and, their lists joined,
  with the output; ``system_fingerprint`` and ``service_tier`` are read from the first chunk
  and from the chunks that carry the finish reason or usage (the last non-null wins).

Only the choice with index 0 is read. Payloads that break the protocol raise
:class:`~sluice._errors.ProtocolError`; an ``error`` object raises the :class:`CallError` that
:func:`~sluice._protocols.http_errors.error_for_status` picks for it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import orjson

from .. import _conversation
from .. import _events as events
from .._errors import CallError, ProtocolError
from .._events import TextDelta, UsageReported, text_delta
from .._messages import FinishReason, Message, ReasoningPart, TextPart, Usage
from .base import AttemptOutput
from .decode_shared import MAX_EVENT_BYTES, MAX_LINE_BYTES
from .decode_shared import count as _count
from .decode_shared import malformed as _malformed
from .sse import SSEDecoder

if TYPE_CHECKING:
    from .._events import DeltaEvent
    from .._messages import ContentPart, ToolCall

__all__ = [
    "OpenAIStreamDecoder",
    "decode_body",
    "error_from_payload",
    "normalize_finish_reason",
    "normalize_usage",
]

_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}


def normalize_finish_reason(raw: str | None, has_tool_calls: bool) -> FinishReason:
    """Our finish reason for the provider's ``raw`` one.

    ``tool_calls`` whenever the message holds tool calls and the model stopped normally
    (``stop`` or no reason at all): some servers say ``stop`` after calling tools.
    """
    if has_tool_calls and (raw is None or raw == "stop"):
        return "tool_calls"
    if raw is None:
        return "other"
    return _FINISH_REASONS.get(raw, "other")


def normalize_usage(raw: object) -> Usage:
    """Our :class:`Usage` for an OpenAI-style ``usage`` object.

    ``input_tokens`` is ``prompt_tokens`` (cached tokens included). ``output_tokens`` is
    ``total_tokens - prompt_tokens`` when the total disagrees with prompt plus completion
    (xAI leaves reasoning out of ``completion_tokens``), else ``completion_tokens``. Cache
    reads come from ``prompt_tokens_details.cached_tokens`` or DeepSeek's
    ``prompt_cache_hit_tokens``; cache writes from ``prompt_tokens_details.cache_write_tokens``.

    Raises:
        ProtocolError: ``raw`` is not an object.
    """
    if type(raw) is not dict:
        from .http_errors import excerpt  # the error paths load it (not a call that succeeds)

        raise ProtocolError(f"usage is not an object: {excerpt(orjson.dumps(raw))}")
    prompt = _count(raw.get("prompt_tokens"))
    output = _count(raw.get("completion_tokens"))
    total = raw.get("total_tokens")
    if type(total) is int and total != prompt + output and total >= prompt:
        output = total - prompt
    details = raw.get("prompt_tokens_details")
    cache_read = cache_write = 0
    if type(details) is dict:
        cache_read = _count(details.get("cached_tokens"))
        cache_write = _count(details.get("cache_write_tokens"))
    if not cache_read:
        cache_read = _count(raw.get("prompt_cache_hit_tokens"))
    details = raw.get("completion_tokens_details")
    reasoning = _count(details.get("reasoning_tokens")) if type(details) is dict else 0
    return Usage(prompt, output, cache_read, cache_write, reasoning)


def error_from_payload(error: object, status: int | None = None) -> CallError:
    """The :class:`CallError` for an ``error`` value found in a reply.

    ``error`` is OpenAI's ``{"message", "type", "code", "param"}`` object or a bare string. The
    error type is ``code`` when it is a non-empty string, else ``type``. With ``status`` None,
    a numeric ``code`` or ``status`` between 400 and 599 inside the object is used instead.
    """
    from .http_errors import error_for_status

    message, error_type, inner_status = error_fields(error)
    return error_for_status(
        status if status is not None else inner_status, message, error_type=error_type
    )


def error_fields(error: object) -> tuple[str, str | None, int | None]:
    """``(message, error_type, status)`` of an ``error``, as :func:`error_from_payload` reads it."""
    if isinstance(error, str):
        return error or "the provider reported an error without a message", None, None
    from .http_errors import excerpt

    if type(error) is not dict:
        return excerpt(orjson.dumps(error)), None, None
    message = error.get("message")
    if not isinstance(message, str) or not message:
        message = excerpt(orjson.dumps(error))
    error_type: str | None = None
    for key in ("code", "type"):
        value = error.get(key)
        if isinstance(value, str) and value:
            error_type = value
            break
    status: int | None = None
    for key in ("code", "status"):
        value = error.get(key)
        if type(value) is int and 400 <= value <= 599:
            status = value
            break
    return message, error_type, status


class _ToolCallState:
    __slots__ = ("arguments", "id", "name")

    def __init__(self, call_id: str | None, name: str | None) -> None:
        self.id = call_id
        self.name = name
        self.arguments: list[str] = []


def _tool_calls(calls: dict[int, _ToolCallState]) -> list[ToolCall]:
    if not calls:
        return []  # a reply without tool calls does not load ToolCall
    tool_call = _conversation.ToolCall
    return [
        tool_call(
            id=calls[i].id or f"call_{i}",
            name=calls[i].name or "",
            arguments="".join(calls[i].arguments) or "{}",
        )
        for i in sorted(calls)
    ]


def _message(reasoning: str, text: str, calls: list[ToolCall]) -> Message:
    parts: list[ContentPart] = []
    if reasoning:
        parts.append(ReasoningPart(text=reasoning))
    if text:
        parts.append(TextPart(text))
    parts.extend(calls)
    return Message("assistant", tuple(parts))


class OpenAIStreamDecoder:
    """Decodes one streamed chat-completions reply into delta events (a :class:`StreamDecoder`).

    Each :meth:`feed` returns the deltas completed by that piece of the body: a
    :class:`TextDelta`, :class:`ReasoningDelta` or :class:`ToolCallDelta` per non-empty
    fragment, and a :class:`UsageReported` whenever the reported usage changes. After
    ``data: [DONE]`` every later byte is ignored.
    """

    __slots__ = (
        "_call_id",
        "_calls",
        "_chunks",
        "_done",
        "_finish_reason",
        "_logprobs",
        "_meta",
        "_reasoning",
        "_response_id",
        "_sse",
        "_text",
        "_usage",
    )

    def __init__(
        self, call_id: str, *, max_line: int = MAX_LINE_BYTES, max_event: int = MAX_EVENT_BYTES
    ) -> None:
        self._call_id = call_id
        self._sse = SSEDecoder(max_line=max_line, max_event=max_event)
        self._chunks = 0
        self._done = False
        self._text: list[str] = []
        self._reasoning: list[str] | None = None
        """Made at the first piece of reasoning: most replies have none."""
        self._calls: dict[int, _ToolCallState] = {}
        self._finish_reason: str | None = None
        self._usage: Usage | None = None
        self._response_id: str | None = None
        self._logprobs: dict[str, Any] | None = None
        self._meta: dict[str, str] = {}
        """``system_fingerprint`` and ``service_tier``, when the provider sent them."""

    @property
    def chunks_seen(self) -> int:
        """JSON chunks decoded so far; comments, empty events and ``[DONE]`` do not count."""
        return self._chunks

    def feed(self, data: bytes) -> list[DeltaEvent]:
        """Decode the next piece of the body, cut anywhere; see the class docstring.

        Raises:
            CallError: the stream carried an ``error`` object.
            ProtocolError: a data payload is not a JSON chunk of this protocol.
        """
        return self._feed(data, True)

    def feed_quiet(self, data: bytes) -> bool:
        """:meth:`feed` for a reader that sees no deltas (a quiet call): whether ``feed`` would
        have returned any event. A piece of text is only kept for the result (no event is
        made for it); :attr:`output_chars` and :attr:`usage_seen` tell what the deltas would.

        Raises:
            CallError: as :meth:`feed`.
        """
        texts = len(self._text)
        return bool(self._feed(data, False)) or len(self._text) != texts

    @property
    def output_chars(self) -> int:
        """Characters of output the deltas returned so far carried: text, reasoning, tool call
        names and arguments (the text of an unclosed last event read by :meth:`finish`
        included once it ran)."""
        chars = sum(map(len, self._text)) + sum(map(len, self._reasoning or ()))
        for state in self._calls.values():
            chars += len(state.name or "") + sum(map(len, state.arguments))
        return chars

    @property
    def usage_seen(self) -> Usage | None:
        """The usage the reply reported last, None before any."""
        return self._usage

    def _feed(self, data: bytes, deltas: bool) -> list[DeltaEvent]:
        out: list[DeltaEvent] = []
        if self._done:
            return out
        chunk = self._chunk
        texts = self._text
        loads = orjson.loads
        for payload in self._sse.feed_payloads(data):
            if not payload:
                continue
            if payload[0] != 0x7B:  # 0x7B: "{"
                if payload.startswith(b"[DONE]"):
                    self._done = True
                    break
                chunk(payload, out, deltas)  # not JSON: _chunk raises
                continue
            # Most chunks of a reply carry one piece of text and nothing else: read here, in
            # the loop, what _chunk would read of them; any other chunk is read whole by _read.
            try:
                parsed = loads(payload)
            except orjson.JSONDecodeError:
                raise _malformed("a stream event is not JSON", payload) from None
            if type(parsed) is dict and self._response_id is not None:
                choices = parsed.get("choices")
                if type(choices) is list and len(choices) == 1:
                    choice = choices[0]
                    delta = choice.get("delta") if type(choice) is dict else None
                    if type(delta) is dict and len(delta) == 1:
                        text = delta.get("content")
                        logprobs = choice.get("logprobs")
                        if (
                            text
                            and type(text) is str
                            and not logprobs
                            and not parsed.get("error")
                            and not choice.get("finish_reason")
                            and not parsed.get("usage")
                            and choice.get("index", 0) == 0
                        ):
                            self._chunks += 1
                            texts.append(text)
                            if deltas:
                                out.append(text_delta(self._call_id, text, logprobs))
                            continue
            self._read(parsed, payload, out, deltas)
        return out

    def finish(self) -> AttemptOutput:
        """The body ended: the assembled assistant message, finish reason and usage.

        An event the body ended without closing is still read; if it is cut short, it is
        dropped. Its deltas are not delivered, but its content is part of the result.

        Raises:
            StreamBroken: the body ended with neither ``[DONE]`` nor a finish reason.
            CallError: that unclosed last event was an ``error`` object.
        """
        if not self._done:
            self._read_tail()
        if not self._done and self._finish_reason is None:
            from .._errors import StreamBroken  # loaded by a stream cut short

            raise StreamBroken(
                f"the stream ended after {self._chunks} chunks without a finish reason or [DONE]",
                events_delivered=self._chunks,
            )
        calls = _tool_calls(self._calls)
        return AttemptOutput(
            message=_message("".join(self._reasoning or ()), "".join(self._text), calls),
            finish_reason=normalize_finish_reason(self._finish_reason, bool(calls)),
            raw_finish_reason=self._finish_reason,
            usage=self._usage,
            response_id=self._response_id,
            logprobs=self._logprobs,
            system_fingerprint=self._meta.get("system_fingerprint"),
            service_tier=self._meta.get("service_tier"),
        )

    def _read_tail(self) -> None:
        ignored: list[DeltaEvent] = []
        for event in self._sse.end():
            if event.data.startswith(b"[DONE]"):
                self._done = True
                return
            if event.data:
                try:
                    self._chunk(event.data, ignored)
                except ProtocolError:
                    return  # the body was cut inside this event

    def _chunk(self, payload: bytes, out: list[DeltaEvent], deltas: bool = True) -> None:
        """Read one JSON chunk into the reply; its events go to ``out``, except that without
        ``deltas`` a chunk of nothing but text adds no event (only its text to the reply)."""
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise _malformed("a stream event is not JSON", payload) from None
        self._read(chunk, payload, out, deltas)

    def _read(self, chunk: object, payload: bytes, out: list[DeltaEvent], deltas: bool) -> None:
        """:meth:`_chunk` of a payload parsed as ``chunk``."""
        if type(chunk) is not dict:
            raise _malformed("a stream event is not a JSON object", payload)
        self._chunks += 1
        error = chunk.get("error")
        if error:
            raise error_from_payload(error)
        if self._response_id is None:
            _read_meta(chunk, self._meta)
            response_id = chunk.get("id")
            if isinstance(response_id, str) and response_id:
                self._response_id = response_id
        choices = chunk.get("choices")
        if choices:
            if type(choices) is not list:
                raise _malformed("choices is not a list", payload)
            for choice in choices:
                if type(choice) is not dict:
                    raise _malformed("a choice is not an object", payload)
                if choice.get("index", 0) != 0:
                    continue
                delta = choice.get("delta")
                logprobs = choice.get("logprobs")
                if logprobs:
                    logprobs = self._join_logprobs(logprobs, payload)
                if delta:
                    if type(delta) is not dict:
                        raise _malformed("a delta is not an object", payload)
                    text = delta.get("content")
                    # Most chunks carry nothing but a piece of text: skip the other lookups.
                    if text and len(delta) == 1 and type(text) is str:
                        self._text.append(text)
                        if deltas:
                            out.append(text_delta(self._call_id, text, logprobs))
                    else:
                        self._delta(delta, payload, out, logprobs)
                reason = choice.get("finish_reason")
                if reason:
                    if type(reason) is not str:
                        raise _malformed("finish_reason is not a string", payload)
                    self._finish_reason = reason
                    _read_meta(chunk, self._meta)
        usage = chunk.get("usage")
        if usage:
            _read_meta(chunk, self._meta)
            normalized = normalize_usage(usage)
            if normalized != self._usage:
                self._usage = normalized
                out.append(UsageReported(self._call_id, normalized))

    def _join_logprobs(self, logprobs: object, payload: bytes) -> dict[str, Any]:
        """Add a chunk's ``logprobs`` to the reply's (each list extends the one before)."""
        if type(logprobs) is not dict:
            raise _malformed("logprobs is not an object", payload)
        joined = self._logprobs
        if joined is None:
            joined = self._logprobs = {}
        for key, value in logprobs.items():
            current = joined.get(key)
            if type(value) is list:
                if type(current) is list:
                    current.extend(value)
                else:
                    joined[key] = list(value)  # a copy of our own, extended in place
            elif current is None:
                joined[key] = value
        return logprobs

    def _delta(
        self,
        delta: dict[str, Any],
        payload: bytes,
        out: list[DeltaEvent],
        logprobs: dict[str, Any] | None = None,
    ) -> None:
        """Read a delta with more than text in it: reasoning, text, refusal and tool calls."""
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            if type(reasoning) is not str:
                raise _malformed("reasoning is not a string", payload)
            if self._reasoning is None:
                self._reasoning = [reasoning]
            else:
                self._reasoning.append(reasoning)
            out.append(events.ReasoningDelta(self._call_id, reasoning))  # (its class loads then)
        for key in ("content", "refusal"):
            text = delta.get(key)
            if text:
                if type(text) is not str:
                    raise _malformed(f"{key} is not a string", payload)
                self._text.append(text)
                out.append(TextDelta(self._call_id, text, logprobs))
                logprobs = None  # once per chunk
        calls = delta.get("tool_calls")
        if calls:
            if type(calls) is not list:
                raise _malformed("tool_calls is not a list", payload)
            for call in calls:
                self._tool_fragment(call, payload, out)

    def _tool_fragment(self, call: object, payload: bytes, out: list[DeltaEvent]) -> None:
        if type(call) is not dict:
            raise _malformed("a tool call is not an object", payload)
        function = call.get("function") or {}
        if type(function) is not dict:
            raise _malformed("a tool call's function is not an object", payload)
        call_id = call.get("id") or None
        name = function.get("name") or None
        if not (call_id is None or type(call_id) is str) or not (name is None or type(name) is str):
            raise _malformed("a tool call's id or name is not a string", payload)
        arguments = function.get("arguments") or ""
        if type(arguments) is not str:
            # A few servers send the arguments as a JSON value instead of its text.
            arguments = orjson.dumps(arguments).decode()
        index = call.get("index")
        if type(index) is not int:
            index = self._index_for(call_id)
        state = self._calls.get(index)
        if state is None:
            self._calls[index] = state = _ToolCallState(call_id, name)
        else:
            if call_id is not None and state.id is None:
                state.id = call_id
            else:
                call_id = None
            if name is not None and state.name is None:
                state.name = name
            else:
                name = None
        if arguments:
            state.arguments.append(arguments)
        if call_id or name or arguments:
            out.append(events.ToolCallDelta(self._call_id, index, call_id, name, arguments))

    def _index_for(self, call_id: str | None) -> int:
        """The index of a fragment that came without one: its call's, or the latest call's."""
        if call_id is not None:
            for index, state in self._calls.items():
                if state.id == call_id:
                    return index
            return max(self._calls, default=-1) + 1
        return max(self._calls, default=0)


def decode_body(body: bytes) -> AttemptOutput:
    """Decode a whole non-streamed ``chat.completion`` body.

    Raises:
        CallError: the body is an ``error`` object.
        ProtocolError: the body is not a chat completion.
    """
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise _malformed("the reply body is not JSON", body) from None
    if type(reply) is not dict:
        raise _malformed("the reply body is not a JSON object", body)
    error = reply.get("error")
    if error:
        raise error_from_payload(error)
    choices = reply.get("choices")
    if type(choices) is not list or not choices or type(choices[0]) is not dict:
        raise _malformed("the reply has no choices", body)
    choice = next((c for c in choices if type(c) is dict and c.get("index", 0) == 0), choices[0])
    message = choice.get("message")
    if type(message) is not dict:
        raise _malformed("the reply's choice has no message", body)
    reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
    content = message.get("content") or ""
    refusal = message.get("refusal") or ""
    reason = choice.get("finish_reason")
    if not (
        type(reasoning) is str
        and type(content) is str
        and type(refusal) is str
        and (reason is None or type(reason) is str)
    ):
        raise _malformed("the reply's message has fields of the wrong type", body)
    calls = _body_tool_calls(message.get("tool_calls"), body)
    usage = reply.get("usage")
    response_id = reply.get("id")
    logprobs = choice.get("logprobs")
    meta: dict[str, str] = {}
    _read_meta(reply, meta)
    return AttemptOutput(
        message=_message(reasoning, content + refusal, calls),
        finish_reason=normalize_finish_reason(reason or None, bool(calls)),
        raw_finish_reason=reason or None,
        usage=normalize_usage(usage) if usage else None,
        response_id=response_id if isinstance(response_id, str) and response_id else None,
        logprobs=logprobs if type(logprobs) is dict else None,
        system_fingerprint=meta.get("system_fingerprint"),
        service_tier=meta.get("service_tier"),
    )


def _read_meta(reply: dict[str, Any], meta: dict[str, str]) -> None:
    """Note the reply-level fields sluice passes on (``system_fingerprint``, ``service_tier``)."""
    for key in ("system_fingerprint", "service_tier"):
        value = reply.get(key)
        if isinstance(value, str) and value:
            # One string for every reply that names the same fingerprint or tier, not a copy
            # held by each open stream.
            meta[key] = sys.intern(value)


def _body_tool_calls(raw: object, body: bytes) -> list[ToolCall]:
    if not raw:
        return []
    if type(raw) is not list:
        raise _malformed("tool_calls is not a list", body)
    calls: dict[int, _ToolCallState] = {}
    for position, call in enumerate(raw):
        function = call.get("function") if type(call) is dict else None
        if type(call) is not dict or type(function) is not dict:
            raise _malformed("a tool call is not an object with a function", body)
        call_id = call.get("id")
        name = function.get("name")
        arguments = function.get("arguments") or ""
        if type(arguments) is not str:
            arguments = orjson.dumps(arguments).decode()
        state = _ToolCallState(
            call_id if isinstance(call_id, str) else None, name if isinstance(name, str) else None
        )
        state.arguments.append(arguments)
        calls[position] = state
    return _tool_calls(calls)
