"""Request bodies for the Gemini API (``generateContent`` and ``streamGenerateContent``).

How our message model maps onto the wire:

* system messages go to ``systemInstruction``; user and tool messages are ``user`` contents,
  assistant messages ``model`` contents, and consecutive contents of the same role are merged,
  so the responses to parallel calls share one turn as the API requires;
* text is a ``text`` part, reasoning a ``text`` part with ``thought: true``; ``data:`` images
  and base64 files are ``inlineData``, other URLs and file ids ``fileData``;
* a tool call is a ``functionCall`` part (``id``, ``name``, ``args`` as an object) and a tool
  result a ``functionResponse`` part whose ``response`` is ``{"output": text}``, or
  ``{"error": text}`` for a failed call, the keys the API documents. Its ``name`` is the
  result's own, else that of the call with the same id earlier in the conversation;
* a part's ``signature`` (the ``thoughtSignature`` the decoder kept) is sent back on the same
  part, as the API requires for Gemini 3 function calls.

Tools are declared with ``parametersJsonSchema``, which takes our JSON schemas as they are (the
older ``parameters`` field takes only an OpenAPI subset). ``tool_choice`` becomes
``toolConfig.functionCallingConfig.mode`` ``AUTO``/``ANY``/``NONE``, a named tool ``ANY`` with
``allowedFunctionNames``. Sampling settings go to ``generationConfig``, where ``max_tokens`` is
``maxOutputTokens``; a JSON ``response_format`` sets ``responseMimeType`` and, with a schema,
``responseJsonSchema``. ``parallel_tool_calls`` has no equivalent and is not sent.
``extra_body`` is merged last (``safetySettings``, ``generationConfig.thinkingConfig``, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from .. import _conversation
from .._errors import ConfigError
from .._messages import ChatRequest, Message, ReasoningPart, TextPart
from .base import HttpRequest
from .openai_request import merge_extra
from .wire import arguments_object, json_body, request_headers

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from .._messages import ContentPart, FilePart, Tool

# Tool calls and results, images, files and a named tool choice are tested for through
# sluice._conversation, after text: a plain text chat never loads their classes.

__all__ = ["build_body", "build_request"]

_MODES = {"auto": "AUTO", "required": "ANY", "none": "NONE"}


def build_request(
    request: ChatRequest,
    *,
    base_url: str,
    api_key: str | None,
    headers: Mapping[str, str] | None = None,
) -> HttpRequest:
    """``POST {base_url}/models/{model}:streamGenerateContent?alt=sse`` (or ``:generateContent``).

    ``base_url`` holds the version prefix
    (``https://generativelanguage.googleapis.com/v1beta``); a model name may carry its
    ``models/`` prefix. Headers: ``user-agent`` (``sluice/<version>``), ``content-type``,
    ``accept``, ``x-goog-api-key`` when ``api_key`` is given, then the request's
    ``extra_headers`` (see :func:`.wire.add_headers`), then ``headers``, which replace
    defaults of the same name.

    Raises:
        ConfigError: a part cannot be sent in this protocol.
    """
    model = request.model_name.removeprefix("models/")
    method = "streamGenerateContent?alt=sse" if request.stream else "generateContent"
    credential = ("x-goog-api-key", api_key) if api_key else None
    built = request_headers(
        "text/event-stream" if request.stream else "application/json",
        credential,
        request.extra_headers,
        headers,
    )
    return HttpRequest(
        method="POST",
        url=f"{base_url.rstrip('/')}/models/{quote(model, safe='')}:{method}",
        headers=built,
        body=json_body(build_body(request)),
    )


def build_body(request: ChatRequest) -> dict[str, Any]:
    """The JSON body for ``request``, before serialization."""
    system = [m for m in request.messages if m.role == "system"]
    body: dict[str, Any] = {
        "contents": _contents(m for m in request.messages if m.role != "system")
    }
    if system:
        body["systemInstruction"] = {"parts": [_part(p, {}) for m in system for p in m.content]}
    if request.tools:
        body["tools"] = [{"functionDeclarations": [_declaration(t) for t in request.tools]}]
    choice = request.tool_choice
    if choice is not None and isinstance(choice, _conversation.SpecificTool):
        config = {"mode": "ANY", "allowedFunctionNames": [choice.name]}
        body["toolConfig"] = {"functionCallingConfig": config}
    elif choice is not None:
        body["toolConfig"] = {"functionCallingConfig": {"mode": _MODES[choice]}}
    generation = _generation_config(request)
    if generation:
        body["generationConfig"] = generation
    if request.extra_body:
        merge_extra(body, request.extra_body)
    return body


def _generation_config(request: ChatRequest) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if request.temperature is not None:
        config["temperature"] = request.temperature
    if request.top_p is not None:
        config["topP"] = request.top_p
    if request.max_tokens is not None:
        config["maxOutputTokens"] = request.max_tokens
    if request.stop:
        config["stopSequences"] = list(request.stop)
    if request.seed is not None:
        config["seed"] = request.seed
    fmt = request.response_format
    if fmt is not None and fmt.type != "text":
        config["responseMimeType"] = "application/json"
        if fmt.type == "json_schema" and fmt.schema is not None:
            config["responseJsonSchema"] = fmt.schema
    return config


def _contents(messages: Iterable[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # call id -> tool name: a functionResponse names its function
    for message in messages:
        role = "model" if message.role == "assistant" else "user"
        parts = []
        for part in message.content:
            if isinstance(part, ReasoningPart) and role != "model":
                continue  # reasoning has no wire form outside a model turn
            if isinstance(part, TextPart) and not part.text and not part.signature:
                continue  # the API rejects a part with no data
            parts.append(_part(part, names))
        if not parts:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["parts"].extend(parts)
        else:
            out.append({"role": role, "parts": parts})
    return out


def _part(part: ContentPart, names: dict[str, str]) -> dict[str, Any]:
    wire: dict[str, Any]
    if isinstance(part, TextPart):
        wire = {"text": part.text}
    elif isinstance(part, ReasoningPart):
        wire = {"text": part.text, "thought": True}
    elif isinstance(part, _conversation.ToolCall):
        names[part.id] = part.name
        wire = {
            "functionCall": {
                "id": part.id,
                "name": part.name,
                "args": arguments_object(part, "Gemini"),
            }
        }
    elif isinstance(part, _conversation.ToolResultPart):
        name = part.name or names.get(part.tool_call_id)
        if not name:
            raise ConfigError(
                f"Gemini needs the tool name of the result for call {part.tool_call_id!r}: "
                "give the ToolResultPart a name, or keep the call in the conversation"
            )
        response = {"error" if part.is_error else "output": part.content}
        wire = {"functionResponse": {"id": part.tool_call_id, "name": name, "response": response}}
    elif isinstance(part, _conversation.ImagePart):
        wire = _media(part.url, part.media_type, None)
    else:
        wire = _file(part)
    signature = getattr(part, "signature", None)
    if signature:
        wire["thoughtSignature"] = signature
    return wire


def _media(url: str, media_type: str | None, default_type: str | None) -> dict[str, Any]:
    if url.startswith("data:"):
        header, comma, data = url[5:].partition(",")
        inline_type, _, encoding = header.partition(";")
        if not comma or encoding != "base64":
            raise ConfigError("a data: URL sent to Gemini must be base64-encoded")
        mime = media_type or inline_type or default_type
        if not mime:
            raise ConfigError("Gemini needs the media type of inline data")
        return {"inlineData": {"mimeType": mime, "data": data}}
    file_data = {"fileUri": url}
    if media_type or default_type:
        file_data["mimeType"] = media_type or default_type or ""
    return {"fileData": file_data}


def _file(part: FilePart) -> dict[str, Any]:
    if part.file_id is not None:
        return _media(part.file_id, part.media_type, None)
    if part.data is None:
        raise ConfigError("a file part needs data or a file_id")
    if part.data.startswith("data:"):
        return _media(part.data, part.media_type, "application/pdf")
    return {"inlineData": {"mimeType": part.media_type or "application/pdf", "data": part.data}}


def _declaration(tool: Tool) -> dict[str, Any]:
    wire: dict[str, Any] = {"name": tool.name}
    if tool.description:
        wire["description"] = tool.description
    wire["parametersJsonSchema"] = tool.parameters
    return wire
