"""Fuzzed request parsing: whatever bytes a client sends, the gateway refuses or closes.

The request-head parser, the chunked-body decoder and the whole server loop are fed arbitrary
bytes, valid requests with bytes swapped in, and truncations at every byte, cut into arbitrary
pieces. The parsers may answer only with a refusal (:class:`HeadError` with a 4xx status, or
501/505 for a framing or version the server does not speak); the server only with such a
response or by closing; never with an exception, and never with a 500 from its barrier
(``Server.internal_errors`` stays 0). Valid input round-trips exactly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice._gateway import Server, ServerLimits
from sluice._gateway.chunked import ChunkedBody
from sluice._gateway.request_head import HeadError, parse_head

if TYPE_CHECKING:
    from collections.abc import Callable

FUZZ = settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
FUZZ_SERVER = settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
"""Fewer examples where each runs a whole server: a few seconds in all."""
REFUSALS = {400, 408, 413, 431, 501, 505}

VALID_HEAD = (
    b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer sk-1\r\n"
    b"content-type: application/json\r\nx-request-id: abc-123\r\ncontent-length: 12"
)
BYTE_SOUP = st.sampled_from(
    [b"\x00", b"\r", b"\n", b"\r\n", b" ", b"\t", b":", b"\x7f", b"\xff", b"9" * 5000, b"f" * 17]
)


def _refusal(parse: Callable[[], object]) -> int | None:
    """The status ``parse()`` refused with (None: it did not)."""
    try:
        parse()
    except HeadError as exc:
        return exc.status
    return None


def _parse(head: bytes) -> None:
    assert _refusal(lambda: parse_head(head)) in {None, *REFUSALS}


@FUZZ
@given(st.binary(max_size=400))
def test_arbitrary_heads_are_parsed_or_refused(head: bytes) -> None:
    _parse(head)


@FUZZ
@given(st.integers(0, len(VALID_HEAD)), st.integers(0, len(VALID_HEAD)), BYTE_SOUP | st.binary())
def test_a_valid_head_with_bytes_swapped_in_is_parsed_or_refused(
    start: int, stop: int, inserted: bytes
) -> None:
    start, stop = min(start, stop), max(start, stop)
    _parse(VALID_HEAD[:start] + inserted + VALID_HEAD[stop:])


def test_every_truncation_of_a_valid_head_is_parsed_or_refused() -> None:
    for cut in range(len(VALID_HEAD) + 1):
        _parse(VALID_HEAD[:cut])


@FUZZ
@given(st.integers(1, 5000))
def test_content_length_has_at_most_20_digits(digits: int) -> None:
    head = b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: " + b"7" * digits
    if digits <= 20:
        assert parse_head(head).content_length == int("7" * digits)
    else:
        assert _refusal(lambda: parse_head(head)) == 400


_names = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", max_size=10).map(
    lambda n: b"x" + n.encode()  # never one of the fields the parser reads itself
)
_values = st.text([chr(c) for c in range(0x20, 0x7F)], max_size=20).map(
    lambda v: b"v" + v.encode() + b"v"  # no whitespace at either end: the parser trims it
)


@FUZZ
@given(st.lists(st.tuples(_names, _values), max_size=8), st.integers(0, 10**20 - 1))
def test_valid_heads_round_trip(fields: list[tuple[bytes, bytes]], length: int) -> None:
    lines = [b"PUT /a?b=c HTTP/1.1", b"Host: x", *(b"%s: %s" % f for f in fields)]
    lines.append(b"Content-Length: %d" % length)
    head = parse_head(b"\r\n".join(lines))
    assert head.headers == [(b"host", b"x"), *fields, (b"content-length", b"%d" % length)]
    assert head.content_length == length and not head.chunked


def _chunked(body: bytes, sizes: list[int], extension: bytes, trailers: bytes) -> bytes:
    out = []
    at = 0
    for size in sizes:
        piece = body[at : at + size]
        at += len(piece)
        if piece:
            out.append(b"%x%s\r\n%s\r\n" % (len(piece), extension, piece))
    if at < len(body):
        out.append(b"%X\r\n%s\r\n" % (len(body) - at, body[at:]))
    out.append(b"0%s\r\n%s\r\n" % (extension, trailers))
    return b"".join(out)


def _feed(decoder: ChunkedBody, data: bytes, cuts: list[int]) -> bool:
    done = False
    last = 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        done = decoder.feed(data[last:cut])
        last = cut
    return done


@FUZZ
@given(
    st.binary(max_size=300),
    st.lists(st.integers(1, 80), max_size=6),
    st.sampled_from([b"", b";a=b", b' ; name="v"']),
    st.sampled_from([b"", b"x-trailer: 1\r\n", b"a: b\r\nc: d\r\n"]),
    st.lists(st.integers(0, 2000), max_size=6),
    st.binary(max_size=20),
)
def test_chunked_bodies_round_trip_in_any_pieces(
    body: bytes,
    sizes: list[int],
    extension: bytes,
    trailers: bytes,
    cuts: list[int],
    after: bytes,
) -> None:
    encoded = _chunked(body, sizes, extension, trailers)
    decoder = ChunkedBody(max_body=1000)
    assert _feed(decoder, encoded + after, cuts)
    assert decoder.body == body and decoder.rest == after
    for cut in range(len(encoded)):  # every truncation: not done yet, and no error
        assert not ChunkedBody(max_body=1000).feed(encoded[:cut])


@FUZZ
@given(st.binary(max_size=400), st.lists(st.integers(0, 400), max_size=5))
def test_arbitrary_chunked_bytes_are_decoded_or_refused(data: bytes, cuts: list[int]) -> None:
    status = _refusal(lambda: _feed(ChunkedBody(max_body=100, max_trailer=64), data, cuts))
    assert status in (None, 400, 413, 431)


@FUZZ
@given(st.integers(1, 5000), st.booleans())
def test_a_chunk_size_past_the_limit_is_refused_before_its_line_ends(
    digits: int, line_ends: bool
) -> None:
    data = b"f" * digits + (b"\r\n" if line_ends else b"")
    status = _refusal(lambda: ChunkedBody(max_body=16 * 1024 * 1024).feed(data))
    if digits <= 6:  # 0xffffff is 16 MiB - 1: a size within the limit
        assert status is None
    else:
        assert status == (413 if digits <= 16 else 400)


async def _answer(request, respond) -> None:
    await respond.send(200, [], b"ok")


async def _serve_bytes(pieces: list[bytes]) -> tuple[bytes, Server]:
    """Send ``pieces`` to a real :class:`Server` over a memory stream, close, and return
    everything it answered."""
    server = Server(_answer, ServerLimits(max_body_bytes=100, max_header_bytes=8192))
    client, end = trio.testing.memory_stream_pair()
    reply = b""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.serve_connection, end)
        for piece in pieces:
            try:
                await client.send_all(piece)
            except trio.BrokenResourceError:
                break
        await client.send_stream.aclose()
        while received := await client.receive_some(65536):
            reply += received
    return reply, server


def _check_replies(reply: bytes, server: Server) -> None:
    assert server.internal_errors == 0
    while reply:
        assert reply.startswith(b"HTTP/1.1 "), reply
        status = int(reply[9:12])
        assert status == 200 or status in REFUSALS, reply
        head, _, rest = reply.partition(b"\r\n\r\n")
        length = int(head.partition(b"content-length: ")[2].partition(b"\r\n")[0])
        reply = rest[length:]


PIECES = st.lists(
    st.binary(max_size=60)
    | BYTE_SOUP
    | st.sampled_from(
        [
            b"GET /x HTTP/1.1\r\nhost: a\r\n\r\n",
            b"POST /x HTTP/1.1\r\nhost: a\r\ncontent-length: 3\r\n\r\n",
            b"POST /x HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n",
            b"POST /x HTTP/1.1\r\nhost: a\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\n",
            b"POST /x HTTP/1.1\r\nhost: a\r\ncontent-length: ",
            b"POST /x HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\nf",
            b"3\r\nabc\r\n",
            b"0\r\n\r\n",
            b"\r\n\r\n",
        ]
    ),
    max_size=8,
)


@FUZZ_SERVER
@given(PIECES)
def test_the_server_refuses_or_closes_on_any_bytes(pieces: list[bytes]) -> None:
    reply, server = trio.run(
        _serve_bytes, pieces, clock=trio.testing.MockClock(autojump_threshold=0)
    )
    _check_replies(reply.replace(b"HTTP/1.1 100 Continue\r\n\r\n", b""), server)


_FIELDS = st.sampled_from(
    [
        b"host: a",
        b"transfer-encoding: chunked",
        b"expect: 100-continue",
        b"connection: close",
        b"x-request-id: r-1",
        b"x: \x00",
        b"content-length: -1",
    ]
) | st.sampled_from([1, 20, 21, 4300, 4301, 5000]).map(lambda n: b"content-length: " + b"1" * n)


@FUZZ_SERVER
@given(
    st.sampled_from([b"GET /x HTTP/1.1", b"POST /x HTTP/1.1", b"POST /x HTTP/1.0", b"X / HTTP/9"]),
    st.lists(_FIELDS | st.binary(max_size=20), max_size=6),
    st.binary(max_size=40) | st.sampled_from([b"ffffffffffffffff", b"5\r\nhello\r\n0\r\n\r\n"]),
)
def test_the_server_refuses_or_answers_any_head(line: bytes, fields: list[bytes], body: bytes):
    data = b"\r\n".join([line, *fields]) + b"\r\n\r\n" + body
    reply, server = trio.run(
        _serve_bytes, [data], clock=trio.testing.MockClock(autojump_threshold=0)
    )
    _check_replies(reply.replace(b"HTTP/1.1 100 Continue\r\n\r\n", b""), server)
