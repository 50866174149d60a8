"""Request bodies for Ollama's native chat API (``POST /api/chat``).

How our message model maps onto the wire:

* each message has a ``content`` string (its text parts joined); images go to ``images`` as
  bare base64 (Ollama reads nothing else, so an ``https:`` image URL is refused), and so do
  file parts of an ``image/*`` type; other files cannot be sent;
* assistant reasoning goes back in ``thinking``, tool calls in ``tool_calls`` as
  ``{"function": {"index", "name", "arguments"}}`` with ``arguments`` as a JSON object;
* every tool result becomes its own ``{"role": "tool", "content", "tool_name"}`` message; the
  tool name is the result's own, else that of the call with the same id earlier in the
  conversation. The wire format has no error flag or call id for a result.

``stream`` is always sent, because Ollama streams when it is absent. Structured output goes in
``format`` (the JSON schema, or ``"json"``); sampling settings go in ``options``, where
``max_tokens`` is ``num_predict``. Ollama has no ``tool_choice``: ``none`` leaves the tools out,
and ``required`` or a named tool cannot be enforced, so the tools are sent as for ``auto``.
``think`` (reasoning on or off, or a level) and ``keep_alive`` go through ``extra_body``,
which is merged last.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import _conversation
from .._errors import ConfigError
from .._messages import ChatRequest, Message, ReasoningPart, TextPart
from .base import HttpRequest
from .openai_request import merge_extra
from .wire import arguments_object, json_body, request_headers

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from .._messages import FilePart, ImagePart, Tool

# Tool calls and results, images and files are tested for through sluice._conversation, after
# text and reasoning: a plain text chat never loads their classes.

__all__ = ["build_body", "build_request", "chat_url"]


def chat_url(base_url: str) -> str:
    """``{base_url}/api/chat``; a trailing ``/v1`` (the OpenAI-compatible prefix) is dropped."""
    base = base_url.rstrip("/").removesuffix("/v1")
    return base + "/api/chat"


def build_request(
    request: ChatRequest,
    *,
    base_url: str,
    api_key: str | None,
    headers: Mapping[str, str] | None = None,
) -> HttpRequest:
    """``POST {base_url}/api/chat`` for ``request`` (``base_url`` like
    ``http://localhost:11434``).

    Headers: ``user-agent`` (``sluice/<version>``), ``content-type``, ``accept``
    (``application/x-ndjson`` when streaming), ``authorization`` when ``api_key`` is given
    (Ollama's cloud wants one), then the request's
    ``extra_headers`` (see :func:`.wire.add_headers`), then ``headers``, which replace
    defaults of the same name.

    Raises:
        ConfigError: a part cannot be sent in this protocol.
    """
    credential = ("authorization", f"Bearer {api_key}") if api_key else None
    built = request_headers(
        "application/x-ndjson" if request.stream else "application/json",
        credential,
        request.extra_headers,
        headers,
    )
    return HttpRequest(
        method="POST",
        url=chat_url(base_url),
        headers=built,
        body=json_body(build_body(request)),
    )


def build_body(request: ChatRequest) -> dict[str, Any]:
    """The JSON body for ``request``, before serialization."""
    body: dict[str, Any] = {
        "model": request.model_name,
        "messages": _messages(request.messages),
        "stream": request.stream,
    }
    if request.tools and request.tool_choice != "none":
        body["tools"] = [_tool(t) for t in request.tools]
    fmt = request.response_format
    if fmt is not None and fmt.type != "text":
        body["format"] = fmt.schema if fmt.type == "json_schema" and fmt.schema else "json"
    options: dict[str, Any] = {}
    if request.temperature is not None:
        options["temperature"] = request.temperature
    if request.top_p is not None:
        options["top_p"] = request.top_p
    if request.max_tokens is not None:
        options["num_predict"] = request.max_tokens
    if request.stop:
        options["stop"] = list(request.stop)
    if request.seed is not None:
        options["seed"] = request.seed
    if options:
        body["options"] = options
    if request.extra_body:
        merge_extra(body, request.extra_body)
    return body


def _messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # call id -> tool name, to name the tool of a result
    for message in messages:
        texts: list[str] = []
        images: list[str] = []
        reasoning: list[str] = []
        calls: list[dict[str, Any]] = []
        for part in message.content:
            if isinstance(part, TextPart):
                texts.append(part.text)
            elif isinstance(part, ReasoningPart):
                if message.role == "assistant":
                    reasoning.append(part.text)
            elif isinstance(part, _conversation.ToolResultPart):
                result = {"role": "tool", "content": part.content}
                name = part.name or names.get(part.tool_call_id)
                if name:
                    result["tool_name"] = name
                out.append(result)
            elif isinstance(part, _conversation.ToolCall):
                names[part.id] = part.name
                function = {
                    "index": len(calls),
                    "name": part.name,
                    "arguments": arguments_object(part, "Ollama"),
                }
                calls.append({"function": function})
            else:
                images.append(_image(part))
        if not (texts or images or calls or reasoning) and message.content:
            continue  # it held only tool results, now tool messages of their own
        wire: dict[str, Any] = {"role": message.role, "content": "".join(texts)}
        if images:
            wire["images"] = images
        if reasoning:
            wire["thinking"] = "".join(reasoning)
        if calls:
            wire["tool_calls"] = calls
        out.append(wire)
    return out


def _image(part: ImagePart | FilePart) -> str:
    if isinstance(part, _conversation.FilePart):
        if part.data is None or not (part.media_type or "").startswith("image/"):
            raise ConfigError("Ollama takes only images, as base64 data, not other files")
        data = part.data
    else:
        data = part.url
    if data.startswith("data:"):
        header, comma, payload = data[5:].partition(",")
        if not comma or not header.endswith(";base64"):
            raise ConfigError("a data: URL sent to Ollama must be base64-encoded")
        return payload
    if isinstance(part, _conversation.ImagePart):
        raise ConfigError("Ollama takes images as base64 data (a data: URL), not by URL")
    return data


def _tool(tool: Tool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    function["parameters"] = tool.parameters
    return {"type": "function", "function": function}
