"""Tool-call arguments parsed while they stream: the incremental parser and the deltas."""

from __future__ import annotations

import copy
import json
import random

import orjson
import pytest

import sluice
from sluice import ChatRequest, Completed, Tool, ToolCallDelta
from sluice._events import DeltaEvent, ReasoningDelta, TextDelta, UsageReported
from sluice._messages import Usage
from sluice._tools.repair import parse_partial
from sluice._tools.streaming import (
    ArgumentStreams,
    ForcedReplyDeltas,
    StreamingArguments,
)
from sluice.simulator import SimulatorConfig, mock_transport

from .helpers import virtual_deadline

DOCS = [
    {},
    {"city": "Paris"},
    {
        "city": "São Paulo",
        "days": 12,
        "ratio": -1.5e3,
        "exact": 0.25,
        "yes": True,
        "no": False,
        "nothing": None,
        "list": [1, "two", [3, {"x": "y"}], {}, []],
        "nested": {"a": {"b": [True, None, -0]}},
        "escapes": 'quote " backslash \\ newline \n tab \t slash / é',
    },
    {"content": "def f(x):\n    return x * 2\n" * 20},
]


def texts(doc: dict) -> list[str]:
    """The same arguments as different servers write them."""
    return [
        json.dumps(doc),
        json.dumps(doc, indent=2),
        json.dumps(doc, ensure_ascii=False),
        orjson.dumps(doc).decode(),
    ]


def comparable(prefix: str) -> bool:
    """``parse_partial`` strips the text, so it drops whitespace at the end of a string that
    is still open; the incremental parser keeps it (it is part of the value)."""
    return not prefix[-1:].isspace()


def chunks(text: str, rng: random.Random) -> list[str]:
    out, pos = [], 0
    while pos < len(text):
        size = rng.randint(1, 9)
        out.append(text[pos : pos + size])
        pos += size
    return out


@pytest.mark.parametrize("doc", DOCS, ids=["empty", "one", "every-kind", "long-string"])
def test_every_prefix_parses_as_parse_partial_does(doc):
    rng = random.Random(8)
    for text in texts(doc):
        for _ in range(10):
            parser = StreamingArguments()
            seen = ""
            for piece in chunks(text, rng):
                seen += piece
                got = parser.feed(piece)
                if comparable(seen):
                    expected = parse_partial(seen)
                    assert got == (expected if isinstance(expected, dict) else None), seen
            assert got == doc
            assert not parser.repairing  # strict JSON never left the fast path


def test_snapshots_already_handed_out_never_change():
    text = json.dumps(DOCS[2])
    parser = StreamingArguments()
    handed: list[tuple[dict | None, dict | None]] = []
    for piece in chunks(text, random.Random(3)):
        snapshot = parser.feed(piece)
        handed.append((snapshot, copy.deepcopy(snapshot)))
    assert all(live == frozen for live, frozen in handed)


def test_a_snapshot_only_grows():
    parser = StreamingArguments()
    lengths = []
    for piece in ['{"a": "he', "llo", '", "b": [1', ", 2", "]}"]:
        snapshot = parser.feed(piece)
        lengths.append(len(json.dumps(snapshot)))
    assert lengths == sorted(lengths)
    assert parser.feed("") == {"a": "hello", "b": [1, 2]}


def test_escapes_split_across_fragments_and_surrogate_pairs():
    parser = StreamingArguments()
    assert parser.feed('{"s": "a\\') == {"s": "a"}
    assert parser.feed("n\\u00") == {"s": "a\n"}
    assert parser.feed("e9\\ud83d") == {"s": "a\né"}  # half a pair is held back
    assert parser.feed("\\ude00") == {"s": "a\né\U0001f600"}
    assert parser.feed('\\udc00"}') == {"s": "a\né\U0001f600\ufffd"}  # a lone low half


@pytest.mark.parametrize(
    "text",
    [
        "{'city': 'Paris', 'days': 3}",
        '```json\n{"city": "Paris"}\n```',
        '{"city": "Paris",}',
        '{city: "Paris"}',
        '"{\\"city\\": \\"Paris\\"}"',
        'Sure: {"city": "Paris"}',
        '{"flag": True}',
    ],
    ids=["single-quotes", "fence", "trailing-comma", "bare-key", "double-encoded", "prose", "py"],
)
def test_broken_json_falls_back_to_the_repairing_parser(text):
    parser = StreamingArguments()
    for piece in chunks(text, random.Random(1)):
        got = parser.feed(piece)
    assert parser.repairing
    expected = parse_partial(text)
    assert got == (expected if isinstance(expected, dict) else None)
    assert got  # each of these holds an object


def test_what_is_not_an_object_gives_none():
    for text in ["[1, 2]", "42", '"text"', "", "   "]:
        assert StreamingArguments().feed(text) is None, text


def test_interleaved_calls_are_parsed_apart():
    streams = ArgumentStreams()
    events = [
        ToolCallDelta("c1", 0, "call_a", "a", ""),
        ToolCallDelta("c1", 1, "call_b", "b", '{"y": "b'),
        ToolCallDelta("c1", 0, None, None, '{"x": 1,'),
        ToolCallDelta("c1", 1, None, None, 'ee"}'),
    ]
    out = streams.annotate(list[DeltaEvent](events))
    annotated = [e for e in out if isinstance(e, ToolCallDelta)]
    assert [e.partial_arguments for e in annotated] == [None, {"y": "b"}, {"x": 1}, {"y": "bee"}]
    assert [e.arguments for e in annotated] == [e.arguments for e in events]
    assert streams.annotate([]) == []


WEATHER = Tool(
    name="get_weather",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    },
)


@virtual_deadline(60)
async def test_streamed_tool_call_deltas_carry_the_arguments_parsed_so_far(autojump_clock):
    request = ChatRequest(
        model="sim:sim-small", messages="Weather?", tools=[WEATHER], tool_choice="required"
    )
    async with (
        sluice.open_runtime(transport=mock_transport(SimulatorConfig())) as rt,
        rt.stream(request) as call,
    ):
        events = [event async for event in call]
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert len(deltas) > 3  # the arguments came in pieces
    assert isinstance(events[-1], Completed)
    (tool_call,) = events[-1].result.tool_calls
    final = orjson.loads(tool_call.arguments)
    assert deltas[-1].partial_arguments == final
    text = ""
    for delta in deltas:
        text += delta.arguments
        expected = parse_partial(text) if text.strip() else None
        if comparable(text):
            assert delta.partial_arguments == (expected if isinstance(expected, dict) else None)


@virtual_deadline(60)
async def test_a_whole_reply_carries_its_arguments_parsed_once(autojump_clock):
    request = ChatRequest(
        model="sim:sim-small",
        messages="Weather?",
        tools=[WEATHER],
        tool_choice="required",
        stream=False,
    )
    async with (
        sluice.open_runtime(transport=mock_transport(SimulatorConfig())) as rt,
        rt.stream(request) as call,
    ):
        events = [event async for event in call]
    (delta,) = [e for e in events if isinstance(e, ToolCallDelta)]
    assert call.result is not None
    assert delta.partial_arguments == orjson.loads(call.result.tool_calls[0].arguments)


def test_a_forced_reply_keeps_every_event_but_its_text():
    shaper = ForcedReplyDeltas()
    others: list[DeltaEvent] = [ReasoningDelta("c1", "thinking"), UsageReported("c1", Usage(1, 2))]
    assert shaper.annotate(others) is others  # nothing to drop: the same list, no copy
    mixed: list[DeltaEvent] = [
        TextDelta("c1", '{"name": '), others[0], TextDelta("c1", '"f"}'), others[1]
    ]
    assert shaper.annotate(mixed) == others
