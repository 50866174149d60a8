"""The SSE decoder: WHATWG line and field rules, and identical events for any split of a body."""

from __future__ import annotations

import cProfile
import pstats
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice._errors import ProtocolError
from sluice._protocols.sse import SSEDecoder, SSEEvent


def decode(*pieces: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events = []
    for piece in pieces:
        events.extend(decoder.feed(piece))
    return events


def test_data_line_and_blank_line_dispatch_one_message() -> None:
    assert decode(b'data: {"a":1}\n\n') == [SSEEvent("message", b'{"a":1}')]


def test_event_waits_for_the_blank_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\n") == []
    assert decoder.feed(b"\n") == [SSEEvent("message", b"x")]


def test_only_one_leading_space_is_dropped() -> None:
    assert decode(b"data:x\n\ndata:  y\n\n") == [
        SSEEvent("message", b"x"),
        SSEEvent("message", b" y"),
    ]


def test_data_lines_join_with_newline() -> None:
    assert decode(b"data: a\ndata:\ndata: b\n\n") == [SSEEvent("message", b"a\n\nb")]


def test_event_name_applies_to_one_event_only() -> None:
    assert decode(b"event: ping\ndata: 1\n\ndata: 2\n\n") == [
        SSEEvent("ping", b"1"),
        SSEEvent("message", b"2"),
    ]


def test_comments_ids_retry_and_unknown_fields_are_skipped() -> None:
    body = b": OPENROUTER PROCESSING\nid: 7\nretry: 100\nfoo: bar\ndata: x\n\n:\n\n"
    assert decode(body) == [SSEEvent("message", b"x")]


def test_field_without_colon_is_a_name_with_empty_value() -> None:
    assert decode(b"data\n\n") == [SSEEvent("message", b"")]


def test_blank_line_without_data_dispatches_nothing_and_forgets_the_name() -> None:
    assert decode(b"event: a\n\ndata: x\n\n") == [SSEEvent("message", b"x")]


def test_crlf_and_cr_line_endings() -> None:
    assert decode(b"data: a\r\n\r\ndata: b\r\rdata: c\n\n") == [
        SSEEvent("message", b"a"),
        SSEEvent("message", b"b"),
        SSEEvent("message", b"c"),
    ]


def test_cr_at_end_of_piece_and_lf_at_start_of_next_are_one_line_ending() -> None:
    assert decode(b"data: a\r", b"\n\r", b"\n") == [SSEEvent("message", b"a")]


def test_cr_at_end_of_piece_completes_its_line_at_once() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r\r") == [SSEEvent("message", b"a")]
    # The next piece's leading LF pairs with the last CR: no extra blank line, no state change.
    assert decoder.feed(b"\ndata: b\n\n") == [SSEEvent("message", b"b")]


def test_payload_cut_inside_a_utf8_character_stays_bytes() -> None:
    body = 'data: {"t":"😊"}\n\n'.encode()
    cut = body.index(b"\xf0") + 2
    assert decode(body[:cut], body[cut:]) == [SSEEvent("message", '{"t":"😊"}'.encode())]


def test_leading_byte_order_mark_is_skipped_even_when_split() -> None:
    assert decode(b"\xef", b"\xbb", b"\xbfdata: x\n\n") == [SSEEvent("message", b"x")]
    assert decode(b"\xef\xbb\xbfdata: x\n\n") == [SSEEvent("message", b"x")]


def test_byte_order_mark_later_in_the_stream_is_data() -> None:
    assert decode(b"data: x\n\n\xef\xbb\xbfdata: y\n\n") == [SSEEvent("message", b"x")]


def test_end_flushes_an_event_without_blank_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\ndata: [DONE]") == [SSEEvent("message", b"a")]
    assert decoder.end() == [SSEEvent("message", b"[DONE]")]
    assert decoder.end() == []


def test_empty_feed_changes_nothing() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"") == []
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"") == []
    assert decoder.feed(b"\n\n") == [SSEEvent("message", b"a")]


# A body as servers write it: any mix of line endings, comments, names and multi-line data,
# with non-ASCII text so that splits land inside UTF-8 sequences. Each body comes with the
# events it holds, worked out from how it was written. No deadline: timing on a busy CI
# machine is not what these tests check.
_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\r\n"),
    max_size=12,
)
_newline = st.sampled_from([b"\n", b"\r\n", b"\r"])


@st.composite
def _streams(draw: st.DrawFn) -> tuple[bytes, list[SSEEvent]]:
    out = bytearray()
    events = []
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            out += b":" + draw(_text).encode() + draw(_newline)
        name = "message"
        if draw(st.booleans()):
            name = draw(_text)
            out += b"event: " + name.encode() + draw(_newline)
        lines = []
        for _ in range(draw(st.integers(1, 3))):
            value = draw(_text)
            if draw(st.booleans()):
                out += b"data: " + value.encode()
            else:
                out += b"data:" + value.encode()
                value = value.removeprefix(" ")
            newline = draw(_newline)
            out += newline
            lines.append(value)
        # After a CR, an LF would only complete that line ending, not add a blank line.
        out += draw(st.sampled_from([b"\r", b"\r\n"])) if newline == b"\r" else draw(_newline)
        events.append(SSEEvent(name or "message", "\n".join(lines).encode()))
    return bytes(out), events


@settings(deadline=None)
@given(stream=_streams())
def test_whole_body_gives_the_events_it_was_written_with(
    stream: tuple[bytes, list[SSEEvent]],
) -> None:
    body, events = stream
    assert decode(body) == events


@settings(deadline=None)
@given(stream=_streams(), cuts=st.lists(st.integers(0, 10_000), max_size=12))
def test_any_split_gives_the_same_events_as_the_whole_body(
    stream: tuple[bytes, list[SSEEvent]], cuts: list[int]
) -> None:
    body, events = stream
    points = sorted({c % (len(body) + 1) for c in cuts})
    pieces = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    assert decode(*pieces) == events


@settings(deadline=None)
@given(stream=_streams())
def test_byte_at_a_time_gives_the_same_events_as_the_whole_body(
    stream: tuple[bytes, list[SSEEvent]],
) -> None:
    body, events = stream
    assert decode(*(body[i : i + 1] for i in range(len(body)))) == events


def test_a_line_longer_than_the_limit_is_refused_however_it_arrives() -> None:
    for pieces in ([b"data: " + b"x" * 2000], [b"data: "] + [b"x" * 100] * 11):
        decoder = SSEDecoder(max_line=1024, max_event=4096)
        *head, last = pieces
        for piece in head:
            assert decoder.feed(piece) == []
        with pytest.raises(ProtocolError, match=r"an SSE line is larger than the 1 KiB limit"):
            decoder.feed(last)


def test_a_whole_long_line_in_one_piece_is_refused_too() -> None:
    decoder = SSEDecoder(max_line=1024)
    with pytest.raises(ProtocolError, match="max_line_bytes") as caught:
        decoder.feed(b"data: " + b"x" * 2000 + b"\n\n")
    assert caught.value.should_retry is False


def test_an_event_larger_than_the_limit_is_refused() -> None:
    decoder = SSEDecoder(max_line=1024, max_event=2048)
    assert decoder.feed(b"data: " + b"a" * 1000 + b"\ndata:" + b"b" * 1000 + b"\n") == []
    with pytest.raises(ProtocolError, match=r"an SSE event is larger than the 2 KiB limit"):
        decoder.feed(b"data: " + b"c" * 100 + b"\n")


def test_events_within_the_limits_pass_and_the_count_starts_over_per_event() -> None:
    decoder = SSEDecoder(max_line=1024, max_event=1500)
    events = []
    for _ in range(10):
        events += decoder.feed(b"data: " + b"a" * 1000 + b"\n\n")
    assert len(events) == 10


def test_a_long_line_cut_into_many_pieces_is_joined_once() -> None:
    decoder = SSEDecoder()
    pieces = [b"data: "] + [b"x" * 1000] * 500 + [b"\n\n"]
    events = [e for piece in pieces for e in decoder.feed(piece)]
    assert events == [SSEEvent("message", b"x" * 500_000)]


@settings(deadline=None)
@given(stream=_streams(), cuts=st.lists(st.integers(0, 10_000), max_size=12))
def test_payloads_alone_are_the_events_data_however_the_body_is_cut(
    stream: tuple[bytes, list[SSEEvent]], cuts: list[int]
) -> None:
    """``feed_payloads`` (a reader that ignores event names) gets exactly the ``data`` of the
    events ``feed`` returns, for any split: the one-line events read in one step included."""
    body, events = stream
    points = sorted({c % (len(body) + 1) for c in cuts})
    pieces = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    decoder = SSEDecoder()
    payloads = [payload for piece in pieces for payload in decoder.feed_payloads(piece)]
    payloads += [event.data for event in decoder.end()]
    assert payloads == [event.data for event in events]


def _python_calls(decoder: SSEDecoder, piece: bytes) -> tuple[int, list[bytes]]:
    profiler = cProfile.Profile()
    profiler.enable()
    payloads = decoder.feed_payloads(piece)
    profiler.disable()
    stats: Any = pstats.Stats(profiler)  # total_calls is not in the stubs
    return stats.total_calls, payloads


def test_a_piece_of_usual_events_costs_no_python_call_per_event() -> None:
    """A piece holding only usual events (one ``data:`` line and a blank line each, as
    providers flush them) is read by one split: 200 events make as many Python calls as 20
    (the per-event loop made three more calls per event: over 500 more for 200)."""
    counts = []
    for n in (20, 200):
        body = b"".join(b'data: {"n":%d}\n\n' % i for i in range(n))
        calls, payloads = _python_calls(SSEDecoder(), body)
        assert payloads == [b'{"n":%d}' % i for i in range(n)]
        # A large read ends inside an event: the whole ones before it are read the same way.
        cut_calls, payloads = _python_calls(SSEDecoder(), body + b'data: {"n":\ndata: ')
        assert payloads == [b'{"n":%d}' % i for i in range(n)]
        counts.append((calls, cut_calls))
    assert counts[0] == counts[1] and counts[0][0] < 20 and counts[0][1] < 30, counts
