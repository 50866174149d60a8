"""OpenAI Responses API bodies to sluice models and back, as a server speaks it. Pure: no I/O,
no clock.

:func:`parse_responses_body` reads a ``POST /v1/responses`` body (or the ``body`` of a Batch
input line with that URL) into a :class:`~sluice._messages.ChatRequest`, so a Responses client
reaches any provider; :func:`render_response` writes a finished
:class:`~sluice._messages.ChatResult` as a ``response`` object; :class:`ResponsesEvents` turns
one call's deltas into the Responses stream (``response.created`` ... ``response.completed``,
each event with its ``sequence_number``).

What maps to what. ``instructions`` is the first system message; ``input`` is one user message
(a string) or a list of items: messages (``input_text``, ``input_image``, ``input_file`` and an
assistant's ``output_text``/``refusal`` parts), ``function_call`` items (consecutive ones, with
the reasoning and assistant text before them, make one assistant message) and
``function_call_output`` items (tool messages). ``tools`` holds function tools (the flat
Responses shape); ``tool_choice`` is ``auto``/``required``/``none`` or a named function;
``text.format`` is structured output; ``max_output_tokens`` is ``max_tokens``. Every other key
(``reasoning``, ``metadata``, ``store``, ``previous_response_id``, ``include``, ...) goes to
``extra_body`` as sent: the server decides what it can honour.

Back: reasoning becomes a ``reasoning`` item whose summary is the reasoning text (its signature,
if any, in ``encrypted_content``, which a later request's ``reasoning`` item hands back),
text a ``message`` item with one ``output_text`` part, each tool call a ``function_call`` item
whose ``call_id`` is the call's id. A reply cut by the token limit or a content filter is
``incomplete`` with ``incomplete_details.reason`` (``max_output_tokens``, ``content_filter``).

Every problem in a body raises :class:`~sluice._errors.ConfigError` whose message names the
field path (``body.input[2].content[0].image_url: ...``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import orjson

from ._messages import (
    ChatRequest,
    ContentPart,
    FilePart,
    ImagePart,
    Message,
    ReasoningPart,
    ResponseFormat,
    SpecificTool,
    TextPart,
    Tool,
    ToolCall,
    ToolChoice,
    split_model,
)
from ._openai_parse import expect_dict, expect_list, expect_str, fail, integer, number

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._events import ReasoningSignature, ToolCallDelta
    from ._messages import ChatResult, Usage

__all__ = [
    "ResponsesEvents",
    "parse_responses_body",
    "render_response",
    "response_usage",
]

# Body keys read into ChatRequest fields (or deliberately dropped: the server decides how to
# stream); every other key goes to the provider in ``extra_body``.
_MAPPED_KEYS = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "text",
        "temperature",
        "top_p",
        "max_output_tokens",
        "stream",
        "stream_options",
    }
)

# ---- body -> ChatRequest ---------------------------------------------------------------------


def _model(body: Mapping[str, Any], override: str | None, path: str) -> str:
    if override is not None:
        return override
    if "model" not in body:
        raise fail(
            f"{path}.model", "missing; write it as 'provider:model' or pass a model override"
        )
    model = expect_str(body["model"], f"{path}.model")
    try:
        split_model(model)
    except ValueError:
        raise fail(
            f"{path}.model",
            f"{model!r} names no provider; write it as 'provider:model' "
            f"(for example 'openai:{model}') or pass a model override",
        ) from None
    return model


def _image(part: Mapping[str, Any], path: str) -> ImagePart:
    detail = part.get("detail")
    if detail not in (None, "auto", "low", "high"):
        raise fail(f"{path}.detail", f"expected 'auto', 'low' or 'high', got {detail!r}")
    url = part.get("image_url")
    if url is None:
        if part.get("file_id") is not None:
            raise fail(
                f"{path}.file_id",
                "images by file id are not supported here; send 'image_url' (an https: or "
                "data: URL)",
            )
        raise fail(f"{path}.image_url", "missing; an input_image needs an https: or data: URL")
    return ImagePart(url=expect_str(url, f"{path}.image_url"), detail=detail)


def _file(part: Mapping[str, Any], path: str) -> FilePart:
    data, file_id = part.get("file_data"), part.get("file_id")
    if data is None and file_id is None:
        if part.get("file_url") is not None:
            raise fail(f"{path}.file_url", "files by URL are not supported; send 'file_data'")
        raise fail(path, "an input_file needs 'file_data' or 'file_id'")
    media_type = None
    if data is not None:
        data = expect_str(data, f"{path}.file_data")
        if data.startswith("data:") and ";base64," in data:
            header, _, data = data.partition(";base64,")
            media_type = header.removeprefix("data:") or None
    name = part.get("filename")
    return FilePart(
        data=data,
        media_type=media_type,
        name=None if name is None else expect_str(name, f"{path}.filename"),
        file_id=None if file_id is None else expect_str(file_id, f"{path}.file_id"),
    )


def _input_part(value: Any, path: str) -> ContentPart:
    part = expect_dict(value, path)
    kind = part.get("type")
    if kind in ("input_text", "output_text"):
        return TextPart(expect_str(part.get("text"), f"{path}.text"))
    if kind == "refusal":
        return TextPart(expect_str(part.get("refusal"), f"{path}.refusal"))
    if kind == "input_image":
        return _image(part, path)
    if kind == "input_file":
        return _file(part, path)
    raise fail(
        f"{path}.type",
        f"expected 'input_text', 'input_image', 'input_file' or 'output_text', got {kind!r}",
    )


def _content(value: Any, path: str, *, text_only: bool) -> tuple[ContentPart, ...]:
    if isinstance(value, str):
        return (TextPart(value),)
    parts = tuple(_input_part(p, f"{path}[{i}]") for i, p in enumerate(expect_list(value, path)))
    if text_only:
        for i, p in enumerate(parts):
            if not isinstance(p, TextPart):
                raise fail(f"{path}[{i}].type", "only text is allowed in this message")
    return parts


def _output_text(value: Any, path: str) -> str:
    """A ``function_call_output``'s ``output``: a string, or a list of ``input_text`` parts."""
    if isinstance(value, str):
        return value
    texts = []
    for i, item in enumerate(expect_list(value, path)):
        part = expect_dict(item, f"{path}[{i}]")
        if part.get("type") != "input_text":
            raise fail(
                f"{path}[{i}].type",
                f"only 'input_text' parts are supported in a tool output, got {part.get('type')!r}",
            )
        texts.append(expect_str(part.get("text"), f"{path}[{i}].text"))
    return "".join(texts)


def _reasoning(item: Mapping[str, Any], path: str) -> ReasoningPart:
    summary = item.get("summary") or []
    texts = []
    for i, value in enumerate(expect_list(summary, f"{path}.summary")):
        texts.append(expect_str(expect_dict(value, f"{path}.summary[{i}]").get("text"),
                                f"{path}.summary[{i}].text"))  # fmt: skip
    signature = item.get("encrypted_content")
    return ReasoningPart(
        text="\n\n".join(texts),
        signature=None if signature is None else expect_str(signature, f"{path}.encrypted_content"),
    )


_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}


def _messages(value: Any, path: str) -> list[Message]:
    """The ``input`` items as messages: an assistant's reasoning, text and function calls that
    follow each other make one assistant message, as a chat conversation holds them."""
    if isinstance(value, str):
        return [Message.user(value)]
    items = expect_list(value, path)
    out: list[Message] = []
    turn: list[ContentPart] = []  # the assistant turn being gathered

    def close_turn() -> None:
        if turn:
            out.append(Message("assistant", tuple(turn)))
            turn.clear()

    for i, raw in enumerate(items):
        where = f"{path}[{i}]"
        item = expect_dict(raw, where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in _ROLES:
                raise fail(
                    f"{where}.role",
                    f"expected 'user', 'system', 'developer' or 'assistant', got {role!r}",
                )
            if "content" not in item:
                raise fail(f"{where}.content", "missing")
            content = _content(item["content"], f"{where}.content", text_only=role != "user")
            if role == "assistant":
                turn.extend(content)
                continue
            close_turn()
            out.append(Message(_ROLES[role], content))  # type: ignore[arg-type]
        elif kind == "function_call":
            arguments = item.get("arguments", "{}")
            if not isinstance(arguments, str):
                arguments = orjson.dumps(arguments).decode()
            turn.append(
                ToolCall(
                    id=expect_str(item.get("call_id"), f"{where}.call_id"),
                    name=expect_str(item.get("name"), f"{where}.name"),
                    arguments=arguments,
                )
            )
        elif kind == "reasoning":
            if turn:  # reasoning begins the next turn, never the middle of one
                close_turn()
            turn.append(_reasoning(item, where))
        elif kind == "function_call_output":
            close_turn()
            out.append(
                Message.tool(
                    expect_str(item.get("call_id"), f"{where}.call_id"),
                    _output_text(item.get("output"), f"{where}.output"),
                )
            )
        elif kind == "item_reference":
            raise fail(
                f"{where}.type",
                "'item_reference' needs stored responses, which this server does not keep; "
                "send the items themselves",
            )
        else:
            raise fail(
                f"{where}.type",
                "expected 'message', 'function_call', 'function_call_output' or 'reasoning',"
                f" got {kind!r}",
            )
    close_turn()
    return out


def _tool(value: Any, path: str) -> Tool:
    t = expect_dict(value, path)
    kind = t.get("type")
    if kind != "function":
        raise fail(
            f"{path}.type",
            f"only 'function' tools are supported here, got {kind!r} (built-in tools need "
            "OpenAI's own Responses API)",
        )
    strict = t.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise fail(f"{path}.strict", "expected a boolean")
    parameters = t.get("parameters")
    description = t.get("description")
    return Tool(
        name=expect_str(t.get("name"), f"{path}.name"),
        description="" if description is None else expect_str(description, f"{path}.description"),
        parameters={"type": "object", "properties": {}}
        if parameters is None
        else expect_dict(parameters, f"{path}.parameters"),
        strict=strict,
    )


def _tool_choice(value: Any, path: str) -> ToolChoice | None:
    if value is None:
        return None
    if value in ("auto", "required", "none"):
        return value  # type: ignore[no-any-return]
    choice = expect_dict(value, path)
    if choice.get("type") == "function":
        return SpecificTool(expect_str(choice.get("name"), f"{path}.name"))
    raise fail(
        path,
        "expected 'auto', 'required', 'none' or {\"type\": \"function\", \"name\": ...}, got"
        f" type {choice.get('type')!r}",
    )


def _text_format(value: Any, path: str) -> tuple[ResponseFormat | None, dict[str, Any]]:
    """``text.format`` as a ResponseFormat, and the other keys of ``text`` (``verbosity``)."""
    if value is None:
        return None, {}
    text = expect_dict(value, path)
    rest = {k: v for k, v in text.items() if k != "format"}
    if text.get("format") is None:
        return None, rest
    fmt = expect_dict(text["format"], f"{path}.format")
    kind = fmt.get("type")
    if kind == "text":
        return None, rest
    if kind == "json_object":
        return ResponseFormat(type="json_object"), rest
    if kind == "json_schema":
        strict = fmt.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise fail(f"{path}.format.strict", "expected a boolean")
        if "schema" not in fmt:
            raise fail(f"{path}.format.schema", "missing; a json_schema format needs a schema")
        return ResponseFormat(
            type="json_schema",
            schema=expect_dict(fmt["schema"], f"{path}.format.schema"),
            name=expect_str(fmt.get("name", "response"), f"{path}.format.name"),
            strict=strict,
        ), rest
    raise fail(
        f"{path}.format.type", f"expected 'text', 'json_object' or 'json_schema', got {kind!r}"
    )


def parse_responses_body(
    body: Any,
    *,
    model: str | None = None,
    stream: bool = True,
    path: str = "body",
    fields: Mapping[str, Any] | None = None,
) -> ChatRequest:
    """Read a Responses API request body into a :class:`ChatRequest` (see the module
    docstring for what maps to what).

    Args:
        body: the decoded JSON body.
        model: a ``provider:model`` that replaces the body's ``model``; without it the body's
            model must itself be written ``provider:model``.
        stream: the request's ``stream`` flag; the body's own ``stream`` is ignored, because
            the caller decides how to stream.
        path: the prefix used in error messages.
        fields: more ``ChatRequest`` fields set by the caller (the gateway's ``tag``).

    Raises:
        ConfigError: the body is no object, the model or input is missing or wrong, or a
            field has the wrong shape; the message names the field.
    """
    b = expect_dict(body, path)
    chosen = _model(b, model, path)
    if "input" not in b:
        raise fail(f"{path}.input", "missing; send a string or a list of input items")
    messages = _messages(b["input"], f"{path}.input")
    instructions = b.get("instructions")
    if instructions is not None:
        messages.insert(0, Message.system(expect_str(instructions, f"{path}.instructions")))
    if not any(m.role != "system" for m in messages):
        raise fail(f"{path}.input", "must hold at least one item")
    tools = tuple(
        _tool(t, f"{path}.tools[{i}]")
        for i, t in enumerate(expect_list(b.get("tools") or [], f"{path}.tools"))
    )
    parallel = b.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise fail(f"{path}.parallel_tool_calls", "expected a boolean")
    response_format, text_rest = _text_format(b.get("text"), f"{path}.text")
    metadata = b.get("metadata")
    if metadata is not None:
        for key, value in expect_dict(metadata, f"{path}.metadata").items():
            expect_str(value, f"{path}.metadata.{key}")
    extra = {k: v for k, v in b.items() if k not in _MAPPED_KEYS}
    if text_rest:
        extra["text"] = text_rest
    return ChatRequest(
        model=chosen,
        messages=tuple(messages),
        tools=cast("Any", tools),
        tool_choice=_tool_choice(b.get("tool_choice"), f"{path}.tool_choice"),
        parallel_tool_calls=parallel,
        response_format=response_format,
        temperature=number(b.get("temperature"), f"{path}.temperature"),
        top_p=number(b.get("top_p"), f"{path}.top_p"),
        max_tokens=integer(b.get("max_output_tokens"), f"{path}.max_output_tokens"),
        stream=stream,
        extra_body=extra,
        **(fields or {}),
    )


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
    Every event carries the next ``sequence_number``, from 0.
    """

    __slots__ = ("_body", "_calls", "_created_at", "_id", "_items", "_model", "_open", "_seq")

    def __init__(
        self, response_id: str, model: str, created_at: int, body: Mapping[str, Any] | None = None
    ) -> None:
        self._id = response_id
        self._model = model
        self._created_at = created_at
        self._body: Mapping[str, Any] = body or {}
        self._seq = 0
        self._items: list[_Item] = []
        self._open: list[_Item] = []
        """Items added and not yet done: one reasoning or message item, or function calls."""
        self._calls: dict[int, _Item] = {}
        """Function-call items by the call's index in the reply."""

    @property
    def response_id(self) -> str:
        return self._id

    def _event(self, kind: str, data: dict[str, Any]) -> bytes:
        data = {"type": kind, "sequence_number": self._seq, **data}
        self._seq += 1
        return b"event: %s\ndata: %s\n\n" % (kind.encode(), orjson.dumps(data))

    def _shell(self, status: str, output: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return _response(
            self._id, self._model, self._created_at, self._body, status, output or [], None
        )

    def start(self, usage: Usage | None = None) -> bytes:
        """``response.created`` and ``response.in_progress`` (``usage`` is not told before
        the end in this format)."""
        shell = self._shell("in_progress")
        return self._event("response.created", {"response": shell}) + self._event(
            "response.in_progress", {"response": shell}
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
