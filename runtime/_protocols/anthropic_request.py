"""Request bodies for the Anthropic messages protocol (``POST /v1/messages``).

How our message model maps onto the wire:

* every system message goes to the top-level ``system``: one message as a string, several as a
  list of text blocks (the API has no system turn inside ``messages``);
* tool messages become ``user`` turns of ``tool_result`` blocks, and consecutive turns of the
  same role are merged into one, so the results of parallel calls share a single user turn;
* assistant tool calls become ``tool_use`` blocks whose ``input`` is the parsed arguments
  object; a reasoning part with a signature goes back as a ``thinking`` block (one with a
  signature and no text as ``redacted_thinking``, the form the decoder reads it into), and a
  reasoning part without a signature is not sent, as the API would reject it;
* images are ``base64`` sources (from ``data:`` URLs) or ``url`` sources; files are
  ``document`` blocks (PDF and other base64 data, plain text as a ``text`` source, or a
  Files API id).

``max_tokens`` is required by the API, so a request without one asks for
:data:`DEFAULT_MAX_TOKENS`. ``tool_choice`` maps ``auto``/``required``/``none``/a named tool to
``auto``/``any``/``none``/``tool``, and ``parallel_tool_calls=False`` to
``disable_parallel_tool_use``. ``seed`` and ``response_format`` have no equivalent in this
protocol and are not sent; ``thinking``, ``metadata`` and the like go through ``extra_body``,
which is merged last exactly as for the OpenAI protocol.

Prompt caching (``ChatRequest.cache_breakpoints``) puts ``cache_control: {"type":
"ephemeral"}`` on the last tool definition (``tools``), on the last system block (``system``;
the system prompt is then sent as a list of blocks), and on the last block of the last
message that is not a temporary correction message (``last_message``), so a correction retry
reuses the cache of the conversation it corrects. Thinking blocks cannot carry a breakpoint,
so the last other block of that message does; a tool result can. The API caches nothing for a
prompt shorter than its minimum (1024 tokens for most models) and says no more about it.

A part or tool that carries its own ``cache_control`` (what a client of the gateway wrote on
that block) sends it on its block unchanged, and a breakpoint never overwrites it; a system
prompt with such a part goes as one text block per part, so each marker stays where it was.
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Any

from .. import _conversation
from .._errors import ConfigError
from .._messages import ChatRequest, Message, ReasoningPart, TextPart, is_temporary
from .base import HttpRequest
from .openai_request import merge_extra
from .wire import arguments_object, json_body, request_headers

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._messages import CacheBreakpoint, ContentPart, FilePart, ImagePart, Tool

# Tool calls and results, images, files and a named tool choice are tested for through
# sluice._conversation, after text: a plain text chat never loads their classes.

__all__ = ["ANTHROPIC_VERSION", "DEFAULT_MAX_TOKENS", "build_body", "build_request"]

_UNMARKABLE = frozenset(("thinking", "redacted_thinking"))

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
"""``max_tokens`` for a request that sets none (the API has no default of its own)."""


def build_request(
    request: ChatRequest,
    *,
    base_url: str,
    api_key: str | None,
    headers: Mapping[str, str] | None = None,
) -> HttpRequest:
    """``POST {base_url}/messages`` for ``request``.

    ``base_url`` holds the version prefix (``https://api.anthropic.com/v1``). Headers:
    ``user-agent`` (``sluice/<version>``), ``content-type``, ``accept``,
    ``anthropic-version``, ``x-api-key`` when ``api_key`` is given, then the request's
    ``extra_headers`` (see :func:`.wire.add_headers`), then ``headers``, which replace
    defaults of the same name.

    Raises:
        ConfigError: a part cannot be sent in this protocol (see the module docstring).
    """
    credential = ("x-api-key", api_key) if api_key else None
    built = request_headers(
        "text/event-stream" if request.stream else "application/json",
        credential,
        request.extra_headers,
        headers,
        ("anthropic-version", ANTHROPIC_VERSION),
    )
    return HttpRequest(
        method="POST",
        url=base_url.rstrip("/") + "/messages",
        headers=built,
        body=json_body(build_body(request)),
    )


def build_body(request: ChatRequest) -> dict[str, Any]:
    """The JSON body for ``request``, before serialization."""
    system = [m for m in request.messages if m.role == "system"]
    points = request.cache_breakpoints
    body: dict[str, Any] = {
        "model": request.model_name,
        "max_tokens": request.max_tokens if request.max_tokens is not None else DEFAULT_MAX_TOKENS,
        "messages": _messages((m for m in request.messages if m.role != "system"), points),
    }
    if system:
        body["system"] = _system(system, points)
    if request.tools:
        body["tools"] = [_tool(t) for t in request.tools]
        if "tools" in points:
            body["tools"][-1].setdefault("cache_control", {"type": "ephemeral"})
    choice = _tool_choice(request)
    if choice is not None:
        body["tool_choice"] = choice
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    if request.stream:
        body["stream"] = True
    if request.extra_body:
        merge_extra(body, request.extra_body)
    return body


def _system(
    messages: list[Message], points: frozenset[CacheBreakpoint]
) -> str | list[dict[str, Any]]:
    texts = []
    marked = False
    for message in messages:
        for part in message.content:
            if not isinstance(part, TextPart):
                raise ConfigError(f"a system message can only hold text, not a {part.type} part")
            marked = marked or part.cache_control is not None
        texts.append(message.text)
    blocks: list[dict[str, Any]]
    if marked:
        blocks = [
            block
            for message in messages
            for part in message.content
            if (block := _block(part, assistant=False)) is not None
        ]
    elif len(texts) == 1 and ("system" not in points or not texts[0]):
        return texts[0]
    else:
        blocks = [{"type": "text", "text": text} for text in texts if text]
    if blocks and "system" in points:
        blocks[-1].setdefault("cache_control", {"type": "ephemeral"})
    return blocks


def _messages(messages: Any, points: frozenset[CacheBreakpoint]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    mark_last = "last_message" in points
    mark: dict[str, Any] | None = None  # the block for the last_message breakpoint
    for message in messages:
        role = "assistant" if message.role == "assistant" else "user"
        blocks = [
            block
            for part in message.content
            if (block := _block(part, assistant=role == "assistant")) is not None
        ]
        if not blocks and message.content:
            continue  # only parts with no wire form (unsigned reasoning)
        if mark_last and not is_temporary(message):
            markable = [b for b in blocks if b["type"] not in _UNMARKABLE]
            if markable:
                mark = markable[-1]
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    if mark is not None:
        mark.setdefault("cache_control", {"type": "ephemeral"})
    return out


def _block(part: ContentPart, *, assistant: bool) -> dict[str, Any] | None:
    block = _wire_block(part, assistant=assistant)
    if block is not None and not isinstance(part, ReasoningPart) and part.cache_control:
        block["cache_control"] = part.cache_control
    return block


def _wire_block(part: ContentPart, *, assistant: bool) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        # The API rejects empty text blocks.
        return {"type": "text", "text": part.text} if part.text else None
    if isinstance(part, ReasoningPart):
        if not assistant or not part.signature:
            return None
        if not part.text:
            return {"type": "redacted_thinking", "data": part.signature}
        return {"type": "thinking", "thinking": part.text, "signature": part.signature}
    if isinstance(part, _conversation.ToolResultPart):
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": part.tool_call_id,
            "content": part.content,
        }
        if part.is_error:
            result["is_error"] = True
        return result
    if isinstance(part, _conversation.ToolCall):
        return {
            "type": "tool_use",
            "id": part.id,
            "name": part.name,
            "input": arguments_object(part, "Anthropic"),
        }
    if isinstance(part, _conversation.ImagePart):
        return {"type": "image", "source": _image_source(part)}
    return _document(part)


def _data_url(url: str) -> tuple[str, str] | None:
    """``(media_type, base64 data)`` of a base64 ``data:`` URL, else None."""
    if not url.startswith("data:"):
        return None
    header, comma, data = url[5:].partition(",")
    media_type, _, encoding = header.partition(";")
    if not comma or encoding != "base64":
        raise ConfigError("a data: URL sent to Anthropic must be base64-encoded")
    return media_type, data


def _image_source(part: ImagePart) -> dict[str, Any]:
    inline = _data_url(part.url)
    if inline is None:
        return {"type": "url", "url": part.url}
    media_type, data = inline
    return {"type": "base64", "media_type": part.media_type or media_type, "data": data}


def _document(part: FilePart) -> dict[str, Any]:
    if part.file_id is not None:
        source: dict[str, Any] = {"type": "file", "file_id": part.file_id}
    elif part.data is not None:
        inline = _data_url(part.data)
        media_type, data = inline if inline is not None else ("", part.data)
        media_type = part.media_type or media_type or "application/pdf"
        if media_type == "text/plain":
            source = {"type": "text", "media_type": media_type, "data": _decode_text(data)}
        else:
            source = {"type": "base64", "media_type": media_type, "data": data}
    else:
        raise ConfigError("a file part needs data or a file_id")
    block: dict[str, Any] = {"type": "document", "source": source}
    if part.name is not None:
        block["title"] = part.name
    return block


def _decode_text(data: str) -> str:
    try:
        return base64.b64decode(data, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise ConfigError("a text/plain file part must hold base64-encoded UTF-8") from None


def _tool(tool: Tool) -> dict[str, Any]:
    wire: dict[str, Any] = {"name": tool.name}
    if tool.description:
        wire["description"] = tool.description
    wire["input_schema"] = tool.parameters
    if tool.cache_control:
        wire["cache_control"] = tool.cache_control
    return wire


def _tool_choice(request: ChatRequest) -> dict[str, Any] | None:
    choice = request.tool_choice
    wire: dict[str, Any]
    if choice is not None and isinstance(choice, _conversation.SpecificTool):
        wire = {"type": "tool", "name": choice.name}
    elif choice == "required":
        wire = {"type": "any"}
    elif choice == "none":
        return {"type": "none"}
    elif choice == "auto" or (request.parallel_tool_calls is False and request.tools):
        wire = {"type": "auto"}
    else:
        return None
    if request.parallel_tool_calls is False:
        wire["disable_parallel_tool_use"] = True
    return wire
