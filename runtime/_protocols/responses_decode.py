"""Replies of OpenAI's Responses API: streamed events and whole ``response`` objects.

A streamed reply is a sequence of typed events (``response.created``, ...,
``response.completed``). What the decoder reads:

* ``response.output_item.added`` opens an output item: a ``function_call`` becomes tool call
  ``index`` (counted over the reply's function calls) and its ``call_id`` and ``name`` go out
  at once; a ``reasoning`` item opens a reasoning part;
* ``response.function_call_arguments.delta`` adds to the arguments of the call whose
  ``item_id`` (or else ``output_index``) it names; ``...arguments.done`` and
  ``response.output_item.done`` supply arguments that never came in pieces;
* ``response.output_text.delta`` and ``response.refusal.delta`` are text (a refusal is the
  model's answer in words); a text delta's ``logprobs`` go out with it as
  ``{"content": [...]}``, the chat API's shape, and joined with the output;
* ``response.reasoning_summary_text.delta`` and ``response.reasoning_text.delta`` (raw
  reasoning, as DeepSeek and open-weight servers send it) are reasoning; the summary parts of
  one reasoning item are joined by a blank line, and that line goes out as a delta of its own;
* ``response.output_item.done`` of a ``reasoning`` item gives the part its signature: the
  item's id and ``encrypted_content`` (see
  :func:`~sluice._protocols.responses_request.reasoning_signature`), so the part can be sent
  back on the next turn; it goes out as a :class:`ReasoningSignature` (``redacted`` when the
  item had no text), as a whole reply's would;
* ``response.completed`` and ``response.incomplete`` end the reply with its usage (cached and
  reasoning tokens from the usage details); ``incomplete_details.reason`` names why it was cut
  (``max_output_tokens``: ``length``; ``content_filter``);
* ``response.failed`` and an ``error`` event raise the :class:`CallError` their code calls for.

A stream that ends with its items but no deltas for them (a server that sends only the final
object) still gives the whole message: the final ``response`` is decoded as a body and its
content goes out as deltas with the last event. Events of other types (built-in tools,
annotations, ``response.in_progress``, keep-alives) change nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import orjson

from .. import _conversation
from .. import _errors as errors
from .. import _events as events
from .._errors import CallError, ProtocolError
from .._events import TextDelta, UsageReported
from .._messages import FinishReason, Message, ReasoningPart, TextPart, Usage
from .base import AttemptOutput
from .decode_shared import MAX_EVENT_BYTES, MAX_LINE_BYTES
from .decode_shared import count as _count
from .decode_shared import malformed as _malformed
from .responses_request import reasoning_signature
from .sse import SSEDecoder

if TYPE_CHECKING:
    from .._events import DeltaEvent
    from .._messages import ContentPart

# The rarer events, errors and parts (reasoning, function calls, a broken stream) are named
# through their modules where they are made, and the error helpers are imported where an error
# is in hand: a plain text reply then loads none of them (``tests/test_codec_first_use.py``).

__all__ = [
    "ResponsesStreamDecoder",
    "decode_body",
    "failure_error",
    "normalize_usage",
    "reply_finish",
]

_SUMMARY_BREAK = "\n\n"

# Error codes of a failed response that describe the request, so that trying again cannot help.
_CLIENT_CODES = frozenset({"invalid_prompt", "empty_image_file", "image_file_not_found"})


def normalize_usage(raw: object) -> Usage:
    """Our :class:`Usage` for a Responses ``usage`` object: ``input_tokens`` (cached included),
    ``output_tokens`` (reasoning included), ``input_tokens_details.cached_tokens`` and
    ``output_tokens_details.reasoning_tokens``.

    Raises:
        ProtocolError: ``raw`` is not an object.
    """
    if type(raw) is not dict:
        from .http_errors import excerpt

        raise ProtocolError(f"usage is not an object: {excerpt(orjson.dumps(raw))}")
    details = raw.get("input_tokens_details")
    cached = _count(details.get("cached_tokens")) if type(details) is dict else 0
    details = raw.get("output_tokens_details")
    reasoning = _count(details.get("reasoning_tokens")) if type(details) is dict else 0
    return Usage(
        _count(raw.get("input_tokens")), _count(raw.get("output_tokens")), cached, 0, reasoning
    )


def failure_error(error: object) -> CallError:
    """The :class:`CallError` for a failed response's ``error`` or an ``error`` event.

    ``{"code", "message", "param"}``: the code is the error type. A code that says the request
    itself is wrong (``invalid_...``, the image codes, ``invalid_prompt``) is read as a 400, so
    it is not retried; the rest are read by their code alone (see
    :func:`.http_errors.error_for_status`: ``rate_limit_exceeded`` is a rate limit,
    ``server_error`` and unknown codes a server error).
    """
    from .http_errors import error_for_status, excerpt

    message, code = "the provider reported an error without a message", None
    if type(error) is dict:
        found = error.get("message")
        message = found if isinstance(found, str) and found else excerpt(orjson.dumps(error))
        for key in ("code", "type"):
            value = error.get(key)
            if isinstance(value, str) and value:
                code = value
                break
    elif isinstance(error, str) and error:
        message = error
    status: int | None = None
    if code is not None:
        lowered = code.lower()
        if lowered in _CLIENT_CODES or lowered.startswith("invalid_") or "image" in lowered:
            status = 400
    error_obj = error_for_status(status, message, error_type=code)
    param = error.get("param") if type(error) is dict else None
    if isinstance(param, str) or code is not None:
        error_obj = attrs.evolve(
            error_obj, param=param if isinstance(param, str) else None, code=code
        )
    return error_obj


def reply_finish(
    status: object, incomplete: object, has_tool_calls: bool
) -> tuple[FinishReason, str | None]:
    """``(finish reason, the provider's own)`` of a response's ``status`` and
    ``incomplete_details``: ``completed`` is ``stop`` (``tool_calls`` with tool calls);
    ``incomplete`` names its reason (``max_output_tokens`` is ``length``, ``content_filter``
    stays), which is the raw reason kept."""
    if status == "incomplete":
        reason = incomplete.get("reason") if type(incomplete) is dict else None
        raw = reason if isinstance(reason, str) and reason else "incomplete"
        if raw == "max_output_tokens":
            return "length", raw
        if raw == "content_filter":
            return "content_filter", raw
        return "other", raw
    raw_status = status if isinstance(status, str) and status else None
    if raw_status in (None, "completed"):
        return ("tool_calls" if has_tool_calls else "stop"), raw_status
    return "other", raw_status


class _Item:
    """One output item being streamed."""

    __slots__ = ("arguments", "call_id", "index", "item_id", "kind", "name", "signature", "text")

    def __init__(self, kind: str, item_id: str | None) -> None:
        self.kind = kind
        self.item_id = item_id
        self.text: list[str] = []
        """Text, reasoning text, or argument pieces."""
        self.index = -1
        """For a function call: its tool call index."""
        self.call_id: str | None = None
        self.name: str | None = None
        self.arguments = False
        """For a function call: argument pieces arrived."""
        self.signature: str | None = None


def _parts(items: list[_Item]) -> list[ContentPart]:
    parts: list[ContentPart] = []
    for item in items:
        if item.kind == "function_call":
            parts.append(
                _conversation.ToolCall(
                    id=item.call_id or f"call_{item.index}",
                    name=item.name or "",
                    arguments="".join(item.text) or "{}",
                )
            )
        elif item.kind == "reasoning":
            text = "".join(item.text)
            if text or item.signature:
                parts.append(ReasoningPart(text=text, signature=item.signature))
        elif item.text:
            text = "".join(item.text)
            if parts and type(parts[-1]) is TextPart:
                parts[-1] = TextPart(parts[-1].text + text)
            else:
                parts.append(TextPart(text))
    return parts


class ResponsesStreamDecoder:
    """Decodes one streamed Responses reply into delta events (a :class:`StreamDecoder`);
    see the module docstring."""

    __slots__ = (
        "_by_id",
        "_by_output",
        "_call_id",
        "_calls",
        "_chunks",
        "_done",
        "_finish",
        "_items",
        "_logprobs",
        "_response_id",
        "_service_tier",
        "_sse",
        "_usage",
    )

    def __init__(
        self, call_id: str, *, max_line: int = MAX_LINE_BYTES, max_event: int = MAX_EVENT_BYTES
    ) -> None:
        self._call_id = call_id
        self._sse = SSEDecoder(max_line=max_line, max_event=max_event)
        self._chunks = 0
        self._done = False
        self._items: list[_Item] = []
        self._logprobs: list[Any] = []
        """The token log probabilities of the text, when the request asked for them."""
        self._by_id: dict[str, _Item] = {}
        self._by_output: dict[int, _Item] = {}
        self._calls = 0
        self._finish: tuple[FinishReason, str | None] | None = None
        self._usage: Usage | None = None
        self._response_id: str | None = None
        self._service_tier: str | None = None

    @property
    def chunks_seen(self) -> int:
        """JSON events decoded so far; comments and empty events do not count."""
        return self._chunks

    def feed(self, data: bytes) -> list[DeltaEvent]:
        """Decode the next piece of the body, cut anywhere; see the module docstring.

        Raises:
            CallError: the stream carried ``response.failed`` or an ``error`` event.
            ProtocolError: a data payload is not a JSON event.
        """
        out: list[DeltaEvent] = []
        if self._done:
            return out
        for name, payload in self._sse.feed(data):
            if payload and not self._done:
                if payload[0] != 0x7B and payload.startswith(b"[DONE]"):  # 0x7B: "{"
                    continue
                self._event(name, payload, out)
        return out

    def finish(self) -> AttemptOutput:
        """The body ended: the assembled message, finish reason and usage.

        Raises:
            StreamBroken: the body ended before ``response.completed`` or
                ``response.incomplete``.
            CallError: an unclosed last event was ``response.failed`` or an ``error``.
        """
        if not self._done:
            ignored: list[DeltaEvent] = []
            for event in self._sse.end():
                if event.data and event.data[0] == 0x7B and not self._done:
                    try:
                        self._event(event.event, event.data, ignored)
                    except ProtocolError:
                        break  # the body was cut inside this event
        if self._finish is None:
            raise errors.StreamBroken(
                f"the stream ended after {self._chunks} events without response.completed",
                events_delivered=self._chunks,
            )
        return AttemptOutput(
            message=Message("assistant", tuple(_parts(self._items))),
            finish_reason=self._finish[0],
            raw_finish_reason=self._finish[1],
            usage=self._usage,
            response_id=self._response_id,
            logprobs={"content": self._logprobs} if self._logprobs else None,
            service_tier=self._service_tier,
        )

    def _event(self, name: str, payload: bytes, out: list[DeltaEvent]) -> None:
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise _malformed("a stream event is not JSON", payload) from None
        if type(event) is not dict:
            raise _malformed("a stream event is not a JSON object", payload)
        self._chunks += 1
        kind = event.get("type") or name  # a server that names the type only in ``event:``
        if kind == "response.output_text.delta" or kind == "response.refusal.delta":
            delta = event.get("delta")
            if delta:
                if type(delta) is not str:
                    raise _malformed("a text delta is not a string", payload)
                self._item_for(event, "message").text.append(delta)
                logprobs = event.get("logprobs")
                if logprobs and type(logprobs) is list:
                    self._logprobs.extend(logprobs)
                    out.append(TextDelta(self._call_id, delta, {"content": logprobs}))
                else:
                    out.append(TextDelta(self._call_id, delta))
        elif kind == "response.function_call_arguments.delta":
            delta = event.get("delta")
            if delta:
                if type(delta) is not str:
                    raise _malformed("an arguments delta is not a string", payload)
                item = self._item_for(event, "function_call")
                item.text.append(delta)
                item.arguments = True
                out.append(events.ToolCallDelta(self._call_id, item.index, None, None, delta))
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            delta = event.get("delta")
            if delta:
                if type(delta) is not str:
                    raise _malformed("a reasoning delta is not a string", payload)
                item = self._item_for(event, "reasoning")
                item.text.append(delta)
                out.append(events.ReasoningDelta(self._call_id, delta))
        elif kind == "response.reasoning_summary_part.added":
            item = self._item_for(event, "reasoning")
            if item.text:
                item.text.append(_SUMMARY_BREAK)
                out.append(events.ReasoningDelta(self._call_id, _SUMMARY_BREAK))
        elif kind == "response.output_item.added":
            self._added(event, payload, out)
        elif kind == "response.output_item.done":
            self._item_done(event, payload, out)
        elif kind == "response.function_call_arguments.done":
            arguments = event.get("arguments")
            item = self._item_for(event, "function_call")
            if not item.arguments and isinstance(arguments, str) and arguments:
                item.text.append(arguments)
                item.arguments = True
                out.append(events.ToolCallDelta(self._call_id, item.index, None, None, arguments))
        elif kind in ("response.completed", "response.incomplete"):
            self._end(event.get("response"), payload, out)
        elif kind == "response.created":
            self._meta(event.get("response"))
        elif kind == "response.failed":
            response = event.get("response")
            error = response.get("error") if type(response) is dict else None
            raise failure_error(error or "the response failed without an error object")
        elif kind == "error":
            inner = event.get("error")
            raise failure_error(inner if inner else {k: v for k, v in event.items() if k != "type"})

    def _meta(self, response: object) -> None:
        if type(response) is not dict:
            return
        if self._response_id is None:
            found = response.get("id")
            if isinstance(found, str) and found:
                self._response_id = found
        tier = response.get("service_tier")
        if isinstance(tier, str) and tier:
            self._service_tier = tier

    def _new_item(self, kind: str, item_id: str | None, output_index: object) -> _Item:
        item = _Item(kind, item_id)
        if kind == "function_call":
            item.index = self._calls
            self._calls += 1
        self._items.append(item)
        if item_id is not None:
            self._by_id[item_id] = item
        if type(output_index) is int:
            self._by_output[output_index] = item
        return item

    def _item_for(self, event: dict[str, Any], kind: str) -> _Item:
        """The item an event names by ``item_id`` or ``output_index``; one of ``kind`` is opened
        for an event whose item was never added."""
        item_id = event.get("item_id")
        item = self._by_id.get(item_id) if isinstance(item_id, str) else None
        if item is None:
            item = self._by_output.get(event.get("output_index"))  # type: ignore[arg-type]
        if item is None or item.kind != kind:
            item = self._new_item(
                kind, item_id if isinstance(item_id, str) else None, event.get("output_index")
            )
        return item

    def _added(self, event: dict[str, Any], payload: bytes, out: list[DeltaEvent]) -> None:
        raw = event.get("item")
        if type(raw) is not dict:
            raise _malformed("an output item is not an object", payload)
        kind = raw.get("type")
        if kind not in ("function_call", "reasoning", "message"):
            return  # a built-in tool's item: nothing of ours
        item_id = raw.get("id")
        item = self._new_item(
            kind, item_id if isinstance(item_id, str) else None, event.get("output_index")
        )
        if kind == "function_call":
            call_id, name = raw.get("call_id"), raw.get("name")
            if not (call_id is None or type(call_id) is str) or not (
                name is None or type(name) is str
            ):
                raise _malformed("a function call's call_id or name is not a string", payload)
            item.call_id, item.name = call_id or None, name or None
            arguments = raw.get("arguments") or ""
            if type(arguments) is not str:
                arguments = orjson.dumps(arguments).decode()
            if arguments:
                item.text.append(arguments)
                item.arguments = True
            out.append(
                events.ToolCallDelta(self._call_id, item.index, item.call_id, item.name, arguments)
            )

    def _item_done(self, event: dict[str, Any], payload: bytes, out: list[DeltaEvent]) -> None:
        raw = event.get("item")
        if type(raw) is not dict:
            raise _malformed("an output item is not an object", payload)
        kind = raw.get("type")
        if kind == "reasoning":
            item = self._item_for({"item_id": raw.get("id"), **event}, "reasoning")
            item_id = raw.get("id")
            if isinstance(item_id, str) and item_id:
                encrypted = raw.get("encrypted_content")
                item.signature = reasoning_signature(
                    item_id, encrypted if isinstance(encrypted, str) else None
                )
                out.append(
                    events.ReasoningSignature(self._call_id, item.signature, redacted=not item.text)
                )
        elif kind == "function_call":
            item = self._item_for({"item_id": raw.get("id"), **event}, "function_call")
            opened = item.call_id is not None or item.name is not None
            call_id, name = raw.get("call_id"), raw.get("name")
            new_id = call_id if isinstance(call_id, str) and call_id and not opened else None
            new_name = name if isinstance(name, str) and name and not opened else None
            item.call_id = item.call_id or new_id
            item.name = item.name or new_name
            arguments = raw.get("arguments")
            if not isinstance(arguments, str):
                arguments = "" if arguments is None else orjson.dumps(arguments).decode()
            if item.arguments:
                arguments = ""
            elif arguments:
                item.text.append(arguments)
                item.arguments = True
            if new_id or new_name or arguments:
                out.append(
                    events.ToolCallDelta(self._call_id, item.index, new_id, new_name, arguments)
                )

    def _end(self, response: object, payload: bytes, out: list[DeltaEvent]) -> None:
        if type(response) is not dict:
            raise _malformed("the final event has no response object", payload)
        self._meta(response)
        self._done = True
        if not self._items:
            # A server that sent no item events: the final object holds the reply.
            whole = _output(response, payload)
            out.extend(_deltas(self._call_id, whole))
            self._items = [_item_of(part) for part in whole.content]
        usage = response.get("usage")
        if usage:
            self._usage = normalize_usage(usage)
            out.append(UsageReported(self._call_id, self._usage))
        has_calls = any(item.kind == "function_call" for item in self._items)
        self._finish = reply_finish(
            response.get("status"), response.get("incomplete_details"), has_calls
        )


def _item_of(part: ContentPart) -> _Item:
    """A finished item standing for one part of a message decoded whole."""
    if isinstance(part, TextPart):  # text first: the others' classes load with the first met
        item = _Item("message", None)
        item.text = [part.text]
    elif isinstance(part, ReasoningPart):
        item = _Item("reasoning", None)
        item.text, item.signature = [part.text], part.signature
    elif isinstance(part, _conversation.ToolCall):
        item = _Item("function_call", None)
        item.call_id, item.name, item.text = part.id, part.name, [part.arguments]
    else:
        item = _Item("message", None)
        item.text = []
    return item


def _deltas(call_id: str, message: Message) -> list[DeltaEvent]:
    out: list[DeltaEvent] = []
    index = 0
    for part in message.content:
        if isinstance(part, TextPart):
            out.append(TextDelta(call_id, part.text))
        elif isinstance(part, ReasoningPart):
            if part.text:
                out.append(events.ReasoningDelta(call_id, part.text))
            if part.signature:
                out.append(
                    events.ReasoningSignature(call_id, part.signature, redacted=not part.text)
                )
        elif isinstance(part, _conversation.ToolCall):
            out.append(events.ToolCallDelta(call_id, index, part.id, part.name, part.arguments))
            index += 1
    return out


def _output(response: dict[str, Any], body: bytes, logprobs: list[Any] | None = None) -> Message:
    """The assistant message of a whole ``response`` object's ``output`` items; the text's
    log probabilities, where it has them, are added to ``logprobs``."""
    output = response.get("output") or []
    if type(output) is not list:
        raise _malformed("the response's output is not a list", body)
    parts: list[ContentPart] = []
    for raw in output:
        if type(raw) is not dict:
            raise _malformed("an output item is not an object", body)
        kind = raw.get("type")
        if kind == "message":
            content = raw.get("content") or []
            if type(content) is not list:
                raise _malformed("a message's content is not a list", body)
            for piece in content:
                if type(piece) is not dict:
                    raise _malformed("a content part is not an object", body)
                text = piece.get("text") if piece.get("type") == "output_text" else None
                if piece.get("type") == "refusal":
                    text = piece.get("refusal")
                found = piece.get("logprobs")
                if logprobs is not None and found and type(found) is list:
                    logprobs.extend(found)
                if text:
                    if type(text) is not str:
                        raise _malformed("a message's text is not a string", body)
                    if parts and type(parts[-1]) is TextPart:
                        parts[-1] = TextPart(parts[-1].text + text)
                    else:
                        parts.append(TextPart(text))
        elif kind == "function_call":
            call_id, name = raw.get("call_id"), raw.get("name")
            arguments = raw.get("arguments") or ""
            if type(arguments) is not str:
                arguments = orjson.dumps(arguments).decode()
            parts.append(
                _conversation.ToolCall(
                    id=call_id if isinstance(call_id, str) and call_id else f"call_{len(parts)}",
                    name=name if isinstance(name, str) else "",
                    arguments=arguments or "{}",
                )
            )
        elif kind == "reasoning":
            texts: list[str] = []
            for key, text_type in (("summary", "summary_text"), ("content", "reasoning_text")):
                pieces = raw.get(key) or []
                if type(pieces) is list:
                    texts.extend(
                        p["text"]
                        for p in pieces
                        if type(p) is dict
                        and p.get("type") == text_type
                        and isinstance(p.get("text"), str)
                    )
            item_id, encrypted = raw.get("id"), raw.get("encrypted_content")
            signature = (
                reasoning_signature(item_id, encrypted if isinstance(encrypted, str) else None)
                if isinstance(item_id, str) and item_id
                else None
            )
            text = _SUMMARY_BREAK.join(texts)
            if text or signature:
                parts.append(ReasoningPart(text=text, signature=signature))
    return Message("assistant", tuple(parts))


def decode_body(body: bytes) -> AttemptOutput:
    """Decode a whole ``response`` object.

    Raises:
        CallError: the body is an ``error`` object or a failed response.
        ProtocolError: the body is not a response.
    """
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise _malformed("the reply body is not JSON", body) from None
    if type(reply) is not dict:
        raise _malformed("the reply body is not a JSON object", body)
    status = reply.get("status")
    error = reply.get("error")
    if error and (status in (None, "failed") or "output" not in reply):
        raise failure_error(error)
    if status == "failed":
        raise failure_error("the response failed without an error object")
    if "output" not in reply:
        raise _malformed("the reply is not a response (no output)", body)
    logprobs: list[Any] = []
    message = _output(reply, body, logprobs)
    finish, raw = reply_finish(status, reply.get("incomplete_details"), bool(message.tool_calls))
    usage = reply.get("usage")
    response_id = reply.get("id")
    tier = reply.get("service_tier")
    return AttemptOutput(
        message=message,
        finish_reason=finish,
        raw_finish_reason=raw,
        usage=normalize_usage(usage) if usage else None,
        response_id=response_id if isinstance(response_id, str) and response_id else None,
        logprobs={"content": logprobs} if logprobs else None,
        service_tier=tier if isinstance(tier, str) and tier else None,
    )
