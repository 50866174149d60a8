"""The Gemini codec against recorded Gemini traffic.

Every ``gemini`` case of ``tests/conformance_data/manifest.json`` gets one reply test. Expected
values were read from the recordings by hand and are written out per case below (the long
story of the text stream and the thought signatures are copied verbatim). Streams are fed
whole, a byte at a time, 7 bytes at a time (which cuts the CRLF separators) and in seeded
random pieces, and every split must give the same result, the same event count and deltas
that add up to the final message.

Where the recorded request can be expressed as a :class:`ChatRequest`, a second test builds it
and compares the whole body as parsed JSON, after these normalizations of the recording:

* a function declaration's schema is renamed to ``parametersJsonSchema``: the Python SDK
  spelled that field ``parameters_json_schema`` (proto JSON accepts both), and the Go SDK sent
  the same schema as OpenAPI ``parameters`` with upper-case type names, which are
  lower-cased; we always send JSON Schema;
* a declaration's ``"description": ""`` is dropped: we omit empty fields;
* a ``functionResponse.response`` of ``{"response": text}`` becomes ``{"output": text}``, the
  key the API documents for a result (``error`` for a failure), which we send.

Settings :class:`ChatRequest` does not model (``candidateCount``, ``topK``,
``safetySettings``, ``responseModalities``) are given through ``extra_body``, as a user would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import orjson
import pytest

from sluice._errors import AuthenticationFailed, CallError
from sluice._events import ReasoningDelta, TextDelta, ToolCallDelta, UsageReported
from sluice._messages import ChatRequest, Message, Tool, ToolCall, Usage
from sluice._protocols.gemini import GeminiCodec
from tests.conformance import Case, decode_pieces, load_cases, splits

if TYPE_CHECKING:
    from sluice._protocols.base import AttemptOutput

CASES = load_cases(frozenset({"gemini"}))
CODEC = GeminiCodec()
BASE = "https://generativelanguage.googleapis.com/v1beta"
WALL_NOW = 1_785_837_328.0


@attrs.frozen(kw_only=True)
class Reply:
    """What a successful recorded reply must decode to."""

    parts: tuple[str, ...]
    """The message's part types, in order."""
    signatures: tuple[str | None, ...]
    """Each part's ``signature`` (the ``thoughtSignature`` that came with it)."""
    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[tuple[str, str, Any], ...] = ()
    """(id, name, parsed arguments) in order."""
    raw_arguments: tuple[str, ...] | None = None
    usage: Usage
    finish_reason: str
    raw_finish_reason: str
    response_id: str
    chunks: int | None = None
    """Events in the stream."""


@attrs.frozen(kw_only=True)
class ErrorReply:
    """What a recorded error reply must map to."""

    cls: type[CallError]
    status: int
    message: str
    error_type: str
    retry_after: float | None = None


STORY = (
    "Jasper was an expert in the art of doing nothing. Or, more accurately, the art of "
    "*appearing* to do nothing. From his favourite sun-drenched spot on the worn armchair, "
    "he surveyed his domain with half-closed, golden eyes. His marmalade fur, thick and "
    "soft, absorbed the warmth, and a low, rumbling purr vibrated through his sturdy "
    "chest.\n\nHis human, a kind woman named Eleanor, often remarked on his laziness. "
    "\"You just sleep all day, don't you, old boy?\" she'd chuckle, ruffling the fur "
    "behind his ears. Jasper would respond with a slow blink, a twitch of his tail, and an "
    "increase in purr-volume, which Eleanor took as agreement.\n\nBut Jasper knew better. "
    "He was a sentinel. A guardian. While his body seemed a mere furry lump, his senses "
    "were finely tuned. He catalogued every shift in light, every creak of the "
    "floorboards, the distant chirping of sparrows, the subtle scent of rain on the wind. "
    "He knew when the postman was two streets away, when Eleanor's car turned into the "
    "driveway, and, most importantly, when a rogue dust bunny dared to venture from "
    "beneath the sofa.\n\nOne particularly sleepy afternoon, a fly, bold and buzzing, "
    "dared to invade his sanctuary. It zipped past his nose, a tiny, irritating whir. "
    "Jasper's ears swiveled, almost imperceptibly. His tail, previously draped lifelessly, "
    "gave a single, deliberate twitch.\n\nThe fly, oblivious to the danger, landed on the "
    "lampshade, preening. Jasper's eyes, now fully open, narrowed to slits of emerald. His "
    "body tensed, not a muscle out of place. He slid from the armchair, a liquid flow of "
    "fur and muscle, silent as a shadow. Each paw placement was precise, deliberate. He "
    "was no longer the lazy sun-worshipper; he was a hunter.\n\nHe stalked, low to the "
    "ground, a coiled spring. The fly, sensing a shift in the air, buzzed nervously. "
    "Jasper paused, perfectly still, then launched himself. It wasn't a clumsy leap, but "
    "an elegant, explosive arc. A blur of orange fur, a flash of velvet paw, and a soft "
    "*thwack*.\n\nThe fly was no more.\n\nJasper landed with silent grace, sniffed his paw "
    "with a look of profound satisfaction, then gave a tiny, almost imperceptible shake of "
    "his head, as if to dislodge the last vestiges of the hunt. He stretched, a long, "
    "luxurious arch of his back, and then, with a yawn that revealed a surprisingly pink "
    "tongue, he padded back to his sunbeam.\n\nHe settled back into his armchair, closed "
    "his eyes, and resumed his purr. When Eleanor came home later, she found him exactly "
    "where she'd left him, a picture of blissful idleness. She stroked his head. \"Still "
    'sleeping, are we, Jasper?"\n\nJasper merely blinked, a silent guardian of the realm, '
    "his secret victory nestled deep within his contented purr. He had done his duty. And "
    "now, he could truly rest."
)
STREAM_CALL_SIGNATURE = (
    "Et8ECtwEAXLI2nyCB1jKZUE4ZxdH07XhZlpU7X7tlcbNO8oQurN910Rmh6fTq1azIzM7kzq/xMB7GilOxBK6VM"
    "DoMgkGuIHttwPgPiwD2jO3a3ra4gFE+zxUPPx9R9bsRWd5641CymAZnsFeXVvrwYeeymh7gxR0a8F0pYkxwvuM"
    "DgGJwopaCXSuP8+6d8OgA+uoGTyyzr6f9Qi2N0sZwDcURV1S+8QSYsz8Ilijh/lfKAoEJ7g8qWJil47hvc/4Qn"
    "VueKCcIsFCb2mto2w+awtagbg3DXF52epHnQyCe7RaKAHyvRqZ7NOSi9Aya4LkGnf7uoeG/yLPwZMPSet3xzyg"
    "CMuyU+P7sG7T7g7KfQtlHPTpSAuJZIexbYi91N+RJJAhSNMX5tt1zlDRHAWcZ/8e0zBbg1CiWJ3dI8YsVGRXdD"
    "Ih5KUx1b7SVNwVIqj6oeISXLBHJKZHXXrnhceKcIKbVZ1UscQTKZGOFnIzilGl/5H64Cjp3/IK1kpsypchhXVR"
    "478xb3jlbsgtUaSC1bifszV7kD5XROIYHE3nrt/hI75yABz/naoNxuJIHV6ZUqC1d6T8mB3U8DfhS65PF0JVjc"
    "Ov7j+PifCb6nSMb/eaJAYKTOx37cfZTcmQIoFDofypBC6UVGt/GbCr76mpFqjENZ5QTN5nfbH/rfuM00/mBQPb"
    "uRdcmEgujEIo/BelxPEVOC6tszKkQlEoJfO7qazAvRvksWHQHNQtUFO6n1HmRaK1sq6Ana1c5vSj8Mv7uDLmJN"
    "TV8/iGNlLqwj6FjB4rbYIju0HegvoS6z1/ufbMdg=="
)
PARIS_CALL_SIGNATURE = (
    "ErwCCrkCARFNMg9mMORTMaw4mPhBdF3AK++rCjOH+n+QysYX1w47IEVhSBpnj/qrc50FEW82LTDU4YtPHnpC3S"
    "NFH4O9tT12zbhW32B0DsixxEAiIC3OkxXZ9lzOohuckzMCbGMMmAboW06tW+9RKhFpO89BKVIwNTVIdaK46wDQ"
    "7/+5o6IsEaKLUwgWCxNy6frMOzRMHZwhd1cb+lO4tWW2uv7euMHXrGfS0f6bv0maY1xHo2IaardO4YR2K9XYKB"
    "7YyKP0QyFvb70ToGPagCZ9ehQvUmXQItb22d1gMXDUMichOcsHiawiMxa1mpZI08Nx48vzuYkMtyb4iKy6fmd6"
    "cp1XOeD1ijSNdbOOxii6xfEp8Xen0cyaMPjwqHjb5y3xB6IkIIuwx3ezNjabj4o/Rc2tHD87deZ81H+Q8Q=="
)
TEXT_PART_SIGNATURE = (
    "CroBARFNMg/hCeSOl74024OHhQ+HE0pSIa7+Mp6MkcG3AuOXHvpBmwp0dDlG4NIDWylkDSl48sh2ccgh0ifXGj"
    "kUGS6jyLmTw2N3qwAqhK3jF7JQsM3tdw0PWjc6KmBF3aJyRSEmjK1+9CBZfp3P+Tj+Dct/JXAEnSIcvdJPQvV9"
    "dlF0wUZfYmcN3kWQ8mC68+YHHWrdyTZen7u83LO65YCplbsAOCk7H6XZGLNOeC5D+8GwzWofnOZ6l4SZ"
)

EXPECTED: dict[str, Reply | ErrorReply] = {
    "stream_text_sse_crlf": Reply(
        parts=("text",),
        signatures=(None,),
        text=STORY,
        # Last event: prompt 9, candidates 653, thoughts 1257, total 1919 (= 9 + 653 + 1257).
        usage=Usage(9, 1910, 0, 0, 1257),
        finish_reason="stop",
        raw_finish_reason="STOP",
        response_id="-7ZxapbrCZa7vdIPhrCMoQ4",
        chunks=14,
    ),
    "stream_function_call_thought_signature": Reply(
        # The API gave no call id; the second event's {"text": ""} adds nothing.
        parts=("tool_call",),
        signatures=(STREAM_CALL_SIGNATURE,),
        tool_calls=(("call_0", "get_country", {}),),
        raw_arguments=("{}",),
        usage=Usage(29, 120, 0, 0, 110),
        finish_reason="tool_calls",
        raw_finish_reason="STOP",
        response_id="SVV8aY6uBqe6qtsPmJbEuAM",
        chunks=2,
    ),
    "generate_parallel_function_calls_thought_signature": Reply(
        # API-issued ids; only the first call carries a signature.
        parts=("tool_call", "tool_call"),
        signatures=(PARIS_CALL_SIGNATURE, None),
        tool_calls=(
            ("pkjly1p7", "get_temperature", {"location": "Paris"}),
            ("bnxwmmb1", "get_temperature", {"location": "London"}),
        ),
        raw_arguments=('{"location":"Paris"}', '{"location":"London"}'),
        usage=Usage(69, 88, 0, 0, 56),
        finish_reason="tool_calls",
        raw_finish_reason="STOP",
        response_id="tbZxauHIDsiOvdIPgsDH2A4",
    ),
    "generate_after_function_responses": Reply(
        parts=("text",),
        signatures=(None,),
        text="The temperature is currently 22°C in both Paris and London.",
        usage=Usage(131, 15, 0, 0, 0),
        finish_reason="stop",
        raw_finish_reason="STOP",
        response_id="t7Zxaq6tGJiXvdIP9cPRsA8",
    ),
    "generate_text_part_with_thought_signature": Reply(
        parts=("text",),
        signatures=(TEXT_PART_SIGNATURE,),
        text="The weather in Paris is sunny and 24C. The time in Paris is 3pm.",
        usage=Usage(162, 49, 0, 0, 28),
        finish_reason="stop",
        raw_finish_reason="STOP",
        response_id="WqNOas_zD46sz7IPt7r-iAU",
    ),
    "error_400_invalid_argument_api_key": ErrorReply(
        # A 400 INVALID_ARGUMENT, but its ErrorInfo reason says the key was refused.
        cls=AuthenticationFailed,
        status=400,
        message="API key not valid. Please pass a valid API key.",
        error_type="API_KEY_INVALID",
    ),
}


def decode_stream(pieces: list[bytes]) -> tuple[AttemptOutput, list[Any], int]:
    out, events, seen = decode_pieces(CODEC, pieces)
    return out, events, seen


def assert_deltas_add_up(out: AttemptOutput, events: list[Any]) -> None:
    """The deltas a consumer saw rebuild the final message; usage is reported once."""
    assert all(e.call_id == "call-1" for e in events)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == out.message.text
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    assert reasoning == out.message.reasoning
    calls = [(e.index, e.id, e.name, e.arguments) for e in events if isinstance(e, ToolCallDelta)]
    expected = [(i, c.id, c.name, c.arguments) for i, c in enumerate(out.message.tool_calls)]
    assert calls == expected, "each call comes whole, in one delta"
    usages = [e.usage for e in events if isinstance(e, UsageReported)]
    assert usages == [out.usage]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_recorded_reply(case: Case) -> None:
    expected = EXPECTED.get(case.name)
    body = case.body()
    status = case.status()
    if status >= 400:
        assert isinstance(expected, ErrorReply), "every recorded error has expectations"
        assert status == expected.status
        error = CODEC.decode_error(status, case.headers(), body, wall_now=WALL_NOW)
        assert type(error) is expected.cls
        assert error.status == expected.status
        assert error.message == expected.message
        assert error.error_type == expected.error_type
        assert getattr(error, "retry_after", None) == expected.retry_after
        # Gemini sometimes wraps the error in a one-element list.
        listed = b"[" + body + b"]"
        again = CODEC.decode_error(status, case.headers(), listed, wall_now=WALL_NOW)
        assert (type(again), again.message, again.error_type) == (
            expected.cls,
            expected.message,
            expected.error_type,
        )
        return
    if case.streamed:
        results = {name: decode_stream(pieces) for name, pieces in splits(case, body).items()}
        out, _, chunks = results["whole"]
        for name, (other, other_events, other_chunks) in results.items():
            assert other == out, f"split {name!r} decoded differently"
            assert_deltas_add_up(other, other_events)
            assert other_chunks == chunks
    else:
        out, chunks = CODEC.decode_body(body), None
    assert isinstance(expected, Reply), f"no expectations written for {case.name}"
    assert tuple(p.type for p in out.message.content) == expected.parts
    assert tuple(getattr(p, "signature", None) for p in out.message.content) == (
        expected.signatures
    )
    assert out.message.text == expected.text
    assert out.message.reasoning == expected.reasoning
    calls = out.message.tool_calls
    assert [(c.id, c.name, c.parsed_arguments()) for c in calls] == list(expected.tool_calls)
    if expected.raw_arguments is not None:
        assert tuple(c.arguments for c in calls) == expected.raw_arguments
    assert out.usage == expected.usage
    assert out.finish_reason == expected.finish_reason
    assert out.raw_finish_reason == expected.raw_finish_reason
    assert out.response_id == expected.response_id
    if expected.chunks is not None:
        assert chunks == expected.chunks


GO_SDK_EXTRAS: dict[str, Any] = {
    "generationConfig": {"candidateCount": 1, "topK": 3},
    "safetySettings": [
        {"category": f"HARM_CATEGORY_{name}", "threshold": "BLOCK_NONE"}
        for name in ("DANGEROUS_CONTENT", "HARASSMENT", "HATE_SPEECH", "SEXUALLY_EXPLICIT")
    ],
}
"""What langchaingo's Go client sends beyond our model: one candidate, top-k 3, no blocking."""

TEMPERATURE_QUESTION = "What's the temperature in Paris and London?"
PARIS_CALL = ToolCall(
    id="pkjly1p7",
    name="get_temperature",
    arguments='{"location":"Paris"}',
    signature=PARIS_CALL_SIGNATURE,
)
LONDON_CALL = ToolCall(id="bnxwmmb1", name="get_temperature", arguments='{"location":"London"}')

REQUESTS: dict[str, ChatRequest] = {
    "stream_text_sse_crlf": ChatRequest(
        model="gemini:gemini-2.5-flash",
        messages="Tell me a short story about a cat",
        max_tokens=2048,
        temperature=0.5,
        top_p=0.95,
        extra_body=GO_SDK_EXTRAS,
    ),
    "stream_function_call_thought_signature": ChatRequest(
        model="gemini:gemini-3-pro-preview",
        messages="What is the capital of the user country? Call the tool",
        tools=(
            Tool(
                name="get_country",
                parameters={"additionalProperties": False, "properties": {}, "type": "object"},
            ),
        ),
        extra_body={"generationConfig": {"responseModalities": ["TEXT"]}},
    ),
    "generate_parallel_function_calls_thought_signature": ChatRequest(
        model="gemini:gemini-3-flash-preview",
        messages=TEMPERATURE_QUESTION,
        tools=(
            Tool(
                name="get_temperature",
                description="Get the current temperature for a location",
                parameters={
                    "properties": {
                        "location": {"description": "The city name, e.g. Paris", "type": "string"}
                    },
                    "required": ["location"],
                    "type": "object",
                },
            ),
        ),
        max_tokens=1024,
        temperature=1,
        top_p=0.95,
        stream=False,
        extra_body=GO_SDK_EXTRAS,
    ),
    "generate_after_function_responses": ChatRequest(
        model="gemini:gemini-3-flash-preview",
        messages=[
            Message.user(TEMPERATURE_QUESTION),
            Message.assistant([PARIS_CALL, LONDON_CALL]),
            Message.tool("pkjly1p7", "22°C"),
            Message.tool("bnxwmmb1", "22°C"),
        ],
        max_tokens=512,
        temperature=1,
        top_p=0.95,
        stream=False,
        extra_body=GO_SDK_EXTRAS,
    ),
    "error_400_invalid_argument_api_key": ChatRequest(
        model="gemini:gemini-2.5-flash",
        messages="Hello",
        max_tokens=2048,
        temperature=0.5,
        top_p=0.95,
        stream=False,
        extra_body=GO_SDK_EXTRAS,
    ),
}

REQUEST_CASES = [c for c in CASES if c.name in REQUESTS]


def _lower_types(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {
            k: v.lower() if k == "type" and isinstance(v, str) else _lower_types(v)
            for k, v in schema.items()
        }
    if isinstance(schema, list):
        return [_lower_types(v) for v in schema]
    return schema


def normalized_recording(recorded: dict[str, Any]) -> dict[str, Any]:
    """The recorded body after the normalizations listed in the module docstring."""
    body = dict(recorded)
    tools = []
    for tool in body.get("tools", ()):
        declarations = []
        for declaration in tool["functionDeclarations"]:
            wire = {k: v for k, v in declaration.items() if not (k == "description" and v == "")}
            if "parameters_json_schema" in wire:
                wire["parametersJsonSchema"] = wire.pop("parameters_json_schema")
            if "parameters" in wire:
                wire["parametersJsonSchema"] = _lower_types(wire.pop("parameters"))
            declarations.append(wire)
        tools.append({"functionDeclarations": declarations})
    if tools:
        body["tools"] = tools
    contents = []
    for content in body["contents"]:
        parts = []
        for part in content["parts"]:
            response = part.get("functionResponse")
            if response is not None and set(response["response"]) == {"response"}:
                fixed = {**response, "response": {"output": response["response"]["response"]}}
                part = {**part, "functionResponse": fixed}
            parts.append(part)
        contents.append({**content, "parts": parts})
    body["contents"] = contents
    return body


def test_every_case_with_a_recorded_request_is_compared() -> None:
    if not CASES:
        pytest.skip("the conformance corpus is not there")
    with_requests = {c.name for c in CASES if c.request() is not None}
    assert with_requests == set(REQUESTS)


@pytest.mark.parametrize("case", REQUEST_CASES, ids=[c.name for c in REQUEST_CASES])
def test_recorded_request(case: Case) -> None:
    recorded = case.request()
    assert recorded is not None
    request = REQUESTS[case.name]
    http = CODEC.build_request(request, base_url=BASE, api_key="k")
    method = "streamGenerateContent?alt=sse" if request.stream else "generateContent"
    assert http.url == f"{BASE}/models/{request.model_name}:{method}"
    assert ("x-goog-api-key", "k") in http.headers
    assert orjson.loads(http.body) == normalized_recording(recorded)


def test_recorded_request_line_and_key_header() -> None:
    """The one request line recorded for Gemini (the Go SDK's text stream) is ours too."""
    case = next((c for c in CASES if c.name == "stream_text_sse_crlf"), None)
    if case is None:
        pytest.skip("the conformance corpus is not there")
    recorded = orjson.loads(
        next(p for p in case.files if p.name.endswith(".request.headers.json")).read_bytes()
    )
    http = CODEC.build_request(REQUESTS[case.name], base_url=BASE, api_key="k")
    assert recorded["request_line"] == f"POST {http.url} HTTP/1.1"
    assert "X-Goog-Api-Key" in {name for name, _ in recorded["headers"]}
