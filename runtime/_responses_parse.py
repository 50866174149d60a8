"""OpenAI Responses API request bodies read into sluice's :class:`~sluice._messages.ChatRequest`,
as a server reads them. Pure: no I/O, no clock. (The way back, results and streams, is
:mod:`sluice._responses_format`.)

What maps to what. ``instructions`` is the first system message; ``input`` is one user message
(a string) or a list of items: messages (``input_text``, ``input_image``, ``input_file`` and an
assistant's ``output_text``/``refusal`` parts), ``function_call`` items (consecutive ones, with
the reasoning and assistant text before them, make one assistant message) and
``function_call_output`` items (tool messages). ``tools`` holds function tools (the flat
Responses shape); ``tool_choice`` is ``auto``/``required``/``none`` or a named function;
``text.format`` is structured output; ``max_output_tokens`` is ``max_tokens``. Every other key
(``reasoning``, ``metadata``, ``store``, ``previous_response_id``, ``include``, ...) goes to
``extra_body`` as sent: the server decides what it can honour.

Every problem in a body raises :class:`~sluice._errors.ConfigError` whose message names the
field path (``body.input[2].content[0].image_url: ...``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import orjson

from ._messages import (
    ChatRequest,
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
from ._openai_parse import expect_dict, expect_list, expect_str, fail, integer, number

if TYPE_CHECKING:
    from collections.abc import Mapping


__all__ = ["chat_extra", "parse_responses_body"]

# Body keys read into ChatRequest fields (or deliberately dropped: the server decides how to
# stream); every other key goes to the provider in ``extra_body``.
_MAPPED_KEYS = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "text",
        "temperature",
        "top_p",
        "max_output_tokens",
        "stream",
        "stream_options",
    }
)

# ---- body -> ChatRequest ---------------------------------------------------------------------


def _model(body: Mapping[str, Any], override: str | None, path: str) -> str:
    if override is not None:
        return override
    if "model" not in body:
        raise fail(
            f"{path}.model", "missing; write it as 'provider:model' or pass a model override"
        )
    model = expect_str(body["model"], f"{path}.model")
    try:
        split_model(model)
    except ValueError:
        raise fail(
            f"{path}.model",
            f"{model!r} names no provider; write it as 'provider:model' "
            f"(for example 'openai:{model}') or pass a model override",
        ) from None
    return model


def _image(part: Mapping[str, Any], path: str) -> ImagePart:
    detail = part.get("detail")
    if detail not in (None, "auto", "low", "high"):
        raise fail(f"{path}.detail", f"expected 'auto', 'low' or 'high', got {detail!r}")
    url = part.get("image_url")
    if url is None:
        if part.get("file_id") is not None:
            raise fail(
                f"{path}.file_id",
                "images by file id are not supported here; send 'image_url' (an https: or "
                "data: URL)",
            )
        raise fail(f"{path}.image_url", "missing; an input_image needs an https: or data: URL")
    return ImagePart(url=expect_str(url, f"{path}.image_url"), detail=detail)


def _file(part: Mapping[str, Any], path: str) -> FilePart:
    data, file_id = part.get("file_data"), part.get("file_id")
    if data is None and file_id is None:
        if part.get("file_url") is not None:
            raise fail(f"{path}.file_url", "files by URL are not supported; send 'file_data'")
        raise fail(path, "an input_file needs 'file_data' or 'file_id'")
    media_type = None
    if data is not None:
        data = expect_str(data, f"{path}.file_data")
        if data.startswith("data:") and ";base64," in data:
            header, _, data = data.partition(";base64,")
            media_type = header.removeprefix("data:") or None
    name = part.get("filename")
    return FilePart(
        data=data,
        media_type=media_type,
        name=None if name is None else expect_str(name, f"{path}.filename"),
        file_id=None if file_id is None else expect_str(file_id, f"{path}.file_id"),
    )


def _input_part(value: Any, path: str) -> ContentPart:
    part = expect_dict(value, path)
    kind = part.get("type")
    if kind in ("input_text", "output_text"):
        return TextPart(expect_str(part.get("text"), f"{path}.text"))
    if kind == "refusal":
        return TextPart(expect_str(part.get("refusal"), f"{path}.refusal"))
    if kind == "input_image":
        return _image(part, path)
    if kind == "input_file":
        return _file(part, path)
    raise fail(
        f"{path}.type",
        f"expected 'input_text', 'input_image', 'input_file' or 'output_text', got {kind!r}",
    )


def _content(value: Any, path: str, *, text_only: bool) -> tuple[ContentPart, ...]:
    if isinstance(value, str):
        return (TextPart(value),)
    parts = tuple(_input_part(p, f"{path}[{i}]") for i, p in enumerate(expect_list(value, path)))
    if text_only:
        for i, p in enumerate(parts):
            if not isinstance(p, TextPart):
                raise fail(f"{path}[{i}].type", "only text is allowed in this message")
    return parts


def _output_text(value: Any, path: str) -> str:
    """A ``function_call_output``'s ``output``: a string, or a list of ``input_text`` parts."""
    if isinstance(value, str):
        return value
    texts = []
    for i, item in enumerate(expect_list(value, path)):
        part = expect_dict(item, f"{path}[{i}]")
        if part.get("type") != "input_text":
            raise fail(
                f"{path}[{i}].type",
                f"only 'input_text' parts are supported in a tool output, got {part.get('type')!r}",
            )
        texts.append(expect_str(part.get("text"), f"{path}[{i}].text"))
    return "".join(texts)


def _reasoning(item: Mapping[str, Any], path: str) -> ReasoningPart:
    summary = item.get("summary") or []
    texts = []
    for i, value in enumerate(expect_list(summary, f"{path}.summary")):
        texts.append(expect_str(expect_dict(value, f"{path}.summary[{i}]").get("text"),
                                f"{path}.summary[{i}].text"))  # fmt: skip
    signature = item.get("encrypted_content")
    return ReasoningPart(
        text="\n\n".join(texts),
        signature=None if signature is None else expect_str(signature, f"{path}.encrypted_content"),
    )


_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}


def _messages(value: Any, path: str) -> list[Message]:
    """The ``input`` items as messages: an assistant's reasoning, text and function calls that
    follow each other make one assistant message, as a chat conversation holds them."""
    if isinstance(value, str):
        return [Message.user(value)]
    items = expect_list(value, path)
    out: list[Message] = []
    turn: list[ContentPart] = []  # the assistant turn being gathered

    def close_turn() -> None:
        if turn:
            out.append(Message("assistant", tuple(turn)))
            turn.clear()

    for i, raw in enumerate(items):
        where = f"{path}[{i}]"
        item = expect_dict(raw, where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in _ROLES:
                raise fail(
                    f"{where}.role",
                    f"expected 'user', 'system', 'developer' or 'assistant', got {role!r}",
                )
            if "content" not in item:
                raise fail(f"{where}.content", "missing")
            content = _content(item["content"], f"{where}.content", text_only=role != "user")
            if role == "assistant":
                turn.extend(content)
                continue
            close_turn()
            out.append(Message(_ROLES[role], content))  # type: ignore[arg-type]
        elif kind == "function_call":
            arguments = item.get("arguments", "{}")
            if not isinstance(arguments, str):
                arguments = orjson.dumps(arguments).decode()
            turn.append(
                ToolCall(
                    id=expect_str(item.get("call_id"), f"{where}.call_id"),
                    name=expect_str(item.get("name"), f"{where}.name"),
                    arguments=arguments,
                )
            )
        elif kind == "reasoning":
            if turn:  # reasoning begins the next turn, never the middle of one
                close_turn()
            turn.append(_reasoning(item, where))
        elif kind == "function_call_output":
            close_turn()
            out.append(
                Message.tool(
                    expect_str(item.get("call_id"), f"{where}.call_id"),
                    _output_text(item.get("output"), f"{where}.output"),
                )
            )
        elif kind == "item_reference":
            raise fail(
                f"{where}.type",
                "'item_reference' needs stored responses, which this server does not keep; "
                "send the items themselves",
            )
        else:
            raise fail(
                f"{where}.type",
                "expected 'message', 'function_call', 'function_call_output' or 'reasoning',"
                f" got {kind!r}",
            )
    close_turn()
    return out


def _tool(value: Any, path: str) -> Tool:
    t = expect_dict(value, path)
    kind = t.get("type")
    if kind != "function":
        raise fail(
            f"{path}.type",
            f"only 'function' tools are supported here, got {kind!r} (built-in tools need "
            "OpenAI's own Responses API)",
        )
    strict = t.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise fail(f"{path}.strict", "expected a boolean")
    parameters = t.get("parameters")
    description = t.get("description")
    return Tool(
        name=expect_str(t.get("name"), f"{path}.name"),
        description="" if description is None else expect_str(description, f"{path}.description"),
        parameters={"type": "object", "properties": {}}
        if parameters is None
        else expect_dict(parameters, f"{path}.parameters"),
        strict=strict,
    )


def _tool_choice(value: Any, path: str) -> ToolChoice | None:
    if value is None:
        return None
    if value in ("auto", "required", "none"):
        return value  # type: ignore[no-any-return]
    choice = expect_dict(value, path)
    if choice.get("type") == "function":
        return SpecificTool(expect_str(choice.get("name"), f"{path}.name"))
    raise fail(
        path,
        "expected 'auto', 'required', 'none' or {\"type\": \"function\", \"name\": ...}, got"
        f" type {choice.get('type')!r}",
    )


def _text_format(value: Any, path: str) -> tuple[ResponseFormat | None, dict[str, Any]]:
    """``text.format`` as a ResponseFormat, and the other keys of ``text`` (``verbosity``)."""
    if value is None:
        return None, {}
    text = expect_dict(value, path)
    rest = {k: v for k, v in text.items() if k != "format"}
    if text.get("format") is None:
        return None, rest
    fmt = expect_dict(text["format"], f"{path}.format")
    kind = fmt.get("type")
    if kind == "text":
        return None, rest
    if kind == "json_object":
        return ResponseFormat(type="json_object"), rest
    if kind == "json_schema":
        strict = fmt.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise fail(f"{path}.format.strict", "expected a boolean")
        if "schema" not in fmt:
            raise fail(f"{path}.format.schema", "missing; a json_schema format needs a schema")
        return ResponseFormat(
            type="json_schema",
            schema=expect_dict(fmt["schema"], f"{path}.format.schema"),
            name=expect_str(fmt.get("name", "response"), f"{path}.format.name"),
            strict=strict,
        ), rest
    raise fail(
        f"{path}.format.type", f"expected 'text', 'json_object' or 'json_schema', got {kind!r}"
    )


def parse_responses_body(
    body: Any,
    *,
    model: str | None = None,
    stream: bool = True,
    path: str = "body",
    fields: Mapping[str, Any] | None = None,
) -> ChatRequest:
    """Read a Responses API request body into a :class:`ChatRequest` (see the module
    docstring for what maps to what).

    Args:
        body: the decoded JSON body.
        model: a ``provider:model`` that replaces the body's ``model``; without it the body's
            model must itself be written ``provider:model``.
        stream: the request's ``stream`` flag; the body's own ``stream`` is ignored, because
            the caller decides how to stream.
        path: the prefix used in error messages.
        fields: more ``ChatRequest`` fields set by the caller (the gateway's ``tag``).

    Raises:
        ConfigError: the body is no object, the model or input is missing or wrong, or a
            field has the wrong shape; the message names the field.
    """
    b = expect_dict(body, path)
    chosen = _model(b, model, path)
    if "input" not in b:
        raise fail(f"{path}.input", "missing; send a string or a list of input items")
    messages = _messages(b["input"], f"{path}.input")
    instructions = b.get("instructions")
    if instructions is not None:
        messages.insert(0, Message.system(expect_str(instructions, f"{path}.instructions")))
    if not any(m.role != "system" for m in messages):
        raise fail(f"{path}.input", "must hold at least one item")
    tools = tuple(
        _tool(t, f"{path}.tools[{i}]")
        for i, t in enumerate(expect_list(b.get("tools") or [], f"{path}.tools"))
    )
    parallel = b.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise fail(f"{path}.parallel_tool_calls", "expected a boolean")
    response_format, text_rest = _text_format(b.get("text"), f"{path}.text")
    metadata = b.get("metadata")
    if metadata is not None:
        for key, value in expect_dict(metadata, f"{path}.metadata").items():
            expect_str(value, f"{path}.metadata.{key}")
    extra = {k: v for k, v in b.items() if k not in _MAPPED_KEYS}
    if text_rest:
        extra["text"] = text_rest
    return ChatRequest(
        model=chosen,
        messages=tuple(messages),
        tools=cast("Any", tools),
        tool_choice=_tool_choice(b.get("tool_choice"), f"{path}.tool_choice"),
        parallel_tool_calls=parallel,
        response_format=response_format,
        temperature=number(b.get("temperature"), f"{path}.temperature"),
        top_p=number(b.get("top_p"), f"{path}.top_p"),
        max_tokens=integer(b.get("max_output_tokens"), f"{path}.max_output_tokens"),
        stream=stream,
        extra_body=extra,
        **(fields or {}),
    )


_CHAT_SAME = ("user", "service_tier", "prompt_cache_key", "safety_identifier")


def chat_extra(extra_body: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters of a Responses body's ``extra_body`` that chat completions knows too,
    under chat's names: ``user``, ``service_tier``, ``prompt_cache_key``,
    ``safety_identifier`` as they are, ``reasoning.effort`` as ``reasoning_effort`` and
    ``text.verbosity`` as ``verbosity``. The rest (``store``, ``include``, ``metadata``...)
    means nothing, or something else, to a chat upstream."""
    out = {key: extra_body[key] for key in _CHAT_SAME if key in extra_body}
    reasoning = extra_body.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") is not None:
        out["reasoning_effort"] = reasoning["effort"]
    text = extra_body.get("text")
    if isinstance(text, dict) and text.get("verbosity") is not None:
        out["verbosity"] = text["verbosity"]
    return out
