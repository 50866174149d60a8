"""Incremental gzip and deflate decoding of response bodies, shared by both transports."""

from __future__ import annotations

import zlib

from ._errors import RemoteProtocolError, ResponseTooLarge

__all__ = ["MAX_EXPANSION", "Decompressor", "decompressor_for"]

MAX_EXPANSION = 64 * 1024 * 1024
"""The most one piece of compressed input may expand to. A network read is at most 64 KiB, so
this allows a ratio of 1000 to 1 (runs of zeros), and a decompression bomb costs at most this
much memory before it is refused."""


class Decompressor:
    """Incremental gzip or deflate decoding; malformed or truncated data is a protocol error,
    and a piece that expands past :data:`MAX_EXPANSION` is :class:`ResponseTooLarge`."""

    __slots__ = ("_fed", "_gzip", "_z")

    def __init__(self, gzip: bool) -> None:
        self._gzip = gzip
        self._fed = False
        self._z = zlib.decompressobj(zlib.MAX_WBITS | 16 if gzip else zlib.MAX_WBITS)

    def decode(self, data: bytes) -> bytes:
        if not data:
            return b""
        first = not self._fed
        self._fed = True
        try:
            return self._checked(self._z.decompress(data, MAX_EXPANSION), len(data))
        except zlib.error:
            if not first or self._gzip:
                raise RemoteProtocolError("the compressed body is malformed") from None
        # Some servers send raw deflate (no zlib header) for "deflate": retry the first piece.
        self._z = zlib.decompressobj(-zlib.MAX_WBITS)
        try:
            return self._checked(self._z.decompress(data, MAX_EXPANSION), len(data))
        except zlib.error:
            raise RemoteProtocolError("the compressed body is malformed") from None

    def _checked(self, out: bytes, size: int) -> bytes:
        if self._z.unconsumed_tail:
            raise ResponseTooLarge(
                f"{size} compressed bytes expand to more than {MAX_EXPANSION >> 20} MiB"
            )
        return out

    def finish(self) -> bytes:
        if not self._fed:
            return b""
        try:
            tail = self._z.flush()
        except zlib.error:
            raise RemoteProtocolError("the compressed body is malformed") from None
        if not self._z.eof:
            raise RemoteProtocolError("the compressed body is truncated")
        return tail


def decompressor_for(content_encoding: str | None) -> Decompressor | None:
    """A decoder for a ``content-encoding`` value, or None for identity and codings not asked for.

    Only gzip (``x-gzip``) and deflate are decoded: they are all the transports ask for, so any
    other coding (``br``, ``zstd``...) can only come from a caller's own ``accept-encoding``
    and passes through as it is.
    """
    if content_encoding is None:
        return None
    coding = content_encoding.strip().lower()
    if coding == "gzip" or coding == "x-gzip":
        return Decompressor(gzip=True)
    if coding == "deflate":
        return Decompressor(gzip=False)
    return None
