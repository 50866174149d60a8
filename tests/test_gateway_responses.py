"""The gateway's ``POST /v1/responses`` in virtual time: streamed and not, function tools, any
provider behind it (an Anthropic upstream answers a Responses client), virtual keys, quotas
and budgets as for chat, and clear refusals. Replies are validated by the openai SDK's own
models."""

import typing

import orjson
from openai.types.responses import Response, ResponseStreamEvent

from sluice._gateway import GatewaySettings, KeyRing, issue_key
from sluice.simulator import SimulatorConfig
from sluice.simulator._text import count_tokens

from .gateway_helpers import gateway_harness
from .helpers import virtual_deadline

_UNION = typing.get_args(typing.get_args(ResponseStreamEvent)[0])
_EVENT_TYPES = {typing.get_args(c.model_fields["type"].annotation)[0]: c for c in _UNION}

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
CONFIG = {
    "ledger": {"persist": False},
    "providers": {"simant": {"protocol": "anthropic", "base_url": "http://sim.invalid/v1"}},
}
OPEN = GatewaySettings(require_key=False)


def body(model="sim:sim-small", **extra):
    return {"model": model, "input": "Tell me about rivers.", **extra}


def events(raw: bytes) -> list[tuple[str, dict]]:
    """Every SSE event, validated strictly by the SDK's model of its type."""
    out = []
    for block in raw.split(b"\n\n")[:-1]:
        name, data = block.split(b"\n")
        kind = name.removeprefix(b"event: ").decode()
        parsed = orjson.loads(data.removeprefix(b"data: "))
        assert parsed["type"] == kind
        _EVENT_TYPES[kind].model_validate(parsed, strict=True)
        out.append((kind, parsed))
    assert [d["sequence_number"] for _, d in out] == list(range(len(out)))
    return out


def _ring(**specs):
    keys: dict = {}
    tokens: dict[str, str] = {}
    for name, limits in specs.items():
        keys[name], tokens[name] = issue_key(keys, name, now=0.0, **limits)
    return KeyRing(None, keys), tokens


@virtual_deadline(60)
async def test_a_plain_response_and_its_stream(autojump_clock):
    sim = SimulatorConfig(output_tokens=6)
    async with gateway_harness(settings=OPEN, config=CONFIG, sim=sim) as gw:
        status, headers, raw = await gw.call(
            "/v1/responses", body(instructions="Be brief.", metadata={"k": "v"})
        )
        assert status == 200 and headers["content-type"] == "application/json"
        reply = orjson.loads(raw)
        Response.model_validate(reply, strict=True)
        assert reply["object"] == "response" and reply["status"] == "completed"
        assert reply["model"] == "sim:sim-small"
        assert reply["instructions"] == "Be brief." and reply["metadata"] == {"k": "v"}
        (message,) = reply["output"]
        assert len(message["content"][0]["text"].split()) == 6
        assert reply["usage"]["output_tokens"] == 6
        assert reply["usage"]["input_tokens"] == count_tokens("Be brief. Tell me about rivers.")

        status, headers, raw = await gw.call("/v1/responses", body(stream=True))
        assert status == 200 and headers["content-type"].startswith("text/event-stream")
        found = events(raw)
        names = [name for name, _ in found]
        assert names[:4] == [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
        ]
        assert names[-1] == "response.completed"
        text = "".join(d["delta"] for n, d in found if n == "response.output_text.delta")
        final = found[-1][1]["response"]
        assert final["output"][0]["content"][0]["text"] == text
        assert final["usage"]["output_tokens"] == 6
        # The upstream was asked in its own protocol (chat completions), streamed.
        assert gw.sim.chat_requests_seen == 2


@virtual_deadline(60)
async def test_a_function_tool_comes_back_as_a_function_call_item(autojump_clock):
    async with gateway_harness(settings=OPEN, config=CONFIG) as gw:
        status, _, raw = await gw.call(
            "/v1/responses", body(tools=[WEATHER], tool_choice="required")
        )
        assert status == 200
        reply = orjson.loads(raw)
        Response.model_validate(reply, strict=True)
        (call,) = reply["output"]
        assert call["type"] == "function_call" and call["name"] == "get_weather"
        assert call["call_id"].startswith("call_")
        assert set(orjson.loads(call["arguments"])) == {"city"}

        # The tool's result goes back as a function_call_output item; the model answers.
        follow = body(
            tools=[WEATHER],
            input=[
                {"role": "user", "content": "Weather in Paris? Use the tool."},
                {k: call[k] for k in ("type", "call_id", "name", "arguments")},
                {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"},
            ],
            stream=True,
        )
        status, _, raw = await gw.call("/v1/responses", follow)
        assert status == 200
        assert [i["type"] for i in events(raw)[-1][1]["response"]["output"]] == ["message"]

        status, _, raw = await gw.call(
            "/v1/responses", body(tools=[WEATHER], tool_choice="required", stream=True)
        )
        found = events(raw)
        deltas = "".join(d["delta"] for n, d in found if n.endswith("arguments.delta"))
        done = next(d for n, d in found if n == "response.function_call_arguments.done")
        assert deltas == done["arguments"] and set(orjson.loads(deltas)) == {"city"}
        (item,) = found[-1][1]["response"]["output"]
        assert item["call_id"].startswith("call_") and item["arguments"] == deltas


@virtual_deadline(60)
async def test_an_anthropic_model_answers_a_responses_client(autojump_clock):
    sim = SimulatorConfig(output_tokens=5)
    async with gateway_harness(settings=OPEN, config=CONFIG, sim=sim) as gw:
        status, _, raw = await gw.call(
            "/v1/responses",
            body("simant:claude-sim", instructions="Be brief.", max_output_tokens=100),
        )
        assert status == 200
        reply = orjson.loads(raw)
        Response.model_validate(reply, strict=True)
        assert reply["model"] == "simant:claude-sim"
        assert len(reply["output"][0]["content"][0]["text"].split()) == 5
        status, _, raw = await gw.call(
            "/v1/responses", body("simant:claude-sim", tools=[WEATHER], tool_choice="required",
                                  stream=True),
        )  # fmt: skip
        assert status == 200
        (item,) = events(raw)[-1][1]["response"]["output"]
        assert item["type"] == "function_call" and item["call_id"].startswith("toolu_")
        # Both went to the simulator's Anthropic route; a cut reply is incomplete.
        status, _, raw = await gw.call(
            "/v1/responses", body("simant:claude-sim", max_output_tokens=2)
        )
        reply = orjson.loads(raw)
        assert reply["status"] == "incomplete"
        assert reply["incomplete_details"] == {"reason": "max_output_tokens"}


@virtual_deadline(60)
async def test_stored_response_parameters_are_refused_for_other_upstreams(autojump_clock):
    async with gateway_harness(settings=OPEN, config=CONFIG) as gw:
        status, _, raw = await gw.call("/v1/responses", body(previous_response_id="resp_1"))
        assert status == 400
        error = orjson.loads(raw)["error"]
        assert error["type"] == "invalid_request_error"
        assert error["message"].startswith("body.previous_response_id: ")
        status, _, raw = await gw.call("/v1/responses", body(background=True))
        assert status == 400 and "body.background" in orjson.loads(raw)["error"]["message"]
        status, _, raw = await gw.call("/v1/responses", body(tools=[{"type": "web_search"}]))
        assert status == 400
        assert orjson.loads(raw)["error"]["message"].startswith(
            "body.tools[0].type: only 'function' tools"
        )
        status, _, raw = await gw.call("/v1/responses", {"model": "sim:sim-small"})
        assert status == 400 and "body.input: missing" in orjson.loads(raw)["error"]["message"]
        # Parameters only OpenAI's Responses API knows never reach a chat upstream.
        status, _, _ = await gw.call(
            "/v1/responses", body(reasoning={"effort": "low"}, store=False, include=["x"])
        )
        assert status == 200
        assert gw.sim.chat_requests_seen == 1


@virtual_deadline(300)
async def test_keys_quotas_and_budgets_hold_as_for_chat(autojump_clock):
    ring, tokens = _ring(
        alice={"rpm": 2}, frank={"budget_usd": 0.001}, heidi={"models": ["sim:sim-small"]}
    )
    async with gateway_harness(keys=ring, config=CONFIG) as gw:
        status, _, raw = await gw.call("/v1/responses", body())
        assert status == 401 and orjson.loads(raw)["error"]["code"] == "invalid_api_key"
        for _ in range(2):
            status, _, _ = await gw.call("/v1/responses", body(), token=tokens["alice"])
            assert status == 200
        status, headers, raw = await gw.call(
            "/v1/responses", body(stream=True), token=tokens["alice"]
        )
        assert status == 429 and headers["retry-after"] == "60"
        assert orjson.loads(raw)["error"]["code"] == "rate_limit_exceeded"

        status, _, raw = await gw.call("/v1/responses", body("sim:other"), token=tokens["heidi"])
        assert status == 403 and orjson.loads(raw)["error"]["code"] == "model_not_allowed"

        calls = 0
        while True:
            status, headers, raw = await gw.call(
                "/v1/responses", body(max_output_tokens=50), token=tokens["frank"]
            )
            if status != 200:
                break
            calls += 1
            assert calls < 20
        assert calls >= 3
        assert status == 429 and headers["x-should-retry"] == "false"
        assert orjson.loads(raw)["error"]["type"] == "insufficient_quota"
        rows = await gw.gateway.rt.ledger.snapshot(by=("tag",))
        assert {row.tag: row.totals.calls for row in rows}["alice"] == 2
        assert gw.gateway.requests[("/v1/responses", 200)] == 2 + calls


@virtual_deadline(60)
async def test_a_stream_that_breaks_after_output_ends_with_response_failed(autojump_clock):
    sim = SimulatorConfig(output_tokens=20, script=("disconnect:4",))
    async with gateway_harness(settings=OPEN, config=CONFIG, sim=sim) as gw:
        status, _, raw = await gw.call("/v1/responses", body(stream=True))
    assert status == 200
    found = events(raw)
    assert any(n == "response.output_text.delta" for n, _ in found)
    name, data = found[-1]
    assert name == "response.failed"
    assert data["response"]["status"] == "failed"
    assert data["response"]["error"]["code"] == "server_error"
    assert data["response"]["output"][0]["status"] == "incomplete"
