"""``sluice chat MODEL PROMPT``: one call, streamed to the terminal or printed as JSON."""

from __future__ import annotations

import sys
from pathlib import Path  # noqa: TC003 (cyclopts reads the annotations at runtime)
from typing import Annotated, Any

import orjson
from cyclopts import Parameter

from .._runtime import Runtime, open_runtime
from ..errors import ConfigError, SluiceError
from ..events import StreamReset, TextDelta
from ..messages import ChatRequest, ChatResult, Message, Tool
from ._common import EXIT_OK, build_config, check_model, report_error

__all__ = ["chat", "load_tools", "result_json"]

_TOOL_KEYS = ("name", "description", "parameters")


def load_tools(path: Path) -> tuple[Tool, ...]:
    """The tools in ``path``: a JSON list of ``{"name", "description", "parameters"}`` objects
    (``description`` and ``parameters``, a JSON schema object, may be left out).

    Raises:
        ConfigError: the file cannot be read, is not such a list, or two tools share a name.
    """
    shape = 'a JSON list of {"name", "description", "parameters"} objects'
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read tools file {path}: {exc.strerror}") from None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"tools file {path} is not valid JSON: {exc}") from None
    if not isinstance(data, list):
        raise ConfigError(f"tools file {path} must hold {shape}")
    tools: list[Tool] = []
    for index, item in enumerate(data):
        where = f"tools file {path}, tool {index}"
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: expected an object with {', '.join(_TOOL_KEYS)}")
        unknown = sorted(set(item) - set(_TOOL_KEYS))
        if unknown:
            raise ConfigError(
                f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; "
                f"a tool has {', '.join(_TOOL_KEYS)}"
            )
        name, description = item.get("name"), item.get("description", "")
        parameters = item.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: 'name' must be a non-empty string")
        if not isinstance(description, str):
            raise ConfigError(f"{where} ({name}): 'description' must be a string")
        if not isinstance(parameters, dict):
            raise ConfigError(f"{where} ({name}): 'parameters' must be a JSON schema object")
        tools.append(Tool(name=name, description=description, parameters=parameters))
    names = [t.name for t in tools]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"tools file {path}: tool names must be unique; repeated: {repeated}")
    return tuple(tools)


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
    tools: Path | None = None,
    tool_choice: str | None = None,
    config: Path | None = None,
) -> int:
    """Send one chat call and print the answer.

    Without --json the text streams to stdout as it arrives, then one line per tool call. With
    --json one JSON object is printed: provider, model, text, reasoning, tool_calls (the final,
    repaired calls, arguments parsed), finish_reason, usage. Exit status: 0 on success, 1 when
    the call failed (a tool-call error after the correction limit too), 2 for a bad model
    string, config, key or tools file.

    Args:
        model: provider:model, for example sim:sim-small or openai:gpt-4o-mini.
        prompt: the user message.
        system: a system message sent before the prompt.
        as_json: print the result (or the error) as one JSON object.
        stream: stream the reply (--no-stream asks the provider for one whole body).
        base_url: the provider's OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1.
        api_key: the API key for this provider.
        tools: a JSON file holding a list of {"name", "description", "parameters"} objects,
            the tools the model may call.
        tool_choice: auto, required, none, or the name of one tool the model must call.
            Where the provider cannot force a call, sluice forces it through structured output.
        config: the config file (TOML, or JSON for .json; default: SLUICE_CONFIG, else the
            platform's config.toml).
    """
    try:
        check_model(model)
        run_config = build_config(
            config_file=config,
            provider=model.partition(":")[0],
            base_url=base_url,
            api_key=api_key,
        )
        if tool_choice is not None and tools is None:
            raise ConfigError("--tool-choice needs --tools FILE.json")
        tool_list = load_tools(tools) if tools is not None else ()
    except ConfigError as exc:
        return report_error(exc, as_json=as_json)
    messages = [Message.user(prompt)]
    if system is not None:
        messages.insert(0, Message.system(system))
    request = ChatRequest(
        model=model, messages=messages, stream=stream, tools=tool_list, tool_choice=tool_choice
    )
    error: SluiceError | None = None
    async with open_runtime(run_config) as rt:
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
