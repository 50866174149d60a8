"""The ``openai-responses`` codec against recorded Responses API traffic.

The recordings (``tests/conformance_data/openai_responses``, provenance in its ``manifest.json``
and ``INDEX.md``) come from pydantic-ai's VCR cassettes of OpenAI's and DeepSeek's
``/responses`` endpoints. Expected values were read from the recordings by hand and are
written out per case below. Streams are fed whole, a byte at a time, 7 bytes at a time and in
seeded random pieces; every split must decode alike, and the deltas must add up to the final
message.

Where the recorded request can be expressed as a :class:`ChatRequest`, a second test builds it
and compares the whole body as parsed JSON, after these normalizations: the recorder's nulls
(``previous_response_id``, a function call's ``status``, a tool's ``description``, a
``reasoning.summary``), empty ``instructions`` and ``"stream": false`` are dropped, as are
empty tool descriptions (sluice omits unset fields, and the API reads null and absent alike);
and
sluice's own ``"store": false`` is checked, then dropped (the recorder's client left
``store`` at the API's default).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import orjson
import pytest

from sluice._errors import BadRequest, CallError
from sluice._events import ReasoningDelta, TextDelta, ToolCallDelta, UsageReported
from sluice._messages import ChatRequest, Message, Tool, ToolCall, Usage
from sluice._protocols.responses import ResponsesCodec
from sluice._protocols.responses_request import split_reasoning_signature
from tests.conformance import Case, conformance_dir, decode_pieces, load_cases, splits

if TYPE_CHECKING:
    from sluice._protocols.base import AttemptOutput

ROOT = conformance_dir()
CODEC = ResponsesCodec()


MANIFEST = "openai_responses/manifest.json"
CASES = load_cases(manifest_name=MANIFEST)


@attrs.frozen(kw_only=True)
class Reply:
    text: str = ""
    reasoning: str = ""
    reasoning_ids: tuple[str, ...] = ()
    """The reasoning items' ids, as their parts' signatures carry them."""
    encrypted: tuple[int, ...] = ()
    """The length of each reasoning item's encrypted content (0: none)."""
    tool_calls: tuple[tuple[str, str, str], ...] = ()
    """(call id, name, arguments exactly as sent)."""
    usage: Usage
    finish_reason: str
    raw_finish_reason: str
    response_id: str
    service_tier: str | None = None
    events: int | None = None
    """Data events in the stream."""


@attrs.frozen(kw_only=True)
class ErrorReply:
    cls: type[CallError]
    status: int
    message: str
    error_type: str
    param: str


EXPECTED: dict[str, Reply | ErrorReply] = {
    "stream_function_call": Reply(
        tool_calls=(("call_kL0PCQV7M2WMoVX8V8OtYSAL", "get_capital", '{"country":"France"}'),),
        usage=Usage(255, 16, 0, 0, 0),
        finish_reason="tool_calls",
        raw_finish_reason="completed",
        response_id="resp_67e554a155508191900ee113293c4c830794405d35281ae2",
        events=11,
    ),
    "stream_text_after_function_call_output": Reply(
        text="The capital of France is Paris.",
        usage=Usage(278, 9, 0, 0, 0),
        finish_reason="stop",
        raw_finish_reason="completed",
        response_id="resp_67e554a21aa88191b65876ac5e5bbe0406c52f0e511c76ed",
        events=15,
    ),
    "stream_reasoning_encrypted_function_call_usage": Reply(
        # No summary was asked for: the reasoning item is only its id and encrypted content.
        reasoning_ids=("rs_0050471a34b36ae60068c97bac4dcc819595fd0f80d6b3c405",),
        encrypted=(3896,),
        tool_calls=(("call_CWXgs68YprAjp6t0371hiPOI", "final_result", '{"result":6666}'),),
        usage=Usage(53, 469, 0, 0, 448),
        finish_reason="tool_calls",
        raw_finish_reason="completed",
        response_id="resp_0050471a34b36ae60068c97b94a480819587a9d70cf2979b33",
        service_tier="flex",
        events=14,
    ),
    "deepseek_stream_reasoning_text_function_call": Reply(
        reasoning="The user asks about temperature in Tokyo. I'll call the tool.",
        reasoning_ids=("fa6f3a83-5d25-46e8-9d03-1a89ce5cf2ba",),
        encrypted=(0,),
        tool_calls=(("call_00_xjY8Z2BvSlzgEmmw0DtH0464", "get_temperature", '{"city": "Tokyo"}'),),
        # 256 of the 366 prompt tokens came from DeepSeek's cache.
        usage=Usage(366, 59, 256, 0, 14),
        finish_reason="tool_calls",
        raw_finish_reason="completed",
        response_id="1235b7ba-fdc9-4a1c-bfe4-6137c207baf3",
        service_tier="default",
        events=34,
    ),
    "nonstream_function_call": Reply(
        tool_calls=(("call_YfwRsW8sUxDKipwyhWTzOXCA", "get_capital", '{"country":"PotatoLand"}'),),
        usage=Usage(40, 18, 0, 0, 0),
        finish_reason="tool_calls",
        raw_finish_reason="completed",
        response_id="resp_04907f5d3de791830068fbaa19bb908195a91378279dba0f14",
        service_tier="default",
    ),
    "nonstream_text_after_function_call_output": Reply(
        text="The capital of PotatoLand is Potato City.",
        usage=Usage(67, 11, 0, 0, 0),
        finish_reason="stop",
        raw_finish_reason="completed",
        response_id="resp_0e9950da9eac6a780068fbaa1bc030819da585a6f85ddad1e6",
        service_tier="default",
    ),
    "nonstream_reasoning_summary": Reply(
        reasoning=(
            "**Generating factorial function**\n\nI need to respond with a Python function for "
            "calculating the factorial. The user wants me to think step-by-step, but I need to "
            "keep my reasoning brief. I'll provide a brief explanation of how the function "
            "works and include some input validation. I could choose either an iterative or "
            "recursive approach. I'll keep the details high-level, showing only the essential "
            "steps before presenting the final code to the user."
        ),
        reasoning_ids=("rs_0b028a7a2aca8d68006942f4e0d380819398dfa502c33bce7b",),
        encrypted=(1252,),
        text=(
            '```python\ndef factorial(n: int) -> int:\n    """\n    Return n! (the factorial of '
            "n).\n\n    Steps:\n    1) Validate that n is a non-negative integer.\n    2) Start "
            "with result = 1.\n    3) Multiply result by each integer from 2 up to n.\n    4) "
            'Return result.\n    """\n    if not isinstance(n, int):\n        raise TypeError("n '
            'must be an integer")\n    if n < 0:\n        raise ValueError("n must be '
            'non-negative")\n\n    result = 1\n    for k in range(2, n + 1):\n        result *= '
            "k\n    return result\n```\n\nExample:\n```python\nprint(factorial(5))  # 120\n```"
        ),
        usage=Usage(34, 226, 0, 0, 59),
        finish_reason="stop",
        raw_finish_reason="completed",
        response_id="resp_0b028a7a2aca8d68006942f4e05a848193a3052f1530ea1deb",
        service_tier="default",
    ),
    "stream_reasoning_summary_parts_ABRIDGED": Reply(
        # Three deltas of each of the four summary parts were kept (see INDEX.md); the parts
        # are joined by a blank line, which went out as a delta of its own.
        reasoning=(
            "**Providing street crossing\n\n**Explaining street\n\n**Sharing street crossing"
            "\n\n**Providing safe crossing"
        ),
        reasoning_ids=("rs_68c42d1d0878819d8266007cd3d1402c08fbf9b1584184ff",),
        encrypted=(440,),
        text="I'm not a",
        # Usage counts the whole reply: 1,408 of its 1,680 output tokens were reasoning.
        usage=Usage(13, 1680, 0, 0, 1408),
        finish_reason="stop",
        raw_finish_reason="completed",
        response_id="resp_68c42d0fb418819dbfa579f69406b49508fbf9b1584184ff",
        service_tier="default",
        events=37,
    ),
    "error_400_temperature": ErrorReply(
        cls=BadRequest,
        status=400,
        message=(
            "Invalid 'temperature': decimal below minimum value. Expected a value >= 0, but got "
            "-1 instead."
        ),
        error_type="decimal_below_min_value",
        param="temperature",
    ),
}


def assert_deltas_add_up(out: AttemptOutput, events: list[Any]) -> None:
    """The deltas a consumer saw rebuild the final message."""
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == out.message.text
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    assert reasoning == out.message.reasoning
    calls: dict[int, list[Any]] = {}
    for e in events:
        if isinstance(e, ToolCallDelta):
            call = calls.setdefault(e.index, [None, None, ""])
            if e.id is not None:
                assert call[0] is None, "an id is reported once"
                call[0] = e.id
            if e.name is not None:
                assert call[1] is None, "a name is reported once"
                call[1] = e.name
            call[2] += e.arguments
    rebuilt = tuple(
        ToolCall(id=i, name=n, arguments=a or "{}") for i, n, a in (calls[k] for k in sorted(calls))
    )
    assert rebuilt == out.message.tool_calls
    usages = [e.usage for e in events if isinstance(e, UsageReported)]
    assert (usages[-1] if usages else None) == out.usage


def test_every_case_has_written_expectations_and_provenance():
    manifest = orjson.loads((ROOT / "openai_responses" / "manifest.json").read_bytes())
    assert {c.name for c in CASES} == set(EXPECTED)
    for entry in manifest["cases"]:
        assert entry["source_repo"] and entry["source_path"] and entry["licence"]
        assert len(entry["commit"]) == 40
        for file in entry["files"]:
            assert (ROOT / file["path"]).stat().st_size == file["bytes"]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_recorded_reply(case: Case) -> None:
    expected = EXPECTED[case.name]
    body = case.body()
    status = case.status()
    if status >= 400:
        assert isinstance(expected, ErrorReply)
        error = CODEC.decode_error(status, case.headers(), body, wall_now=0.0)
        assert type(error) is expected.cls
        assert (error.status, error.message, error.error_type, error.param) == (
            expected.status,
            expected.message,
            expected.error_type,
            expected.param,
        )
        return
    assert isinstance(expected, Reply)
    if case.streamed:
        results = {
            name: decode_pieces(CODEC, pieces) for name, pieces in splits(case, body).items()
        }
        out, _, chunks = results["whole"]
        for name, (other, other_events, other_chunks) in results.items():
            assert other == out, f"split {name!r} decoded differently"
            assert_deltas_add_up(other, other_events)
            assert other_chunks == chunks
        assert chunks == expected.events
    else:
        out = CODEC.decode_body(body)
    assert out.message.text == expected.text
    assert out.message.reasoning == expected.reasoning
    calls = out.message.tool_calls
    assert tuple((c.id, c.name, c.arguments) for c in calls) == expected.tool_calls
    signatures = [
        split_reasoning_signature(p.signature) for p in out.message.content if p.type == "reasoning"
    ]
    assert tuple(s[0] for s in signatures if s) == expected.reasoning_ids
    assert tuple(len(s[1] or "") for s in signatures if s) == expected.encrypted
    assert out.usage == expected.usage
    assert (out.finish_reason, out.raw_finish_reason) == (
        expected.finish_reason,
        expected.raw_finish_reason,
    )
    assert out.response_id == expected.response_id
    assert out.service_tier == expected.service_tier


CAPITAL = Tool(
    name="get_capital",
    parameters={
        "additionalProperties": False,
        "properties": {"country": {"type": "string"}},
        "required": ["country"],
        "type": "object",
    },
    strict=True,
)
FRANCE = "What is the capital of France?"
POTATO = "What is the capital of PotatoLand?"
FRANCE_CALL = ToolCall(
    id="fc_67e554a1de488191af0831d35cbe082e0794405d35281ae2",
    name="get_capital",
    arguments='{"country":"France"}',
)
POTATO_CALL = ToolCall(
    id="call_YfwRsW8sUxDKipwyhWTzOXCA", name="get_capital", arguments='{"country":"PotatoLand"}'
)

REQUESTS: dict[str, ChatRequest] = {
    "stream_function_call": ChatRequest(
        model="openai:gpt-4o", messages=FRANCE, tools=(CAPITAL,), tool_choice="auto"
    ),
    "stream_text_after_function_call_output": ChatRequest(
        model="openai:gpt-4o",
        messages=[
            Message.user(FRANCE),
            Message.assistant([FRANCE_CALL]),
            Message.tool(FRANCE_CALL.id, "Paris"),
        ],
        tools=(CAPITAL,),
        tool_choice="auto",
    ),
    "stream_reasoning_encrypted_function_call_usage": ChatRequest(
        model="openai:gpt-5",
        messages="Calculate 100 * 200 / 3",
        tools=(
            Tool(
                name="final_result",
                description="The final response which ends this conversation",
                parameters={
                    "additionalProperties": False,
                    "properties": {"result": {"type": "integer"}},
                    "required": ["result"],
                    "type": "object",
                },
                strict=True,
            ),
        ),
        tool_choice="required",
        extra_body={
            "include": ["reasoning.encrypted_content"],
            "reasoning": {"effort": "low"},
            "service_tier": "flex",
        },
    ),
    "deepseek_stream_reasoning_text_function_call": ChatRequest(
        model="deepseek:deepseek-v4-flash",
        messages="What is the temperature in Tokyo?",
        tools=(
            Tool(
                name="get_temperature",
                description="Get the current temperature in a city.",
                parameters={
                    "additionalProperties": False,
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                    "type": "object",
                },
                strict=True,
            ),
        ),
        tool_choice="auto",
    ),
    "nonstream_function_call": ChatRequest(
        model="openai:gpt-4o", messages=POTATO, tools=(CAPITAL,), tool_choice="auto", stream=False
    ),
    "nonstream_text_after_function_call_output": ChatRequest(
        model="openai:gpt-4o",
        messages=[
            Message.user(POTATO),
            Message.assistant([POTATO_CALL]),
            Message.tool(POTATO_CALL.id, "Potato City"),
        ],
        tools=(CAPITAL,),
        tool_choice="auto",
        stream=False,
    ),
    "nonstream_reasoning_summary": ChatRequest(
        model="openai:gpt-5.2",
        messages=[
            Message.system("You are a helpful coding assistant."),
            Message.user(
                "Write a Python function that calculates the factorial of a number. "
                "Think step by step."
            ),
        ],
        stream=False,
        extra_body={
            "include": ["reasoning.encrypted_content"],
            "reasoning": {"effort": "high", "summary": "auto"},
        },
    ),
    "stream_reasoning_summary_parts_ABRIDGED": ChatRequest(
        model="openai:o3-mini",
        messages="How do I cross the street?",
        extra_body={
            "include": ["reasoning.encrypted_content"],
            "reasoning": {"effort": "high", "summary": "detailed"},
        },
    ),
    "error_400_temperature": ChatRequest(model="openai:gpt-4o", messages=FRANCE, temperature=-1),
}


def without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def normalized_recording(recorded: dict[str, Any]) -> dict[str, Any]:
    """The recorded body without what the module docstring lists."""
    body: dict[str, Any] = without_nulls(recorded)
    if body.get("stream") is False:
        del body["stream"]
    if body.get("instructions") == "":
        del body["instructions"]
    for tool in body.get("tools", ()):
        if tool.get("description") == "":
            del tool["description"]
    return body


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_recorded_request(name: str) -> None:
    (case,) = [c for c in CASES if c.name == name]
    recorded = case.request()
    assert recorded is not None
    built = orjson.loads(
        CODEC.build_request(REQUESTS[name], base_url="https://api.openai.com/v1", api_key="k").body
    )
    assert built.pop("store") is False
    assert built == normalized_recording(recorded)
