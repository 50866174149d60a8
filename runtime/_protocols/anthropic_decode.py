"""Replies of the Anthropic messages protocol: streamed events, whole bodies, error payloads.

A streamed reply is a sequence of SSE events whose JSON ``type`` says what they are:
``message_start`` (response id and first usage), then per content block a
``content_block_start``, its ``content_block_delta`` events and a ``content_block_stop``, then
``message_delta`` (stop reason and the final, cumulative usage) and ``message_stop``. ``ping``
events are keep-alives; an ``error`` event raises the :class:`CallError` its type maps to.

What the decoders guarantee:

* the message holds one part per content block, in block order: ``text`` blocks as
  :class:`TextPart`, ``thinking`` blocks as :class:`ReasoningPart` with their signature,
  ``redacted_thinking`` as a :class:`ReasoningPart` with no text and the encrypted data as its
  signature, ``tool_use`` as :class:`ToolCall`; other block types (server tools, their
  results) are not the model's answer to us and are skipped;
* a tool call's arguments are the ``input_json_delta`` fragments joined, ``"{}"`` when they
  joined to nothing (a tool without parameters sends one empty fragment), or the block's own
  ``input`` when no fragment came; :class:`ToolCallDelta` indexes count tool calls only
  (0, 1, ...), not content blocks;
* a thinking block's signature (``signature_delta``) is reported as a
  :class:`ReasoningSignature` when it comes, and a ``redacted_thinking`` block as one with
  ``redacted`` set, so a stream consumer can send the block back on a later turn;
* usage takes the latest value of every field (``message_delta`` repeats them cumulatively).
  The prompt's count from ``message_start`` is reported just before the first delta of real
  output (in the same batch, so a batch never holds usage alone before output began), and
  the final usage with ``message_delta``; see :func:`normalize_usage` for the mapping;
* ``stop_sequence`` (the stop sequence that ended the reply) is kept as the output's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from .. import _conversation
from .. import _errors as errors
from .. import _events as events
from .._errors import BadRequest, CallError, ProtocolError
from .._events import TextDelta, UsageReported
from .._messages import FinishReason, Message, ReasoningPart, TextPart, Usage
from .base import AttemptOutput
from .decode_shared import MAX_EVENT_BYTES, MAX_LINE_BYTES
from .decode_shared import count as _count
from .decode_shared import malformed as _malformed
from .sse import SSEDecoder

if TYPE_CHECKING:
    from .._events import DeltaEvent
    from .._messages import ContentPart

# The rarer events, errors and parts (reasoning, tool calls, a broken stream) are named through
# their modules where they are made, and the error helpers are imported where an error is in
# hand: a plain text reply then loads none of them (``tests/test_codec_first_use.py``).

__all__ = [
    "AnthropicStreamDecoder",
    "decode_body",
    "error_fields",
    "error_from_reply",
    "normalize_finish_reason",
    "normalize_usage",
]

_FINISH_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}

# Error types whose HTTP status is a plain client error; without a status (inside a stream)
# error_for_status would call them server errors.
_CLIENT_ERRORS = frozenset({"request_too_large", "billing_error"})


def normalize_finish_reason(raw: str | None, has_tool_calls: bool) -> FinishReason:
    """Our finish reason for a ``stop_reason``: ``tool_calls`` whenever the message holds tool
    calls and the model stopped normally (``end_turn``, ``stop_sequence`` or no reason)."""
    if has_tool_calls and raw in (None, "end_turn", "stop_sequence"):
        return "tool_calls"
    if raw is None:
        return "other"
    return _FINISH_REASONS.get(raw, "other")


def normalize_usage(raw: dict[str, Any]) -> Usage:
    """Our :class:`Usage` for an Anthropic ``usage`` object.

    Anthropic counts cached prompt tokens outside ``input_tokens``, so ``input_tokens`` here
    is ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``;
    ``cache_read_tokens`` and ``cache_write_tokens`` are the two cache fields. Thinking tokens
    are part of ``output_tokens`` and not reported apart, so ``reasoning_tokens`` is 0.
    """
    read = _count(raw.get("cache_read_input_tokens"))
    write = _count(raw.get("cache_creation_input_tokens"))
    prompt = _count(raw.get("input_tokens")) + read + write
    return Usage(prompt, _count(raw.get("output_tokens")), read, write, 0)


def error_fields(reply: object) -> tuple[str, str | None, str | None]:
    """``(message, error_type, request_id)`` of an error reply or ``error`` event.

    ``reply`` is ``{"type": "error", "error": {"type", "message"}, "request_id"}``; a reply of
    another shape gives an excerpt of itself as the message.
    """
    error = reply.get("error") if type(reply) is dict else None
    message = error_type = request_id = None
    if type(error) is dict:
        message = error.get("message")
        error_type = error.get("type")
    if type(reply) is dict:
        request_id = reply.get("request_id")
    if not isinstance(message, str) or not message:
        from .http_errors import excerpt

        message = excerpt(orjson.dumps(reply))
    return (
        message,
        error_type if isinstance(error_type, str) and error_type else None,
        request_id if isinstance(request_id, str) and request_id else None,
    )


def error_from_reply(reply: object) -> CallError:
    """The :class:`CallError` for an error that came with a 200 reply: an ``error`` event in a
    stream, or an error body read as a reply. Its status is None."""
    message, error_type, request_id = error_fields(reply)
    if error_type in _CLIENT_ERRORS:
        return BadRequest(message, error_type=error_type, request_id=request_id)
    from .http_errors import error_for_status

    return error_for_status(None, message, error_type=error_type, request_id=request_id)


class _Block:
    """One content block being streamed."""

    __slots__ = ("call_index", "id", "input", "kind", "name", "pieces", "signature")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.pieces: list[str] = []
        self.signature = ""
        self.id: str | None = None
        self.name: str | None = None
        self.call_index = -1
        self.input: object = None


def _parts(blocks: dict[int, _Block]) -> list[ContentPart]:
    parts: list[ContentPart] = []
    for index in sorted(blocks):
        block = blocks[index]
        text = "".join(block.pieces)
        if block.kind == "text":
            if text:
                parts.append(TextPart(text))
        elif block.kind == "thinking":
            if text or block.signature:
                parts.append(ReasoningPart(text=text, signature=block.signature or None))
        elif block.kind == "redacted_thinking":
            parts.append(ReasoningPart(text="", signature=block.signature or None))
        elif block.kind == "tool_use":
            parts.append(
                _conversation.ToolCall(
                    id=block.id or f"call_{block.call_index}",
                    name=block.name or "",
                    arguments=text or "{}",
                )
            )
    return parts


class AnthropicStreamDecoder:
    """Decodes one streamed messages reply into delta events (a :class:`StreamDecoder`).

    Each :meth:`feed` returns a :class:`TextDelta` or :class:`ReasoningDelta` per non-empty
    text or thinking fragment, a :class:`ToolCallDelta` when a ``tool_use`` block starts (id
    and name) and per non-empty argument fragment, and a :class:`UsageReported` with
    ``message_delta``. After ``message_stop`` every later byte is ignored.
    """

    __slots__ = (
        "_blocks",
        "_call_id",
        "_calls",
        "_chunks",
        "_done",
        "_raw_usage",
        "_response_id",
        "_sse",
        "_start_usage",
        "_stop_reason",
        "_stop_sequence",
        "_usage",
    )

    def __init__(
        self, call_id: str, *, max_line: int = MAX_LINE_BYTES, max_event: int = MAX_EVENT_BYTES
    ) -> None:
        self._call_id = call_id
        self._sse = SSEDecoder(max_line=max_line, max_event=max_event)
        self._chunks = 0
        self._done = False
        self._blocks: dict[int, _Block] = {}
        self._calls = 0
        self._stop_reason: str | None = None
        self._stop_sequence: str | None = None
        self._start_usage = False
        """``message_start`` brought usage not yet reported (see the module docstring)."""
        self._raw_usage: dict[str, Any] = {}
        self._usage: Usage | None = None
        self._response_id: str | None = None

    @property
    def chunks_seen(self) -> int:
        """Events decoded so far; ``ping`` events do not count."""
        return self._chunks

    def feed(self, data: bytes) -> list[DeltaEvent]:
        """Decode the next piece of the body, cut anywhere; see the class docstring.

        Raises:
            CallError: the stream carried an ``error`` event.
            ProtocolError: an event is not a JSON object of this protocol.
        """
        out: list[DeltaEvent] = []
        if self._done:
            return out
        for payload in self._sse.feed_payloads(data):
            if payload:
                self._event(payload, out)
                if self._done:
                    break
        if self._start_usage and out:
            self._start_usage = False
            usage = normalize_usage(self._raw_usage)
            if usage != self._usage:
                self._usage = usage
                out.insert(0, UsageReported(self._call_id, usage))
        return out

    def finish(self) -> AttemptOutput:
        """The body ended: the assembled assistant message, finish reason and usage.

        An event the body ended without closing is still read, unless it was cut short.

        Raises:
            StreamBroken: the body ended before ``message_stop`` and without a stop reason.
            CallError: that unclosed last event was an ``error`` event.
        """
        if not self._done:
            ignored: list[DeltaEvent] = []
            for event in self._sse.end():
                if event.data:
                    try:
                        self._event(event.data, ignored)
                    except ProtocolError:
                        break  # the body was cut inside this event
        if not self._done and self._stop_reason is None:
            raise errors.StreamBroken(
                f"the stream ended after {self._chunks} events without message_stop",
                events_delivered=self._chunks,
            )
        parts = _parts(self._blocks)
        has_calls = any(block.kind == "tool_use" for block in self._blocks.values())
        return AttemptOutput(
            message=Message("assistant", tuple(parts)),
            finish_reason=normalize_finish_reason(self._stop_reason, has_calls),
            raw_finish_reason=self._stop_reason,
            usage=normalize_usage(self._raw_usage) if self._raw_usage else None,
            response_id=self._response_id,
            stop_sequence=self._stop_sequence,
        )

    def _event(self, payload: bytes, out: list[DeltaEvent]) -> None:
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise _malformed("a stream event is not JSON", payload) from None
        if type(event) is not dict:
            raise _malformed("a stream event is not a JSON object", payload)
        kind = event.get("type")
        if kind == "ping":
            return
        self._chunks += 1
        if kind == "content_block_delta":
            self._delta(event, payload, out)
        elif kind == "content_block_start":
            self._start(event, payload, out)
        elif kind == "content_block_stop":
            self._stop(event, out)
        elif kind == "message_start":
            message = event.get("message")
            if type(message) is not dict:
                raise _malformed("message_start has no message", payload)
            response_id = message.get("id")
            if isinstance(response_id, str) and response_id:
                self._response_id = response_id
            if self._usage_update(message.get("usage"), payload):
                self._start_usage = True
        elif kind == "message_delta":
            delta = event.get("delta")
            if type(delta) is dict:
                reason = delta.get("stop_reason")
                if isinstance(reason, str) and reason:
                    self._stop_reason = reason
                sequence = delta.get("stop_sequence")
                if isinstance(sequence, str):
                    self._stop_sequence = sequence
            if self._usage_update(event.get("usage"), payload):
                self._start_usage = False  # the final usage supersedes the prompt's
                usage = normalize_usage(self._raw_usage)
                if usage != self._usage:
                    self._usage = usage
                    out.append(UsageReported(self._call_id, usage))
        elif kind == "message_stop":
            self._done = True
        elif kind == "error":
            raise error_from_reply(event)
        # Event types added after this was written are skipped, as the API asks of clients.

    def _usage_update(self, usage: object, payload: bytes) -> bool:
        if usage is None:
            return False
        if type(usage) is not dict:
            raise _malformed("usage is not an object", payload)
        self._raw_usage.update(usage)
        return True

    def _block_at(self, index: object) -> _Block | None:
        """The open block at ``index``; None for no such block or an index that is no int
        (a list or dict would not even be a valid key)."""
        return self._blocks.get(index) if type(index) is int else None

    def _delta(self, event: dict[str, Any], payload: bytes, out: list[DeltaEvent]) -> None:
        delta = event.get("delta")
        if type(delta) is not dict:
            raise _malformed("a content_block_delta has no delta", payload)
        kind = delta.get("type")
        block = self._block_at(event.get("index"))
        if kind == "text_delta":
            text = delta.get("text")
            if text:
                if type(text) is not str:
                    raise _malformed("text is not a string", payload)
                if block is None:
                    block = self._implicit(event, "text", payload)
                block.pieces.append(text)
                out.append(TextDelta(self._call_id, text))
        elif kind == "input_json_delta":
            fragment = delta.get("partial_json")
            if block is None:
                block = self._implicit(event, "tool_use", payload)
                self._open_call(block, out)
            if fragment:
                if type(fragment) is not str:
                    raise _malformed("partial_json is not a string", payload)
                block.pieces.append(fragment)
                if block.kind == "tool_use":
                    out.append(
                        events.ToolCallDelta(self._call_id, block.call_index, None, None, fragment)
                    )
        elif kind == "thinking_delta":
            text = delta.get("thinking")
            if text:
                if type(text) is not str:
                    raise _malformed("thinking is not a string", payload)
                if block is None:
                    block = self._implicit(event, "thinking", payload)
                block.pieces.append(text)
                out.append(events.ReasoningDelta(self._call_id, text))
        elif kind == "signature_delta":
            signature = delta.get("signature")
            if signature and type(signature) is str:
                if block is None:
                    block = self._implicit(event, "thinking", payload)
                block.signature += signature
                out.append(events.ReasoningSignature(self._call_id, signature))
        # Other delta types (citations, ...) carry nothing this message model keeps.

    def _implicit(self, event: dict[str, Any], kind: str, payload: bytes) -> _Block:
        """The block a delta belongs to when its content_block_start never came."""
        index = event.get("index")
        if type(index) is not int:
            raise _malformed("a content block event has no index", payload)
        block = self._blocks[index] = _Block(kind)
        return block

    def _start(self, event: dict[str, Any], payload: bytes, out: list[DeltaEvent]) -> None:
        index = event.get("index")
        content = event.get("content_block")
        if type(index) is not int or type(content) is not dict:
            raise _malformed("a content_block_start has no index or block", payload)
        kind = content.get("type")
        block = self._blocks[index] = _Block(kind if isinstance(kind, str) else "")
        if kind == "text":
            text = content.get("text")
            if text and type(text) is str:
                block.pieces.append(text)
                out.append(TextDelta(self._call_id, text))
        elif kind == "thinking":
            text = content.get("thinking")
            if text and type(text) is str:
                block.pieces.append(text)
                out.append(events.ReasoningDelta(self._call_id, text))
            signature = content.get("signature")
            if signature and type(signature) is str:
                block.signature = signature
                out.append(events.ReasoningSignature(self._call_id, signature))
        elif kind == "redacted_thinking":
            data = content.get("data")
            if data and type(data) is str:
                block.signature = data
                out.append(events.ReasoningSignature(self._call_id, data, redacted=True))
        elif kind == "tool_use":
            call_id, name = content.get("id"), content.get("name")
            block.id = call_id if isinstance(call_id, str) and call_id else None
            block.name = name if isinstance(name, str) and name else None
            block.input = content.get("input")
            self._open_call(block, out)

    def _open_call(self, block: _Block, out: list[DeltaEvent]) -> None:
        block.kind = "tool_use"
        block.call_index = self._calls
        self._calls += 1
        if block.id is None:
            block.id = f"call_{block.call_index}"
        out.append(events.ToolCallDelta(self._call_id, block.call_index, block.id, block.name, ""))

    def _stop(self, event: dict[str, Any], out: list[DeltaEvent]) -> None:
        block = self._block_at(event.get("index"))
        if block is not None and block.kind == "tool_use" and not block.pieces and block.input:
            # Arguments that came whole in content_block_start rather than as fragments.
            arguments = orjson.dumps(block.input).decode()
            block.pieces.append(arguments)
            out.append(events.ToolCallDelta(self._call_id, block.call_index, None, None, arguments))


def decode_body(body: bytes) -> AttemptOutput:
    """Decode a whole non-streamed ``message`` body.

    Raises:
        CallError: the body is an error reply.
        ProtocolError: the body is not a message.
    """
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise _malformed("the reply body is not JSON", body) from None
    if type(reply) is not dict:
        raise _malformed("the reply body is not a JSON object", body)
    if reply.get("type") == "error" or "error" in reply:
        raise error_from_reply(reply)
    content = reply.get("content")
    if type(content) is not list:
        raise _malformed("the reply has no content list", body)
    blocks: dict[int, _Block] = {}
    calls = 0
    for index, item in enumerate(content):
        if type(item) is not dict:
            raise _malformed("a content block is not an object", body)
        kind = item.get("type")
        block = blocks[index] = _Block(kind if isinstance(kind, str) else "")
        text = item.get("text") if kind == "text" else item.get("thinking")
        if isinstance(text, str) and text:
            block.pieces.append(text)
        signature = item.get("signature") if kind == "thinking" else item.get("data")
        if isinstance(signature, str):
            block.signature = signature
        if kind == "tool_use":
            call_id, name = item.get("id"), item.get("name")
            block.id = call_id if isinstance(call_id, str) and call_id else None
            block.name = name if isinstance(name, str) else None
            block.call_index = calls
            calls += 1
            arguments = item.get("input")
            if arguments:
                block.pieces.append(orjson.dumps(arguments).decode())
    reason = reply.get("stop_reason")
    reason = reason if isinstance(reason, str) and reason else None
    sequence = reply.get("stop_sequence")
    usage = reply.get("usage")
    response_id = reply.get("id")
    return AttemptOutput(
        message=Message("assistant", tuple(_parts(blocks))),
        finish_reason=normalize_finish_reason(reason, calls > 0),
        raw_finish_reason=reason,
        usage=normalize_usage(usage) if type(usage) is dict else None,
        response_id=response_id if isinstance(response_id, str) and response_id else None,
        stop_sequence=sequence if isinstance(sequence, str) else None,
    )
