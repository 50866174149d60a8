"""The simulator's ``POST /v1/responses``: request parsing, the reply's shape (validated by the
openai SDK's own models), streamed and not, function tools, reasoning summaries, usage by the
one token rule, and the shared latency, faults and quotas. Timed tests run on
``autojump_clock``."""

from __future__ import annotations

import typing
from typing import Any

import httpx
import orjson
import pytest
import trio
import trio.testing
from openai.types.responses import Response, ResponseStreamEvent

from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport
from sluice.simulator._request import RequestError
from sluice.simulator._responses import SUMMARY_TOKENS, parse_responses_request
from sluice.simulator._text import count_tokens

WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}

_UNION = typing.get_args(typing.get_args(ResponseStreamEvent)[0])
_EVENT_TYPES = {typing.get_args(c.model_fields["type"].annotation)[0]: c for c in _UNION}


def request(**fields: Any) -> dict[str, Any]:
    return {"model": "gpt-sim", "input": "Tell me about rivers.", **fields}


def sse(data: bytes) -> list[tuple[str, Any]]:
    """``(event name, data)`` of every event, each validated by the SDK's model of its type."""
    out = []
    for block in data.decode().split("\n\n"):
        if not block:
            continue
        event_line, data_line = block.split("\n")
        name = event_line.removeprefix("event: ")
        parsed = orjson.loads(data_line.removeprefix("data: "))
        assert parsed["type"] == name
        _EVENT_TYPES[name].model_validate(parsed, strict=True)
        out.append((name, parsed))
    return out


def client(app_or_config: SimulatorApp | SimulatorConfig | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=mock_transport(app_or_config), base_url="http://sim/v1")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"model": None}, "You must provide a model parameter."),
        ({"input": []}, "Invalid 'input'"),
        ({"input": [{"role": "robot", "content": "x"}]}, "Invalid value for 'input[0].role'"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "'item_reference' is not supported"),
        ({"stream": "yes"}, "Invalid type for 'stream'"),
        ({"max_output_tokens": 0}, "Invalid 'max_output_tokens'"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "x"}}, "named 'x'"),
        ({"tool_choice": "required"}, "'tool_choice' is 'required' but no tools"),
        ({"text": {"format": {"type": "yaml"}}}, "Invalid value for 'text.format.type'"),
    ],
)
def test_bad_requests_say_what_is_wrong(fields: dict[str, Any], message: str) -> None:
    body = request(**fields)
    if fields.get("model", "") is None:
        del body["model"]
    with pytest.raises(RequestError) as caught:
        parse_responses_request(orjson.dumps(body))
    assert message in caught.value.message


def test_prompt_tokens_count_instructions_and_items_by_the_one_rule() -> None:
    parsed = parse_responses_request(
        orjson.dumps(
            request(
                instructions="Be brief please.",
                input=[
                    {"role": "user", "content": [{"type": "input_text", "text": "one two"}]},
                    {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "c", "output": "three"},
                ],
            )
        )
    )
    assert parsed.prompt_tokens == count_tokens("Be brief please. one two {} three")


async def test_a_plain_response_is_a_valid_response_object() -> None:
    with trio.fail_after(10):
        async with client(SimulatorConfig(output_tokens=5)) as http:
            r = await http.post(
                "/responses", json=request(instructions="Be brief.", metadata={"k": "v"})
            )
    assert r.status_code == 200
    assert r.headers["x-request-id"] == "sim-req-1"
    body = r.json()
    Response.model_validate(body, strict=True)
    assert body["id"] == "resp_simreq1"
    assert body["object"] == "response"
    assert body["status"] == "completed"
    assert body["instructions"] == "Be brief."
    assert body["metadata"] == {"k": "v"}
    (message,) = body["output"]
    assert message["type"] == "message"
    text = message["content"][0]["text"]
    assert count_tokens(text) == 5
    assert body["usage"] == {
        "input_tokens": count_tokens("Tell me about rivers. Be brief."),
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": count_tokens("Tell me about rivers. Be brief.") + 5,
    }


async def test_a_function_tool_is_called_with_arguments_valid_for_its_schema() -> None:
    with trio.fail_after(10):
        async with client() as http:
            r = await http.post("/responses", json=request(tools=[WEATHER], tool_choice="required"))
            streamed = await http.post(
                "/responses", json=request(tools=[WEATHER], tool_choice="required", stream=True)
            )
    body = r.json()
    Response.model_validate(body, strict=True)
    (call,) = body["output"]
    assert call["type"] == "function_call"
    assert call["name"] == "get_weather"
    assert call["call_id"].startswith("call_")
    assert set(orjson.loads(call["arguments"])) == {"city"}
    events = sse(streamed.content)
    names = [name for name, _ in events]
    assert names[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert names[-3:] == [
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    deltas = [d["delta"] for name, d in events if name.endswith("arguments.delta")]
    assert "".join(deltas) == events[-3][1]["arguments"] == call["arguments"]
    assert events[-1][1]["response"]["output"] == [{**call, "id": "fc_simreq2"}]


async def test_a_streamed_reply_follows_the_latency_model_and_counts_in_sequence(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(60):
        config = SimulatorConfig(ttft=0.5, tokens_per_second=10, output_tokens=3)
        pieces = []
        async with (
            client(config) as http,
            http.stream("POST", "/responses", json=request(stream=True)) as r,
        ):
            async for piece in r.aiter_raw():
                pieces.append((trio.current_time(), sse(piece)))
    assert r.headers["content-type"] == "text/event-stream"
    assert [at for at, _ in pieces] == [0.5, 0.6, 0.7]
    assert [[name for name, _ in events] for _, events in pieces] == [
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
        ],
        ["response.output_text.delta"],
        [
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ],
    ]
    events = [e for _, evs in pieces for e in evs]
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    text = "".join(d["delta"] for name, d in events if name == "response.output_text.delta")
    assert events[-1][1]["response"]["output"][0]["content"][0]["text"] == text


async def test_a_reasoning_summary_comes_when_asked_and_counts_as_reasoning() -> None:
    with trio.fail_after(10):
        async with client(SimulatorConfig(output_tokens=4)) as http:
            plain = await http.post("/responses", json=request(reasoning={"effort": "low"}))
            body = await http.post("/responses", json=request(reasoning={"summary": "auto"}))
            streamed = await http.post(
                "/responses", json=request(reasoning={"summary": "auto"}, stream=True)
            )
    assert [i["type"] for i in plain.json()["output"]] == ["message"]
    reasoning, message = body.json()["output"]
    assert reasoning["type"] == "reasoning"
    assert count_tokens(reasoning["summary"][0]["text"]) == SUMMARY_TOKENS
    assert message["type"] == "message"
    usage = body.json()["usage"]
    assert usage["output_tokens"] == 4 + SUMMARY_TOKENS
    assert usage["output_tokens_details"] == {"reasoning_tokens": SUMMARY_TOKENS}
    events = sse(streamed.content)
    names = [name for name, _ in events]
    assert names[2:8] == [
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.delta",
    ]
    ids = lambda items: [{**i, "id": i["id"].partition("_")[0]} for i in items]  # noqa: E731
    assert ids(events[-1][1]["response"]["output"]) == ids(body.json()["output"])


async def test_max_output_tokens_makes_the_response_incomplete() -> None:
    with trio.fail_after(10):
        async with client(SimulatorConfig(output_tokens=20)) as http:
            r = await http.post("/responses", json=request(max_output_tokens=3))
            streamed = await http.post("/responses", json=request(max_output_tokens=3,
                                                                   stream=True))  # fmt: skip
    body = r.json()
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][0]["status"] == "incomplete"
    assert body["usage"]["output_tokens"] == 3
    assert sse(streamed.content)[-1][0] == "response.incomplete"


async def test_faults_quotas_and_errors_are_openai_shaped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(60):
        app = SimulatorApp(SimulatorConfig(rpm=1, script=("500", "malformed:1")))
        async with client(app) as http:
            failed = await http.post("/responses", json=request())
            malformed = await http.post("/responses", json=request(stream=True))
            refused = await http.post("/responses", json=request())
            bad = await http.post("/responses", json={"model": "m"})
    assert failed.status_code == 500
    assert failed.json()["error"]["type"] == "server_error"
    blocks = malformed.content.split(b"\n\n")
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(blocks[1].split(b"\n")[1].removeprefix(b"data: "))
    assert refused.status_code == 429
    assert refused.headers["retry-after-ms"]
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "input"
    assert app.chat_requests_seen == 4


async def test_the_token_quota_counts_the_reasoning_tokens_too() -> None:
    # "Tell me about rivers." is 4 prompt tokens; 4 output tokens; a summary 12 more.
    with trio.fail_after(10):
        config = SimulatorConfig(output_tokens=4, tpm=30)
        async with client(config) as http:
            plain = [(await http.post("/responses", json=request())).status_code for _ in range(3)]
        async with client(config) as http:
            asked = request(reasoning={"summary": "auto"})
            thinking = [(await http.post("/responses", json=asked)).status_code for _ in range(2)]
    assert plain == [200, 200, 200]  # 8 tokens each
    assert thinking == [200, 429]  # 20 tokens each
