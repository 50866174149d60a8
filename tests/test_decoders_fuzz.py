"""Fuzzed decoders: whatever bytes a server sends, only sluice's own errors come out.

Every decoder (SSE, NDJSON, whole JSON bodies, error bodies, each protocol's stream decoder)
is fed arbitrary bytes, truncations of the recorded replies in ``tests/conformance_data``, and
recorded replies with one JSON value swapped for an arbitrary one, cut into arbitrary pieces.
A decoder may answer with a :class:`~sluice._errors.CallError` (a ``ProtocolError``, a
``StreamBroken``, or the error a reply reported); any other exception is a bug.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice._errors import CallError
from sluice._protocols import codec_for
from sluice._protocols.sse import SSEDecoder

from .conformance import Case, load_cases

PROTOCOL_OF = {
    "openai": "openai",
    "openai_compat": "openai",
    "deepseek": "openai",
    "anthropic": "anthropic",
    "gemini": "gemini",
    "ollama": "ollama",
    "openai_responses": "openai-responses",
}
PROTOCOLS = sorted(set(PROTOCOL_OF.values()))
CASES = [
    c
    for c in load_cases() + load_cases(manifest_name="openai_responses/manifest.json")
    if c.body_path is not None and c.provider in PROTOCOL_OF
]
STREAMED = [c for c in CASES if c.streamed and c.status() < 400]
WHOLE = [c for c in CASES if not c.streamed and c.status() < 400]
ERRORS = [c for c in CASES if c.status() >= 400]

FUZZ = settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.sampled_from(["", "stop", "tool_use", "text", "function", "STOP", "[DONE]", "0"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _dumps(value: Any) -> bytes:
    """JSON text of ``value``; integers beyond 64 bits too, which orjson cannot write."""
    return json.dumps(value).encode()


def cuts(data: bytes, points: list[int]) -> list[bytes]:
    """``data`` cut at ``points`` (taken modulo its length), in order."""
    marks = sorted({p % (len(data) + 1) for p in points})
    edges = [0, *marks, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def run_stream(protocol: str, pieces: list[bytes]) -> None:
    """Feed ``pieces`` to a fresh stream decoder and finish it; only CallErrors may escape."""
    decoder = codec_for(protocol).stream_decoder("fuzz", max_line=4096, max_event=8192)
    try:
        for piece in pieces:
            decoder.feed(piece)
        decoder.finish()
    except CallError:
        pass


def run_whole(protocol: str, body: bytes) -> None:
    try:
        codec_for(protocol).decode_body(body)
    except CallError:
        pass


def test_the_corpus_has_replies_of_every_protocol() -> None:
    for group in (STREAMED, WHOLE, ERRORS):
        assert {PROTOCOL_OF[c.provider] for c in group} >= ({"openai", "anthropic", "gemini"})
    assert any(PROTOCOL_OF[c.provider] == "ollama" for c in STREAMED)


# -- arbitrary bytes --------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
@FUZZ
@given(data=st.binary(max_size=600), points=st.lists(st.integers(min_value=0), max_size=6))
def test_stream_decoders_take_arbitrary_bytes(
    protocol: str, data: bytes, points: list[int]
) -> None:
    run_stream(protocol, cuts(data, points))


# SSE- and NDJSON-shaped noise reaches the JSON handling that raw bytes rarely do.
shaped_lines = st.lists(
    st.one_of(
        st.sampled_from([b"", b"data: [DONE]", b": ping", b"event: error", b"event: ping", b"\r"]),
        json_values.map(lambda v: b"data: " + _dumps(v)),
        json_values.map(_dumps),
        st.binary(max_size=20).map(lambda b: b"data: " + b),
    ),
    max_size=12,
)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@FUZZ
@given(lines=shaped_lines, points=st.lists(st.integers(min_value=0), max_size=4))
def test_stream_decoders_take_arbitrary_events(
    protocol: str, lines: list[bytes], points: list[int]
) -> None:
    run_stream(protocol, cuts(b"\n".join(lines) + b"\n\n", points))


@pytest.mark.parametrize("protocol", PROTOCOLS)
@FUZZ
@given(body=st.binary(max_size=400) | json_values.map(_dumps))
def test_whole_body_decoders_take_arbitrary_bytes(protocol: str, body: bytes) -> None:
    run_whole(protocol, body)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@FUZZ
@given(
    status=st.integers(min_value=400, max_value=599),
    body=st.binary(max_size=300) | json_values.map(_dumps),
    headers=st.dictionaries(
        st.sampled_from(["retry-after", "retry-after-ms", "x-request-id", "request-id"]),
        st.text(max_size=30),
        max_size=3,
    ),
)
def test_error_decoders_always_answer_with_a_call_error(
    protocol: str, status: int, body: bytes, headers: dict[str, str]
) -> None:
    error = codec_for(protocol).decode_error(status, headers, body, wall_now=1.7e9)
    assert isinstance(error, CallError)


@FUZZ
@given(data=st.binary(max_size=800), points=st.lists(st.integers(min_value=0), max_size=8))
def test_the_sse_decoder_gives_the_same_events_for_any_split_and_never_fails(
    data: bytes, points: list[int]
) -> None:
    def decode(pieces: list[bytes]) -> list[Any]:
        decoder = SSEDecoder()
        events = [e for piece in pieces for e in decoder.feed(piece)]
        return events + decoder.end()

    assert decode(cuts(data, points)) == decode([data])


# -- the recorded replies, cut short or altered -----------------------------------------------


def _protocol(case: Case) -> str:
    return PROTOCOL_OF[case.provider]


@pytest.mark.parametrize("case", STREAMED, ids=lambda c: c.id)
@FUZZ
@given(cut=st.integers(min_value=0), points=st.lists(st.integers(min_value=0), max_size=5))
def test_truncated_recorded_streams(case: Case, cut: int, points: list[int]) -> None:
    body = case.body()
    run_stream(_protocol(case), cuts(body[: cut % (len(body) + 1)], points))


@pytest.mark.parametrize("case", WHOLE + ERRORS, ids=lambda c: c.id)
@FUZZ
@given(cut=st.integers(min_value=0))
def test_truncated_recorded_bodies(case: Case, cut: int) -> None:
    body = case.body()
    cut_body = body[: cut % (len(body) + 1)]
    run_whole(_protocol(case), cut_body)
    error = codec_for(_protocol(case)).decode_error(
        case.status() if case.status() >= 400 else 500, case.headers(), cut_body, wall_now=1.7e9
    )
    assert isinstance(error, CallError)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``value`` (the root included)."""
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*path, index))
    return found


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replace(value[head], rest, new)}
    copy = list(value)
    copy[head] = _replace(copy[head], rest, new)
    return copy


def _mutate(payload: bytes, which: int, new: Any) -> bytes:
    """``payload`` (JSON) with the value at one of its paths (``which``, modulo) set to ``new``."""
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return payload
    paths = _paths(value)
    return _dumps(_replace(value, paths[which % len(paths)], new))


def _split_events(case: Case) -> tuple[list[bytes], bytes]:
    """The JSON payloads of a recorded stream, and the separator that joins them back."""
    body = case.body().replace(b"\r\n", b"\n")
    if case.body_path is not None and case.body_path.suffix == ".ndjson":
        return [line for line in body.split(b"\n") if line], b"\n"
    return [line[6:] for line in body.split(b"\n") if line.startswith(b"data: ")], b"\n\n"


@pytest.mark.parametrize("case", STREAMED, ids=lambda c: c.id)
@FUZZ
@given(
    event=st.integers(min_value=0),
    which=st.integers(min_value=0),
    new=json_values,
    points=st.lists(st.integers(min_value=0), max_size=3),
)
def test_recorded_streams_with_one_value_swapped(
    case: Case, event: int, which: int, new: Any, points: list[int]
) -> None:
    payloads, separator = _split_events(case)
    index = event % len(payloads)
    payloads[index] = _mutate(payloads[index], which, new)
    if separator == b"\n":
        body = b"\n".join(payloads) + b"\n"
    else:
        body = b"".join(b"data: " + p + b"\n\n" for p in payloads)
    run_stream(_protocol(case), cuts(body, points))


@pytest.mark.parametrize("case", WHOLE, ids=lambda c: c.id)
@FUZZ
@given(which=st.integers(min_value=0), new=json_values)
def test_recorded_bodies_with_one_value_swapped(case: Case, which: int, new: Any) -> None:
    run_whole(_protocol(case), _mutate(case.body(), which, new))


def test_a_retry_after_with_a_control_character_is_ignored_not_a_crash() -> None:
    """Found by the error-decoder fuzz test: ``\\s`` matched U+001F, which float() refuses."""
    from sluice._protocols.http_errors import parse_retry_after

    assert parse_retry_after({"retry-after": "0\x1f"}, 0.0) is None
    assert parse_retry_after({"retry-after": " 12 "}, 0.0) == 12.0
