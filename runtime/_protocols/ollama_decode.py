"""Replies of Ollama's native chat API: NDJSON streams, whole bodies, error payloads.

A streamed reply is one JSON object per line. Each carries a piece of ``message.content``
and/or ``message.thinking``; tool calls come whole, in a line of their own; the last line has
``done: true``, ``done_reason`` and the token counts. An ``{"error": "..."}`` line reports a
failure mid-stream.

What the decoders guarantee:

* the message holds the reasoning, then the text, then the tool calls;
* a tool call's ``arguments`` object becomes compact JSON text; its id is the one the server
  gave (newer servers do), else ``call_<n>`` where ``n`` counts the reply's tool calls from 0,
  as the :class:`ToolCallDelta` index does;
* usage is ``prompt_eval_count`` in and ``eval_count`` out, from the ``done`` line (Ollama
  reports no cache or reasoning counts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from .. import _conversation
from .. import _errors as errors
from .. import _events as events
from .._errors import ProtocolError
from .._events import TextDelta, UsageReported
from .._messages import FinishReason, Message, ReasoningPart, TextPart, Usage
from .base import AttemptOutput
from .decode_shared import MAX_LINE_BYTES, too_large
from .decode_shared import count as _count
from .decode_shared import malformed as _malformed

if TYPE_CHECKING:
    from .._errors import CallError
    from .._events import DeltaEvent
    from .._messages import ContentPart, ToolCall

# The rarer events, errors and parts (thinking, tool calls, a broken stream) are named through
# their modules where they are made, and the error helpers are imported where an error is in
# hand: a plain text reply then loads none of them (``tests/test_codec_first_use.py``).

__all__ = [
    "OllamaStreamDecoder",
    "decode_body",
    "error_message",
    "normalize_finish_reason",
    "normalize_usage",
]


def normalize_finish_reason(raw: str | None, has_tool_calls: bool) -> FinishReason:
    """Our finish reason for a ``done_reason``: ``stop`` (``tool_calls`` when the message holds
    tool calls, which Ollama also ends with ``stop``), ``length``, else ``other``."""
    if has_tool_calls and raw in (None, "stop"):
        return "tool_calls"
    if raw == "stop":
        return "stop"
    if raw == "length":
        return "length"
    return "other"


def normalize_usage(done: dict[str, Any]) -> Usage:
    """Our :class:`Usage` for the counts of a ``done`` line."""
    return Usage(_count(done.get("prompt_eval_count")), _count(done.get("eval_count")), 0, 0, 0)


def error_message(error: object) -> str:
    """The text of an ``error`` value: Ollama sends a bare string."""
    if isinstance(error, str) and error:
        return error
    if type(error) is dict and isinstance(error.get("message"), str) and error["message"]:
        return str(error["message"])
    from .http_errors import excerpt

    return excerpt(orjson.dumps(error))


def _error_reply(error: object) -> CallError:
    """The :class:`CallError` for an ``error`` in a 200 reply, whose status is not known."""
    from .http_errors import error_for_status

    return error_for_status(None, error_message(error))


class OllamaStreamDecoder:
    """Decodes one NDJSON ``/api/chat`` reply into delta events (a :class:`StreamDecoder`).

    Each :meth:`feed` returns a :class:`TextDelta` or :class:`ReasoningDelta` per non-empty
    piece, one :class:`ToolCallDelta` per whole tool call and a :class:`UsageReported` with the
    ``done`` line. Lines may be cut anywhere across pieces; blank lines are skipped; after the
    ``done`` line every later byte is ignored.
    """

    __slots__ = (
        "_buf",
        "_call_id",
        "_calls",
        "_chunks",
        "_done",
        "_done_reason",
        "_held",
        "_max_line",
        "_reasoning",
        "_text",
        "_usage",
    )

    def __init__(self, call_id: str, *, max_line: int = MAX_LINE_BYTES) -> None:
        self._call_id = call_id
        self._max_line = max_line
        self._buf = b""
        """The unfinished line: bytes after the last newline."""
        self._held: list[bytes] = []
        """Later pieces of that line, joined once it ends (linear time for a long line)."""
        self._chunks = 0
        self._done = False
        self._done_reason: str | None = None
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[ToolCall] = []
        self._usage: Usage | None = None

    @property
    def chunks_seen(self) -> int:
        """JSON lines decoded so far."""
        return self._chunks

    def feed(self, data: bytes) -> list[DeltaEvent]:
        """Decode the next piece of the body, cut anywhere; see the class docstring.

        Raises:
            CallError: a line carried an ``error``.
            ProtocolError: a line is not a JSON object of this protocol, or is longer than
                ``max_line`` bytes (terminal).
        """
        out: list[DeltaEvent] = []
        if self._done:
            return out
        end = data.rfind(b"\n")
        if end < 0:
            if data:
                self._held.append(data)
                if len(self._buf) + sum(map(len, self._held)) > self._max_line:
                    raise too_large("an NDJSON line", self._max_line, "max_line_bytes")
            return out
        if self._held:
            end += len(self._buf) + sum(map(len, self._held))
            data = b"".join((self._buf, *self._held, data))
            self._held.clear()
        elif self._buf:
            end += len(self._buf)
            data = self._buf + data
        self._buf = data[end + 1 :]
        if len(self._buf) > self._max_line:
            raise too_large("an NDJSON line", self._max_line, "max_line_bytes")
        max_line = self._max_line
        for line in data[:end].split(b"\n"):
            if len(line) > max_line:
                raise too_large("an NDJSON line", max_line, "max_line_bytes")
            if len(line) > 2 or line.strip():
                self._line(line, out)
                if self._done:
                    break
        return out

    def finish(self) -> AttemptOutput:
        """The body ended: the assembled assistant message, finish reason and usage.

        A last line without a newline is still read, unless it was cut short.

        Raises:
            StreamBroken: the body ended before the ``done`` line.
            CallError: that last line carried an ``error``.
        """
        tail = b"".join((self._buf, *self._held))
        self._buf = b""
        self._held.clear()
        if not self._done and tail.strip():
            try:
                self._line(tail, [])
            except ProtocolError:
                pass  # the body was cut inside this line
        if not self._done:
            raise errors.StreamBroken(
                f"the stream ended after {self._chunks} lines without a done line",
                events_delivered=self._chunks,
            )
        return self._output()

    def _output(self) -> AttemptOutput:
        parts: list[ContentPart] = []
        reasoning = "".join(self._reasoning)
        if reasoning:
            parts.append(ReasoningPart(text=reasoning))
        text = "".join(self._text)
        if text:
            parts.append(TextPart(text))
        parts.extend(self._calls)
        return AttemptOutput(
            message=Message("assistant", tuple(parts)),
            finish_reason=normalize_finish_reason(self._done_reason, bool(self._calls)),
            raw_finish_reason=self._done_reason,
            usage=self._usage,
        )

    def _line(self, line: bytes, out: list[DeltaEvent]) -> None:
        try:
            chunk = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise _malformed("a stream line is not JSON", line) from None
        if type(chunk) is not dict:
            raise _malformed("a stream line is not a JSON object", line)
        self._object(chunk, line, out)

    def _object(self, chunk: dict[str, Any], line: bytes, out: list[DeltaEvent]) -> None:
        self._chunks += 1
        message = chunk.get("message")
        if message:
            if type(message) is not dict:
                raise _malformed("message is not an object", line)
            text = message.get("content")
            if text:
                if type(text) is not str:
                    raise _malformed("content is not a string", line)
                self._text.append(text)
                out.append(TextDelta(self._call_id, text))
            thinking = message.get("thinking")
            if thinking:
                if type(thinking) is not str:
                    raise _malformed("thinking is not a string", line)
                self._reasoning.append(thinking)
                out.append(events.ReasoningDelta(self._call_id, thinking))
            calls = message.get("tool_calls")
            if calls:
                if type(calls) is not list:
                    raise _malformed("tool_calls is not a list", line)
                for call in calls:
                    self._tool_call(call, line, out)
        elif "error" in chunk:
            raise _error_reply(chunk["error"])
        if chunk.get("done") is True:
            self._done = True
            reason = chunk.get("done_reason")
            self._done_reason = reason if isinstance(reason, str) and reason else None
            self._usage = normalize_usage(chunk)
            out.append(UsageReported(self._call_id, self._usage))

    def _tool_call(self, call: object, line: bytes, out: list[DeltaEvent]) -> None:
        if type(call) is not dict or type(function := call.get("function")) is not dict:
            raise _malformed("a tool call has no function object", line)
        name, args = function.get("name"), function.get("arguments")
        if not isinstance(name, str):
            raise _malformed("a tool call has no name", line)
        if isinstance(args, str):
            arguments = args or "{}"  # a server that sends the JSON text instead
        else:
            arguments = orjson.dumps(args).decode() if args else "{}"
        index = len(self._calls)
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            call_id = f"call_{index}"
        self._calls.append(_conversation.ToolCall(id=call_id, name=name, arguments=arguments))
        out.append(events.ToolCallDelta(self._call_id, index, call_id, name, arguments))


def decode_body(body: bytes) -> AttemptOutput:
    """Decode a whole non-streamed ``/api/chat`` body (one JSON object).

    A body of several lines (a streamed reply read whole) is decoded as a stream.

    Raises:
        CallError: the body is an ``error``.
        ProtocolError: the body is not a chat reply.
        StreamBroken: a body of several lines has no ``done`` line.
    """
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError:
        if b"\n" not in body.strip():
            raise _malformed("the reply body is not JSON", body) from None
        decoder = OllamaStreamDecoder("")
        decoder.feed(body)
        return decoder.finish()
    if type(reply) is not dict:
        raise _malformed("the reply body is not a JSON object", body)
    if "error" in reply and not reply.get("message"):
        raise _error_reply(reply["error"])
    if type(reply.get("message")) is not dict:
        raise _malformed("the reply has no message", body)
    decoder = OllamaStreamDecoder("")
    decoder._object(reply, body, [])
    # A whole body is complete even if an old server left out ``done``.
    return decoder._output()
