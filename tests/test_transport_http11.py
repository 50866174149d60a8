"""The sans-io HTTP/1.1 codec: request heads, URL splitting, and the response parser.

Pure and synchronous. The hypothesis tests generate valid responses (every framing, interim
responses, gzip, chunk extensions and trailers) and check that any split of their bytes parses
to the same status, headers and body, and that h11 agrees; and that garbage or mangled input
raises only TransportError subclasses and never loops.
"""

from __future__ import annotations

import cProfile
import gzip
import pstats
import zlib
from typing import Any

import h11
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.transport._errors import (
    ReadError,
    RemoteProtocolError,
    ResponseTooLarge,
    TransportError,
)
from sluice.transport._http11 import ResponseHead, ResponseParser, encode_request_head
from sluice.transport._urls import host_header, split_url

# -- helpers ------------------------------------------------------------------------------


def parse(
    pieces: list[bytes], method: str = "POST", *, eof: bool = True, max_head_size: int = 65536
) -> tuple[ResponseHead, bytes, ResponseParser]:
    """Feed ``pieces`` one by one as a connection would; return head, body and the parser."""
    parser = ResponseParser(max_head_size=max_head_size)
    parser.start(method)
    head: ResponseHead | None = None
    body: list[bytes] = []
    steps = 0
    for piece in [*pieces, None]:
        if piece is None:
            if not eof:
                break
            parser.feed_eof()
        else:
            parser.feed(piece)
        # After end-of-file each call must either progress or raise: a few calls at most.
        for _ in range(4 if piece is None else 1):
            steps += 1
            if head is None:
                head = parser.read_head()
                if head is None:
                    break
            body.append(parser.read_body())
            if parser.done:
                break
        if parser.done:
            break
    assert steps < len(pieces) + 10
    assert head is not None, "no head and no error"
    if eof:
        assert parser.done, "end of input neither completed the response nor raised"
    return head, b"".join(body), parser


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for point in points:
        pieces.append(data[last:point])
        last = point
    pieces.append(data[last:])
    return [p for p in pieces if p]


SSE = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'


def chunked(*chunks: bytes, trailer: bytes = b"") -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n" + trailer + b"\r\n"


# -- request heads --------------------------------------------------------------------------


def test_request_head_is_exact() -> None:
    head = encode_request_head(
        "POST",
        "/v1/chat/completions",
        "api.example.com",
        (("content-type", "application/json"), ("authorization", "Bearer k")),
        17,
    )
    assert head == (
        b"POST /v1/chat/completions HTTP/1.1\r\n"
        b"content-type: application/json\r\n"
        b"authorization: Bearer k\r\n"
        b"host: api.example.com\r\n"
        b"content-length: 17\r\n"
        b"accept-encoding: gzip\r\n"
        b"\r\n"
    )


def test_request_head_respects_the_callers_host_and_accept_encoding() -> None:
    head = encode_request_head(
        "GET", "/", "a", (("Host", "b"), ("Accept-Encoding", "identity")), None
    )
    assert head == b"GET / HTTP/1.1\r\nHost: b\r\nAccept-Encoding: identity\r\n\r\n"


def test_request_head_drops_framing_and_connection_headers() -> None:
    given_headers = (
        ("Content-Length", "999"),
        ("transfer-encoding", "chunked"),
        ("connection", "close"),
        ("keep-alive", "5"),
        ("upgrade", "h2c"),
        ("x-ok", "1"),
    )
    head = encode_request_head("POST", "/", "h", given_headers, 2)
    assert head == (
        b"POST / HTTP/1.1\r\nx-ok: 1\r\nhost: h\r\ncontent-length: 2\r\n"
        b"accept-encoding: gzip\r\n\r\n"
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [("x", "a\r\nx-injected: 1"), ("x", "a\nb"), ("x", "a\0"), ("bad name", "v"), ("", "v")],
)
def test_request_head_rejects_injection_without_echoing_the_value(name: str, value: str) -> None:
    with pytest.raises(ValueError, match="invalid name or value") as info:
        encode_request_head("GET", "/", "h", ((name, value),), None)
    assert "injected" not in str(info.value)


def test_request_head_must_be_latin1() -> None:
    with pytest.raises(ValueError, match="Latin-1"):
        encode_request_head("GET", "/", "h", (("x-name", "snow ☃"),), None)


# -- URLs -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://API.example.com/v1/x?a=1#frag", ("https", "api.example.com", 443, "/v1/x?a=1")),
        ("http://h:8080", ("http", "h", 8080, "/")),
        ("http://h?q", ("http", "h", 80, "/?q")),
        ("HTTP://[::1]:9/p", ("http", "::1", 9, "/p")),
        ("https://[2001:db8::1]/", ("https", "2001:db8::1", 443, "/")),
        ("https://bücher.example/", ("https", "xn--bcher-kva.example", 443, "/")),
        ("http://h/café?q=é&r=%41", ("http", "h", 80, "/caf%C3%A9?q=%C3%A9&r=%41")),
    ],
)
def test_split_url(url: str, expected: tuple[str, str, int, str]) -> None:
    assert split_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "ftp://h/",
        "h/path",
        "http://",
        "http://:80/",
        "http://h:0/",
        "http://h:70000/",
        "http://h:x/",
        "http://user:pw@h/",
        "http://[::1/",
        "http://[::1]x/",
        "http://h/a b",
        "http://h/a\r\nx-injected: 1",
        "http://h\t/",
    ],
)
def test_split_url_rejects(url: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - several messages, one type
        split_url(url)


@given(st.text(max_size=60))
def test_split_url_raises_only_value_error(url: str) -> None:
    try:
        split_url(url)
    except ValueError:
        pass


def test_host_header_omits_default_ports_and_brackets_ipv6() -> None:
    assert host_header("https", "a", 443) == "a"
    assert host_header("http", "a", 443) == "a:443"
    assert host_header("http", "::1", 8080) == "[::1]:8080"


# -- responses: fixed cases -----------------------------------------------------------------


def test_content_length_body_and_reuse() -> None:
    head, body, parser = parse([b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello"])
    assert (head.status, body) == (200, b"hello")
    assert head.headers == {"content-length": "5", "x-a": "1"}
    assert head.http_version == "1.1"
    assert parser.done and parser.reusable


def test_chunked_body_with_extensions_trailers_and_upper_case_hex() -> None:
    raw = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"1A;name=value\r\n" + b"x" * 26 + b"\r\n"
        b"0005 ; ext\r\nhello\r\n"
        b"0\r\nX-Trailer: yes\r\nX-Other: 2\r\n\r\n"
    )
    _, body, parser = parse([raw])
    assert body == b"x" * 26 + b"hello"
    assert parser.reusable


def test_every_split_point_of_a_chunked_response() -> None:
    raw = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunked(SSE, SSE[:7], SSE)
    for i in range(len(raw) + 1):
        for j in range(i, len(raw) + 1, 7):
            _, body, parser = parse([raw[:i], raw[i:j], raw[j:]])
            assert body == SSE + SSE[:7] + SSE, (i, j)
            assert parser.reusable


def test_body_pieces_are_large_not_per_line() -> None:
    raw = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunked(*[SSE] * 20)
    parser = ResponseParser()
    parser.start("POST")
    parser.feed(raw)
    assert parser.read_head() is not None
    assert parser.read_body() == SSE * 20  # one piece for everything that arrived at once
    assert parser.done


def test_interim_responses_are_skipped() -> None:
    raw = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
        b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"
    )
    head, body, _ = parse([raw])
    assert (head.status, body) == (201, b"ok")
    assert "link" not in head.headers


def test_switching_protocols_is_rejected() -> None:
    with pytest.raises(RemoteProtocolError, match="101"):
        parse([b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n"])


@pytest.mark.parametrize(
    ("method", "status"), [("HEAD", 200), ("GET", 204), ("GET", 304), ("CONNECT", 200)]
)
def test_responses_without_a_body(method: str, status: int) -> None:
    raw = f"HTTP/1.1 {status} X\r\nContent-Length: 10\r\n\r\n".encode()
    head, body, parser = parse([raw], method, eof=False)
    assert (head.status, body) == (status, b"")
    assert parser.done and parser.reusable


def test_connect_refusal_has_a_body() -> None:
    _, body, _ = parse([b"HTTP/1.1 407 Auth\r\nContent-Length: 4\r\n\r\nnope"], "CONNECT")
    assert body == b"nope"


def test_read_to_close_body_needs_end_of_file_and_is_not_reusable() -> None:
    raw = b"HTTP/1.1 200 OK\r\n\r\npart one, "
    _, body, parser = parse([raw, b"part two"], eof=False)
    assert not parser.done
    _, body, parser = parse([raw, b"part two"])
    assert body == b"part one, part two"
    assert parser.done and not parser.reusable


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n",
    ],
)
def test_not_reusable(head: bytes) -> None:
    body = b"2\r\nok\r\n0\r\n\r\n" if b"chunked" in head else b"ok"
    _, got, parser = parse([head + body], eof=False)
    assert got == b"ok"
    assert parser.done and not parser.reusable


def test_stray_bytes_after_the_body_make_the_connection_unusable() -> None:
    _, _, parser = parse([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA"], eof=False)
    assert parser.done and not parser.reusable and parser.buffered == 5


def test_headers_lower_cased_repeats_joined_and_folded_lines_unfolded() -> None:
    raw = (
        b"HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nX-Long: first\r\n  second\r\n"
        b"set-cookie: b=2\r\nX-Empty:\r\nContent-Length: 0\r\n\r\n"
    )
    head, _, _ = parse([raw], eof=False)
    assert head.headers == {
        "set-cookie": "a=1, b=2",
        "x-long": "first second",
        "x-empty": "",
        "content-length": "0",
    }


def test_bare_lf_line_endings_in_the_head_are_tolerated() -> None:
    head, body, _ = parse([b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok"])
    assert (head.status, dict(head.headers), body) == (200, {"content-length": "2"}, b"ok")


def test_a_bare_blank_line_ends_the_head_before_a_crlf_one_in_the_body() -> None:
    head, body, _ = parse([b"HTTP/1.1 200 OK\nContent-Length: 6\n\nab\r\n\r\n"])
    assert (head.headers["content-length"], body) == ("6", b"ab\r\n\r\n")
    head, body, _ = parse([b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\nab\r\n\r\n"])
    assert body == b"ab\r\n\r\n"


def test_a_usual_head_is_looked_for_once() -> None:
    """A head with CRLF line endings throughout is found by one search for its end, not a
    second one for a bare blank line before it (over the whole head: it had one)."""
    parser = ResponseParser()
    parser.start("POST")
    parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: b\r\n\r\nok")
    profiler = cProfile.Profile()
    profiler.enable()
    head = parser.read_head()
    profiler.disable()
    stats: Any = pstats.Stats(profiler)  # its stats are not in the stubs
    finds = sum(n for (_, _, name), (n, *_) in stats.stats.items() if "'find'" in name)
    assert finds == 1
    assert head is not None and head.headers["x-a"] == "b"
    assert parser.read_body() == b"ok"


def test_gzip_body_is_decoded_incrementally() -> None:
    payload = SSE * 50
    compressed = gzip.compress(payload)
    raw = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
    raw += chunked(*[compressed[i : i + 40] for i in range(0, len(compressed), 40)])
    _, body, parser = parse([raw[i : i + 13] for i in range(0, len(raw), 13)])
    assert body == payload
    assert parser.reusable


@pytest.mark.parametrize("raw_deflate", [False, True])
def test_deflate_with_or_without_zlib_header(raw_deflate: bool) -> None:
    z = zlib.compressobj(wbits=-zlib.MAX_WBITS if raw_deflate else zlib.MAX_WBITS)
    data = z.compress(b"deflated " * 30) + z.flush()
    raw = b"HTTP/1.1 200 OK\r\nContent-Encoding: deflate\r\nContent-Length: %d\r\n\r\n" % len(data)
    _, body, _ = parse([raw + data])
    assert body == b"deflated " * 30


def test_unknown_content_encoding_passes_through() -> None:
    _, body, _ = parse([b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 3\r\n\r\nabc"])
    assert body == b"abc"


def test_empty_gzip_body_is_fine() -> None:
    head, body, _ = parse(
        [b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 0\r\n\r\n"]
    )
    assert (head.status, body) == (200, b"")


@pytest.mark.parametrize(
    ("body", "match"),
    [(gzip.compress(b"hello world")[:-6], "truncated"), (b"\x1f\x8bnot gzip at all", "malformed")],
    ids=["truncated", "malformed"],  # gzip's header holds the time: the same ids in every worker
)
def test_bad_gzip_is_a_protocol_error(body: bytes, match: str) -> None:
    raw = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(body)
    with pytest.raises(RemoteProtocolError, match=match):
        parse([raw + body])


def test_early_end_of_file_is_a_read_error_that_says_whether_the_body_started() -> None:
    with pytest.raises(ReadError) as info:
        parse([b"HTTP/1.1 200 OK\r\nContent-Len"])
    assert not info.value.body_started
    with pytest.raises(ReadError) as info:
        parse([b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"])
    assert info.value.body_started
    with pytest.raises(ReadError):
        parse([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"])
    with pytest.raises(ReadError):
        parse([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: 1\r\n"])


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/2 200 OK\r\n\r\n",
        b"HTTP/1.1 20 OK\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 099 X\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"SMTP ready\r\n",
        b"HTTP/1.1 200 OK\r\nNo colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n: empty name\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: a\x00b\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n continuation first\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+5\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXY0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\nbad trailer\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1" * 17 + b"\r\n",
    ],
)
def test_malformed_responses(raw: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        parse([raw])


def test_head_size_limit() -> None:
    big = b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * 200 + b"\r\n"
    with pytest.raises(ResponseTooLarge, match="head is larger than the 128 bytes limit"):
        parse([big, b"X-More: 1\r\n"], eof=False, max_head_size=128)
    with pytest.raises(ResponseTooLarge, match="head is larger than the 128 bytes limit"):
        parse([big + b"\r\n"], max_head_size=128)


def test_chunk_line_and_trailer_limits() -> None:
    start = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    with pytest.raises(ResponseTooLarge, match="line is longer than 4096 bytes"):
        parse([start + b"5;" + b"e" * 5000], eof=False)
    trailers = b"".join(b"X-T%d: %s\r\n" % (i, b"v" * 50) for i in range(5))
    with pytest.raises(ResponseTooLarge, match="trailer section is larger than the 200 bytes"):
        parse([start + b"0\r\n" + trailers + b"\r\n"], max_head_size=200)


def test_parser_serves_consecutive_responses_on_one_connection() -> None:
    parser = ResponseParser()
    for i in range(3):
        parser.start("GET")
        parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n%d" % i)
        assert parser.read_head() is not None
        assert parser.read_body() == b"%d" % i
        assert parser.reusable


# -- responses: generated -------------------------------------------------------------------

_TOKEN = st.text(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!#$%&'*+^`|~",
    min_size=1,
    max_size=12,
)
_FRAMING_NAMES = {"content-length", "transfer-encoding", "connection", "content-encoding"}
_VALUE = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E) | st.sampled_from(" \t\x80\xe9\xff"),
    max_size=30,
).map(lambda v: v.strip(" \t"))


@st.composite
def responses(draw: st.DrawFn) -> tuple[bytes, str, int, dict[str, str], bytes, bool]:
    """(raw bytes, method, status, expected headers, expected body, expected reusable)."""
    method = draw(st.sampled_from(["GET", "POST", "HEAD"]))
    version = draw(st.sampled_from(["1.1", "1.1", "1.0"]))
    status = draw(st.sampled_from([200, 201, 204, 304, 400, 404, 429, 500, 503]))
    framing = draw(st.sampled_from(["length", "chunked", "close"]))
    body = draw(st.binary(max_size=600))
    compress = draw(st.booleans())
    close_header = draw(st.booleans()) and draw(st.booleans())
    headers = draw(
        st.lists(st.tuples(_TOKEN, _VALUE), max_size=6).filter(
            lambda hs: not {n.lower() for n, _ in hs} & _FRAMING_NAMES
        )
    )
    interim = draw(st.lists(st.sampled_from([100, 102, 103]), max_size=2))

    raw = b"".join(b"HTTP/1.1 %d Interim\r\nX-Interim: 1\r\n\r\n" % code for code in interim)
    wire_body = gzip.compress(body, mtime=0) if compress else body
    all_headers = list(headers)
    if compress:
        all_headers.append(("Content-Encoding", "gzip"))
    if close_header:
        all_headers.append(("Connection", "close"))
    has_body = method != "HEAD" and status not in (204, 304)
    if framing == "length":
        all_headers.append(("Content-Length", str(len(wire_body))))
        payload = wire_body
    elif framing == "chunked":
        all_headers.append(("Transfer-Encoding", "chunked"))
        cuts = sorted(draw(st.lists(st.integers(0, len(wire_body)), max_size=5)))
        pieces = [wire_body[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire_body)], strict=True)]
        payload = b""
        for piece in pieces:
            if not piece:
                continue
            size = draw(st.sampled_from(["%x", "%X", "%04x"])) % len(piece)
            ext = draw(st.sampled_from(["", ";a=b", ';q="x;y"']))
            payload += f"{size}{ext}\r\n".encode() + piece + b"\r\n"
        trailer = draw(st.sampled_from([b"", b"X-Checksum: abc\r\n"]))
        payload += b"0\r\n" + trailer + b"\r\n"
    else:
        payload = wire_body
    head = f"HTTP/{version} {status} Reason Phrase\r\n".encode()
    head += b"".join(f"{n}: {v}\r\n".encode("latin-1") for n, v in all_headers) + b"\r\n"
    raw += head + (payload if has_body else b"")
    expected: dict[str, str] = {}
    for name, value in all_headers:
        key = name.lower()
        expected[key] = value if key not in expected else f"{expected[key]}, {value}"
    reusable = version == "1.1" and not close_header and (framing != "close" or not has_body)
    return raw, method, status, expected, body if has_body else b"", reusable


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(responses(), st.lists(st.integers(min_value=0), max_size=12))
def test_any_split_of_a_valid_response_parses_the_same(
    case: tuple[bytes, str, int, dict[str, str], bytes, bool], cuts: list[int]
) -> None:
    raw, method, status, headers, body, reusable = case
    head, got, parser = parse(split_at(raw, cuts), method)
    assert (head.status, dict(head.headers), got) == (status, headers, body)
    assert parser.done
    assert parser.reusable == reusable


@settings(max_examples=200)
@given(responses())
def test_h11_agrees_on_valid_responses(
    case: tuple[bytes, str, int, dict[str, str], bytes, bool],
) -> None:
    raw, method, status, headers, _, _ = case
    head, ours, _ = parse([raw], method)
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method=method, target="/", headers=[("host", "h")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(raw)
    conn.receive_data(b"")
    theirs = b""
    while True:
        event = conn.next_event()
        if isinstance(event, h11.Response):
            assert event.status_code == status == head.status
            names = [n.decode() for n, _ in event.headers]
            assert sorted(set(names)) == sorted(headers)
        elif isinstance(event, h11.Data):
            theirs += event.data
        elif isinstance(event, h11.EndOfMessage):
            break
    if "content-encoding" not in headers:
        assert ours == theirs


def _drive_garbage(data: bytes, cuts: list[int], method: str) -> None:
    try:
        parse(split_at(data, cuts), method)
    except TransportError:
        pass


@settings(max_examples=400)
@given(st.binary(max_size=300), st.lists(st.integers(min_value=0), max_size=6))
def test_garbage_raises_only_transport_errors(data: bytes, cuts: list[int]) -> None:
    _drive_garbage(data, cuts, "GET")
    _drive_garbage(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + data, cuts, "GET")
    _drive_garbage(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n" + data, cuts, "GET")


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    responses(),
    st.lists(
        st.tuples(st.integers(min_value=0), st.integers(0, 255), st.integers(0, 2)), max_size=4
    ),
    st.lists(st.integers(min_value=0), max_size=6),
)
def test_mangled_responses_raise_only_transport_errors(
    case: tuple[bytes, str, int, dict[str, str], bytes, bool],
    edits: list[tuple[int, int, int]],
    cuts: list[int],
) -> None:
    raw = bytearray(case[0])
    for where, byte, kind in edits:
        i = where % (len(raw) + 1)
        if kind == 0:
            raw[i:i] = bytes([byte])
        elif kind == 1 and i < len(raw):
            raw[i] = byte
        else:
            del raw[i : i + 1]
    _drive_garbage(bytes(raw), cuts, case[1])


@pytest.mark.parametrize(
    ("size", "message"),
    [
        (b"ffffffffffffffff", "chunk size 0xffffffffffffffff is larger than the 4 GiB limit"),
        (b"100000001", "chunk size 0x100000001 is larger than the 4 GiB limit"),
        (b"0" * 30 + b"100000001", "is larger than the 4 GiB limit"),
    ],
)
def test_absurd_chunk_sizes_are_refused(size: bytes, message: str) -> None:
    start = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    with pytest.raises(ResponseTooLarge, match=message):
        parse([start + size + b"\r\nabc"], eof=False)


def test_a_chunk_of_exactly_4_gib_is_still_a_chunk() -> None:
    start = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    head, body, parser = parse([start + b"100000000\r\nabc"], eof=False)
    assert head.status == 200 and body == b"abc" and not parser.done


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (b"-5", RemoteProtocolError, "invalid content-length '-5'"),
        (b"+5", RemoteProtocolError, "invalid content-length"),
        (b"1e3", RemoteProtocolError, "invalid content-length"),
        (b"99999999999999999999999", ResponseTooLarge, "larger than the 1 TiB limit"),
        (b"1099511627777", ResponseTooLarge, "larger than the 1 TiB limit"),
        (b"9" * 5000, ResponseTooLarge, "larger than the 1 TiB limit"),
    ],
)
def test_absurd_content_lengths_are_refused(value: bytes, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        parse([b"HTTP/1.1 200 OK\r\nContent-Length: " + value + b"\r\n\r\nabc"], eof=False)


def test_a_content_length_with_leading_zeros_is_read_as_decimal() -> None:
    _, body, parser = parse([b"HTTP/1.1 200 OK\r\nContent-Length: 0003\r\n\r\nabc"])
    assert body == b"abc" and parser.done


def test_a_decompression_bomb_is_refused_per_piece() -> None:
    import zlib

    from sluice.transport._decoding import MAX_EXPANSION, Decompressor

    bomb = zlib.compress(b"\0" * (MAX_EXPANSION + 1024), 9)
    assert len(bomb) < 100_000
    with pytest.raises(ResponseTooLarge, match="expand to more than 64 MiB"):
        Decompressor(gzip=False).decode(bomb)
    assert Decompressor(gzip=False).decode(zlib.compress(b"\0" * MAX_EXPANSION, 9)) == (
        b"\0" * MAX_EXPANSION
    )


def test_repeated_short_header_values_share_one_string() -> None:
    """Every open stream holds its response's headers: the values a server repeats in every
    response are one string, not a copy per response; values differ as they should."""
    raw = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nx-request-id: req_1\r\n"
    first, _, _ = parse([raw + b"content-length: 0\r\n\r\n"])
    second, _, _ = parse([raw.replace(b"req_1", b"req_2") + b"content-length: 0\r\n\r\n"])
    assert first.headers["content-type"] == "text/event-stream"
    assert first.headers["content-type"] is second.headers["content-type"]
    assert (first.headers["x-request-id"], second.headers["x-request-id"]) == ("req_1", "req_2")


def test_responses_with_the_same_header_names_share_one_name_table() -> None:
    """The headers an open stream holds are its values alone: responses whose heads list the
    same names in the same order share the table of names (a dict each held their own)."""
    raw = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nx-request-id: req_%d\r\n"
        b"set-cookie: a=%d\r\nSet-Cookie: b\r\ncontent-length: 0\r\n\r\n"
    )
    first, _, _ = parse([raw % (1, 1)])
    second, _, _ = parse([raw % (2, 2)])
    other, _, _ = parse([b"HTTP/1.1 200 OK\r\nx-request-id: req_3\r\ncontent-length: 0\r\n\r\n"])
    assert first.headers._index is second.headers._index
    assert first.headers._index is not other.headers._index
    assert dict(first.headers) == {
        "content-type": "text/event-stream",
        "x-request-id": "req_1",
        "set-cookie": "a=1, b",
        "content-length": "0",
    }
    assert second.headers == {
        "content-type": "text/event-stream",
        "x-request-id": "req_2",
        "set-cookie": "a=2, b",
        "content-length": "0",
    }
    assert list(other.headers.items()) == [("x-request-id", "req_3"), ("content-length", "0")]
    headers = first.headers
    assert "content-type" in headers and "Content-Type" not in headers
    assert (headers.get("retry-after"), headers.get("retry-after", "-"), len(headers)) == (
        None,
        "-",
        4,
    )
    with pytest.raises(KeyError):
        headers["retry-after"]
    # A value may be a cookie or a token: the repr names the headers only.
    assert "a=1" not in repr(headers) and "set-cookie" in repr(headers)


def test_a_folded_head_is_read_line_by_line_even_when_its_names_were_seen() -> None:
    """The per-layout fast path never applies to a head with a continuation line: the same
    names, once folded, are unfolded as RFC 9112 §5.2 says; a bad name is still refused."""
    plain, _, _ = parse([b"HTTP/1.1 200 OK\r\nX-A: 1\r\nX-B: 2\r\ncontent-length: 0\r\n\r\n"])
    folded, _, _ = parse(
        [b"HTTP/1.1 200 OK\r\nX-A: 1\r\n  more: text\r\nX-B: 2\r\ncontent-length: 0\r\n\r\n"]
    )
    assert dict(plain.headers) == {"x-a": "1", "x-b": "2", "content-length": "0"}
    assert dict(folded.headers) == {"x-a": "1 more: text", "x-b": "2", "content-length": "0"}
    parser = ResponseParser()
    parser.start("GET")
    parser.feed(b"HTTP/1.1 200 OK\r\nX A: 1\r\ncontent-length: 0\r\n\r\n")
    with pytest.raises(RemoteProtocolError, match="malformed header line"):
        parser.read_head()


def test_a_head_of_one_repeated_name_joins_its_values_every_time() -> None:
    """The per-layout picker of a head whose every line repeats one name: first read (the
    layout made) and again (the layout reused) join the values in arrival order."""
    raw = b"HTTP/1.1 204 No Content\r\nVia: 1.1 a%d\r\nvia: 1.1 b\r\nVIA: 1.1 c\r\n\r\n"
    first, _, _ = parse([raw % 1])
    second, _, _ = parse([raw % 2])
    assert dict(first.headers) == {"via": "1.1 a1, 1.1 b, 1.1 c"}
    assert dict(second.headers) == {"via": "1.1 a2, 1.1 b, 1.1 c"}


def _body_calls(raw: bytes) -> tuple[int, bytes]:
    """Python calls that reading the body of ``raw`` (a whole response) makes, and the body."""
    parser = ResponseParser()
    parser.start("POST")
    parser.feed(raw)
    assert parser.read_head() is not None
    profiler = cProfile.Profile()
    profiler.enable()
    body = parser.read_body()
    profiler.disable()
    assert parser.done and parser.reusable
    stats: Any = pstats.Stats(profiler)  # total_calls is not in the stubs
    return stats.total_calls, body


def test_a_read_of_whole_chunks_costs_no_python_call_per_chunk() -> None:
    """Whole chunks with plain sizes, as a server flushing SSE events sends them, are de-chunked
    by one split: 200 chunks in a read make as many Python calls as 20 (the per-chunk loop
    made three more calls per chunk: over 500 more for 200). A chunk whose data holds a CRLF
    is read by the state machine, as exactly."""
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    counts = []
    for n in (20, 200):
        events = [b'data: {"n":%d}\n\n' % i for i in range(n)]
        calls, body = _body_calls(head + chunked(*events))
        assert body == b"".join(events)
        counts.append(calls)
    assert counts[0] == counts[1] and counts[0] < 25, counts
    _, body = _body_calls(head + chunked(b"data: a\r\n\r\n", b"data: b\n\n"))
    assert body == b"data: a\r\n\r\ndata: b\n\n"


_NAME = st.sampled_from([b"X-A", b"x-a", b"Content-Type", b"set-cookie", b"Via", b"x-b"])
_HEADER_VALUE = st.binary(max_size=80).map(
    lambda v: v.replace(b"\r", b"").replace(b"\n", b"").lstrip(b" \t")
)


@settings(max_examples=300)
@given(st.lists(st.tuples(_NAME, _HEADER_VALUE), max_size=8), st.booleans())
def test_read_fields_agrees_with_the_line_by_line_reader(
    fields: list[tuple[bytes, bytes]], twice: bool
) -> None:
    """The head reader that splits every line and looks up every value by ``map`` (values
    seen before or not, names repeated or not, colons and odd bytes in values) gives exactly
    what the line-by-line reader of folded heads gives; read twice, from the layout and value
    tables it filled the first time, too."""
    from sluice.transport._head_fields import _folded_headers, read_fields

    lines = [b"HTTP/1.1 200 OK", *(name + b":" + value for name, value in fields)]
    expected_headers, expected_values, expected_framing = _folded_headers(lines)
    for _ in range(2 if twice else 1):
        headers, values, framing = read_fields(lines)
        assert (values, framing) == (expected_values, expected_framing)
        assert list(headers.items()) == list(expected_headers.items())


def test_read_fields_makes_no_python_call_per_header_line() -> None:
    """A head's fields are read by ``map`` over its lines: a head of 40 lines makes as many
    Python calls as one of 4 once its layout and values were seen (the per-line loop made
    four calls per line), and a value never seen before costs a few calls of its own."""
    from sluice.transport._head_fields import read_fields

    def calls(lines: list[bytes]) -> int:
        read_fields(lines)  # the layout and the values seen
        profiler = cProfile.Profile()
        profiler.enable()
        read_fields(lines)
        profiler.disable()
        stats: Any = pstats.Stats(profiler)  # total_calls is not in the stubs
        return int(stats.total_calls)

    short = [b"HTTP/1.1 200 OK", *(b"x-h%d: v" % i for i in range(4))]
    long = [b"HTTP/1.1 200 OK", *(b"x-h%d: v" % i for i in range(40))]
    assert calls(short) == calls(long) < 12
    new_value = [*long, b"x-request-id: req_%d" % id(long)]
    read_fields([*long, b"x-request-id: seen"])  # the layout, not the value
    profiler = cProfile.Profile()
    profiler.enable()
    headers, _, _ = read_fields(new_value)
    profiler.disable()
    stats: Any = pstats.Stats(profiler)
    assert calls(long) < stats.total_calls <= calls(long) + 5
    assert headers["x-request-id"] == f"req_{id(long)}"
