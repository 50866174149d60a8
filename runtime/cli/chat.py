"""``sluice chat MODEL PROMPT``: one call, streamed to the terminal or printed as JSON."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import orjson
from cyclopts import Parameter

from .._runtime import Runtime, open_runtime
from ..errors import ConfigError, SluiceError
from ..events import StreamReset, TextDelta
from ..messages import ChatRequest, ChatResult, Message
from ._common import EXIT_OK, build_config, check_model, report_error

__all__ = ["chat", "result_json"]


def _arguments(text: str) -> Any:
    try:
        return orjson.loads(text) if text.strip() else {}
    except orjson.JSONDecodeError:
        return text


def result_json(result: ChatResult) -> dict[str, Any]:
    """The ``--json`` object for a finished call.

    Each tool call's ``arguments`` is the parsed JSON value, or the raw text when the model's
    text is not JSON.
    """
    usage = result.usage
    return {
        "provider": result.provider,
        "model": result.model,
        "text": result.text,
        "reasoning": result.reasoning,
        "tool_calls": [
            {"id": call.id, "name": call.name, "arguments": _arguments(call.arguments)}
            for call in result.tool_calls
        ],
        "finish_reason": result.finish_reason,
        "usage": {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
            "reasoning_tokens": usage.reasoning_tokens,
        },
    }


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _print_tool_calls(result: ChatResult) -> None:
    for call in result.tool_calls:
        _write(f"[tool call {call.name}({call.arguments}) id={call.id}]\n")


async def _stream_text(rt: Runtime, request: ChatRequest) -> SluiceError | None:
    """Print text as it arrives; return the call's error, if any."""
    ended_with_newline = True
    async with rt.stream(request) as call:
        async for event in call:
            if isinstance(event, TextDelta) and event.text:
                _write(event.text)
                ended_with_newline = event.text.endswith("\n")
            elif isinstance(event, StreamReset):
                # Text already printed cannot be taken back; say that it is being replaced.
                _write("\n")
                print(
                    f"sluice: attempt {event.attempt} broke off ({event.reason}); "
                    "the answer starts again below",
                    file=sys.stderr,
                )
                ended_with_newline = True
    if not ended_with_newline:
        _write("\n")
    if call.result is not None:
        _print_tool_calls(call.result)
    return call.error


async def chat(
    model: str,
    prompt: str,
    /,
    *,
    system: str | None = None,
    as_json: Annotated[bool, Parameter(name="--json", negative=())] = False,
    stream: Annotated[bool, Parameter(negative="--no-stream")] = True,
    base_url: str | None = None,
    api_key: str | None = None,
) -> int:
    """Send one chat call and print the answer.

    Without --json the text streams to stdout as it arrives. With --json one JSON object is
    printed: provider, model, text, reasoning, tool_calls, finish_reason, usage. Exit status:
    0 on success, 1 when the call failed, 2 for a bad model string, config or key.

    Args:
        model: provider:model, for example sim:sim-small or openai:gpt-4o-mini.
        prompt: the user message.
        system: a system message sent before the prompt.
        as_json: print the result (or the error) as one JSON object.
        stream: stream the reply (--no-stream asks the provider for one whole body).
        base_url: the provider's OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1.
        api_key: the API key for this provider.
    """
    try:
        check_model(model)
        config = build_config(provider=model.partition(":")[0], base_url=base_url, api_key=api_key)
    except ConfigError as exc:
        return report_error(exc, as_json=as_json)
    messages = [Message.user(prompt)]
    if system is not None:
        messages.insert(0, Message.system(system))
    request = ChatRequest(model=model, messages=messages, stream=stream)
    error: SluiceError | None = None
    async with open_runtime(config) as rt:
        try:
            if as_json or not stream:
                result = await rt.chat(request)
                if as_json:
                    _write(orjson.dumps(result_json(result)).decode() + "\n")
                else:
                    if result.text:
                        _write(result.text if result.text.endswith("\n") else result.text + "\n")
                    _print_tool_calls(result)
            else:
                error = await _stream_text(rt, request)
        except SluiceError as exc:
            error = exc
    if error is not None:
        return report_error(error, as_json=as_json)
    return EXIT_OK
