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

from ._messages import (
    ChatRequest,
    ChatResult,
    ResponseFormat,
    SpecificTool,
    ToolChoice,
    split_model,
)
from ._openai_parse import (
    expect_dict,
    expect_list,
    expect_str,
    fail,
    integer,
    number,
    parse_message,
    parse_tool,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["parse_chat_body", "parse_message", "parse_tool", "render_chat_completion"]

# The message and tool parsers are in _openai_parse (ChatRequest takes OpenAI dicts too); this
# module reads and renders whole request and response bodies.

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


def _tool_choice(value: Any, path: str) -> ToolChoice | None:
    if value is None:
        return None
    if value in ("auto", "required", "none"):
        return value  # type: ignore[no-any-return]
    if isinstance(value, dict):
        fn = expect_dict(value.get("function"), f"{path}.function")
        return SpecificTool(expect_str(fn.get("name"), f"{path}.function.name"))
    raise fail(path, "expected 'auto', 'required', 'none' or {\"type\": \"function\", ...}")


def _response_format(value: Any, path: str) -> ResponseFormat | None:
    if value is None:
        return None
    rf = expect_dict(value, path)
    kind = rf.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return ResponseFormat(type="json_object")
    if kind == "json_schema":
        js = expect_dict(rf.get("json_schema"), f"{path}.json_schema")
        strict = js.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise fail(f"{path}.json_schema.strict", "expected a boolean")
        schema = js.get("schema")
        return ResponseFormat(
            type="json_schema",
            schema=None if schema is None else expect_dict(schema, f"{path}.json_schema.schema"),
            name=expect_str(js.get("name", "response"), f"{path}.json_schema.name"),
            strict=strict,
        )
    raise fail(f"{path}.type", f"expected 'text', 'json_object' or 'json_schema', got {kind!r}")


def _stop(value: Any, path: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(expect_str(s, f"{path}[{i}]") for i, s in enumerate(expect_list(value, path)))


def _model(body: Mapping[str, Any], override: str | None, path: str) -> str:
    if override is not None:
        return override
    if "model" not in body:
        raise fail(
            f"{path}.model", "missing; write it as 'provider:model' or pass a model override"
        )
    model = expect_str(body["model"], f"{path}.model")
    if ":" not in model:
        raise fail(
            f"{path}.model",
            f"{model!r} names no provider; write it as 'provider:model' "
            f"(for example 'openai:{model}' or 'sim:{model}') or pass a model override",
        )
    try:
        split_model(model)
    except ValueError as exc:
        raise fail(f"{path}.model", str(exc)) from None
    return model


def parse_chat_body(
    body: Any,
    *,
    model: str | None = None,
    stream: bool = True,
    path: str = "body",
    fields: Mapping[str, Any] | None = None,
) -> ChatRequest:
    """Read a chat-completions request body into a :class:`ChatRequest`.

    Args:
        body: the decoded JSON body.
        model: a ``provider:model`` that replaces the body's ``model``; without it the body's
            model must itself be written ``provider:model``.
        stream: the request's ``stream`` flag; the body's own ``stream`` and
            ``stream_options`` are ignored because the runtime decides how to stream.
        path: the prefix used in error messages.
        fields: more ``ChatRequest`` fields, set by the caller rather than the body (the
            gateway's ``tag`` and ``on_partial``): given to the constructor, so checked once.

    Returns:
        A request holding every mapped field; keys sluice does not model are passed to the
        provider unchanged in ``extra_body``.

    Raises:
        ConfigError: the body is not an object, the model or messages are missing or wrong,
            ``n`` asks for more than one choice, or a field has the wrong shape.
    """
    b = expect_dict(body, path)
    chosen = _model(b, model, path)
    if "messages" not in b:
        raise fail(f"{path}.messages", "missing")
    raw_messages = expect_list(b["messages"], f"{path}.messages")
    if not raw_messages:
        raise fail(f"{path}.messages", "must hold at least one message")
    messages = tuple(parse_message(m, f"{path}.messages[{i}]") for i, m in enumerate(raw_messages))
    n = integer(b.get("n"), f"{path}.n")
    if n is not None and n != 1:
        raise fail(f"{path}.n", f"only one choice per request is supported, got {n}")
    tools = tuple(
        parse_tool(t, f"{path}.tools[{i}]")
        for i, t in enumerate(expect_list(b.get("tools") or [], f"{path}.tools"))
    )
    parallel = b.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise fail(f"{path}.parallel_tool_calls", "expected a boolean")
    max_tokens = integer(b.get("max_completion_tokens"), f"{path}.max_completion_tokens")
    if max_tokens is None:
        max_tokens = integer(b.get("max_tokens"), f"{path}.max_tokens")
    # attrs' mypy plugin types fields with ``converter=tuple`` as ``Iterable[_T_co]``, which no
    # tuple matches; the values are right, so hide them from that check.
    return ChatRequest(
        model=chosen,
        messages=messages,
        tools=cast("Any", tools),
        tool_choice=_tool_choice(b.get("tool_choice"), f"{path}.tool_choice"),
        parallel_tool_calls=parallel,
        response_format=_response_format(b.get("response_format"), f"{path}.response_format"),
        temperature=number(b.get("temperature"), f"{path}.temperature"),
        top_p=number(b.get("top_p"), f"{path}.top_p"),
        max_tokens=max_tokens,
        stop=cast("Any", _stop(b.get("stop"), f"{path}.stop")),
        seed=integer(b.get("seed"), f"{path}.seed"),
        stream=stream,
        extra_body={k: v for k, v in b.items() if k not in _MAPPED_KEYS},
        **(fields or {}),
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
    becomes the provider's own value when it gave one. ``logprobs``, ``service_tier`` and
    ``system_fingerprint`` are the provider's own (the last two only when it sent them).

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
    body: dict[str, Any] = {
        "id": f"chatcmpl-{result.call_id}",
        "object": "chat.completion",
        "created": created,
        "model": result.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": result.logprobs,
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
    if result.service_tier is not None:
        body["service_tier"] = result.service_tier
    if result.system_fingerprint is not None:
        body["system_fingerprint"] = result.system_fingerprint
    return body
