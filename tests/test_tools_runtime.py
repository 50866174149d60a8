"""The tool-calling layer wired into the runtime, on virtual time.

Preparation at submit, finalization at the end of each attempt and correction retries through
the Supervisor, against the simulator's ``mock_transport`` (its no-tools mode for forcing:
models named ``...notools``) or an ``httpx.MockTransport`` that scripts exact replies.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import attrs
import httpx
import orjson
import pytest
import trio

import sluice
from sluice import (
    ChatRequest,
    Completed,
    Message,
    RetryConfig,
    Retrying,
    RuntimeConfig,
    StreamReset,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallDelta,
)
from sluice._capabilities import WITHOUT_TOOLS
from sluice._config import ModelConfig, ProviderConfig, load_config
from sluice._errors import ConfigError, ToolCallError
from sluice._serde import converter
from sluice._tools import (
    CapabilityOverride,
    ToolOptions,
    correction_messages,
    is_temporary,
    prepare,
)
from sluice._tools.correct import EMPTY_REPLY_NUDGE
from sluice.simulator import SimulatorConfig, mock_transport
from sluice.simulator._broken import KINDS

from .helpers import virtual_deadline

if TYPE_CHECKING:
    from collections.abc import Callable

WEATHER = Tool(
    name="get_weather",
    description="The weather in a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)
SEARCH = Tool(
    name="search",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)
TOOLS = (WEATHER, SEARCH)
TOOLS_NAMES = ("get_weather", "search")
REQUIRED_KEY = {"get_weather": "city", "search": "q"}
NOTOOLS = "sim:sim-notools"
NO_JITTER = RetryConfig(jitter=0.0)
PLAIN_CONFIG = RuntimeConfig(retry=NO_JITTER)


class Wire(httpx.AsyncBaseTransport):
    """Wraps a transport (or a handler); records when each request went and its JSON body."""

    def __init__(
        self, inner: httpx.AsyncBaseTransport | Callable[[httpx.Request], httpx.Response]
    ) -> None:
        self.inner = inner if isinstance(inner, httpx.AsyncBaseTransport) else None
        self.handler = None if isinstance(inner, httpx.AsyncBaseTransport) else inner
        self.sent_at: list[float] = []
        self.bodies: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent_at.append(trio.current_time())
        body = await request.aread()
        self.bodies.append(orjson.loads(body))
        if self.inner is not None:
            return await self.inner.handle_async_request(request)
        assert self.handler is not None
        return self.handler(request)


def completion(
    content: str | None = None, tool_calls: list[dict[str, Any]] | None = None
) -> httpx.Response:
    """A whole ``chat.completion`` body."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "scripted",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
    return httpx.Response(200, json=body)


def streamed(*pieces: str) -> httpx.Response:
    """An SSE stream whose content arrives in ``pieces``."""
    chunks = [{"choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    data = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=data)


def scripted(*replies: httpx.Response) -> Wire:
    """A wire that answers with ``replies`` in order (the last one again after that)."""
    queue = list(replies)

    def handler(request: httpx.Request) -> httpx.Response:
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return Wire(handler)


def forced(choice: str = "required", model: str = NOTOOLS, **fields: Any) -> ChatRequest:
    fields.setdefault("stream", False)
    return ChatRequest(
        model=model,
        messages="What is the weather in Paris?",
        tools=TOOLS,
        tool_choice=choice,
        **fields,
    )


def assert_valid_call(call: ToolCall, names: tuple[str, ...] = ("get_weather", "search")) -> None:
    """One ordinary tool call: an id, a tool of the request, arguments valid for its schema."""
    assert call.id.startswith("call_") and call.name in names
    arguments = orjson.loads(call.arguments)
    assert list(arguments) == [REQUIRED_KEY[call.name]]
    assert isinstance(arguments[REQUIRED_KEY[call.name]], str)


# Preparation at submit ------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["required", "get_weather"])
@virtual_deadline(60)
async def test_forced_call_without_tool_choice_support_ends_as_a_normal_tool_call(
    autojump_clock, choice, stream
):
    wire = Wire(mock_transport(SimulatorConfig()))
    request = forced(choice, stream=stream)
    async with (
        sluice.open_runtime(PLAIN_CONFIG, transport=wire) as rt,
        rt.stream(request) as call,
    ):
        events = [event async for event in call]
    sent = wire.bodies[0]
    # Forced through structured output: no tools, no tool_choice, the tool union as schema.
    assert "tools" not in sent and "tool_choice" not in sent
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["messages"][0]["role"] == "system"
    assert "reply with JSON only" in sent["messages"][0]["content"]
    result = call.result
    assert result is not None and call.error is None
    assert result.finish_reason == "tool_calls"
    assert result.text == ""
    assert (result.attempts, result.corrections) == (1, 0)
    (tool_call,) = result.tool_calls
    assert_valid_call(tool_call, ("get_weather",) if choice == "get_weather" else TOOLS_NAMES)
    assert result.message == Message("assistant", (tool_call,))
    # The JSON envelope never reaches the caller: no text, and the finalized call arrives
    # as a tool-call delta right before Completed, as a native tool call would.
    assert not any(isinstance(e, TextDelta) for e in events)
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert [(d.index, d.id, d.name, d.arguments) for d in deltas] == [
        (0, tool_call.id, tool_call.name, tool_call.arguments)
    ]
    assert deltas[0].partial_arguments == orjson.loads(tool_call.arguments)
    assert events[-2] is deltas[0]
    assert isinstance(events[-1], Completed)
    assert call.result is events[-1].result


@virtual_deadline(60)
async def test_a_backend_with_tool_choice_gets_it_natively(autojump_clock):
    wire = Wire(mock_transport(SimulatorConfig()))
    async with sluice.open_runtime(PLAIN_CONFIG, transport=wire) as rt:
        result = await rt.chat(forced("required", model="sim:sim-small"))
    sent = wire.bodies[0]
    assert sent["tool_choice"] == "required"
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_weather", "search"]
    assert sent["parallel_tool_calls"] is False  # one call asked for explicitly
    assert "response_format" not in sent
    (tool_call,) = result.tool_calls
    assert_valid_call(tool_call)
    assert (result.attempts, result.corrections) == (1, 0)


@virtual_deadline(60)
async def test_preparation_errors_fail_the_call_before_anything_is_sent(autojump_clock):
    wire = Wire(mock_transport(SimulatorConfig()))
    async with sluice.open_runtime(PLAIN_CONFIG, transport=wire) as rt:
        with pytest.raises(ConfigError) as unknown:
            await rt.chat(forced("lookup"))
        with pytest.raises(ConfigError) as no_tools:
            await rt.chat(NOTOOLS, "hi", tool_choice="required")
        async with rt.map([forced("lookup")]) as outcomes:
            (outcome,) = [o async for o in outcomes]
    assert str(unknown.value) == (
        "sim:sim-notools: tool_choice names the tool 'lookup', which is not among the request's "
        "tools (get_weather, search)"
    )
    assert str(no_tools.value) == (
        "sim:sim-notools: tool_choice='required' needs at least one tool in the request"
    )
    assert isinstance(outcome.error, ConfigError) and outcome.result is None
    assert wire.bodies == []


# Repair and correction of broken replies -----------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@virtual_deadline(60)
async def test_each_broken_json_kind_in_a_forced_reply_is_repaired(autojump_clock, kind):
    sim = SimulatorConfig(script=(f"broken_json:{kind}",))
    async with sluice.open_runtime(PLAIN_CONFIG, transport=mock_transport(sim)) as rt:
        result = await rt.chat(forced("get_weather"))
    (tool_call,) = result.tool_calls
    assert_valid_call(tool_call, ("get_weather",))  # no envelope: the forced tool is the fallback
    assert (result.attempts, result.corrections) == (1, 0)


@pytest.mark.parametrize("kind", KINDS)
@virtual_deadline(60)
async def test_each_broken_json_kind_in_native_arguments_is_repaired(autojump_clock, kind):
    sim = SimulatorConfig(script=(f"broken_json:{kind}",))
    async with sluice.open_runtime(PLAIN_CONFIG, transport=mock_transport(sim)) as rt:
        result = await rt.chat(forced("required", model="sim:sim-small"))
    (tool_call,) = result.tool_calls
    assert_valid_call(tool_call)
    assert tool_call.arguments == orjson.dumps(orjson.loads(tool_call.arguments)).decode()
    assert (result.attempts, result.corrections) == (1, 0)


@virtual_deadline(60)
async def test_a_missing_envelope_with_several_tools_is_corrected(autojump_clock):
    """Arguments alone cannot say which of two tools was meant: the model is asked again."""
    sim = SimulatorConfig(script=("broken_json:no_envelope",))
    wire = Wire(mock_transport(sim))
    async with (
        sluice.open_runtime(PLAIN_CONFIG, transport=wire) as rt,
        rt.stream(forced("required")) as call,
    ):
        events = [event async for event in call]
    result = call.result
    assert result is not None
    (tool_call,) = result.tool_calls
    assert_valid_call(tool_call)
    assert (result.attempts, result.corrections) == (2, 1)
    assert wire.sent_at == [0.0, 0.0]  # no backoff before a correction
    (retrying,) = [e for e in events if isinstance(e, Retrying)]
    assert isinstance(retrying.error, ToolCallError)
    assert (retrying.attempt, retrying.delay, retrying.error.reason) == (1, 0.0, "invalid_call")
    (reset,) = [e for e in events if isinstance(e, StreamReset)]
    assert reset.attempt == 1  # the bad reply's deltas had reached the consumer
    second = wire.bodies[1]["messages"]
    assert second[:-2] == wire.bodies[0]["messages"]
    assert [m["role"] for m in second[-2:]] == ["assistant", "user"]
    assert "Available tools: get_weather, search." in second[-1]["content"]


@pytest.mark.parametrize("stream", [False, True])
@virtual_deadline(60)
async def test_correction_round_trip(autojump_clock, stream):
    """A reply that fails the check, then a good one: the result is the good tool call, the
    corrections went only to the backend, and the caller's request is what it was."""
    bad = "Sorry, I cannot look that up."
    good = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    if stream:
        wire = scripted(streamed("Sorry, ", "I cannot look that up."), streamed(good))
    else:
        wire = scripted(completion(bad), completion(good))
    request = forced("required", stream=stream)
    before = attrs.evolve(request)
    async with (
        sluice.open_runtime(PLAIN_CONFIG, transport=wire, rng=random.Random(7)) as rt,
        rt.stream(request) as call,
    ):
        events = [event async for event in call]
    result = call.result
    assert result is not None and call.error is None
    (tool_call,) = result.tool_calls
    assert (tool_call.name, tool_call.arguments) == ("get_weather", '{"city":"Paris"}')
    assert result.message == Message("assistant", (tool_call,))
    assert (result.finish_reason, result.attempts, result.corrections) == ("tool_calls", 2, 1)
    assert not is_temporary(result.message)
    assert request == before and request.messages == (Message.user(request.messages[0].text),)
    assert not any(is_temporary(m) for m in request.messages)
    # On the wire: the second attempt is the first plus the bad reply and the correction.
    (retrying,) = [e for e in events if isinstance(e, Retrying)]
    error = retrying.error
    assert isinstance(error, ToolCallError)
    assert (error.reason, error.generated, error.attempt, error.call_id) == (
        "unparseable",
        bad,
        1,
        "c1",
    )
    prepared = prepare(request, WITHOUT_TOOLS)
    note = correction_messages(error, prepared)
    first, second = (body["messages"] for body in wire.bodies)
    assert second == [
        *first,
        {"role": "assistant", "content": bad},
        {"role": "user", "content": note[-1].text},
    ]
    assert note[-1].text.startswith(
        "Your previous reply could not be used. Your reply was not JSON."
    )
    assert wire.sent_at == [0.0, 0.0]
    # The bad reply's text never reached the caller (a forced call's envelope is withheld).
    # The whole body also reported usage, which was delivered and so is taken back.
    assert not any(isinstance(e, TextDelta) for e in events)
    assert [e.attempt for e in events if isinstance(e, StreamReset)] == ([] if stream else [1])


@virtual_deadline(60)
async def test_the_correction_limit_ends_in_a_tool_call_error(autojump_clock):
    wire = scripted(completion("No."))
    async with sluice.open_runtime(PLAIN_CONFIG, transport=wire) as rt:
        with pytest.raises(ToolCallError) as default_limit:
            await rt.chat(forced("required"))
        sent_by_first = len(wire.bodies)
        with pytest.raises(ToolCallError) as no_corrections:
            await rt.chat(forced("required", tool_options=ToolOptions(max_corrections=0)))
        totals = await rt.ledger_totals()
    error = default_limit.value
    assert sent_by_first == 3  # one attempt and two corrections (ToolOptions default)
    assert (error.call_id, error.provider, error.model, error.attempt) == (
        "c1",
        "sim",
        "sim-notools",
        3,
    )
    assert (error.reason, error.correctable, error.generated) == ("unparseable", True, "No.")
    assert error.available_tools == ("get_weather", "search")
    assert str(error).startswith(
        "[sim:sim-notools] ToolCallError: the reply to a forced tool call holds no JSON"
    )
    assert no_corrections.value.attempt == 1 and len(wire.bodies) == 4
    assert totals["sim:sim-notools"].failures == 2
    # Each correction carries every earlier one: 0, 2 and 4 temporary messages.
    assert [len(b["messages"]) for b in wire.bodies] == [2, 4, 6, 2]


@virtual_deadline(60)
async def test_corrections_and_transport_retries_have_separate_limits(autojump_clock):
    """Two corrections do not use up two transport attempts, nor the reverse; only transport
    retries wait."""
    wire = scripted(
        completion("No."),
        completion("No."),
        httpx.Response(500, json={"error": {"message": "boom", "type": "server_error"}}),
        completion("Still no."),
    )
    config = RuntimeConfig(retry=RetryConfig(max_attempts=2, base_delay=0.5, jitter=0.0))
    async with sluice.open_runtime(config, transport=wire) as rt:
        with pytest.raises(ToolCallError) as caught:
            await rt.chat(forced("required"))
    assert wire.sent_at == [0.0, 0.0, 0.0, 0.5]
    assert (caught.value.attempt, caught.value.generated) == (4, "Still no.")


@virtual_deadline(60)
async def test_an_uncorrectable_error_is_not_retried(autojump_clock):
    cut = httpx.Response(
        200,
        json={
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": '{"name": "get_weather", "par'},
                    "finish_reason": "length",
                }
            ]
        },
    )
    wire = scripted(cut)
    async with sluice.open_runtime(PLAIN_CONFIG, transport=wire) as rt:
        with pytest.raises(ToolCallError) as caught:
            await rt.chat(forced("required", max_tokens=8))
    assert (caught.value.reason, caught.value.correctable) == ("truncated", False)
    assert len(wire.bodies) == 1


# tool_choice "none", empty replies -----------------------------------------------------------

NONE_HINT = (
    '{"providers": {"sim": {"models": {"sim-small": {"tools": {"tool_choice": '
    '["auto", "required", "specific"]}}}}}}'
)


def weather_call(name: str = "get_weather") -> httpx.Response:
    call = {"id": "call_x", "type": "function", "function": {"name": name, "arguments": "{}"}}
    return completion(None, [call])


@virtual_deadline(60)
async def test_a_tool_call_despite_tool_choice_none_is_corrected(autojump_clock):
    wire = scripted(weather_call(), completion("It is sunny in Paris."))
    async with sluice.open_runtime(PLAIN_CONFIG, transport=wire) as rt:
        result = await rt.chat(forced("none", model="sim:sim-small"))
    assert wire.bodies[0]["tool_choice"] == "none"  # the sim honours none: sent natively
    assert (result.text, result.tool_calls) == ("It is sunny in Paris.", ())
    assert (result.attempts, result.corrections) == (2, 1)
    correction = wire.bodies[1]["messages"][-2:]
    assert correction == [
        {"role": "assistant", "content": '{"name":"get_weather","arguments":"{}"}'},
        {
            "role": "user",
            "content": "Your previous reply could not be used. "
            "Do not call any tool in this reply; answer in text.",
        },
    ]


@virtual_deadline(60)
async def test_the_none_error_names_a_per_model_override_that_works(autojump_clock):
    """The error's fix, pasted into the config, stops tool_choice 'none' going to the model."""
    no_corrections = ToolOptions(max_corrections=0)
    wire = scripted(weather_call())
    async with sluice.open_runtime(PLAIN_CONFIG, transport=wire) as rt:
        with pytest.raises(ToolCallError) as caught:
            await rt.chat(forced("none", model="sim:sim-small", tool_options=no_corrections))
    error = caught.value
    assert (error.reason, error.tool_name) == ("tool_choice_none", "get_weather")
    assert error.message.splitlines()[0] == (
        "tool_choice was 'none' but the model called 'get_weather'"
    )
    assert f"  per model: {NONE_HINT}" in error.message.splitlines()
    per_call = "ToolOptions(capabilities=CapabilityOverride(tool_choice={"
    assert f'  per call:  {per_call}"auto", "required", "specific"}}))' in error.message
    # The per-model form, loaded as a config file: tools are no longer sent for "none".
    config = attrs.evolve(load_config(NONE_HINT), retry=NO_JITTER)
    assert config.providers["sim"].models["sim-small"] == ModelConfig(
        tools=CapabilityOverride(tool_choice={"auto", "required", "specific"})
    )
    wire = scripted(completion("It is sunny."))
    async with sluice.open_runtime(config, transport=wire) as rt:
        result = await rt.chat(forced("none", model="sim:sim-small"))
        other_model = await rt.chat(forced("none", model="sim:sim-large"))
    assert "tools" not in wire.bodies[0] and "tool_choice" not in wire.bodies[0]
    assert wire.bodies[1]["tool_choice"] == "none"  # the override is for sim-small only
    assert result.text == other_model.text == "It is sunny."
    # The per-call form does the same.
    options = ToolOptions(
        capabilities=CapabilityOverride(tool_choice={"auto", "required", "specific"})
    )
    wire = scripted(completion("It is sunny."))
    async with sluice.open_runtime(PLAIN_CONFIG, transport=wire) as rt:
        await rt.chat(forced("none", model="sim:sim-small", tool_options=options))
    assert "tools" not in wire.bodies[0]


@virtual_deadline(60)
async def test_empty_replies_get_a_user_nudge_only_when_the_call_has_tools(autojump_clock):
    wire = scripted(completion(""), completion("Paris is sunny."))
    async with sluice.open_runtime(PLAIN_CONFIG, transport=wire) as rt:
        result = await rt.chat(forced("auto", model="sim:sim-small"))
    assert (result.text, result.attempts, result.corrections) == ("Paris is sunny.", 2, 1)
    assert wire.bodies[1]["messages"][-1] == {"role": "user", "content": EMPTY_REPLY_NUDGE}
    assert len(wire.bodies[1]["messages"]) == len(wire.bodies[0]["messages"]) + 1

    # A plain chat call is passed on as it came, empty or not: no tools, nothing to finalize.
    wire = scripted(completion(""))
    async with sluice.open_runtime(PLAIN_CONFIG, transport=wire) as rt:
        plain = await rt.chat("sim:sim-small", "Say nothing.", stream=False)
    assert (plain.text, plain.finish_reason, plain.attempts, plain.corrections) == (
        "",
        "stop",
        1,
        0,
    )


# Config, fallbacks, options --------------------------------------------------------------------


@virtual_deadline(60)
async def test_a_per_model_override_from_the_config_shapes_the_forced_schema(autojump_clock):
    """``top_level_unions: false`` for one model wraps the union in ``item``; the reply comes
    back as an ordinary tool call either way."""
    config = load_config(
        {"providers": {"sim": {"models": {"sim-notools": {"tools": {"top_level_unions": False}}}}}}
    )
    wire = Wire(mock_transport(SimulatorConfig()))
    async with sluice.open_runtime(config, transport=wire) as rt:
        result = await rt.chat(forced("required"))
    schema = wire.bodies[0]["response_format"]["json_schema"]["schema"]
    assert schema["required"] == ["item"] and list(schema["properties"]) == ["item"]
    (tool_call,) = result.tool_calls
    assert_valid_call(tool_call)


@virtual_deadline(60)
async def test_a_fallback_model_is_prepared_for_its_own_backend(autojump_clock):
    wire = Wire(mock_transport(SimulatorConfig(script=("529",))))
    config = RuntimeConfig(
        providers={"sim": ProviderConfig(breaker=None)},
        retry=RetryConfig(max_attempts=1, jitter=0.0),
    )
    request = forced("required", model="sim:sim-small", fallbacks=(NOTOOLS,))
    async with sluice.open_runtime(config, transport=wire) as rt:
        result = await rt.chat(request)
    first, second = wire.bodies
    assert first["tool_choice"] == "required" and "response_format" not in first
    assert "tools" not in second and second["response_format"]["type"] == "json_schema"
    assert result.models_tried == ("sim:sim-small", "sim:sim-notools")
    (tool_call,) = result.tool_calls
    assert_valid_call(tool_call)


def answer_either_way(request: httpx.Request) -> httpx.Response:
    """A native tool call, or the same call as JSON text when a response format asks for it."""
    if "response_format" in orjson.loads(request.content):
        return completion('{"item": {"name": "get_weather", "parameters": {"city": "Paris"}}}')
    function = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    return completion(None, [{"id": "call_1", "type": "function", "function": function}])


CUSTOM_URL = "http://127.0.0.1:8000/v1"


@pytest.mark.parametrize(
    ("model", "providers", "choice", "native"),
    [
        ("openai:gpt-4o-mini", {}, "required", True),
        ("openai:gpt-4o-mini", {"openai": {"base_url": CUSTOM_URL}}, "required", True),
        ("openai:gpt-4o-mini", {"openai": {"base_url": CUSTOM_URL}}, "get_weather", True),
        ("local:qwen", {"local": {"base_url": CUSTOM_URL}}, "required", True),
        (
            "local:qwen",
            {"local": {"base_url": CUSTOM_URL, "tools": {"tool_choice": ["auto", "none"]}}},
            "required",
            False,
        ),
        (
            "openai:gpt-4o-mini",
            {"openai": {"models": {"gpt-4o-mini": {"tools": {"tool_choice": ["auto"]}}}}},
            "get_weather",
            False,
        ),
    ],
)
@virtual_deadline(60)
async def test_capabilities_come_from_the_registry_and_the_model_entry(
    autojump_clock, model, providers, choice, native
):
    """OpenAI honours every mode, and so (issue 27: assumed until the config says otherwise)
    does an OpenAI-compatible server at a custom base URL or a custom provider; the provider's
    and the model's config entries override that."""
    config = load_config({"providers": providers, "retry": {"jitter": 0.0}})
    wire = Wire(answer_either_way)
    environ = {"OPENAI_API_KEY": "sk-test"}
    async with sluice.open_runtime(config, transport=wire, environ=environ) as rt:
        result = await rt.chat(forced(choice, model=model))
    (sent,) = wire.bodies
    if native:
        assert "response_format" not in sent and len(sent["tools"]) == 2
        expected = {"type": "function", "function": {"name": choice}}
        assert sent["tool_choice"] == (choice if choice == "required" else expected)
    else:
        assert "tools" not in sent and "tool_choice" not in sent
        assert sent["response_format"]["type"] == "json_schema"
    (tool_call,) = result.tool_calls
    assert (tool_call.name, orjson.loads(tool_call.arguments)) == ("get_weather", {"city": "Paris"})
    assert (tool_call.id == "call_1") is native  # a forced call gets an id of its own


@pytest.mark.parametrize("ignores", [False, True])
async def test_the_runtimes_own_simulator_decides_what_its_models_do_with_tools(ignores):
    """Loopback, real clock: with ``ignore_tool_choice`` the in-process simulator ignores tools,
    so the runtime forces the call through structured output and it still ends as a valid tool
    call; without it the call goes natively (the simulator answers a native tool call)."""
    with trio.fail_after(20):
        async with sluice.open_runtime(
            PLAIN_CONFIG, simulator=SimulatorConfig(ignore_tool_choice=ignores)
        ) as rt:
            result = await rt.chat(forced("required", model="sim:sim-small"))
    assert result.finish_reason == "tool_calls" and result.corrections == 0
    (tool_call,) = result.tool_calls
    assert_valid_call(tool_call)


def test_tool_options_travel_with_the_request_through_serde() -> None:
    options = ToolOptions(
        capabilities=CapabilityOverride(tool_choice={"auto"}), max_corrections=5, repair=False
    )
    request = forced("required", tool_options=options)
    data = converter.unstructure(request)
    assert data["tool_options"]["capabilities"]["tool_choice"] == ["auto"]
    assert converter.structure(orjson.loads(orjson.dumps(data)), ChatRequest) == request


# The end-to-end run of issue 8 -------------------------------------------------------------------

E2E_EXPECTED = {"valid": 489, "failed": 11, "corrections": 106}
"""The outcome of the sequential run (one call at a time, so the simulator's fault dice fall in
the same order every time); the sums and the invariants hold for any order."""


@pytest.mark.parametrize("max_in_flight", [1, 100])
@virtual_deadline(600)
async def test_500_forced_calls_with_broken_json_end_valid_or_as_tool_call_errors(
    autojump_clock, max_in_flight
):
    """No tool_choice support; half of all replies broken one way or another and a further
    30% without their envelope. Every call ends as a valid tool call or, after the correction
    limit, as a ToolCallError; no temporary message reaches a result or a caller's request."""
    sim = SimulatorConfig(
        rate_broken_json=0.5, fault_rates={"broken_json:no_envelope": 0.3}, fault_seed=8
    )
    requests = [
        ChatRequest(
            model=NOTOOLS,
            messages=f"Question {i}: what is the weather, or what should I search?",
            tools=TOOLS,
            tool_choice="required" if i % 2 else "search",
            stream=i % 4 < 2,
        )
        for i in range(500)
    ]
    copies = [attrs.evolve(r) for r in requests]
    wire = Wire(mock_transport(sim))
    async with (
        sluice.open_runtime(PLAIN_CONFIG, transport=wire, rng=random.Random(8)) as rt,
        rt.map(requests, max_in_flight=max_in_flight) as outcomes,
    ):
        done = [o async for o in outcomes]
    assert sorted(o.index for o in done) == list(range(500))
    valid = [o for o in done if o.result is not None]
    failed = [o for o in done if o.error is not None]
    for outcome in valid:
        result = outcome.result
        assert result is not None
        (tool_call,) = result.tool_calls
        allowed = TOOLS_NAMES if outcome.request.tool_choice == "required" else ("search",)
        assert_valid_call(tool_call, allowed)
        assert result.message == Message("assistant", (tool_call,))
        assert result.finish_reason == "tool_calls"
        assert result.attempts == result.corrections + 1 <= 3
    for outcome in failed:
        error = outcome.error
        assert isinstance(error, ToolCallError)
        assert outcome.request.tool_choice == "required"  # a named tool is its own fallback
        assert (error.reason, error.attempt, error.message) == (
            "invalid_call",
            3,
            "the forced reply names no tool",
        )
    assert requests == copies
    assert not any(is_temporary(m) for r in requests for m in r.messages)
    corrections = sum(o.result.corrections for o in valid if o.result is not None)
    assert len(wire.bodies) == 500 + corrections + 2 * len(failed)
    assert all("tools" not in body and "response_format" in body for body in wire.bodies)
    counts = {"valid": len(valid), "failed": len(failed), "corrections": corrections}
    if max_in_flight == 1:
        assert counts == E2E_EXPECTED
    else:
        assert counts["valid"] + counts["failed"] == 500
        assert counts["failed"] > 0 and counts["corrections"] > 0
