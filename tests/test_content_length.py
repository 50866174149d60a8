"""One ``content-length`` reading for the gateway and the client transport, checked against h11
itself: whatever header lines a peer sends, we accept exactly what h11 accepts, with the same
length."""

from __future__ import annotations

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice._content_length import (
    MAX_DIGITS,
    BadContentLength,
    ContentLengthTooLong,
    parse_content_length,
)
from sluice._gateway.request_head import HeadError, parse_head
from sluice.transport._errors import RemoteProtocolError, ResponseTooLarge
from sluice.transport._http11 import ResponseParser


def h11_length(lines: list[bytes]) -> int | None:
    """The length h11 takes from these ``content-length`` lines; None when it refuses them."""
    headers = [(b"host", b"a"), *((b"content-length", line) for line in lines)]
    try:
        request = h11.Request(method="POST", target="/", headers=headers)
    except h11.LocalProtocolError:
        return None
    return int(dict(request.headers)[b"content-length"])


def ours(lines: list[bytes]) -> int | None:
    try:
        return parse_content_length(b",".join(lines))
    except BadContentLength:
        return None


# A header value as it arrives (no whitespace at either end): digits, lists, junk.
_piece = st.one_of(
    st.integers(0, 10**25).map(lambda n: b"%d" % n),
    st.sampled_from([b"5", b"05", b"0", b"00", b"1" * 20, b"1" * 21, b"-5", b"+5", b"1e3"]),
    st.text("0123456789, \t-+xe", min_size=1, max_size=30).map(str.encode),
)
_line = (
    st.lists(_piece, min_size=1, max_size=3).map(b", ".join).filter(lambda v: v == v.strip(b" \t"))
)


@settings(max_examples=200)
@given(st.lists(_line, min_size=1, max_size=3))
def test_we_accept_what_h11_accepts_with_the_same_length(lines: list[bytes]) -> None:
    assert ours(lines) == h11_length(lines)


@pytest.mark.parametrize(
    ("lines", "length"),
    [
        ([b"5"], 5),
        ([b"5", b"5"], 5),  # repeated lines with one value
        ([b"5, 5"], 5),  # a list with one value
        ([b"0003"], 3),
        ([b"9" * MAX_DIGITS], 10**MAX_DIGITS - 1),
        ([b"5", b"6"], None),
        ([b"5", b"05"], None),  # the same number written twice differently: h11 refuses it
        ([b"5, 6"], None),
        ([b"-5"], None),
        ([b"5 5"], None),
        ([b""], None),
        ([b"1" * (MAX_DIGITS + 1)], None),
        ([b"0" * (MAX_DIGITS + 1)], None),  # leading zeros count as digits
    ],
)
def test_the_cases_that_matter(lines: list[bytes], length: int | None) -> None:
    assert ours(lines) == h11_length(lines) == length


def test_too_many_digits_is_its_own_refusal() -> None:
    with pytest.raises(ContentLengthTooLong, match="5000 digits"):
        parse_content_length("9" * 5000)  # past int()'s 4,300-digit limit: refused, not raised
    with pytest.raises(BadContentLength, match="conflicting"):
        parse_content_length("1, 2")
    with pytest.raises(BadContentLength, match="invalid content-length '²'"):
        parse_content_length("²")  # a digit to str.isdigit, not to HTTP


def _response(lines: list[bytes]) -> None:
    head = b"HTTP/1.1 200 OK\r\n" + b"".join(b"Content-Length: %s\r\n" % v for v in lines)
    parser = ResponseParser()
    parser.start("GET")
    parser.feed(head + b"\r\nabcde")
    assert parser.read_head() is not None


@pytest.mark.parametrize(
    ("lines", "accepted"),
    [([b"5", b"5"], True), ([b"5, 5"], True), ([b"5", b"05"], False), ([b"5", b"6"], False)],
)
def test_the_gateway_and_the_transport_read_it_the_same_way(
    lines: list[bytes], accepted: bool
) -> None:
    fields = b"\r\n".join(b"content-length: %s" % v for v in lines)
    head = b"POST / HTTP/1.1\r\nhost: a\r\n" + fields
    if accepted:
        assert parse_head(head).content_length == 5
        _response(lines)
    else:
        with pytest.raises(HeadError) as refused:
            parse_head(head)
        assert refused.value.status == 400
        with pytest.raises(RemoteProtocolError, match="conflicting"):
            _response(lines)


def test_the_transport_still_calls_an_endless_length_too_large() -> None:
    with pytest.raises(ResponseTooLarge, match="larger than the 1 TiB limit"):
        _response([b"9" * 30])
