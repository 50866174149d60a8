"""Decoding a chunked request body (RFC 9112 section 7.1), fed in pieces. Pure.

Why not h11: the gateway must refuse a chunk it will never accept the moment its size is
known (a size of ``ffffffffffffffff`` is 413 at once, not a wait for the body timeout), and it
reads its own request heads already. Sizes have at most 16 hex digits; a size line, with its
extensions, at most ``_MAX_LINE`` bytes; trailers (read and dropped) at most ``max_trailer``
bytes. Every refusal is a :class:`~.request_head.HeadError` with the status to answer (400
malformed, 413 too large); nothing else is raised, whatever the bytes.
"""

from __future__ import annotations

import re

from .request_head import HeadError

__all__ = ["ChunkedBody"]

_MAX_SIZE_DIGITS = 16
_MAX_LINE = 1024
_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]+)[ \t]*(?:;[^\x00-\x08\x0a-\x1f\x7f]*)?")
_HEX_PREFIX = re.compile(rb"[0-9A-Fa-f]*")
_FIELD_LINE = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+:[^\x00-\x08\x0a-\x1f\x7f]*")

_SIZE, _DATA, _DATA_END, _TRAILER, _DONE = range(5)


class ChunkedBody:
    """One chunked body: :meth:`feed` bytes until it returns True; then :attr:`body` is the
    decoded body and :attr:`rest` the bytes after it (a pipelined request)."""

    __slots__ = ("_buf", "_left", "_parts", "_state", "_trailer", "max_body", "max_trailer", "size")

    def __init__(self, max_body: int, max_trailer: int = 16384) -> None:
        self.max_body = max_body
        self.max_trailer = max_trailer
        self.size = 0
        """Body bytes announced so far (by the chunk sizes read)."""
        self._parts: list[bytes] = []
        self._buf = b""
        self._state = _SIZE
        self._left = 0
        self._trailer = 0

    @property
    def body(self) -> bytes:
        return b"".join(self._parts)

    @property
    def rest(self) -> bytes:
        return self._buf if self._state == _DONE else b""

    def feed(self, data: bytes) -> bool:
        """Take ``data``; True once the last chunk and the trailers are read.

        Works through the bytes by offset, never by slicing off what it has read, so a body
        of many small chunks costs time in proportion to its size.

        Raises:
            HeadError: 400 for a malformed body, 413 once the chunk sizes pass ``max_body``,
                431 for trailers over ``max_trailer`` bytes.
        """
        buf = self._buf + data if self._buf else data
        pos = 0
        size = len(buf)
        while pos < size:
            state = self._state
            if state == _DATA:
                take = min(self._left, size - pos)
                self._parts.append(buf[pos : pos + take])
                pos += take
                self._left -= take
                if self._left == 0:
                    self._state = _DATA_END
            elif state == _DATA_END:
                if buf[pos : pos + 2] != b"\r\n"[: size - pos]:
                    raise HeadError(400, "malformed chunked body: no CRLF after a chunk")
                if size - pos < 2:
                    break
                pos += 2
                self._state = _SIZE
            elif state == _SIZE:
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    self._check_partial_size(buf[pos:])
                    break
                self._read_size(buf[pos:end])
                pos = end + 2
            elif state == _TRAILER:
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    if self._trailer + size - pos > self.max_trailer:
                        raise HeadError(431, "chunked body trailers too large")
                    break
                self._trailer += end + 2 - pos
                if self._trailer > self.max_trailer:
                    raise HeadError(431, "chunked body trailers too large")
                if end == pos:
                    pos = end + 2
                    self._state = _DONE
                elif not _FIELD_LINE.fullmatch(buf, pos, end):
                    raise HeadError(400, "malformed chunked body: bad trailer line")
                else:
                    pos = end + 2
            else:
                break
        self._buf = buf[pos:]
        return self._state == _DONE

    def _check_partial_size(self, buf: bytes) -> None:
        """Refuse a size line that is bad before it is complete: too long, too many digits,
        or digits that already pass the body limit."""
        if len(buf) > _MAX_LINE:
            raise HeadError(400, "malformed chunked body: chunk size line too long")
        digits = _HEX_PREFIX.match(buf)
        assert digits is not None  # matches the empty string at least
        self._check_size(digits.group())

    def _check_size(self, digits: bytes) -> int:
        if len(digits) > _MAX_SIZE_DIGITS:
            raise HeadError(400, "malformed chunked body: chunk size has too many digits")
        size = int(digits, 16) if digits else 0
        if self.size + size > self.max_body:
            raise HeadError(413, f"request body over {self.max_body} bytes")
        return size

    def _read_size(self, line: bytes) -> None:
        if len(line) > _MAX_LINE:
            raise HeadError(400, "malformed chunked body: chunk size line too long")
        match = _SIZE_LINE.fullmatch(line)
        if match is None:
            raise HeadError(400, "malformed chunked body: bad chunk size line")
        size = self._check_size(match.group(1))
        self.size += size
        if size == 0:
            self._state = _TRAILER
        else:
            self._left = size
            self._state = _DATA
