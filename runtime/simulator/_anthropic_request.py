"""Validate an Anthropic messages request body and decide whether it gets a tool call. Pure.

Builds the same :class:`~.request.ChatRequest` as the chat-completions parser, so replies are
planned once for both protocols. Rejections are :class:`~.request.RequestError`; the messages
follow Anthropic's ``field: problem`` wording.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from ._request import ChatRequest, RequestError, ToolTarget, ignores_tools, pick_tool
from ._text import count_tokens, split_fragments

__all__ = ["parse_messages_request"]

_ROLES = ("user", "assistant")


def parse_messages_request(body: bytes, *, ignore_tool_choice: bool = False) -> ChatRequest:
    """Validate ``body`` (``POST /v1/messages``) and pick the reply kind.

    ``model``, ``max_tokens`` and a non-empty ``messages`` are required, as by the real API.
    A tool is called when ``tools`` are given and ``tool_choice`` is ``{"type": "any"}`` (the
    tool the last user text names, else the first), ``{"type": "tool", "name": ...}`` (that
    one), or ``auto``/absent while the conversation ends with a user message that names a tool
    or contains the word "tool" and carries no ``tool_result`` (so an agent loop ends).
    ``{"type": "none"}`` never calls a tool. Tools without an ``input_schema`` (server tools
    such as web search) are never called. With ``ignore_tool_choice`` (or a model whose name
    ends in ``notools``) tools are neither checked nor used.

    Raises:
        RequestError: bad JSON, a missing or malformed field, or a ``tool_choice`` that names
            no given tool.
    """
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise RequestError("There was an error parsing the body of your request.") from None
    if not isinstance(data, dict):
        raise RequestError("The request body must be a JSON object.")
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("model: Field required", "model")
    max_tokens = data.get("max_tokens")
    if max_tokens is None:
        raise RequestError("max_tokens: Field required", "max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise RequestError("max_tokens: Input should be an integer >= 1", "max_tokens")
    messages = data.get("messages")
    if messages is None:
        raise RequestError("messages: Field required", "messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages: at least one message is required", "messages")
    system = _text(data.get("system"))
    chars, words = len(system), count_tokens(system)
    last_user_text = ""
    last_role = ""
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            raise RequestError(
                f"messages.{index}.role: Input should be 'user' or 'assistant'",
                f"messages.{index}",
            )
        content = message.get("content")
        text = _text(content)
        chars += len(text)
        words += count_tokens(text)
        last_role = message["role"]
        if last_role == "user":
            last_user_text = text
            if _has_tool_result(content):
                last_role = "tool"
    stream = data.get("stream") or False
    if not isinstance(stream, bool):
        raise RequestError("stream: Input should be a valid boolean", "stream")
    ignore = ignores_tools(model, ignore_tool_choice)
    tools = [] if ignore else _tools(data.get("tools"))
    if tools:
        definitions = orjson.dumps(data["tools"])
        chars += len(definitions)
        words += len(split_fragments(definitions.decode()))
    tool = None
    if not ignore:
        tool = _pick(tools, data.get("tool_choice"), last_role, last_user_text)
    return ChatRequest(
        model=model,
        stream=stream,
        include_usage=False,
        max_tokens=max_tokens,
        digest=hashlib.blake2b(
            orjson.dumps([data.get("system"), messages], option=orjson.OPT_SORT_KEYS),
            digest_size=16,
        ).digest(),
        prompt_chars=chars,
        prompt_tokens=words,
        last_user_text=last_user_text,
        tool=tool,
    )


def _text(content: Any) -> str:
    """The text of a string, or of the ``text`` blocks (and string tool results) of a list."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif block.get("type") == "tool_result":
            parts.append(_text(block.get("content")))
    return "\n".join(parts)


def _has_tool_result(content: Any) -> bool:
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content
    )


def _tools(raw: Any) -> list[ToolTarget]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise RequestError("tools: Input should be a valid list", "tools")
    tools = []
    for index, tool in enumerate(raw):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise RequestError(f"tools.{index}.name: Field required", f"tools.{index}")
        if tool.get("type", "custom") != "custom":
            continue  # a server tool (web_search_..., bash_...): the simulator never calls it
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise RequestError(f"tools.{index}.input_schema: Field required", f"tools.{index}")
        tools.append(ToolTarget(tool["name"], schema))
    return tools


def _pick(
    tools: list[ToolTarget], choice: Any, last_role: str, last_user_text: str
) -> ToolTarget | None:
    if choice is None:
        choice = {"type": "auto"}
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind not in ("auto", "any", "tool", "none"):
        raise RequestError(
            "tool_choice: Input tag does not match any of the expected tags: "
            "'auto', 'any', 'tool', 'none'",
            "tool_choice",
        )
    if kind == "none":
        return None
    if kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str):
            raise RequestError("tool_choice.tool.name: Field required", "tool_choice")
        for tool in tools:
            if tool.name == name:
                return tool
        raise RequestError(f"tool_choice: tool {name!r} was not found in 'tools'", "tool_choice")
    if not tools:
        if kind == "any":
            raise RequestError(
                "tool_choice: 'any' requires at least one tool in 'tools'", "tool_choice"
            )
        return None
    return pick_tool(
        tools, required=kind == "any", last_role=last_role, last_user_text=last_user_text
    )
