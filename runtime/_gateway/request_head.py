"""Parsing an HTTP/1.1 request head, strictly. Pure: bytes in, fields out.

The gateway reads every request head with this parser rather than h11, which validates every
header with a regular expression and builds an event object per request: a cost a gateway adds
to every call (benchmarks/README.md, "Numbers behind choices in the code", has the figures). It
is as strict as h11 where it matters for a public server: the grammar of RFC 9112 for the
request line and header fields (no whitespace before a colon, no obsolete line folding, no
control characters, no bare CR or LF), ``content-length`` on h11's rules
(:mod:`sluice._content_length`, shared with the client transport), ``host`` on HTTP/1.1,
``transfer-encoding`` only ``chunked`` (on HTTP/1.1, never next to ``content-length``: two
framings of one body are how requests are smuggled past a proxy). Every refusal is a
:class:`HeadError` with the status to answer; nothing else is raised, whatever the bytes.
"""

from __future__ import annotations

import re

import attrs

from .._content_length import BadContentLength, parse_content_length

__all__ = ["Head", "HeadError", "parse_head"]

_TOKEN = rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+"
_REQUEST_LINE = re.compile(rb"(" + _TOKEN + rb") ([^\x00-\x20\x7f]+) HTTP/(1\.[01])")
_OTHER_VERSION = re.compile(_TOKEN + rb" [^\x00-\x20\x7f]+ HTTP/[0-9]+(?:\.[0-9]+)?")
"""A well-formed request line of another HTTP version (505); anything else malformed is 400."""
_FIELD = re.compile(rb"(" + _TOKEN + rb"):[ \t]*([^\x00-\x08\x0a-\x1f\x7f]*)")
_REQUEST_ID = re.compile(rb"[-A-Za-z0-9._:+/=@]{1,128}")
"""A client's ``x-request-id`` that is echoed back: bounded, and nothing a log or a header
could misread."""


class HeadError(Exception):
    """The head is malformed; ``status`` is the response to give (400, 501, 505)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@attrs.frozen(slots=True)
class Head:
    method: bytes
    target: bytes
    http_version: bytes
    headers: list[tuple[bytes, bytes]]
    """Lower-case names, values without surrounding whitespace, in order."""
    content_length: int
    """0 when the head gives none (or the body is chunked)."""
    chunked: bool
    """The body comes in chunks (``transfer-encoding: chunked``)."""
    expect_continue: bool
    """An HTTP/1.1 client waits for ``100 Continue`` before it sends the body."""
    request_id: bytes | None
    """The client's ``x-request-id`` when it sent a sane one (see ``_REQUEST_ID``)."""


def parse_head(head: bytes) -> Head:
    """Parse ``head`` (everything before the blank line that ends it).

    Raises:
        HeadError: the head breaks the grammar, or ``content-length`` breaks h11's rules
            (:func:`~sluice._content_length.parse_content_length`), or the framing is not one
            this server reads, or an HTTP/1.1 request has no ``host``.
    """
    lines = head.split(b"\r\n")
    first = _REQUEST_LINE.fullmatch(lines[0])
    if first is None:
        if _OTHER_VERSION.fullmatch(lines[0]):
            raise HeadError(505, "unsupported HTTP version; use HTTP/1.1")
        raise HeadError(400, "malformed request line")
    method, target, minor = first.groups()
    headers: list[tuple[bytes, bytes]] = []
    length: bytes | None = None
    encoding: bytes | None = None
    expect = False
    host = False
    request_id = None
    for line in lines[1:]:
        field = _FIELD.fullmatch(line)
        if field is None:
            raise HeadError(400, "malformed header line")
        name = field.group(1).lower()
        value = field.group(2).rstrip(b" \t")
        if name == b"content-length":
            length = value if length is None else length + b"," + value
        elif name == b"transfer-encoding":
            if encoding is not None or value.lower() != b"chunked":
                raise HeadError(501, "unsupported transfer-encoding; only chunked is read")
            encoding = value
        elif name == b"expect":
            expect = value.lower() == b"100-continue"
        elif name == b"host":
            host = True
        elif name == b"x-request-id" and _REQUEST_ID.fullmatch(value):
            request_id = value
        headers.append((name, value))
    if minor == b"1.1" and not host:
        raise HeadError(400, "missing Host header")
    if encoding is not None and (length is not None or minor != b"1.1"):
        raise HeadError(400, "transfer-encoding with content-length, or on HTTP/1.0")
    try:
        size = parse_content_length(length) if length is not None else 0
    except BadContentLength as exc:
        raise HeadError(400, str(exc)) from None
    return Head(
        method,
        target,
        minor,
        headers,
        size,
        encoding is not None,
        expect and minor == b"1.1",
        request_id,
    )
