"""OpenAI chat messages and tools (as the OpenAI API takes them) read into sluice's model.

Pure. :func:`parse_message` and :func:`parse_tool` read one dict each; ``ChatRequest`` uses
them for messages and tools given as dicts, and :mod:`sluice._openai_format` for whole request
bodies. Every problem raises :class:`~sluice._errors.ConfigError` naming the field path
(``body.messages[2].content: ...``). The small readers (:func:`expect_str` and the like) are
shared with :mod:`sluice._openai_format`, which reads the rest of a body the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from ._conversation import (
    ContentPart,
    FilePart,
    ImagePart,
    Message,
    ReasoningPart,
    TextPart,
    Tool,
    ToolCall,
)
from ._errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "expect_dict",
    "expect_list",
    "expect_str",
    "fail",
    "integer",
    "number",
    "parse_message",
    "parse_tool",
]


def fail(path: str, problem: str) -> ConfigError:
    return ConfigError(f"{path}: {problem}")


def _json_type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def expect_str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise fail(path, f"expected a string, got {_json_type_name(value)}")
    return value


def expect_dict(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise fail(path, f"expected an object, got {_json_type_name(value)}")
    return value


def expect_list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise fail(path, f"expected an array, got {_json_type_name(value)}")
    return value


def number(value: Any, path: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise fail(path, f"expected a number, got {_json_type_name(value)}")
    return float(value)


def integer(value: Any, path: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(path, f"expected an integer, got {_json_type_name(value)}")
    return value


# ---- request body -> ChatRequest -------------------------------------------------------------


def _text_of(content: Any, path: str) -> str:
    """Content that may only hold text: a string or an array of ``text`` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for i, part in enumerate(expect_list(content, path)):
        p = expect_dict(part, f"{path}[{i}]")
        if p.get("type") != "text":
            raise fail(
                f"{path}[{i}].type", f"only 'text' parts are allowed here, got {p.get('type')!r}"
            )
        texts.append(expect_str(p.get("text"), f"{path}[{i}].text"))
    return "".join(texts)


def _cache_control(part: Mapping[str, Any], path: str) -> Mapping[str, Any] | None:
    """A part's ``cache_control`` (the marker LiteLLM and OpenRouter accept in this format)."""
    marker = part.get("cache_control")
    return None if marker is None else expect_dict(marker, f"{path}.cache_control")


def _system_content(content: Any, path: str) -> tuple[TextPart, ...]:
    """A system message's text; one part per text item when an item has ``cache_control``."""
    if isinstance(content, list) and any(
        isinstance(p, dict) and p.get("cache_control") is not None for p in content
    ):
        _text_of(content, path)  # raises naming the first item that is no text part
        return tuple(
            TextPart(p["text"], cache_control=_cache_control(p, f"{path}[{i}]"))
            for i, p in enumerate(content)
        )
    return (TextPart(_text_of(content, path)),)


def _user_part(part: Any, path: str) -> ContentPart:
    p = expect_dict(part, path)
    kind = p.get("type")
    if kind == "text":
        return TextPart(
            expect_str(p.get("text"), f"{path}.text"), cache_control=_cache_control(p, path)
        )
    if kind == "image_url":
        image = p.get("image_url")
        if isinstance(image, str):  # some clients send the URL directly
            return ImagePart(url=image)
        img = expect_dict(image, f"{path}.image_url")
        detail = img.get("detail")
        if detail not in (None, "auto", "low", "high"):
            raise fail(f"{path}.image_url.detail", "expected 'auto', 'low' or 'high'")
        return ImagePart(
            url=expect_str(img.get("url"), f"{path}.image_url.url"),
            detail=detail,
            cache_control=_cache_control(p, path),
        )
    if kind == "file":
        f = expect_dict(p.get("file"), f"{path}.file")
        data, file_id = f.get("file_data"), f.get("file_id")
        if data is None and file_id is None:
            raise fail(f"{path}.file", "needs 'file_data' or 'file_id'")
        media_type = None
        if isinstance(data, str) and data.startswith("data:") and ";base64," in data:
            header, _, data = data.partition(";base64,")
            media_type = header.removeprefix("data:") or None
        return FilePart(
            data=None if data is None else expect_str(data, f"{path}.file.file_data"),
            media_type=media_type,
            name=None
            if f.get("filename") is None
            else expect_str(f["filename"], f"{path}.file.filename"),
            file_id=None if file_id is None else expect_str(file_id, f"{path}.file.file_id"),
        )
    raise fail(f"{path}.type", f"unsupported content part type {kind!r}")


def _user_content(content: Any, path: str) -> tuple[ContentPart, ...]:
    if isinstance(content, str):
        return (TextPart(content),)
    return tuple(_user_part(p, f"{path}[{i}]") for i, p in enumerate(expect_list(content, path)))


def _tool_call(value: Any, path: str) -> ToolCall:
    call = expect_dict(value, path)
    if call.get("type", "function") != "function":
        raise fail(
            f"{path}.type", f"only 'function' tool calls are supported, got {call.get('type')!r}"
        )
    fn = expect_dict(call.get("function"), f"{path}.function")
    arguments = fn.get("arguments", "{}")
    if not isinstance(arguments, str):  # tolerate an already parsed object
        arguments = orjson.dumps(arguments).decode()
    return ToolCall(
        id=expect_str(call.get("id"), f"{path}.id"),
        name=expect_str(fn.get("name"), f"{path}.function.name"),
        arguments=arguments,
    )


def _assistant(msg: Mapping[str, Any], path: str) -> Message:
    parts: list[ContentPart] = []
    reasoning = msg.get("reasoning_content")
    if reasoning:
        parts.append(ReasoningPart(text=expect_str(reasoning, f"{path}.reasoning_content")))
    content = msg.get("content")
    if isinstance(content, list):
        for i, part in enumerate(content):
            p = expect_dict(part, f"{path}.content[{i}]")
            where = f"{path}.content[{i}]"
            if p.get("type") == "text":
                parts.append(TextPart(expect_str(p.get("text"), f"{where}.text")))
            elif p.get("type") == "refusal":
                parts.append(TextPart(expect_str(p.get("refusal"), f"{where}.refusal")))
            else:
                raise fail(f"{where}.type", f"expected 'text' or 'refusal', got {p.get('type')!r}")
    elif content is not None:
        parts.append(TextPart(expect_str(content, f"{path}.content")))
    calls = msg.get("tool_calls") or []
    for i, call in enumerate(expect_list(calls, f"{path}.tool_calls")):
        parts.append(_tool_call(call, f"{path}.tool_calls[{i}]"))
    return Message("assistant", tuple(parts))


def parse_message(value: Any, path: str = "message") -> Message:
    """Read one OpenAI chat message dict.

    ``developer`` is read as ``system``. Unknown keys on a message (``name``) are ignored.

    Raises:
        ConfigError: the role is missing or unknown, or a field has the wrong shape.
    """
    msg = expect_dict(value, path)
    role = msg.get("role")
    if role in ("system", "developer"):
        return Message("system", _system_content(msg.get("content"), f"{path}.content"))
    if role == "user":
        if "content" not in msg:
            raise fail(f"{path}.content", "a user message needs content")
        return Message("user", _user_content(msg["content"], f"{path}.content"))
    if role == "assistant":
        return _assistant(msg, path)
    if role == "tool":
        return Message.tool(
            expect_str(msg.get("tool_call_id"), f"{path}.tool_call_id"),
            _text_of(msg.get("content"), f"{path}.content"),
        )
    raise fail(
        f"{path}.role",
        f"expected 'system', 'developer', 'user', 'assistant' or 'tool', got {role!r}",
    )


def parse_tool(value: Any, path: str = "tool") -> Tool:
    """Read one OpenAI-format tool (``{"type": "function", "function": {...}}``).

    Raises:
        ConfigError: naming the field whose shape is wrong.
    """
    t = expect_dict(value, path)
    if t.get("type", "function") != "function":
        raise fail(f"{path}.type", f"only 'function' tools are supported, got {t.get('type')!r}")
    fn = expect_dict(t.get("function"), f"{path}.function")
    strict = fn.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise fail(f"{path}.function.strict", "expected a boolean")
    parameters = fn.get("parameters", {"type": "object", "properties": {}})
    return Tool(
        name=expect_str(fn.get("name"), f"{path}.function.name"),
        description=expect_str(fn.get("description", ""), f"{path}.function.description"),
        parameters=expect_dict(parameters, f"{path}.function.parameters"),
        strict=strict,
        cache_control=_cache_control(t, path),
    )
