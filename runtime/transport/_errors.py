"""What the hot-path transports raise when the network or the peer fails.

::

    TransportError                  base: no usable response (or body) came back
    ├── ConnectError                could not open a connection (refused, DNS, bad URL)
    │   ├── TLSError                certificate or TLS handshake failure
    │   └── ProxyError              the proxy is unsupported, unreachable or refused the tunnel
    ├── ConnectTimeout              opening the connection took longer than ``connect_timeout``
    ├── WriteError                  the connection broke while the request was being sent
    ├── ReadError                   the connection broke while reading (body_started)
    ├── ResponseTimeout             the response head trickled for longer than ``head_timeout``
    └── RemoteProtocolError         the peer sent malformed HTTP (or a malformed gzip body)
        └── ResponseTooLarge        a head, line or size beyond the parser's limits

Both transports (:mod:`.pool` and :mod:`.httpx_adapter`) raise only these, so the ProviderActor
maps one tree to its own errors. Messages are short and never carry header values, which may
hold API keys; the original exception, where there is one, is chained as ``__cause__``.
"""

from __future__ import annotations

__all__ = [
    "ConnectError",
    "ConnectTimeout",
    "ProxyError",
    "ReadError",
    "RemoteProtocolError",
    "ResponseTimeout",
    "ResponseTooLarge",
    "TLSError",
    "TransportError",
    "WriteError",
]


class TransportError(Exception):
    """Base class: the request got no usable response, or its body could not be read."""


class ConnectError(TransportError):
    """No connection could be opened; nothing was sent."""


class TLSError(ConnectError):
    """The TLS handshake failed (for example, the certificate did not verify); nothing was sent."""


class ProxyError(ConnectError):
    """The configured proxy is not supported, could not be reached, or refused the tunnel."""


class ConnectTimeout(TransportError):
    """Opening the connection (TCP, proxy tunnel and TLS handshake) took too long."""


class WriteError(TransportError):
    """The connection broke while the request was being written; the server may have seen part."""


class ReadError(TransportError):
    """The connection broke (or closed early) while the response was being read.

    ``body_started`` tells whether any byte of the response body had arrived: False means the
    failure came before or during the response head.
    """

    def __init__(self, message: str, *, body_started: bool = False) -> None:
        super().__init__(message)
        self.body_started = body_started


class ResponseTimeout(TransportError):
    """The response head began but was not complete within the transport's ``head_timeout``
    (for :class:`~.httpx_adapter.HttpxTransport`: did not arrive within it at all).

    The connection is closed. A timeout, so callers may retry it as any other.
    """


class RemoteProtocolError(TransportError):
    """The peer broke HTTP/1.1: a malformed head, framing, chunk or compressed body."""


class ResponseTooLarge(RemoteProtocolError):
    """The response passed one of the parser's size limits: a head over ``max_head_size``, a
    chunk-size line over 4 KiB, a chunk over 4 GiB, a ``content-length`` over 1 TiB, or one
    compressed piece expanding past 64 MiB (a decompression bomb).

    A server that does this will do it again: callers should not retry.
    """
