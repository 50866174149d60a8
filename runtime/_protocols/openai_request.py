"""Request bodies for the OpenAI chat-completions protocol.

How our message model maps onto the wire:

* a message whose parts are all text sends ``content`` as one string (the parts joined, as
  :attr:`Message.text` joins them); any other mix sends a content array of ``text``,
  ``image_url`` and ``file`` items;
* assistant tool calls go to ``tool_calls``, with ``content: null`` when there is no text, and
  reasoning parts go back as ``reasoning_content`` (DeepSeek and Moonshot want them echoed);
* every tool result becomes its own ``{"role": "tool", "tool_call_id", "content"}`` message,
  placed before what else its message held. The wire format has no error flag for a tool
  result, so ``is_error`` is not sent.

Fields left None or empty are omitted. ``extra_body`` is merged last: a mapping merges into a
mapping of the same key, any other value replaces, and None deletes the key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from .. import _conversation
from .._errors import ConfigError
from .._messages import ChatRequest, Message, ReasoningPart, TextPart
from .base import HttpRequest
from .quirks import RequestQuirks, apply_quirks
from .wire import json_body, request_headers

if TYPE_CHECKING:
    from .._messages import ContentPart, ResponseFormat, Tool

__all__ = ["build_body", "build_request", "chat_url", "merge_extra"]


def build_request(
    request: ChatRequest,
    *,
    base_url: str,
    api_key: str | None,
    headers: Mapping[str, str] | None = None,
    quirks: RequestQuirks | None = None,
) -> HttpRequest:
    """``POST {base_url}/chat/completions`` for ``request``.

    ``base_url`` already holds the version prefix (``https://api.openai.com/v1``); with
    ``quirks.azure_api_version`` it is an Azure resource's root and the deployment-style path
    and ``api-version`` query are added (see :class:`~.quirks.RequestQuirks`). Headers:
    ``user-agent`` (``sluice/<version>``), ``content-type``, ``accept`` (``text/event-stream``
    when streaming), ``authorization`` when ``api_key`` is given, then the request's
    ``extra_headers`` (see :func:`.wire.add_headers`), then ``headers``, which replace
    defaults of the same name.
    ``quirks`` adapt the body to one provider's server (see :mod:`.quirks`).
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
        url=chat_url(base_url, request.model_name, quirks),
        headers=built,
        body=json_body(build_body(request, quirks)),
    )


def chat_url(base_url: str, model: str, quirks: RequestQuirks | None = None) -> str:
    """Where a chat request for ``model`` goes: OpenAI's path, or Azure's deployment path."""
    root = base_url.rstrip("/")
    version = quirks.azure_api_version if quirks is not None else None
    if version is None:
        return root + "/chat/completions"
    deployment = quote(model, safe="")
    return f"{root}/openai/deployments/{deployment}/chat/completions?api-version={quote(version)}"


def build_body(request: ChatRequest, quirks: RequestQuirks | None = None) -> dict[str, Any]:
    """The JSON body for ``request``, before serialization."""
    body: dict[str, Any] = {"model": request.model_name, "messages": _messages(request.messages)}
    if request.tools:
        body["tools"] = [_tool(t) for t in request.tools]
    choice = request.tool_choice
    if choice is not None:
        if isinstance(choice, _conversation.SpecificTool):
            body["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
        else:
            body["tool_choice"] = choice
    if request.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = request.parallel_tool_calls
    if request.response_format is not None:
        body["response_format"] = _response_format(request.response_format)
    for key in ("temperature", "top_p", "max_tokens", "seed"):
        value = getattr(request, key)
        if value is not None:
            body[key] = value
    if request.stop:
        body["stop"] = list(request.stop)
    if request.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if quirks is not None:
        apply_quirks(body, quirks)
    if request.extra_body:
        merge_extra(body, request.extra_body)
    return body


def merge_extra(body: dict[str, Any], extra: Mapping[str, Any]) -> None:
    """Merge ``extra`` into ``body`` in place (see the module docstring for the rules)."""
    for key, value in extra.items():
        if value is None:
            body.pop(key, None)
            continue
        current = body.get(key)
        if isinstance(value, Mapping) and isinstance(current, dict):
            merge_extra(current, value)
        else:
            body[key] = value


def _messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        rest: list[ContentPart] = []
        for part in message.content:
            if type(part) is TextPart:
                rest.append(part)  # the common part, tested first: the others load when met
            elif isinstance(part, _conversation.ToolResultPart):
                out.append(
                    {"role": "tool", "tool_call_id": part.tool_call_id, "content": part.content}
                )
            elif message.role == "assistant" or not isinstance(part, ReasoningPart):
                rest.append(part)
            # Reasoning outside an assistant message has no wire form, so it is not sent.
        if not rest and message.content:
            continue  # it held only tool results, now tool messages of their own
        if message.role == "assistant":
            out.append(_assistant(rest))
        else:
            out.append({"role": message.role, "content": _content(rest)})
    return out


def _assistant(parts: list[ContentPart]) -> dict[str, Any]:
    if all(type(p) is TextPart for p in parts):
        return {"role": "assistant", "content": _content(parts)}  # text alone: the usual reply
    tool_call = _conversation.ToolCall
    calls = [p for p in parts if isinstance(p, tool_call)]
    reasoning = "".join(p.text for p in parts if isinstance(p, ReasoningPart))
    others = [p for p in parts if not isinstance(p, tool_call | ReasoningPart)]
    wire: dict[str, Any] = {"role": "assistant"}
    wire["content"] = _content(others) if others or not calls else None
    if reasoning:
        wire["reasoning_content"] = reasoning
    if calls:
        wire["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for c in calls
        ]
    return wire


def _content(parts: Sequence[ContentPart]) -> str | list[dict[str, Any]]:
    """Text parts alone are one string; any other part makes it a list of items. A loop,
    not generators: built for every message of every call."""
    texts: list[str] = []
    for part in parts:
        if not isinstance(part, TextPart):
            return [_content_item(p) for p in parts]
        texts.append(part.text)
    return "".join(texts)


def _content_item(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, _conversation.ImagePart):
        image: dict[str, Any] = {"url": part.url}
        if part.detail is not None:
            image["detail"] = part.detail
        return {"type": "image_url", "image_url": image}
    if isinstance(part, _conversation.FilePart):
        file: dict[str, Any] = {}
        if part.file_id is not None:
            file["file_id"] = part.file_id
        if part.data is not None:
            if part.data.startswith("data:"):
                file["file_data"] = part.data
            else:
                # Chat completions only reads PDFs, so that is the type a bare payload gets.
                media_type = part.media_type or "application/pdf"
                file["file_data"] = f"data:{media_type};base64,{part.data}"
        if part.name is not None:
            file["filename"] = part.name
        return {"type": "file", "file": file}
    raise ConfigError(f"a {part.type} part cannot be sent in the content of a message")


def _tool(tool: Tool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    function["parameters"] = tool.parameters
    if tool.strict is not None:
        function["strict"] = tool.strict
    return {"type": "function", "function": function}


def _response_format(fmt: ResponseFormat) -> dict[str, Any]:
    if fmt.type != "json_schema":
        return {"type": fmt.type}
    schema: dict[str, Any] = {"name": fmt.name}
    if fmt.schema is not None:
        schema["schema"] = fmt.schema
    if fmt.strict is not None:
        schema["strict"] = fmt.strict
    return {"type": "json_schema", "json_schema": schema}
