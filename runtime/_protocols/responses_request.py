"""Request bodies for OpenAI's Responses API (``POST /responses``), built from a ChatRequest.

How our message model maps onto the wire:

* the system messages that open the conversation become ``instructions`` (joined by a blank
  line); a system message later in the conversation stays an ``input`` message of its own;
* a user or assistant message whose parts are all text sends ``content`` as one string; any
  other mix sends ``input_text``, ``input_image`` and ``input_file`` items;
* an assistant message's parts keep their order as ``input`` items: its text as one assistant
  message, each tool call a ``function_call`` item (``call_id``, ``name``, ``arguments``) and
  each reasoning part a ``reasoning`` item, when the part carries the item's id (see
  :func:`reasoning_signature`; reasoning from another provider has no wire form here and is
  not sent);
* every tool result becomes a ``function_call_output`` item, before what else its message
  held. The wire format has no error flag for a tool result, so ``is_error`` is not sent.

Tools are flat (``{"type": "function", "name", "description", "parameters", "strict"}``),
``tool_choice`` names a tool as ``{"type": "function", "name"}``, ``response_format`` goes to
``text.format``, ``max_tokens`` to ``max_output_tokens``. The API has no ``seed`` and no
``stop``: they are left out, with a debug log. ``store`` is false (sluice keeps the
conversation itself; with ``store: false`` the reasoning items come back encrypted when
``include`` asks for ``reasoning.encrypted_content``) unless ``extra_body`` says otherwise.
``extra_body`` is merged last, by the chat protocol's rules (:func:`.openai_request.merge_extra`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from .. import _conversation
from .._errors import ConfigError
from .._messages import ChatRequest, Message, ReasoningPart, TextPart
from .base import HttpRequest
from .openai_request import merge_extra
from .wire import json_body, request_headers

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from .._messages import ContentPart, ResponseFormat, Tool
    from .quirks import RequestQuirks

# Tool calls and results, images, files and a named tool choice are tested for through
# sluice._conversation, after text: a plain text chat never loads their classes.

__all__ = [
    "build_body",
    "build_request",
    "reasoning_signature",
    "responses_url",
    "split_reasoning_signature",
]

_log = logging.getLogger("sluice._protocols.responses_request")


def reasoning_signature(item_id: str, encrypted_content: str | None) -> str:
    """The :attr:`ReasoningPart.signature` that carries a Responses ``reasoning`` item back:
    the item's id, a space, and its ``encrypted_content`` (empty when the reply had none).
    Neither holds a space (ids are ``rs_`` and hex, or a UUID; the content is base64)."""
    return f"{item_id} {encrypted_content or ''}"


def split_reasoning_signature(signature: str | None) -> tuple[str, str | None] | None:
    """``(item id, encrypted content or None)`` of a signature :func:`reasoning_signature`
    made; None for any other signature (another provider's), which has no wire form here."""
    if not signature:
        return None
    item_id, sep, encrypted = signature.partition(" ")
    if not sep or not item_id:
        return None
    return item_id, encrypted or None


def build_request(
    request: ChatRequest,
    *,
    base_url: str,
    api_key: str | None,
    headers: Mapping[str, str] | None = None,
    quirks: RequestQuirks | None = None,
) -> HttpRequest:
    """``POST {base_url}/responses`` for ``request``.

    Headers as :func:`.openai_request.build_request` sets them. Of ``quirks``,
    ``omit_tool_choice`` and ``azure_api_version`` apply (Azure's path is
    ``{base_url}/openai/responses?api-version=...``, the deployment named by ``model``); the
    others describe chat-completions bodies.
    """
    credential = ("authorization", f"Bearer {api_key}") if api_key else None
    built = request_headers(
        "text/event-stream" if request.stream else "application/json",
        credential,
        request.extra_headers,
        headers,
    )
    return HttpRequest(
        method="POST",
        url=responses_url(base_url, quirks),
        headers=built,
        body=json_body(build_body(request, quirks)),
    )


def responses_url(base_url: str, quirks: RequestQuirks | None = None) -> str:
    """Where a Responses request goes: ``{base_url}/responses``, or Azure's path."""
    root = base_url.rstrip("/")
    version = quirks.azure_api_version if quirks is not None else None
    if version is None:
        return root + "/responses"
    return f"{root}/openai/responses?api-version={quote(version)}"


def build_body(request: ChatRequest, quirks: RequestQuirks | None = None) -> dict[str, Any]:
    """The JSON body for ``request``, before serialization."""
    instructions, items = _input(request.messages)
    body: dict[str, Any] = {"model": request.model_name}
    if instructions is not None:
        body["instructions"] = instructions
    body["input"] = items
    if request.tools:
        body["tools"] = [_tool(t) for t in request.tools]
    choice = request.tool_choice
    if choice is not None and isinstance(choice, _conversation.SpecificTool):
        body["tool_choice"] = {"type": "function", "name": choice.name}
    elif choice is not None and not (quirks is not None and choice in quirks.omit_tool_choice):
        body["tool_choice"] = choice
    if request.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = request.parallel_tool_calls
    if request.response_format is not None:
        body["text"] = {"format": _text_format(request.response_format)}
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.max_tokens is not None:
        body["max_output_tokens"] = request.max_tokens
    if request.seed is not None or request.stop:
        _log.debug("seed and stop left out: the Responses API has neither")
    body["store"] = False
    if request.stream:
        body["stream"] = True
    if request.extra_body:
        merge_extra(body, request.extra_body)
    return body


def _input(messages: tuple[Message, ...]) -> tuple[str | None, list[dict[str, Any]]]:
    """``(instructions, input items)`` for the conversation."""
    leading: list[str] = []
    at = 0
    while at < len(messages) and messages[at].role == "system":
        leading.append(_text_only(messages[at]))
        at += 1
    items: list[dict[str, Any]] = []
    for message in messages[at:]:
        if message.role == "assistant":
            _assistant(message.content, items)
            continue
        rest: list[ContentPart] = []
        for part in message.content:
            if isinstance(part, TextPart):
                rest.append(part)
            elif isinstance(part, _conversation.ToolResultPart):
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": part.tool_call_id,
                        "output": part.content,
                    }
                )
            elif not isinstance(part, ReasoningPart):
                rest.append(part)  # a tool call here is refused by _content_item
        if rest or not message.content:
            role = "user" if message.role == "tool" else message.role
            items.append({"role": role, "content": _content(rest)})
    return ("\n\n".join(leading) if leading else None), items


def _text_only(message: Message) -> str:
    for part in message.content:
        if not isinstance(part, TextPart):
            raise ConfigError(f"a system message can hold only text, not a {part.type} part")
    return message.text


def _assistant(parts: tuple[ContentPart, ...], items: list[dict[str, Any]]) -> None:
    """An assistant message's parts as input items, in order; adjacent text is one message."""
    text: list[ContentPart] = []

    def flush() -> None:
        if text:
            items.append({"role": "assistant", "content": _content(text, output=True)})
            text.clear()

    for part in parts:
        if isinstance(part, TextPart):
            text.append(part)
        elif isinstance(part, _conversation.ToolCall):
            flush()
            items.append(
                {
                    "type": "function_call",
                    "call_id": part.id,
                    "name": part.name,
                    "arguments": part.arguments,
                }
            )
        elif isinstance(part, ReasoningPart):
            found = split_reasoning_signature(part.signature)
            if found is None:
                continue  # another provider's reasoning: nothing here can carry it
            flush()
            item: dict[str, Any] = {"type": "reasoning", "id": found[0], "summary": []}
            if part.text:
                item["summary"] = [{"type": "summary_text", "text": part.text}]
            if found[1] is not None:
                item["encrypted_content"] = found[1]
            items.append(item)
        elif isinstance(part, _conversation.ToolResultPart):
            flush()
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": part.tool_call_id,
                    "output": part.content,
                }
            )
        else:
            text.append(part)
    flush()


def _content(parts: Sequence[ContentPart], *, output: bool = False) -> str | list[dict[str, Any]]:
    if all(isinstance(p, TextPart) for p in parts):
        return "".join(p.text for p in parts if isinstance(p, TextPart))
    return [_content_item(p, output) for p in parts]


def _content_item(part: ContentPart, output: bool) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "output_text" if output else "input_text", "text": part.text}
    if isinstance(part, _conversation.ImagePart):
        image: dict[str, Any] = {"type": "input_image", "image_url": part.url}
        image["detail"] = part.detail or "auto"
        return image
    if isinstance(part, _conversation.FilePart):
        file: dict[str, Any] = {"type": "input_file"}
        if part.file_id is not None:
            file["file_id"] = part.file_id
        if part.data is not None:
            if part.data.startswith("data:"):
                file["file_data"] = part.data
            else:
                media_type = part.media_type or "application/pdf"
                file["file_data"] = f"data:{media_type};base64,{part.data}"
        if part.name is not None:
            file["filename"] = part.name
        return file
    raise ConfigError(f"a {part.type} part cannot be sent in the content of a message")


def _tool(tool: Tool) -> dict[str, Any]:
    wire: dict[str, Any] = {"type": "function", "name": tool.name}
    if tool.description:
        wire["description"] = tool.description
    wire["parameters"] = tool.parameters
    if tool.strict is not None:
        wire["strict"] = tool.strict
    return wire


def _text_format(fmt: ResponseFormat) -> dict[str, Any]:
    if fmt.type != "json_schema":
        return {"type": fmt.type}
    wire: dict[str, Any] = {"type": "json_schema", "name": fmt.name}
    if fmt.schema is not None:
        wire["schema"] = fmt.schema
    if fmt.strict is not None:
        wire["strict"] = fmt.strict
    return wire
