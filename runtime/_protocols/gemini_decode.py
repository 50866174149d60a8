"""Replies of the Gemini API: ``alt=sse`` streams, whole bodies, error payloads.

Every streamed event is a whole ``GenerateContentResponse``; the stream has no ``[DONE]`` and
simply ends, so a reply is complete when its candidate gave a ``finishReason`` (or the prompt
was blocked). Only the candidate with index 0 is read.

What the decoders guarantee:

* ``text`` parts are text, ``thought: true`` parts reasoning; consecutive pieces of the same
  kind form one part of the message, in the order the model gave them;
* a ``functionCall`` part arrives whole and becomes one :class:`ToolCall`, with the
  API-issued ``id`` when there is one and ``call_<n>`` otherwise (``n`` counts the reply's
  tool calls from 0, as the :class:`ToolCallDelta` index does); ``args`` become compact JSON;
* a ``thoughtSignature`` stays on the part that carried it (:class:`TextPart`,
  :class:`ReasoningPart` or :class:`ToolCall` ``signature``), so the request builder can send
  it back; one that comes on an empty text part joins the open text part of that kind, or
  becomes an empty :class:`TextPart` of its own;
* usage comes from the last ``usageMetadata`` (it is cumulative, and the prompt count has been
  seen to change in the final event) and is reported once the finish reason is known; see
  :func:`normalize_usage`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from .. import _conversation
from .. import _errors as errors
from .. import _events as events
from .._errors import AuthenticationFailed, CallError, Overloaded, ProtocolError
from .._events import TextDelta, UsageReported
from .._messages import FinishReason, Message, ReasoningPart, TextPart, Usage
from .base import AttemptOutput
from .decode_shared import MAX_EVENT_BYTES, MAX_LINE_BYTES
from .decode_shared import count as _count
from .decode_shared import malformed as _malformed
from .sse import SSEDecoder

if TYPE_CHECKING:
    from .._events import DeltaEvent
    from .._messages import ContentPart, ToolCall

# The rarer events, errors and parts (thoughts, function calls, a broken stream) are named
# through their modules where they are made, and the error helpers are imported where an error
# is in hand: a plain text reply then loads none of them (``tests/test_codec_first_use.py``).

__all__ = [
    "GeminiStreamDecoder",
    "decode_body",
    "error_from_payload",
    "normalize_finish_reason",
    "normalize_usage",
]

_FILTERED = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
    }
)
_AUTH_REASONS = frozenset({"API_KEY_INVALID", "API_KEY_EXPIRED", "API_KEY_SERVICE_BLOCKED"})
_AUTH_STATUSES = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})


def normalize_finish_reason(raw: str | None, has_tool_calls: bool) -> FinishReason:
    """Our finish reason for a ``finishReason``: ``STOP`` is ``tool_calls`` when the message
    holds tool calls, ``MAX_TOKENS`` is ``length``, the safety and recitation reasons
    ``content_filter``; anything else (``MALFORMED_FUNCTION_CALL``, ``OTHER``, ...) ``other``."""
    if raw == "STOP" or raw is None:
        if has_tool_calls:
            return "tool_calls"
        return "stop" if raw == "STOP" else "other"
    if raw == "MAX_TOKENS":
        return "length"
    if raw in _FILTERED:
        return "content_filter"
    return "other"


def normalize_usage(raw: dict[str, Any]) -> Usage:
    """Our :class:`Usage` for a ``usageMetadata`` object.

    ``input_tokens`` is ``promptTokenCount`` (cached tokens included) plus
    ``toolUsePromptTokenCount``; ``output_tokens`` is what ``totalTokenCount`` holds beyond
    that, or ``candidatesTokenCount + thoughtsTokenCount`` without a total;
    ``cache_read_tokens`` is ``cachedContentTokenCount``; ``reasoning_tokens``
    ``thoughtsTokenCount``.
    """
    prompt = _count(raw.get("promptTokenCount")) + _count(raw.get("toolUsePromptTokenCount"))
    thoughts = _count(raw.get("thoughtsTokenCount"))
    total = raw.get("totalTokenCount")
    if type(total) is int and total >= prompt:
        output = total - prompt
    else:
        output = _count(raw.get("candidatesTokenCount")) + thoughts
    return Usage(prompt, output, _count(raw.get("cachedContentTokenCount")), 0, thoughts)


def error_fields(error: object) -> tuple[str, str | None, int | None, str | None]:
    """``(message, error_type, code, status)`` of a Google ``error`` object.

    ``error_type`` is the ``reason`` of an ``ErrorInfo`` detail when there is one (it says
    more, e.g. ``API_KEY_INVALID``), else the ``status`` name (``INVALID_ARGUMENT``).
    """
    from .http_errors import excerpt

    if type(error) is not dict:
        text = error if isinstance(error, str) and error else excerpt(orjson.dumps(error))
        return text, None, None, None
    message = error.get("message")
    if not isinstance(message, str) or not message:
        message = excerpt(orjson.dumps(error))
    status = error.get("status")
    status = status if isinstance(status, str) and status else None
    reason = None
    details = error.get("details")
    if type(details) is list:
        for detail in details:
            if type(detail) is dict and isinstance(detail.get("reason"), str):
                reason = detail["reason"]
                break
    code = error.get("code")
    return message, reason or status, code if type(code) is int else None, status


def error_from_payload(
    error: object,
    status: int | None = None,
    *,
    request_id: str | None = None,
    retry_after: float | None = None,
) -> CallError:
    """The :class:`CallError` for a Google ``error`` object.

    With ``status`` None (an error inside a stream) the object's own ``code`` is used. A key
    the API refused (``API_KEY_INVALID``, which comes as a 400) or an ``UNAUTHENTICATED`` /
    ``PERMISSION_DENIED`` status is :class:`AuthenticationFailed`; a 503 that says the model is
    overloaded is :class:`Overloaded`; everything else follows
    :func:`~sluice._protocols.http_errors.error_for_status`, which keeps ``retry_after`` for a
    :class:`RateLimited`.
    """
    message, error_type, code, status_name = error_fields(error)
    if status is None and code is not None and 400 <= code <= 599:
        status = code
    fields: dict[str, Any] = {"status": status, "error_type": error_type, "request_id": request_id}
    if error_type in _AUTH_REASONS or status_name in _AUTH_STATUSES:
        return AuthenticationFailed(message, **fields)
    if status == 503 and "overloaded" in message.lower():
        return Overloaded(message, **fields)
    from .http_errors import error_for_status

    return error_for_status(
        status, message, error_type=error_type, request_id=request_id, retry_after=retry_after
    )


class _Text:
    """A text or thought part being assembled from streamed pieces."""

    __slots__ = ("pieces", "signature", "thought")

    def __init__(self, thought: bool) -> None:
        self.thought = thought
        self.pieces: list[str] = []
        self.signature: str | None = None


class GeminiStreamDecoder:
    """Decodes one ``alt=sse`` reply into delta events (a :class:`StreamDecoder`).

    Each :meth:`feed` returns a :class:`TextDelta` or :class:`ReasoningDelta` per non-empty
    text piece, one :class:`ToolCallDelta` per whole function call, and a
    :class:`UsageReported` once the finish reason is known (again if a later event changes
    the usage).
    """

    __slots__ = (
        "_blocked",
        "_call_id",
        "_calls",
        "_chunks",
        "_finish_reason",
        "_items",
        "_open",
        "_raw_usage",
        "_response_id",
        "_sse",
        "_usage",
    )

    def __init__(
        self, call_id: str, *, max_line: int = MAX_LINE_BYTES, max_event: int = MAX_EVENT_BYTES
    ) -> None:
        self._call_id = call_id
        self._sse = SSEDecoder(max_line=max_line, max_event=max_event)
        self._chunks = 0
        self._items: list[_Text | ToolCall] = []
        self._open: _Text | None = None
        """The last item when it is a text or thought part that more pieces may extend."""
        self._calls = 0
        self._finish_reason: str | None = None
        self._blocked = False
        """The prompt was refused (``promptFeedback.blockReason``, kept as the finish reason)."""
        self._raw_usage: dict[str, Any] | None = None
        self._usage: Usage | None = None
        self._response_id: str | None = None

    @property
    def chunks_seen(self) -> int:
        """Events decoded so far."""
        return self._chunks

    def feed(self, data: bytes) -> list[DeltaEvent]:
        """Decode the next piece of the body, cut anywhere; see the class docstring.

        Raises:
            CallError: the stream carried an ``error`` object.
            ProtocolError: an event is not a JSON object of this protocol.
        """
        out: list[DeltaEvent] = []
        for payload in self._sse.feed_payloads(data):
            if payload:
                self._chunk(_load(payload), payload, out)
        return out

    def finish(self) -> AttemptOutput:
        """The body ended: the assembled assistant message, finish reason and usage.

        An event the body ended without closing is still read, unless it was cut short.

        Raises:
            StreamBroken: no event gave a finish reason.
            CallError: that unclosed last event was an ``error`` object.
        """
        ignored: list[DeltaEvent] = []
        for event in self._sse.end():
            if event.data:
                try:
                    self._chunk(_load(event.data), event.data, ignored)
                except ProtocolError:
                    break  # the body was cut inside this event
        if self._finish_reason is None:
            raise errors.StreamBroken(
                f"the stream ended after {self._chunks} events without a finish reason",
                events_delivered=self._chunks,
            )
        return self._output()

    def _output(self) -> AttemptOutput:
        parts: list[ContentPart] = []
        for item in self._items:
            if type(item) is _Text:
                text = "".join(item.pieces)
                if item.thought:
                    parts.append(ReasoningPart(text=text, signature=item.signature))
                else:
                    parts.append(TextPart(text, signature=item.signature))
            else:
                assert type(item) is _conversation.ToolCall
                parts.append(item)
        return AttemptOutput(
            message=Message("assistant", tuple(parts)),
            finish_reason="content_filter"
            if self._blocked
            else normalize_finish_reason(self._finish_reason, self._calls > 0),
            raw_finish_reason=self._finish_reason,
            usage=normalize_usage(self._raw_usage) if self._raw_usage else None,
            response_id=self._response_id,
        )

    def _chunk(self, chunk: dict[str, Any], payload: bytes, out: list[DeltaEvent]) -> None:
        self._chunks += 1
        candidates = chunk.get("candidates")
        if candidates:
            if type(candidates) is not list or type(candidates[0]) is not dict:
                raise _malformed("candidates is not a list of objects", payload)
            candidate = candidates[0]
            content = candidate.get("content")
            if content:
                parts = content.get("parts") if type(content) is dict else None
                if type(parts) is not list:
                    raise _malformed("a candidate's content has no parts list", payload)
                for part in parts:
                    if type(part) is not dict:
                        raise _malformed("a part is not an object", payload)
                    text = part.get("text")
                    # Most parts carry nothing but a piece of answer text: skip the rest.
                    if text and len(part) == 1 and type(text) is str:
                        item = self._open
                        if item is None or item.thought:
                            item = self._start(thought=False)
                        item.pieces.append(text)
                        out.append(TextDelta(self._call_id, text))
                    else:
                        self._part(part, payload, out)
            reason = candidate.get("finishReason")
            if reason:
                if type(reason) is not str:
                    raise _malformed("finishReason is not a string", payload)
                self._finish_reason = reason
        elif "error" in chunk:
            raise error_from_payload(chunk["error"])
        else:
            feedback = chunk.get("promptFeedback")
            blocked = feedback.get("blockReason") if type(feedback) is dict else None
            if blocked and type(blocked) is str:
                # The prompt itself was refused: no candidate will come.
                self._finish_reason = blocked
                self._blocked = True
        if self._response_id is None:
            response_id = chunk.get("responseId")
            if isinstance(response_id, str) and response_id:
                self._response_id = response_id
        usage = chunk.get("usageMetadata")
        if usage:
            if type(usage) is not dict:
                raise _malformed("usageMetadata is not an object", payload)
            self._raw_usage = usage
            if self._finish_reason is not None:
                normalized = normalize_usage(usage)
                if normalized != self._usage:
                    self._usage = normalized
                    out.append(UsageReported(self._call_id, normalized))

    def _start(self, *, thought: bool) -> _Text:
        item = self._open = _Text(thought)
        self._items.append(item)
        return item

    def _part(self, part: dict[str, Any], payload: bytes, out: list[DeltaEvent]) -> None:
        signature = part.get("thoughtSignature")
        if signature is not None and type(signature) is not str:
            raise _malformed("thoughtSignature is not a string", payload)
        text = part.get("text")
        if text is not None:
            if type(text) is not str:
                raise _malformed("text is not a string", payload)
            if not text and not signature:
                return
            thought = part.get("thought") is True
            item = self._open
            if item is None or item.thought != thought:
                item = self._start(thought=thought)
            if text:
                item.pieces.append(text)
                if thought:
                    out.append(events.ReasoningDelta(self._call_id, text))
                else:
                    out.append(TextDelta(self._call_id, text))
            if signature:
                item.signature = signature
            return
        call = part.get("functionCall")
        if call is not None:
            self._function_call(call, signature, payload, out)
        # Other parts (inline data, executable code and its result) are not kept.

    def _function_call(
        self, call: object, signature: str | None, payload: bytes, out: list[DeltaEvent]
    ) -> None:
        if type(call) is not dict:
            raise _malformed("a functionCall is not an object", payload)
        name, args, call_id = call.get("name"), call.get("args"), call.get("id")
        if not isinstance(name, str) or not (args is None or type(args) is dict):
            raise _malformed("a functionCall has no name or its args are not an object", payload)
        index = self._calls
        self._calls += 1
        if not isinstance(call_id, str) or not call_id:
            call_id = f"call_{index}"
        arguments = orjson.dumps(args).decode() if args else "{}"
        self._items.append(
            _conversation.ToolCall(
                id=call_id, name=name, arguments=arguments, signature=signature or None
            )
        )
        self._open = None
        out.append(events.ToolCallDelta(self._call_id, index, call_id, name, arguments))


def _load(payload: bytes) -> dict[str, Any]:
    try:
        chunk = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise _malformed("a stream event is not JSON", payload) from None
    if type(chunk) is not dict:
        raise _malformed("a stream event is not a JSON object", payload)
    return chunk


def decode_body(body: bytes) -> AttemptOutput:
    """Decode a whole ``generateContent`` body, or the JSON array ``streamGenerateContent``
    returns without ``alt=sse``.

    A body without a finish reason is taken as it is (finish reason ``other``): unlike a
    stream, a whole body cannot have been cut short unnoticed.

    Raises:
        CallError: the body is an error (alone or in a one-element list).
        ProtocolError: the body is not a reply of this protocol.
    """
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise _malformed("the reply body is not JSON", body) from None
    chunks = reply if type(reply) is list else [reply]
    decoder = GeminiStreamDecoder("")
    ignored: list[DeltaEvent] = []
    for chunk in chunks:
        if type(chunk) is not dict:
            raise _malformed("the reply body is not a JSON object", body)
        if "error" in chunk:
            raise error_from_payload(chunk["error"])
        decoder._chunk(chunk, body, ignored)
    return decoder._output()
