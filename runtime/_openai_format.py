"""OpenAI chat-completions dicts to sluice models and back. Pure: no I/O, no clock.

:func:`parse_chat_body` reads the ``body`` of a chat-completions request (as found in an OpenAI
Batch input line) into a :class:`~sluice._messages.ChatRequest`; :func:`render_chat_completion`
writes a :class:`~sluice._messages.ChatResult` as a ``chat.completion`` object, the shape the
OpenAI SDKs and Batch output files use.

Every problem in a body raises :class:`~sluice._errors.ConfigError` whose message names the
field path (``body.messages[2].content: ...``), so a batch job can put it on the output line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import orjson

from ._errors import ConfigError
from ._messages import (
    ChatRequest,
    ChatResult,
    ContentPart,
    FilePart,
    ImagePart,
    Message,
    ReasoningPart,
    ResponseFormat,
    SpecificTool,
    TextPart,
    Tool,
    ToolCall,
    ToolChoice,
    split_model,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["parse_chat_body", "parse_message", "parse_tool", "render_chat_completion"]

# Body keys that map onto ChatRequest fields (or are deliberately dropped); every other key is
# passed through to the provider in ``extra_body``.
_MAPPED_KEYS = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "seed",
        "n",
        # sluice always streams internally and asks for usage itself.
        "stream",
        "stream_options",
    }
)

_OPENAI_FINISH = frozenset({"stop", "length", "tool_calls", "content_filter"})


def _fail(path: str, problem: str) -> ConfigError:
    return ConfigError(f"{path}: {problem}")


def _type_name(value: Any) -> str:
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


def _expect_str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise _fail(path, f"expected a string, got {_type_name(value)}")
    return value


def _expect_dict(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _fail(path, f"expected an object, got {_type_name(value)}")
    return value


def _expect_list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(path, f"expected an array, got {_type_name(value)}")
    return value


def _number(value: Any, path: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(path, f"expected a number, got {_type_name(value)}")
    return float(value)


def _integer(value: Any, path: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(path, f"expected an integer, got {_type_name(value)}")
    return value


# ---- request body -> ChatRequest -------------------------------------------------------------


def _text_of(content: Any, path: str) -> str:
    """Content that may only hold text: a string or an array of ``text`` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for i, part in enumerate(_expect_list(content, path)):
        p = _expect_dict(part, f"{path}[{i}]")
        if p.get("type") != "text":
            raise _fail(
                f"{path}[{i}].type", f"only 'text' parts are allowed here, got {p.get('type')!r}"
            )
        texts.append(_expect_str(p.get("text"), f"{path}[{i}].text"))
    return "".join(texts)


def _user_part(part: Any, path: str) -> ContentPart:
    p = _expect_dict(part, path)
    kind = p.get("type")
    if kind == "text":
        return TextPart(_expect_str(p.get("text"), f"{path}.text"))
    if kind == "image_url":
        image = p.get("image_url")
        if isinstance(image, str):  # some clients send the URL directly
            return ImagePart(url=image)
        img = _expect_dict(image, f"{path}.image_url")
        detail = img.get("detail")
        if detail not in (None, "auto", "low", "high"):
            raise _fail(f"{path}.image_url.detail", "expected 'auto', 'low' or 'high'")
        return ImagePart(url=_expect_str(img.get("url"), f"{path}.image_url.url"), detail=detail)
    if kind == "file":
        f = _expect_dict(p.get("file"), f"{path}.file")
        data, file_id = f.get("file_data"), f.get("file_id")
        if data is None and file_id is None:
            raise _fail(f"{path}.file", "needs 'file_data' or 'file_id'")
        media_type = None
        if isinstance(data, str) and data.startswith("data:") and ";base64," in data:
            header, _, data = data.partition(";base64,")
            media_type = header.removeprefix("data:") or None
        return FilePart(
            data=None if data is None else _expect_str(data, f"{path}.file.file_data"),
            media_type=media_type,
            name=None
            if f.get("filename") is None
            else _expect_str(f["filename"], f"{path}.file.filename"),
            file_id=None if file_id is None else _expect_str(file_id, f"{path}.file.file_id"),
        )
    raise _fail(f"{path}.type", f"unsupported content part type {kind!r}")


def _user_content(content: Any, path: str) -> tuple[ContentPart, ...]:
    if isinstance(content, str):
        return (TextPart(content),)
    return tuple(_user_part(p, f"{path}[{i}]") for i, p in enumerate(_expect_list(content, path)))


def _tool_call(value: Any, path: str) -> ToolCall:
    call = _expect_dict(value, path)
    if call.get("type", "function") != "function":
        raise _fail(
            f"{path}.type", f"only 'function' tool calls are supported, got {call.get('type')!r}"
        )
    fn = _expect_dict(call.get("function"), f"{path}.function")
    arguments = fn.get("arguments", "{}")
    if not isinstance(arguments, str):  # tolerate an already parsed object
        arguments = orjson.dumps(arguments).decode()
    return ToolCall(
        id=_expect_str(call.get("id"), f"{path}.id"),
        name=_expect_str(fn.get("name"), f"{path}.function.name"),
        arguments=arguments,
    )


def _assistant(msg: Mapping[str, Any], path: str) -> Message:
    parts: list[ContentPart] = []
    reasoning = msg.get("reasoning_content")
    if reasoning:
        parts.append(ReasoningPart(text=_expect_str(reasoning, f"{path}.reasoning_content")))
    content = msg.get("content")
    if isinstance(content, list):
        for i, part in enumerate(content):
            p = _expect_dict(part, f"{path}.content[{i}]")
            where = f"{path}.content[{i}]"
            if p.get("type") == "text":
                parts.append(TextPart(_expect_str(p.get("text"), f"{where}.text")))
            elif p.get("type") == "refusal":
                parts.append(TextPart(_expect_str(p.get("refusal"), f"{where}.refusal")))
            else:
                raise _fail(f"{where}.type", f"expected 'text' or 'refusal', got {p.get('type')!r}")
    elif content is not None:
        parts.append(TextPart(_expect_str(content, f"{path}.content")))
    calls = msg.get("tool_calls") or []
    for i, call in enumerate(_expect_list(calls, f"{path}.tool_calls")):
        parts.append(_tool_call(call, f"{path}.tool_calls[{i}]"))
    return Message("assistant", tuple(parts))


def parse_message(value: Any, path: str = "message") -> Message:
    """Read one OpenAI chat message dict.

    ``developer`` is read as ``system``. Unknown keys on a message (``name``) are ignored.

    Raises:
        ConfigError: the role is missing or unknown, or a field has the wrong shape.
    """
    msg = _expect_dict(value, path)
    role = msg.get("role")
    if role in ("system", "developer"):
        return Message.system(_text_of(msg.get("content"), f"{path}.content"))
    if role == "user":
        if "content" not in msg:
            raise _fail(f"{path}.content", "a user message needs content")
        return Message("user", _user_content(msg["content"], f"{path}.content"))
    if role == "assistant":
        return _assistant(msg, path)
    if role == "tool":
        return Message.tool(
            _expect_str(msg.get("tool_call_id"), f"{path}.tool_call_id"),
            _text_of(msg.get("content"), f"{path}.content"),
        )
    raise _fail(
        f"{path}.role",
        f"expected 'system', 'developer', 'user', 'assistant' or 'tool', got {role!r}",
    )


def parse_tool(value: Any, path: str = "tool") -> Tool:
    """Read one OpenAI-format tool (``{"type": "function", "function": {...}}``).

    Raises:
        ConfigError: naming the field whose shape is wrong.
    """
    t = _expect_dict(value, path)
    if t.get("type", "function") != "function":
        raise _fail(f"{path}.type", f"only 'function' tools are supported, got {t.get('type')!r}")
    fn = _expect_dict(t.get("function"), f"{path}.function")
    strict = fn.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise _fail(f"{path}.function.strict", "expected a boolean")
    parameters = fn.get("parameters", {"type": "object", "properties": {}})
    return Tool(
        name=_expect_str(fn.get("name"), f"{path}.function.name"),
        description=_expect_str(fn.get("description", ""), f"{path}.function.description"),
        parameters=_expect_dict(parameters, f"{path}.function.parameters"),
        strict=strict,
    )


def _tool_choice(value: Any, path: str) -> ToolChoice | None:
    if value is None:
        return None
    if value in ("auto", "required", "none"):
        return value  # type: ignore[no-any-return]
    if isinstance(value, dict):
        fn = _expect_dict(value.get("function"), f"{path}.function")
        return SpecificTool(_expect_str(fn.get("name"), f"{path}.function.name"))
    raise _fail(path, "expected 'auto', 'required', 'none' or {\"type\": \"function\", ...}")


def _response_format(value: Any, path: str) -> ResponseFormat | None:
    if value is None:
        return None
    rf = _expect_dict(value, path)
    kind = rf.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return ResponseFormat(type="json_object")
    if kind == "json_schema":
        js = _expect_dict(rf.get("json_schema"), f"{path}.json_schema")
        strict = js.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise _fail(f"{path}.json_schema.strict", "expected a boolean")
        schema = js.get("schema")
        return ResponseFormat(
            type="json_schema",
            schema=None if schema is None else _expect_dict(schema, f"{path}.json_schema.schema"),
            name=_expect_str(js.get("name", "response"), f"{path}.json_schema.name"),
            strict=strict,
        )
    raise _fail(f"{path}.type", f"expected 'text', 'json_object' or 'json_schema', got {kind!r}")


def _stop(value: Any, path: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(_expect_str(s, f"{path}[{i}]") for i, s in enumerate(_expect_list(value, path)))


def _model(body: Mapping[str, Any], override: str | None, path: str) -> str:
    if override is not None:
        return override
    if "model" not in body:
        raise _fail(
            f"{path}.model", "missing; write it as 'provider:model' or pass a model override"
        )
    model = _expect_str(body["model"], f"{path}.model")
    if ":" not in model:
        raise _fail(
            f"{path}.model",
            f"{model!r} names no provider; write it as 'provider:model' "
            f"(for example 'openai:{model}' or 'sim:{model}') or pass a model override",
        )
    try:
        split_model(model)
    except ValueError as exc:
        raise _fail(f"{path}.model", str(exc)) from None
    return model


def parse_chat_body(
    body: Any, *, model: str | None = None, stream: bool = True, path: str = "body"
) -> ChatRequest:
    """Read a chat-completions request body into a :class:`ChatRequest`.

    Args:
        body: the decoded JSON body.
        model: a ``provider:model`` that replaces the body's ``model``; without it the body's
            model must itself be written ``provider:model``.
        stream: the request's ``stream`` flag; the body's own ``stream`` and
            ``stream_options`` are ignored because the runtime decides how to stream.
        path: the prefix used in error messages.

    Returns:
        A request holding every mapped field; keys sluice does not model are passed to the
        provider unchanged in ``extra_body``.

    Raises:
        ConfigError: the body is not an object, the model or messages are missing or wrong,
            ``n`` asks for more than one choice, or a field has the wrong shape.
    """
    b = _expect_dict(body, path)
    chosen = _model(b, model, path)
    if "messages" not in b:
        raise _fail(f"{path}.messages", "missing")
    raw_messages = _expect_list(b["messages"], f"{path}.messages")
    if not raw_messages:
        raise _fail(f"{path}.messages", "must hold at least one message")
    messages = tuple(parse_message(m, f"{path}.messages[{i}]") for i, m in enumerate(raw_messages))
    n = _integer(b.get("n"), f"{path}.n")
    if n is not None and n != 1:
        raise _fail(f"{path}.n", f"only one choice per request is supported, got {n}")
    tools = tuple(
        parse_tool(t, f"{path}.tools[{i}]")
        for i, t in enumerate(_expect_list(b.get("tools") or [], f"{path}.tools"))
    )
    parallel = b.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise _fail(f"{path}.parallel_tool_calls", "expected a boolean")
    max_tokens = _integer(b.get("max_completion_tokens"), f"{path}.max_completion_tokens")
    if max_tokens is None:
        max_tokens = _integer(b.get("max_tokens"), f"{path}.max_tokens")
    # attrs' mypy plugin types fields with ``converter=tuple`` as ``Iterable[_T_co]``, which no
    # tuple matches; the values are right, so hide them from that check.
    return ChatRequest(
        model=chosen,
        messages=messages,
        tools=cast("Any", tools),
        tool_choice=_tool_choice(b.get("tool_choice"), f"{path}.tool_choice"),
        parallel_tool_calls=parallel,
        response_format=_response_format(b.get("response_format"), f"{path}.response_format"),
        temperature=_number(b.get("temperature"), f"{path}.temperature"),
        top_p=_number(b.get("top_p"), f"{path}.top_p"),
        max_tokens=max_tokens,
        stop=cast("Any", _stop(b.get("stop"), f"{path}.stop")),
        seed=_integer(b.get("seed"), f"{path}.seed"),
        stream=stream,
        extra_body={k: v for k, v in b.items() if k not in _MAPPED_KEYS},
    )


# ---- ChatResult -> chat.completion -----------------------------------------------------------


def _finish_reason(result: ChatResult) -> str:
    if result.finish_reason in _OPENAI_FINISH:
        return result.finish_reason
    return result.raw_finish_reason or result.finish_reason


def render_chat_completion(result: ChatResult, *, created: int) -> dict[str, Any]:
    """Write a result as an OpenAI ``chat.completion`` object with one choice.

    ``content`` is null when the model answered only with tool calls; ``tool_calls`` appears
    only when there are some, and ``reasoning_content`` (the DeepSeek field) only when the
    model showed reasoning. ``finish_reason`` is the normalized one, except that ``other``
    becomes the provider's own value when it gave one.

    Args:
        result: the finished call.
        created: the Unix time to put in ``created`` (the caller reads the clock).
    """
    message: dict[str, Any] = {
        "role": "assistant",
        "content": result.text if result.text or not result.tool_calls else None,
    }
    if result.reasoning:
        message["reasoning_content"] = result.reasoning
    if result.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in result.tool_calls
        ]
    usage = result.usage
    return {
        "id": f"chatcmpl-{result.call_id}",
        "object": "chat.completion",
        "created": created,
        "model": result.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _finish_reason(result),
            }
        ],
        "usage": {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.total_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens},
            "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        },
    }
