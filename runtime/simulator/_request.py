"""Validate a chat-completions request body and decide what kind of reply it gets. Pure.

Only what the simulator needs is read; unknown fields are ignored, as OpenAI-compatible
servers commonly do. Every rejection is a :class:`RequestError` whose message and ``param``
go into a 400 ``invalid_request_error`` body. The Anthropic messages route has its own parser
(:mod:`.anthropic_request`) that builds the same :class:`ChatRequest`.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Any

import attrs
import orjson

from ._text import count_tokens, split_fragments

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "ANY_OBJECT",
    "ChatRequest",
    "RequestError",
    "ToolTarget",
    "generation_options",
    "ignores_tools",
    "parse_chat_request",
    "pick_tool",
    "tool_for_choice",
]

_TOOL_WORD = re.compile(r"\btools?\b", re.IGNORECASE)

ANY_OBJECT: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}
"""The schema of a JSON-mode reply that names no schema (``json_object``, ``format: "json"``)."""


@attrs.define
class RequestError(Exception):
    """The request body is not a valid chat-completions request."""

    message: str
    param: str | None = None

    def __str__(self) -> str:
        return self.message


@attrs.frozen
class ToolTarget:
    """The function the reply calls."""

    name: str
    parameters: Any
    """JSON schema of the arguments; ``{"type": "object", "properties": {}}`` when absent."""


@attrs.frozen(kw_only=True)
class ChatRequest:
    """What the simulator takes from a valid request."""

    model: str
    stream: bool
    include_usage: bool
    """``stream_options.include_usage`` on a streaming request."""
    max_tokens: int | None
    """``max_completion_tokens``, else ``max_tokens``, else None."""
    digest: bytes
    """16-byte BLAKE2b of the messages (keys sorted), the seed of the reply's content."""
    prompt_chars: int
    """Characters of message text plus the serialized tool definitions."""
    prompt_tokens: int = 0
    """Tokens of the message text (words) plus the tool definitions (JSON fragments), by the
    simulator's token rule (:mod:`.text`)."""
    min_tokens: int = 0
    """vLLM's ``min_tokens``: the reply has at least this many tokens (``max_tokens`` still
    caps it)."""
    ignore_eos: bool = False
    """vLLM's ``ignore_eos``: generate until ``max_tokens`` (finish ``length``) whatever the
    natural length of the reply."""
    last_user_text: str
    tool: ToolTarget | None
    """The tool to call; None means the reply is text."""
    json_schema: Any = None
    """Schema of a JSON-text reply (structured output) when there is no tool call; None means
    plain text."""


def ignores_tools(model: str, ignore_tool_choice: bool) -> bool:
    """Whether tools are ignored: the config says so, or the model name ends in ``notools``."""
    return ignore_tool_choice or model.endswith("notools")


def parse_chat_request(body: bytes, *, ignore_tool_choice: bool = False) -> ChatRequest:
    """Validate ``body`` and pick the reply kind.

    A tool is called when ``tools`` are given and ``tool_choice`` is ``"required"`` (the tool
    the last user message names, else the first), names a function (that one), or is
    ``"auto"``/absent while the conversation ends with a user message that names a tool or
    contains the word "tool". Requiring the last message to be the user's keeps an agent loop
    from calling tools forever after each tool result. ``"none"`` never calls a tool.

    Otherwise a ``response_format`` of type ``json_schema`` (or ``json_object``), or an
    Ollama-style top-level ``format`` (a schema, or ``"json"``), makes the reply JSON text.

    With ``ignore_tool_choice`` (or a model whose name ends in ``notools``) the server acts
    like one that does not support tools: ``tools`` and ``tool_choice`` are neither checked
    nor used, so the reply is text, or JSON text when a format asks for it.

    Raises:
        RequestError: bad JSON, a missing or malformed field, or a ``tool_choice`` that names
            no given tool.
    """
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise RequestError(
            "We could not parse the JSON body of your request. The body must be a JSON object."
        ) from None
    if not isinstance(data, dict):
        raise RequestError("The request body must be a JSON object.")
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("You must provide a model parameter.", "model")
    messages = data.get("messages")
    if messages is None:
        raise RequestError("Missing required parameter: 'messages'.", "messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty array of messages.", "messages")
    chars, words, role, last_user_text = _read_messages(messages)
    stream = data.get("stream") or False
    if not isinstance(stream, bool):
        raise RequestError("Invalid type for 'stream': expected a boolean.", "stream")
    options = data.get("stream_options") or {}
    if not isinstance(options, dict):
        raise RequestError(
            "Invalid type for 'stream_options': expected an object.", "stream_options"
        )
    ignore = ignore_tool_choice or model.endswith("notools")  # as ignores_tools() says
    tools = [] if ignore else _tools(data.get("tools"))
    if tools:
        definitions = orjson.dumps(data["tools"])
        chars += len(definitions)
        words += len(split_fragments(definitions.decode()))
    return ChatRequest(
        model=model,
        stream=stream,
        include_usage=stream and bool(options.get("include_usage")),
        max_tokens=_max_tokens(data),
        digest=hashlib.blake2b(
            orjson.dumps(messages, option=orjson.OPT_SORT_KEYS), digest_size=16
        ).digest(),
        prompt_chars=chars,
        prompt_tokens=words,
        **generation_options(data),
        last_user_text=last_user_text,
        tool=None if ignore else _pick_tool(tools, data.get("tool_choice"), role, last_user_text),
        json_schema=_json_schema(data) if "response_format" in data or "format" in data else None,
    )


def _read_messages(messages: list[Any]) -> tuple[int, int, str, str]:
    """``(characters, tokens, last role, last user text)`` of the messages' text.

    Raises:
        RequestError: a message is no object with a string ``role``.
    """
    chars = 0
    words = 0
    last_user_text = ""
    role = ""
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise RequestError(
                f"Invalid value for 'messages[{index}]': a message needs a string 'role'.",
                f"messages[{index}]",
            )
        role = message["role"]
        text = _text(message.get("content"))
        chars += len(text)
        words += count_tokens(text)
        if role == "user":
            last_user_text = text
    return chars, words, role, last_user_text


def generation_options(data: dict[str, Any]) -> dict[str, Any]:
    """``min_tokens`` and ``ignore_eos`` (vLLM's sampling extensions) from a request body.

    Raises:
        RequestError: either has the wrong type.
    """
    minimum = data.get("min_tokens", 0) or 0
    if not isinstance(minimum, int) or isinstance(minimum, bool) or minimum < 0:
        raise RequestError(
            f"Invalid 'min_tokens': expected an integer >= 0, got {minimum!r}.", "min_tokens"
        )
    ignore_eos = data.get("ignore_eos", False) or False
    if not isinstance(ignore_eos, bool):
        raise RequestError("Invalid type for 'ignore_eos': expected a boolean.", "ignore_eos")
    return {"min_tokens": minimum, "ignore_eos": ignore_eos}


def _json_schema(data: dict[str, Any]) -> Any:
    response_format = data.get("response_format")
    if response_format is not None:
        if not isinstance(response_format, dict):
            raise RequestError(
                "Invalid type for 'response_format': expected an object.", "response_format"
            )
        match response_format.get("type"):
            case "text":
                return None
            case "json_object":
                return ANY_OBJECT
            case "json_schema":
                spec = response_format.get("json_schema")
                if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
                    raise RequestError(
                        "Missing required parameter: 'response_format.json_schema.name'.",
                        "response_format.json_schema",
                    )
                return spec.get("schema", ANY_OBJECT)
        raise RequestError(
            "Invalid value for 'response_format.type': expected 'text', 'json_object' or "
            "'json_schema'.",
            "response_format.type",
        )
    ollama_format = data.get("format")
    if ollama_format is None or ollama_format == "":
        return None
    if ollama_format == "json":
        return ANY_OBJECT
    if isinstance(ollama_format, dict):
        return ollama_format
    raise RequestError("Invalid 'format': expected \"json\" or a JSON schema object.", "format")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def _max_tokens(data: dict[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise RequestError(f"Invalid '{key}': expected an integer >= 1, got {value!r}.", key)
        return value
    return None


def _tools(raw: Any) -> list[ToolTarget]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise RequestError("Invalid type for 'tools': expected an array.", "tools")
    tools = []
    for index, tool in enumerate(raw):
        if not isinstance(tool, dict):
            raise RequestError(f"Invalid value for 'tools[{index}]': expected an object.", "tools")
        if tool.get("type", "function") != "function":
            continue
        function = tool.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise RequestError(
                f"Missing required parameter: 'tools[{index}].function.name'.",
                f"tools[{index}].function",
            )
        parameters = function.get("parameters")
        if parameters is None:
            parameters = {"type": "object", "properties": {}}
        tools.append(ToolTarget(function["name"], parameters))
    return tools


def _chat_choice_name(choice: dict[str, Any]) -> Any:
    function = choice.get("function")
    return function.get("name") if isinstance(function, dict) else None


def _pick_tool(
    tools: list[ToolTarget], choice: Any, last_role: str, last_user_text: str
) -> ToolTarget | None:
    return tool_for_choice(
        tools,
        choice,
        last_role,
        last_user_text,
        name_of=_chat_choice_name,
        named_shape='{"type": "function", "function": {"name": ...}}',
    )


def tool_for_choice(
    tools: list[ToolTarget],
    choice: Any,
    last_role: str,
    last_user_text: str,
    *,
    name_of: Callable[[dict[str, Any]], Any],
    named_shape: str,
) -> ToolTarget | None:
    """The tool a request's ``tool_choice`` makes the reply call (None: a text reply), with
    the API's 400 for a choice it refuses. The APIs differ only in where a named choice keeps
    its name (``name_of``) and the shape the error shows (``named_shape``)."""
    if choice is None:
        choice = "auto"
    if choice == "none":
        return None
    if isinstance(choice, dict):
        name = name_of(choice)
        if choice.get("type") != "function" or not isinstance(name, str):
            raise RequestError(
                f"Invalid value for 'tool_choice': a named choice is {named_shape}.",
                "tool_choice",
            )
        for tool in tools:
            if tool.name == name:
                return tool
        raise RequestError(
            f"Invalid value for 'tool_choice': no function named {name!r} in 'tools'.",
            "tool_choice",
        )
    if choice not in ("auto", "required"):
        raise RequestError(
            "Invalid value for 'tool_choice': expected 'none', 'auto', 'required' or a function.",
            "tool_choice",
        )
    if not tools:
        if choice == "required":
            raise RequestError("'tool_choice' is 'required' but no tools were given.", "tools")
        return None
    return pick_tool(
        tools, required=choice == "required", last_role=last_role, last_user_text=last_user_text
    )


def pick_tool(
    tools: list[ToolTarget], *, required: bool, last_role: str, last_user_text: str
) -> ToolTarget | None:
    """The tool an ``auto`` (or, with ``required``, a forced) choice calls, from non-empty
    ``tools``: the one the last user text names, else the first when forced, or when ``auto``
    and the conversation ends with a user message containing the word "tool"."""
    named = next((t for t in tools if t.name in last_user_text), None)
    if required:
        return named or tools[0]
    if last_role != "user":
        return None
    if named is not None:
        return named
    return tools[0] if _TOOL_WORD.search(last_user_text) else None
