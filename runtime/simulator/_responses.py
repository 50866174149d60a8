"""OpenAI's Responses API (``POST /v1/responses``) as the simulator serves it. Pure.

:func:`parse_responses_request` validates a body and builds the same
:class:`~._request.ChatRequest` the chat routes build, so a reply is planned once for every
protocol (text, JSON text for ``text.format``, or a call of one function tool). The request
also says whether a reasoning summary was asked for (``reasoning.summary`` set): the reply then
begins with a ``reasoning`` item whose summary is a few generated words, counted as reasoning
tokens (in ``output_tokens`` too, as OpenAI counts them).

Replies: a ``response`` object (:func:`response_body`) or the event stream
(:func:`response_events`): ``response.created``, ``response.in_progress``, the reasoning item's
events when asked, the message item (``output_item.added``, ``content_part.added``,
``output_text.delta`` per token group, ``output_text.done``, ``content_part.done``,
``output_item.done``) or the function call item (``function_call_arguments.delta``/``.done``),
then ``response.completed`` -- or ``response.incomplete`` with
``incomplete_details.reason = "max_output_tokens"`` when the token limit cut the reply. Each
event has ``event:`` and ``data:`` lines and a ``sequence_number`` from 0. Prompt tokens are
counted by the simulator's one rule (:mod:`.text`) over the instructions, the input's texts and
the tool definitions.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import attrs
import orjson

from ._request import (
    ANY_OBJECT,
    ChatRequest,
    RequestError,
    ToolTarget,
    ignores_tools,
    tool_for_choice,
)
from ._text import count_tokens, derive_seed, generate_tokens, split_fragments
from ._wire import group_tokens

if TYPE_CHECKING:
    from ._reply import Reply

__all__ = [
    "MALFORMED",
    "ResponsesRequest",
    "parse_responses_request",
    "reasoning_tokens",
    "response_body",
    "response_events",
]

MALFORMED = (
    b"event: response.output_text.delta\n"
    b'data: {"type":"response.output_text.delta",<simulated malformed event>\n\n'
)
"""The event the ``malformed`` fault inserts: its data is not JSON."""

SUMMARY_TOKENS = 12
"""Tokens of a reasoning summary."""


@attrs.frozen(kw_only=True)
class ResponsesRequest(ChatRequest):
    """A chat request that came as a Responses body: what the reply adds to a chat reply."""

    summary: bool = False
    """``reasoning.summary`` was set: the reply begins with a reasoning item."""
    settings: dict[str, Any] = attrs.field(factory=dict, eq=False)
    """The request's settings a ``response`` object repeats (``instructions``, ``tools``...)."""


def _fail(message: str, param: str | None) -> RequestError:
    return RequestError(message, param)


def _texts(content: Any, where: str) -> str:
    """The text of a message's content: a string, or its parts' ``text``."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _fail(f"Invalid type for '{where}': expected a string or an array.", where)
    return "\n".join(
        p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
    )


def _read_input(raw: Any) -> tuple[int, int, str, str]:
    """``(characters, tokens, last role, last user text)`` of ``input``."""
    if isinstance(raw, str):
        return len(raw), count_tokens(raw), "user", raw
    if not isinstance(raw, list) or not raw:
        raise _fail("Invalid 'input': expected a string or a non-empty array of items.", "input")
    chars = words = 0
    role = last_user_text = ""
    for index, item in enumerate(raw):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise _fail(f"Invalid type for '{where}': expected an object.", where)
        kind = item.get("type", "message")
        if kind == "message":
            if item.get("role") not in ("user", "system", "developer", "assistant"):
                raise _fail(
                    f"Invalid value for '{where}.role': expected 'user', 'system', "
                    "'developer' or 'assistant'.",
                    f"{where}.role",
                )
            text = _texts(item.get("content"), f"{where}.content")
            role = item["role"]
            if role == "user":
                last_user_text = text
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise _fail(f"Missing required parameter: '{where}.call_id'.", f"{where}.call_id")
            output = item.get("output")
            text = output if isinstance(output, str) else _texts(output, f"{where}.output")
            role = "tool"
        elif kind == "function_call":
            if not isinstance(item.get("call_id"), str) or not isinstance(item.get("name"), str):
                raise _fail(f"Missing required parameter: '{where}.call_id'.", f"{where}.call_id")
            text = str(item.get("arguments", ""))
            role = "assistant"
        elif kind == "reasoning":
            continue
        else:
            raise _fail(f"Invalid value for '{where}.type': {kind!r} is not supported.", where)
        chars += len(text)
        words += count_tokens(text)
    return chars, words, role, last_user_text


def _tools(raw: Any) -> list[ToolTarget]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _fail("Invalid type for 'tools': expected an array.", "tools")
    tools = []
    for index, tool in enumerate(raw):
        if not isinstance(tool, dict):
            raise _fail(f"Invalid value for 'tools[{index}]': expected an object.", "tools")
        if tool.get("type") != "function":
            continue  # a built-in tool (web search, file search): the simulator never calls it
        if not isinstance(tool.get("name"), str):
            raise _fail(f"Missing required parameter: 'tools[{index}].name'.", f"tools[{index}]")
        parameters = tool.get("parameters")
        tools.append(ToolTarget(tool["name"], parameters or {"type": "object", "properties": {}}))
    return tools


def _pick(tools: list[ToolTarget], choice: Any, role: str, last: str) -> ToolTarget | None:
    return tool_for_choice(
        tools,
        choice,
        role,
        last,
        name_of=lambda named: named.get("name"),
        named_shape='{"type": "function", "name": ...}',
    )


def _json_schema(text: Any) -> Any:
    if text is None:
        return None
    if not isinstance(text, dict):
        raise _fail("Invalid type for 'text': expected an object.", "text")
    fmt = text.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise _fail("Invalid type for 'text.format': expected an object.", "text.format")
    match fmt.get("type"):
        case "text":
            return None
        case "json_object":
            return ANY_OBJECT
        case "json_schema":
            if not isinstance(fmt.get("name"), str):
                raise _fail("Missing required parameter: 'text.format.name'.", "text.format.name")
            return fmt.get("schema", ANY_OBJECT)
    raise _fail(
        "Invalid value for 'text.format.type': expected 'text', 'json_object' or 'json_schema'.",
        "text.format.type",
    )


def _settings(data: dict[str, Any]) -> dict[str, Any]:
    return {
        "instructions": data.get("instructions"),
        "max_output_tokens": data.get("max_output_tokens"),
        "metadata": data.get("metadata") or {},
        "parallel_tool_calls": data.get("parallel_tool_calls", True),
        "previous_response_id": data.get("previous_response_id"),
        "reasoning": data.get("reasoning") or {"effort": None, "summary": None},
        "store": data.get("store", True),
        "temperature": data.get("temperature", 1.0),
        "text": data.get("text") or {"format": {"type": "text"}},
        "tool_choice": data.get("tool_choice", "auto"),
        "tools": data.get("tools") or [],
        "top_p": data.get("top_p", 1.0),
        "truncation": data.get("truncation", "disabled"),
        "user": data.get("user"),
    }


def parse_responses_request(body: bytes, *, ignore_tool_choice: bool = False) -> ChatRequest:
    """Validate ``body`` (``POST /v1/responses``) and pick the reply kind.

    ``model`` and ``input`` are required. A function tool is called as on the chat route: when
    ``tool_choice`` is ``required`` (the tool the last user text names, else the first) or
    names a function, or is ``auto``/absent while the input ends with a user message that
    names a tool or says "tool". Built-in tools are never called. ``text.format`` asks for
    JSON text; ``max_output_tokens`` caps the reply.

    Raises:
        RequestError: bad JSON, a missing or malformed field, or a ``tool_choice`` that names
            no given tool.
    """
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise _fail(
            "We could not parse the JSON body of your request. The body must be a JSON object.",
            None,
        ) from None
    if not isinstance(data, dict):
        raise _fail("The request body must be a JSON object.", None)
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise _fail("You must provide a model parameter.", "model")
    if "input" not in data:
        raise _fail("Missing required parameter: 'input'.", "input")
    chars, words, role, last_user_text = _read_input(data["input"])
    instructions = data.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise _fail("Invalid type for 'instructions': expected a string.", "instructions")
        chars += len(instructions)
        words += count_tokens(instructions)
    stream = data.get("stream") or False
    if not isinstance(stream, bool):
        raise _fail("Invalid type for 'stream': expected a boolean.", "stream")
    limit = data.get("max_output_tokens")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise _fail(
            f"Invalid 'max_output_tokens': expected an integer >= 1, got {limit!r}.",
            "max_output_tokens",
        )
    reasoning = data.get("reasoning")
    if reasoning is not None and not isinstance(reasoning, dict):
        raise _fail("Invalid type for 'reasoning': expected an object.", "reasoning")
    ignore = ignores_tools(model, ignore_tool_choice)
    tools = [] if ignore else _tools(data.get("tools"))
    if tools:
        definitions = orjson.dumps(data["tools"])
        chars += len(definitions)
        words += len(split_fragments(definitions.decode()))
    return ResponsesRequest(
        model=model,
        stream=stream,
        include_usage=False,
        max_tokens=limit,
        digest=hashlib.blake2b(
            orjson.dumps([instructions, data["input"]], option=orjson.OPT_SORT_KEYS),
            digest_size=16,
        ).digest(),
        prompt_chars=chars,
        prompt_tokens=words,
        last_user_text=last_user_text,
        tool=None if ignore else _pick(tools, data.get("tool_choice"), role, last_user_text),
        json_schema=_json_schema(data.get("text")),
        summary=bool(reasoning and reasoning.get("summary")),
        settings=_settings(data),
    )


# ---- the reply ---------------------------------------------------------------------------------


def reasoning_tokens(request: ChatRequest) -> int:
    """The reasoning tokens the reply to ``request`` spends: its summary's, when asked."""
    if isinstance(request, ResponsesRequest) and request.summary:
        return SUMMARY_TOKENS
    return 0


def _summary(request: ChatRequest) -> tuple[str, ...]:
    if not isinstance(request, ResponsesRequest) or not request.summary:
        return ()
    return generate_tokens(derive_seed("reasoning summary"), request.digest, SUMMARY_TOKENS)


def _usage(reply: Reply, reasoning: int) -> dict[str, Any]:
    output = reply.completion_tokens + reasoning
    return {
        "input_tokens": reply.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": reply.prompt_tokens + output,
    }


def _ids(request_id: str) -> tuple[str, str]:
    """The response id and the suffix its items' ids share."""
    suffix = request_id.replace("-", "")
    return f"resp_{suffix}", suffix


def _response(
    request: ChatRequest,
    response_id: str,
    created: int,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
) -> dict[str, Any]:
    settings = request.settings if isinstance(request, ResponsesRequest) else {}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "model": request.model,
        "output": output,
        **settings,
        "usage": usage,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _items(reply: Reply, suffix: str, summary: str | None, status: str) -> list[dict[str, Any]]:
    """The output items of a whole reply: the reasoning item (when ``summary`` is not None),
    then the message or the function call."""
    items: list[dict[str, Any]] = []
    if summary is not None:
        items.append(_reasoning_item(suffix, summary))
    text = "".join(reply.tokens)
    if reply.tool_name is None:
        items.append(_message_item(suffix, text, status))
    else:
        items.append(_call_item(suffix, reply, text, status))
    return items


def _reasoning_item(suffix: str, summary: str) -> dict[str, Any]:
    return {
        "id": f"rs_{suffix}",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": summary}] if summary else [],
    }


def _message_item(suffix: str, text: str | None, status: str) -> dict[str, Any]:
    return {
        "id": f"msg_{suffix}",
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [] if text is None else [_text_part(text)],
    }


def _call_item(suffix: str, reply: Reply, arguments: str, status: str) -> dict[str, Any]:
    return {
        "id": f"fc_{suffix}",
        "type": "function_call",
        "status": status,
        "arguments": arguments,
        "call_id": reply.tool_call_id,
        "name": reply.tool_name,
    }


def _status(reply: Reply) -> str:
    return "incomplete" if reply.finish_reason == "length" else "completed"


def response_body(request: ChatRequest, reply: Reply, *, request_id: str, created: int) -> bytes:
    """The whole (non-streamed) ``response`` object."""
    response_id, suffix = _ids(request_id)
    summary = _summary(request)
    status = _status(reply)
    output = _items(reply, suffix, "".join(summary) if summary else None, status)
    return orjson.dumps(
        _response(request, response_id, created, status, output, _usage(reply, len(summary)))
    )


class _Events:
    """Numbers and frames the events of one stream."""

    __slots__ = ("_seq",)

    def __init__(self) -> None:
        self._seq = 0

    def __call__(self, kind: str, data: dict[str, Any]) -> bytes:
        body = orjson.dumps({"type": kind, "sequence_number": self._seq, **data})
        self._seq += 1
        return b"event: %s\ndata: %s\n\n" % (kind.encode(), body)


def _summary_events(
    event: _Events, suffix: str, summary: tuple[str, ...], tokens_per_chunk: int
) -> list[bytes]:
    """The reasoning item's events, whole: added, its summary part streamed, done."""
    text = "".join(summary)
    ids = {"item_id": f"rs_{suffix}", "output_index": 0, "summary_index": 0}
    part = {"type": "summary_text", "text": text}
    return [
        event(
            "response.output_item.added",
            {"output_index": 0, "item": {**_reasoning_item(suffix, ""), "summary": []}},
        ),
        event("response.reasoning_summary_part.added", {**ids, "part": {**part, "text": ""}}),
        *(
            event("response.reasoning_summary_text.delta", {**ids, "delta": piece})
            for piece in group_tokens(summary, tokens_per_chunk)
        ),
        event("response.reasoning_summary_text.done", {**ids, "text": text}),
        event("response.reasoning_summary_part.done", {**ids, "part": part}),
        event(
            "response.output_item.done",
            {"output_index": 0, "item": _reasoning_item(suffix, text)},
        ),
    ]


def _answer_events(
    event: _Events, reply: Reply, suffix: str, index: int, status: str, tokens_per_chunk: int
) -> tuple[list[bytes], list[bytes], list[bytes], dict[str, Any]]:
    """The answer item's events: ``(opening, deltas, closing, the finished item)``; the answer
    is a message with one text part, or one function call."""
    opening: list[bytes]
    text = "".join(reply.tokens)
    chunks: list[bytes]
    if reply.tool_name is None:
        ids = {"item_id": f"msg_{suffix}", "output_index": index, "content_index": 0}
        opening = [
            event(
                "response.output_item.added",
                {"output_index": index, "item": _message_item(suffix, None, "in_progress")},
            ),
            event("response.content_part.added", {**ids, "part": _text_part("")}),
        ]
        chunks = [
            event("response.output_text.delta", {**ids, "delta": piece, "logprobs": []})
            for piece in group_tokens(reply.tokens, tokens_per_chunk)
        ]
        closing = [
            event("response.output_text.done", {**ids, "text": text, "logprobs": []}),
            event("response.content_part.done", {**ids, "part": _text_part(text)}),
        ]
        done_item = _message_item(suffix, text, status)
    else:
        ids = {"item_id": f"fc_{suffix}", "output_index": index}
        opening = [
            event(
                "response.output_item.added",
                {"output_index": index, "item": _call_item(suffix, reply, "", "in_progress")},
            )
        ]
        chunks = [
            event("response.function_call_arguments.delta", {**ids, "delta": piece})
            for piece in group_tokens(reply.tokens, tokens_per_chunk)
        ]
        closing = [
            event(
                "response.function_call_arguments.done",
                {**ids, "name": reply.tool_name, "arguments": text},
            )
        ]
        done_item = _call_item(suffix, reply, text, status)
    return opening, chunks, closing, done_item


def response_events(
    request: ChatRequest,
    reply: Reply,
    *,
    request_id: str,
    created: int,
    tokens_per_chunk: int,
    paced: bool,
) -> list[list[bytes]]:
    """The stream's events, grouped into the slots sent at the same moment (as the chat
    route's: unpaced one slot; paced, the opening events with the first delta, one delta per
    slot, the last slot closing the response)."""
    event = _Events()
    response_id, suffix = _ids(request_id)
    summary = _summary(request)
    shell = _response(request, response_id, created, "in_progress", [], None)
    opening = [
        event("response.created", {"response": shell}),
        event("response.in_progress", {"response": shell}),
    ]
    index = 0
    if summary:
        opening += _summary_events(event, suffix, summary, tokens_per_chunk)
        index = 1
    status = _status(reply)
    added, chunks, closing, done_item = _answer_events(
        event, reply, suffix, index, status, tokens_per_chunk
    )
    opening += added
    output = _items(reply, suffix, "".join(summary) if summary else None, status)
    closing += [
        event("response.output_item.done", {"output_index": index, "item": done_item}),
        event(
            f"response.{status}",
            {
                "response": _response(
                    request, response_id, created, status, output, _usage(reply, len(summary))
                )
            },
        ),
    ]
    if not (paced and chunks):
        return [[*opening, *chunks, *closing]]
    slots = [[*opening, chunks[0]], *([c] for c in chunks[1:])]
    slots[-1].extend(closing)
    return slots
