"""sluice's results and streams written in the OpenAI Responses API's shapes, as a server
writes them. Pure: no I/O, no clock.

:func:`render_response` writes a finished :class:`~sluice._messages.ChatResult` as a
``response`` object; :class:`ResponsesEvents` turns one call's deltas into the Responses stream
(``response.created`` ... ``response.completed``, each event with its ``sequence_number``).
Request bodies are read by :mod:`sluice._responses_parse` (its two functions are re-exported
here, so the gateway and the batch job import one module).

Back: reasoning becomes a ``reasoning`` item whose summary is the reasoning text (its signature,
if any, in ``encrypted_content``, which a later request's ``reasoning`` item hands back),
text a ``message`` item with one ``output_text`` part, each tool call a ``function_call`` item
whose ``call_id`` is the call's id. A reply cut by the token limit or a content filter is
``incomplete`` with ``incomplete_details.reason`` (``max_output_tokens``, ``content_filter``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from ._messages import (
    ReasoningPart,
    ToolCall,
)
from ._responses_parse import chat_extra, parse_responses_body

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._events import ReasoningSignature, ToolCallDelta
    from ._messages import ChatResult, Usage

__all__ = [
    "ResponsesEvents",
    "chat_extra",
    "parse_responses_body",
    "render_response",
    "response_usage",
]


# ---- ChatResult -> response ------------------------------------------------------------------


def response_usage(usage: Usage) -> dict[str, Any]:
    """A ``usage`` object of the Responses API (``cache_write_tokens``: the prompt tokens
    written to the provider's cache, which the SDK's model requires beside ``cached_tokens``)."""
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def _status(result: ChatResult) -> tuple[str, dict[str, str] | None]:
    reason = _INCOMPLETE.get(result.finish_reason)
    if reason is None:
        return "completed", None
    return "incomplete", {"reason": reason}


def _echo(body: Mapping[str, Any]) -> dict[str, Any]:
    """The request's settings as a ``response`` object repeats them, with OpenAI's defaults."""
    return {
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") or {},
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "store": False,
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "user": body.get("user"),
    }


def _response(
    response_id: str,
    model: str,
    created_at: int,
    body: Mapping[str, Any],
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    incomplete: dict[str, str] | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "error": error,
        "incomplete_details": incomplete,
        "model": model,
        "output": output,
        **_echo(body),
        "usage": usage,
    }


def _item_id(kind: str, response_id: str, index: int) -> str:
    """The id of output item ``index``: the same for a streamed and an unstreamed reply."""
    return f"{kind}_{response_id.removeprefix('resp_')}_{index}"


def _reasoning_item(item_id: str, text: str, signature: str | None) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": item_id,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": text}] if text else [],
    }
    if signature is not None:
        item["encrypted_content"] = signature
    return item


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [_text_part(text)],
    }


def _call_item(item_id: str, call: ToolCall, status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "arguments": call.arguments,
        "call_id": call.id,
        "name": call.name,
    }


def _output(result: ChatResult, response_id: str, item_status: str) -> list[dict[str, Any]]:
    output: list[dict[str, Any]] = []
    reasoning = [p for p in result.message.content if isinstance(p, ReasoningPart)]
    for part in reasoning:
        output.append(
            _reasoning_item(_item_id("rs", response_id, len(output)), part.text, part.signature)
        )
    if result.text or not result.tool_calls:
        msg_id = _item_id("msg", response_id, len(output))
        output.append(_message_item(msg_id, result.text, item_status))
    for call in result.tool_calls:
        output.append(_call_item(_item_id("fc", response_id, len(output)), call, "completed"))
    return output


def render_response(
    result: ChatResult,
    *,
    response_id: str,
    model: str,
    created_at: int,
    body: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``result`` as a Responses API ``response`` object.

    Output items in order: a ``reasoning`` item per reasoning part, a ``message`` item with
    the text (present unless the reply is tool calls only), a ``function_call`` item per tool
    call. ``status`` is ``incomplete`` (with ``incomplete_details.reason``) when the reply was
    cut by the token limit or a content filter, else ``completed``.

    Args:
        result: the finished call.
        response_id: the ``id`` (``resp_...``); output item ids are made from it.
        model: the model as the client named it.
        created_at: the Unix time (the caller reads the clock).
        body: the request body, whose settings (``instructions``, ``tools``, ``metadata``,
            ...) the response repeats as OpenAI's does; None for the defaults.
    """
    status, incomplete = _status(result)
    return _response(
        response_id,
        model,
        created_at,
        body or {},
        status,
        _output(result, response_id, status),
        response_usage(result.usage),
        incomplete,
    )


# ---- a call's events -> the Responses stream -------------------------------------------------


_RATE_LIMITED = frozenset({"rate_limit_exceeded", "requests", "tokens", "insufficient_quota"})


def _failure_code(error: Mapping[str, Any]) -> str:
    """A failed response's ``error.code``: the Responses API allows only its own codes, so a
    rate limit is ``rate_limit_exceeded``, a bad request ``invalid_prompt``, the rest
    ``server_error``."""
    if error.get("code") in _RATE_LIMITED or error.get("type") in _RATE_LIMITED:
        return "rate_limit_exceeded"
    if error.get("type") == "invalid_request_error":
        return "invalid_prompt"
    return "server_error"


class _Item:
    """One output item being streamed."""

    __slots__ = ("call_id", "done", "id", "index", "kind", "name", "signature", "text")

    def __init__(self, kind: str, item_id: str, index: int) -> None:
        self.kind = kind  # "reasoning", "message" or "function_call"
        self.id = item_id
        self.index = index
        self.text = ""  # reasoning or message text, or a call's arguments
        self.call_id = ""
        self.name = ""
        self.signature: str | None = None
        self.done = False


class ResponsesEvents:
    """Encodes one call's events as the Responses API's SSE events.

    Call :meth:`start` first, then :meth:`text`, :meth:`reasoning`, :meth:`signature` and
    :meth:`tool_call` for each delta in order, then :meth:`finish` with the result or
    :meth:`error` with an OpenAI error body. Each returns the bytes to write (possibly empty).
    An item opens (``output_item.added``) with its first delta and is done
    (``output_item.done``) when an item of another kind opens or the reply ends; function
    calls stay open side by side until then, so fragments of several calls may interleave.
    Every event carries the next ``sequence_number``, from 0; :meth:`start`'s two events
    always hold 0 and 1, so it may be called after the first deltas were encoded (the gateway
    makes the opening events when it writes the first output, which may be a batch of deltas).
    """

    __slots__ = ("_body", "_calls", "_created_at", "_id", "_items", "_model", "_open", "_seq")

    def __init__(
        self, response_id: str, model: str, created_at: int, body: Mapping[str, Any] | None = None
    ) -> None:
        self._id = response_id
        self._model = model
        self._created_at = created_at
        self._body: Mapping[str, Any] = body or {}
        self._seq = 2  # 0 and 1 are response.created and response.in_progress
        self._items: list[_Item] = []
        self._open: list[_Item] = []
        """Items added and not yet done: one reasoning or message item, or function calls."""
        self._calls: dict[int, _Item] = {}
        """Function-call items by the call's index in the reply."""

    @property
    def response_id(self) -> str:
        return self._id

    def _event(self, kind: str, data: dict[str, Any], number: int | None = None) -> bytes:
        if number is None:
            number = self._seq
            self._seq += 1
        data = {"type": kind, "sequence_number": number, **data}
        return b"event: %s\ndata: %s\n\n" % (kind.encode(), orjson.dumps(data))

    def _shell(self, status: str, output: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return _response(
            self._id, self._model, self._created_at, self._body, status, output or [], None
        )

    def start(self, usage: Usage | None = None) -> bytes:
        """``response.created`` and ``response.in_progress`` (``usage`` is not told before
        the end in this format)."""
        shell = self._shell("in_progress")
        return self._event("response.created", {"response": shell}, 0) + self._event(
            "response.in_progress", {"response": shell}, 1
        )

    # -- items --

    def _item_body(self, item: _Item, status: str) -> dict[str, Any]:
        if item.kind == "reasoning":
            return _reasoning_item(item.id, item.text, item.signature)
        if item.kind == "message":
            return _message_item(item.id, item.text, status)
        call = ToolCall(id=item.call_id, name=item.name, arguments=item.text)
        return _call_item(item.id, call, status)

    def _add(self, kind: str, prefix: str) -> tuple[_Item, bytes]:
        out = self._close()
        item = _Item(kind, _item_id(prefix, self._id, len(self._items)), len(self._items))
        self._items.append(item)
        self._open.append(item)
        return item, out

    def _added(self, item: _Item) -> bytes:
        body = self._item_body(item, "in_progress")
        if item.kind == "message":
            body["content"] = []
        elif item.kind == "reasoning":
            body["summary"] = []
        out = self._event("response.output_item.added", {"output_index": item.index, "item": body})
        ids = {"item_id": item.id, "output_index": item.index}
        if item.kind == "message":
            out += self._event(
                "response.content_part.added",
                {**ids, "content_index": 0, "part": _text_part("")},
            )
        elif item.kind == "reasoning" and item.signature is None:
            out += self._event(
                "response.reasoning_summary_part.added",
                {**ids, "summary_index": 0, "part": {"type": "summary_text", "text": ""}},
            )
        return out

    def _close(self, status: str = "completed") -> bytes:
        out = b""
        for item in self._open:
            out += self._done(item, status)
        self._open.clear()
        return out

    def _done(self, item: _Item, status: str) -> bytes:
        item.done = True
        ids = {"item_id": item.id, "output_index": item.index}
        out = b""
        if item.kind == "message":
            out += self._event(
                "response.output_text.done",
                {**ids, "content_index": 0, "text": item.text, "logprobs": []},
            )
            out += self._event(
                "response.content_part.done",
                {**ids, "content_index": 0, "part": _text_part(item.text)},
            )
        elif item.kind == "reasoning" and item.text:
            out += self._event(
                "response.reasoning_summary_text.done",
                {**ids, "summary_index": 0, "text": item.text},
            )
            out += self._event(
                "response.reasoning_summary_part.done",
                {**ids, "summary_index": 0, "part": {"type": "summary_text", "text": item.text}},
            )
        elif item.kind == "function_call":
            out += self._event(
                "response.function_call_arguments.done",
                {**ids, "name": item.name, "arguments": item.text},
            )
        return out + self._event(
            "response.output_item.done",
            {"output_index": item.index, "item": self._item_body(item, status)},
        )

    def _current(self, kind: str) -> _Item | None:
        if len(self._open) == 1 and self._open[0].kind == kind:
            return self._open[0]
        return None

    # -- deltas --

    def text(self, text: str, logprobs: Mapping[str, Any] | None = None) -> bytes:
        """An ``output_text.delta`` (opening the message item first when none is open);
        OpenAI chat ``logprobs`` (``{"content": [...]}``) go out as the delta's list."""
        item = self._current("message")
        out = b""
        if item is None:
            item, out = self._add("message", "msg")
            out += self._added(item)
        item.text += text
        listed = (logprobs or {}).get("content") or []
        return out + self._event(
            "response.output_text.delta",
            {
                "item_id": item.id,
                "output_index": item.index,
                "content_index": 0,
                "delta": text,
                "logprobs": listed,
            },
        )

    def reasoning(self, text: str) -> bytes:
        """A ``reasoning_summary_text.delta`` (opening a reasoning item first when none is
        open, or when the open one is signed: its block is whole)."""
        item = self._current("reasoning")
        out = b""
        if item is None or item.signature is not None:
            item, out = self._add("reasoning", "rs")
            out += self._added(item)
        item.text += text
        return out + self._event(
            "response.reasoning_summary_text.delta",
            {"item_id": item.id, "output_index": item.index, "summary_index": 0, "delta": text},
        )

    def signature(self, event: ReasoningSignature) -> bytes:
        """A reasoning block's signature: it goes in the reasoning item's
        ``encrypted_content`` (a whole item when it came with no reasoning text)."""
        item = self._current("reasoning")
        if item is None or item.signature is not None:
            item, out = self._add("reasoning", "rs")
            item.signature = event.signature
            return out + self._added(item)
        item.signature = event.signature
        return b""

    def tool_call(self, delta: ToolCallDelta) -> bytes:
        """A ``function_call_arguments.delta`` (opening the call's item first with its first
        fragment)."""
        item = self._calls.get(delta.index)
        out = b""
        if item is not None and item.done:
            return b""  # a fragment after its item was done: no upstream sends one
        if item is None:
            if any(i.kind != "function_call" for i in self._open):
                out = self._close()
            index = len(self._items)
            item = _Item("function_call", _item_id("fc", self._id, index), index)
            item.call_id = delta.id or f"call_{delta.index}"
            item.name = delta.name or ""
            self._items.append(item)
            self._open.append(item)
            self._calls[delta.index] = item
            out += self._added(item)
        if not delta.arguments:
            return out
        item.text += delta.arguments
        return out + self._event(
            "response.function_call_arguments.delta",
            {"item_id": item.id, "output_index": item.index, "delta": delta.arguments},
        )

    # -- the end --

    def finish(self, result: ChatResult) -> bytes:
        """The open items done, then ``response.completed`` (or ``response.incomplete``) with
        the whole response: the items as streamed, the result's usage.

        A function call's id, name and arguments are the result's (the streamed fragments
        may lack an id or hold arguments the runtime repaired); a reply that streamed nothing
        gets its output from the result.
        """
        status, incomplete = _status(result)
        calls = result.tool_calls
        open_calls = [i for i in self._items if i.kind == "function_call"]
        if len(calls) == len(open_calls):
            for item, call in zip(open_calls, calls, strict=True):
                if not item.done:
                    item.call_id, item.name, item.text = call.id, call.name, call.arguments
        out = self._close("incomplete" if incomplete else "completed")
        if self._items:
            output = [
                self._item_body(i, status if i.kind == "message" else "completed")
                for i in self._items
            ]
        else:
            output = _output(result, self._id, status)
        response = _response(
            self._id,
            self._model,
            self._created_at,
            self._body,
            status,
            output,
            response_usage(result.usage),
            incomplete,
        )
        return out + self._event(f"response.{status}", {"response": response})

    def error(self, body: bytes) -> bytes:
        """``response.failed`` after the stream began, from an OpenAI error body
        (``{"error": {"message", "type", "code", ...}}``): its message, and the one of the
        Responses API's failure codes that fits it (see :func:`_failure_code`)."""
        try:
            error = orjson.loads(body).get("error") or {}
        except (orjson.JSONDecodeError, AttributeError):
            error = {}
        detail = {"code": _failure_code(error), "message": error.get("message") or "failed"}
        out = self._close("incomplete")
        output = [self._item_body(i, "incomplete") for i in self._items]
        response = _response(
            self._id, self._model, self._created_at, self._body, "failed", output, None,
            error=detail,
        )  # fmt: skip
        return out + self._event("response.failed", {"response": response})
