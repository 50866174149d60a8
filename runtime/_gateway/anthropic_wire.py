"""The Anthropic messages wire format, as the gateway serves it. Pure: no I/O, no clock.

:func:`parse_messages_body` reads a ``POST /v1/messages`` body into a
:class:`~sluice._messages.ChatRequest` (the reverse of
:mod:`sluice._protocols.anthropic_request`): ``system`` becomes system messages, ``tool_use``
blocks tool calls, ``tool_result`` blocks tool messages, ``thinking`` blocks reasoning parts
with their signature, ``image``/``document`` blocks image and file parts; ``tool_choice``
``auto``/``any``/``tool``/``none`` becomes ``auto``/``required``/a named tool/``none``, and
``disable_parallel_tool_use`` ``parallel_tool_calls=False``. Other body keys (``thinking``,
``metadata``, ``top_k``) go to ``extra_body``. A block's or a tool's ``cache_control`` stays on
its part or tool (the system prompt keeps one text part per block for that), so it reaches an
Anthropic upstream exactly where the client put it.

Replies: a ``message`` object (:func:`render_message`) or the event stream Anthropic sends
(:class:`AnthropicEvents`): ``message_start``, per content block ``content_block_start``, its
deltas (a thinking block's ``signature_delta`` included) and ``content_block_stop``, then
``message_delta`` (stop reason, stop sequence and usage) and ``message_stop``.
``message_start`` reports the prompt's tokens when the upstream told them before the first
output (an Anthropic upstream does), else 0; ``message_delta`` always has the real counts,
which the SDK's accumulator takes. The stop reason is the upstream's own when it is an
Anthropic one that agrees with the normalized reason (``stop_sequence``, ``pause_turn``, ...),
else the one :data:`STOP_REASONS` maps the normalized reason to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import orjson

from .._errors import ConfigError
from .._messages import (
    ChatRequest,
    ContentPart,
    FilePart,
    ImagePart,
    Message,
    ReasoningPart,
    SpecificTool,
    TextPart,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResultPart,
)
from .._protocols.anthropic_decode import normalize_finish_reason

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._events import ReasoningSignature, ToolCallDelta
    from .._messages import ChatResult, Usage

__all__ = [
    "STOP_REASONS",
    "AnthropicEvents",
    "error_body",
    "parse_messages_body",
    "render_message",
    "stop_reason",
]

STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}
"""Anthropic's ``stop_reason`` for each normalized finish reason (``other``: ``end_turn``)."""

_ANTHROPIC_STOPS = frozenset(
    {
        "end_turn",
        "max_tokens",
        "stop_sequence",
        "tool_use",
        "pause_turn",
        "refusal",
        "model_context_window_exceeded",
    }
)


def stop_reason(result: ChatResult) -> str:
    """The ``stop_reason`` for ``result``: the upstream's own when it is Anthropic's and agrees
    with the normalized reason (tool finalization may have changed that), else the mapped one."""
    raw = result.raw_finish_reason
    if raw in _ANTHROPIC_STOPS and (
        normalize_finish_reason(raw, bool(result.tool_calls)) == result.finish_reason
    ):
        return raw
    if result.stop_sequence is not None and result.finish_reason == "stop":
        return "stop_sequence"
    return STOP_REASONS.get(result.finish_reason, "end_turn")


_MAPPED = frozenset(
    {
        "model",
        "messages",
        "system",
        "max_tokens",
        "tools",
        "tool_choice",
        "temperature",
        "top_p",
        "stop_sequences",
        "stream",
    }
)


def error_body(message: str, type_: str) -> bytes:
    """Anthropic's error object: ``{"type": "error", "error": {"type", "message"}}``."""
    return orjson.dumps({"type": "error", "error": {"type": type_, "message": message}})


def _fail(path: str, problem: str) -> ConfigError:
    return ConfigError(f"{path}: {problem}")


def _dict(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _fail(path, "expected an object")
    return value


def _list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(path, "expected an array")
    return value


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise _fail(path, "expected a string")
    return value


def _blocks(content: Any, path: str) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [_dict(b, f"{path}.{i}") for i, b in enumerate(_list(content, path))]


def _result_text(content: Any, path: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for i, block in enumerate(_list(content, path)):
        b = _dict(block, f"{path}.{i}")
        if b.get("type") == "text":
            texts.append(_str(b.get("text"), f"{path}.{i}.text"))
    return "".join(texts)


def _source(block: Mapping[str, Any], path: str) -> tuple[str | None, str | None, str | None]:
    """``(url, media_type, base64 data)`` of an image or document source."""
    source = _dict(block.get("source"), f"{path}.source")
    kind = source.get("type")
    if kind == "url":
        return _str(source.get("url"), f"{path}.source.url"), None, None
    if kind == "base64":
        media = _str(source.get("media_type"), f"{path}.source.media_type")
        return None, media, _str(source.get("data"), f"{path}.source.data")
    if kind == "text":
        import base64

        text = _str(source.get("data"), f"{path}.source.data")
        return None, "text/plain", base64.b64encode(text.encode()).decode()
    raise _fail(f"{path}.source.type", f"unsupported source type {kind!r}")


def _cache_control(block: Mapping[str, Any], path: str) -> Mapping[str, Any] | None:
    marker = block.get("cache_control")
    return None if marker is None else _dict(marker, f"{path}.cache_control")


def _part(block: Mapping[str, Any], path: str) -> ContentPart | Message:
    kind = block.get("type")
    if kind == "text":
        return TextPart(
            _str(block.get("text"), f"{path}.text"), cache_control=_cache_control(block, path)
        )
    if kind == "tool_use":
        return ToolCall(
            id=_str(block.get("id"), f"{path}.id"),
            name=_str(block.get("name"), f"{path}.name"),
            arguments=orjson.dumps(block.get("input") or {}).decode(),
            cache_control=_cache_control(block, path),
        )
    if kind == "tool_result":
        result = ToolResultPart(
            tool_call_id=_str(block.get("tool_use_id"), f"{path}.tool_use_id"),
            content=_result_text(block.get("content"), f"{path}.content"),
            is_error=block.get("is_error") is True,
            cache_control=_cache_control(block, path),
        )
        return Message("tool", (result,))
    if kind == "thinking":
        return ReasoningPart(
            text=_str(block.get("thinking", ""), f"{path}.thinking"),
            signature=block.get("signature") if isinstance(block.get("signature"), str) else None,
        )
    if kind == "redacted_thinking":
        return ReasoningPart(text="", signature=_str(block.get("data"), f"{path}.data"))
    if kind == "image":
        url, media, data = _source(block, path)
        if url is None:
            url = f"data:{media};base64,{data}"
        return ImagePart(url=url, media_type=media, cache_control=_cache_control(block, path))
    if kind == "document":
        url, media, data = _source(block, path)
        title = block.get("title")
        return FilePart(
            data=data if url is None else url,
            media_type=media,
            name=title if isinstance(title, str) else None,
            cache_control=_cache_control(block, path),
        )
    raise _fail(f"{path}.type", f"unsupported content block type {kind!r}")


def _messages(raw: list[Any], path: str) -> list[Message]:
    """Anthropic turns as our messages: a user turn's tool results become tool messages,
    in order, around its other blocks."""
    out: list[Message] = []
    for i, turn in enumerate(raw):
        where = f"{path}.{i}"
        t = _dict(turn, where)
        role = t.get("role")
        if role not in ("user", "assistant"):
            raise _fail(f"{where}.role", "expected 'user' or 'assistant'")
        parts: list[ContentPart] = []
        for j, block in enumerate(_blocks(t.get("content"), f"{where}.content")):
            part = _part(block, f"{where}.content.{j}")
            if isinstance(part, Message):
                if parts:
                    out.append(Message(role, tuple(parts)))
                    parts = []
                out.append(part)
            else:
                parts.append(part)
        if parts or not out or out[-1].role != "tool":
            out.append(Message(role, tuple(parts)))
    return out


def _system(value: Any, path: str) -> list[Message]:
    if value is None:
        return []
    if isinstance(value, str):
        return [Message.system(value)] if value else []
    parts = []
    for i, b in enumerate(_list(value, path)):
        block = _dict(b, f"{path}.{i}")
        parts.append(
            TextPart(
                _str(block.get("text"), f"{path}.{i}.text"),
                cache_control=_cache_control(block, f"{path}.{i}"),
            )
        )
    return [Message.system(parts)] if parts else []


def _tool(value: Any, path: str) -> Tool:
    t = _dict(value, path)
    schema = t.get("input_schema", {"type": "object", "properties": {}})
    description = t.get("description", "")
    return Tool(
        name=_str(t.get("name"), f"{path}.name"),
        description=_str(description, f"{path}.description"),
        parameters=_dict(schema, f"{path}.input_schema"),
        cache_control=_cache_control(t, path),
    )


def _tool_choice(value: Any, path: str) -> tuple[ToolChoice | None, bool | None]:
    if value is None:
        return None, None
    c = _dict(value, path)
    kind = c.get("type")
    parallel = False if c.get("disable_parallel_tool_use") is True else None
    if kind == "auto":
        return "auto", parallel
    if kind == "any":
        return "required", parallel
    if kind == "none":
        return "none", None
    if kind == "tool":
        return SpecificTool(_str(c.get("name"), f"{path}.name")), parallel
    raise _fail(f"{path}.type", "expected 'auto', 'any', 'tool' or 'none'")


def parse_messages_body(
    body: Any, *, model: str, fields: Mapping[str, Any] | None = None
) -> ChatRequest:
    """Read a messages request body into a :class:`ChatRequest` for ``model``
    (``provider:model``, already resolved by the caller), with the caller's own ``fields``
    (given to the constructor, so checked once).

    Raises:
        ConfigError: a required field is missing (``max_tokens``, ``messages``) or a field
            has the wrong shape; the message names its path (``messages.2.content``).
    """
    b = _dict(body, "body")
    max_tokens = b.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise _fail("max_tokens", "required, an integer >= 1")
    raw = _list(b.get("messages"), "messages")
    if not raw:
        raise _fail("messages", "at least one message is required")
    messages = _system(b.get("system"), "system") + _messages(raw, "messages")
    tools = tuple(
        _tool(t, f"tools.{i}") for i, t in enumerate(_list(b.get("tools") or [], "tools"))
    )
    choice, parallel = _tool_choice(b.get("tool_choice"), "tool_choice")
    stop = _list(b.get("stop_sequences") or [], "stop_sequences")
    temperature = b.get("temperature")
    top_p = b.get("top_p")
    for name, value in (("temperature", temperature), ("top_p", top_p)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise _fail(name, "expected a number")
    return ChatRequest(
        model=model,
        messages=messages,
        tools=cast("Any", tools),
        tool_choice=choice,
        parallel_tool_calls=parallel,
        temperature=None if temperature is None else float(temperature),
        top_p=None if top_p is None else float(top_p),
        max_tokens=max_tokens,
        stop=cast("Any", tuple(_str(s, f"stop_sequences.{i}") for i, s in enumerate(stop))),
        extra_body={k: v for k, v in b.items() if k not in _MAPPED},
        **(fields or {}),
    )


def _usage(usage: Usage) -> dict[str, int]:
    return {
        "input_tokens": usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens,
        "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cache_read_tokens,
    }


def _content(result: ChatResult) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in result.message.content:
        if isinstance(part, ReasoningPart):
            if part.text:
                blocks.append(
                    {"type": "thinking", "thinking": part.text, "signature": part.signature or ""}
                )
            elif part.signature:
                blocks.append({"type": "redacted_thinking", "data": part.signature})
        elif isinstance(part, TextPart):
            if part.text:
                blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ToolCall):
            try:
                arguments = part.parsed_arguments()
            except ValueError:
                arguments = {}
            blocks.append(
                {"type": "tool_use", "id": part.id, "name": part.name, "input": arguments}
            )
    return blocks


def render_message(result: ChatResult, *, model: str, message_id: str) -> bytes:
    """The ``message`` body for ``result``, naming the model as the client did."""
    return orjson.dumps(
        {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": _content(result),
            "stop_reason": stop_reason(result),
            "stop_sequence": result.stop_sequence,
            "usage": _usage(result.usage),
        }
    )


def _event(kind: bytes, data: bytes) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (kind, data)


class AnthropicEvents:
    """Encodes one call's events as Anthropic's SSE events, opening and closing content
    blocks as the kind of delta changes."""

    __slots__ = ("_block", "_index", "_model", "_tool_blocks", "message_id")

    def __init__(self, message_id: str, model: str) -> None:
        self.message_id = message_id
        self._model = model
        self._index = -1
        """The index of the open block; -1 before the first."""
        self._block: str | int | None = None
        """What the open block holds: ``text``, ``thinking`` (``signed`` once its signature
        came), or a tool call's index."""
        self._tool_blocks: set[int] = set()

    def start(self, usage: Usage | None = None) -> bytes:
        """``message_start``, with the prompt's token counts when ``usage`` tells them."""
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": 0,
                "output_tokens": 0,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            }
            if usage is None
            else _usage(usage),
        }
        return _event(b"message_start", orjson.dumps({"type": "message_start", "message": message}))

    def _open(self, kind: str | int, block: dict[str, Any]) -> bytes:
        out = self._close()
        self._index += 1
        self._block = kind
        data = {"type": "content_block_start", "index": self._index, "content_block": block}
        return out + _event(b"content_block_start", orjson.dumps(data))

    def _close(self) -> bytes:
        if self._block is None:
            return b""
        self._block = None
        return _event(
            b"content_block_stop",
            b'{"type":"content_block_stop","index":%d}' % self._index,
        )

    def text(self, text: str, logprobs: Mapping[str, Any] | None = None) -> bytes:
        """A text delta (this format has no log probabilities: ``logprobs`` is not sent)."""
        out = b"" if self._block == "text" else self._open("text", {"type": "text", "text": ""})
        return out + _event(
            b"content_block_delta",
            b'{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":%s}}'
            % (self._index, orjson.dumps(text)),
        )

    def reasoning(self, text: str) -> bytes:
        out = b""
        if self._block != "thinking":
            out = self._open("thinking", {"type": "thinking", "thinking": "", "signature": ""})
        return out + _event(
            b"content_block_delta",
            b'{"type":"content_block_delta","index":%d,"delta":{"type":"thinking_delta",'
            b'"thinking":%s}}' % (self._index, orjson.dumps(text)),
        )

    def signature(self, event: ReasoningSignature) -> bytes:
        """A thinking block's ``signature_delta``, or a whole ``redacted_thinking`` block."""
        if event.redacted:
            block = {"type": "redacted_thinking", "data": event.signature}
            return self._open("redacted", block) + self._close()
        out = b""
        if self._block != "thinking":  # a signature with no thinking text before it
            out = self._open("thinking", {"type": "thinking", "thinking": "", "signature": ""})
        self._block = "signed"  # the block is whole: more reasoning opens the next one
        return out + _event(
            b"content_block_delta",
            b'{"type":"content_block_delta","index":%d,"delta":{"type":"signature_delta",'
            b'"signature":%s}}' % (self._index, orjson.dumps(event.signature)),
        )

    def tool_call(self, delta: ToolCallDelta) -> bytes:
        out = b""
        if self._block != delta.index:
            if delta.index in self._tool_blocks:
                # Fragments of an earlier call after another block opened: Anthropic has no
                # way to reopen a block, so they cannot be sent (no upstream interleaves).
                return b""
            self._tool_blocks.add(delta.index)
            block = {
                "type": "tool_use",
                "id": delta.id or f"toolu_{delta.index}",
                "name": delta.name or "",
                "input": {},
            }
            out = self._open(delta.index, block)
        if not delta.arguments:
            return out
        return out + _event(
            b"content_block_delta",
            b'{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta",'
            b'"partial_json":%s}}' % (self._index, orjson.dumps(delta.arguments)),
        )

    def finish(self, result: ChatResult) -> bytes:
        delta = {
            "type": "message_delta",
            "delta": {
                "stop_reason": stop_reason(result),
                "stop_sequence": result.stop_sequence,
            },
            "usage": _usage(result.usage),
        }
        return (
            self._close()
            + _event(b"message_delta", orjson.dumps(delta))
            + _event(b"message_stop", b'{"type":"message_stop"}')
        )

    @staticmethod
    def error(body: bytes) -> bytes:
        return _event(b"error", body)
