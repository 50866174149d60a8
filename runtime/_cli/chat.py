"""``sluice chat MODEL PROMPT``: one call, streamed to the terminal or printed as JSON."""

from __future__ import annotations

import signal
import sys
from pathlib import Path  # noqa: TC003 (cyclopts reads the annotations at runtime)
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import trio
from cyclopts import Parameter

from .._errors import ConfigError, SluiceError
from .._events import StreamReset, TextDelta
from .._messages import ChatRequest, ChatResult, Message, Tool
from .._openai_format import parse_tool
from .._runtime import Runtime, open_runtime
from ._common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_STDOUT_CLOSED,
    build_config,
    check_model,
    leaf,
    report_error,
    silence_stdout,
)
from ._preflight import check_providers

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from .._config import RuntimeConfig

__all__ = ["chat", "load_tools", "result_json"]

_TOOL_KEYS = ("name", "description", "parameters")


def load_tools(path: Path) -> tuple[Tool, ...]:
    """The tools in ``path``: a JSON list of ``{"name", "description", "parameters"}`` objects
    (``description`` and ``parameters``, a JSON schema object, may be left out), or of
    OpenAI-format tools (``{"type": "function", "function": {"name", ...}}``), or both.

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
        if "function" in item or "type" in item:  # the OpenAI format
            tools.append(parse_tool(item, where))
            continue
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


class _StdoutClosed(Exception):
    """stdout was closed by the reader (``sluice chat ... | head -c 5``)."""


def _write(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
        raise _StdoutClosed from None  # ends the call at once: nobody reads the rest


def _print_tool_calls(result: ChatResult) -> None:
    for call in result.tool_calls:
        _write(f"[tool call {call.name}({call.arguments}) id={call.id}]\n")


def _print_result(result: ChatResult) -> None:
    if result.text:
        _write(result.text if result.text.endswith("\n") else result.text + "\n")
    _print_tool_calls(result)


async def _stream_text(rt: Runtime, request: ChatRequest, *, live: bool) -> SluiceError | None:
    """Print the answer; return the call's error, if any.

    ``live`` (stdout is a terminal): text is printed as it arrives, and a retried attempt is
    announced on stderr. Otherwise stdout gets exactly the final answer, printed once the
    call has ended, so a file or a pipe never holds the fragment of an attempt that broke off.
    """
    ended_with_newline = True
    async with rt.stream(request) as call:
        async for event in call:
            if not live:
                continue
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
    if call.result is not None:
        if live:
            if not ended_with_newline:
                _write("\n")
            _print_tool_calls(call.result)
        else:
            _print_result(call.result)
    elif live and not ended_with_newline:
        _write("\n")
    return call.error


def _read_prompt(prompt: str) -> str:
    """``prompt``, or standard input when it is ``-``.

    Raises:
        ConfigError: ``-`` with nothing on standard input, or input that is not UTF-8.
    """
    if prompt != "-":
        return prompt
    try:
        text = sys.stdin.buffer.read().decode()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"the prompt on standard input is not UTF-8 text: {exc}") from None
    if not text.strip():
        raise ConfigError("the prompt '-' is read from standard input, which was empty")
    return text


async def _on_ctrl_c(
    signals: AsyncIterator[int], scope: trio.CancelScope, seen: list[bool]
) -> None:
    """On the first Ctrl-C, cancel the call (and close the runtime) in an orderly way: a
    KeyboardInterrupt raised into whichever task runs would tear the actors down instead."""
    async for _ in signals:
        seen.append(True)
        scope.cancel()
        return


async def _call(
    config: RuntimeConfig, request: ChatRequest, *, as_json: bool, stream: bool
) -> SluiceError | None:
    """Run the call and print its answer; return its error, if any."""
    async with open_runtime(config) as rt:
        try:
            if as_json or not stream:
                result = await rt.chat(request)
                if as_json:
                    _write(orjson.dumps(result_json(result)).decode() + "\n")
                else:
                    _print_result(result)
                return None
            return await _stream_text(rt, request, live=sys.stdout.isatty())
        except SluiceError as exc:
            return exc


def _run_config(
    model: str, *, base_url: str | None, api_key: str | None, config: Path | None
) -> Any:
    """The runtime config for a call to ``model`` (a model or a group), its providers checked.

    Raises:
        ConfigError: the model string, the config or a provider's settings are wrong.
    """
    run_config = build_config(
        config_file=config,
        provider=model.partition(":")[0] if ":" in model else None,
        base_url=base_url,
        api_key=api_key,
    )
    group = run_config.groups.get(model)
    if group is None:
        check_model(model)
        check_providers(run_config, [model.partition(":")[0]])
    else:  # a model group: usable while one of its deployments is
        providers = [d.model.partition(":")[0] for d in group.deployments]
        check_providers(run_config, providers, every=False)
    return run_config


async def chat(
    model: str,
    prompt: Annotated[str, Parameter(allow_leading_hyphen=True)],
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

    Without --json the text streams to stdout as it arrives (when stdout is a terminal; to a
    file or a pipe goes exactly the final text, once the call ends), then one line per tool
    call. With
    --json one JSON object is printed: provider, model, text, reasoning, tool_calls (the final,
    repaired calls, arguments parsed), finish_reason, usage. Exit status: 0 on success, 1 when
    the call failed (a tool-call error after the correction limit too), 2 for a bad model
    string, config, key or tools file (found before any call), 130 when stopped by Ctrl-C,
    141 when stdout was closed before the answer was printed (``| head``).

    Args:
        model: provider:model, for example sim:sim-small or openai:gpt-4o-mini, or the name
            of a model group of the config.
        prompt: the user message; - reads it from standard input.
        system: a system message sent before the prompt.
        as_json: print the result (or the error) as one JSON object.
        stream: stream the reply (--no-stream asks the provider for one whole body).
        base_url: the provider's OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1.
        api_key: the API key for this provider.
        tools: a JSON file holding the tools the model may call: a list of OpenAI-format
            tools ({"type": "function", "function": {...}}) or of {"name", "description",
            "parameters"} objects.
        tool_choice: auto, required, none, or the name of one tool the model must call.
            Where the provider cannot force a call, sluice forces it through structured output.
        config: the config file (TOML, or JSON for .json; default: SLUICE_CONFIG, else the
            platform's config.toml).
    """
    try:
        run_config = _run_config(model, base_url=base_url, api_key=api_key, config=config)
        if tool_choice is not None and tools is None:
            raise ConfigError("--tool-choice needs --tools FILE.json")
        tool_list = load_tools(tools) if tools is not None else ()
        prompt = _read_prompt(prompt)
    except ConfigError as exc:
        return report_error(exc, as_json=as_json)
    messages = [Message.user(prompt)]
    if system is not None:
        messages.insert(0, Message.system(system))
    request = ChatRequest(
        model=model, messages=messages, stream=stream, tools=tool_list, tool_choice=tool_choice
    )
    error: SluiceError | None = None
    interrupted: list[bool] = []
    closed = False
    try:
        with trio.open_signal_receiver(signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_on_ctrl_c, signals, nursery.cancel_scope, interrupted)
                error = await _call(run_config, request, as_json=as_json, stream=stream)
                nursery.cancel_scope.cancel()
    except* _StdoutClosed:
        closed = True
    except* ConfigError as group:  # the runtime could not start (a bad or unreachable store)
        error = leaf(group, ConfigError)
    if closed:
        return EXIT_STDOUT_CLOSED
    if interrupted:
        print("sluice: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    if error is not None:
        return report_error(error, as_json=as_json)
    return EXIT_OK
