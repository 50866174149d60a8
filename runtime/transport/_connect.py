"""Opening one connection for FastTransport: TCP, then a proxy tunnel and TLS where needed."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import trio

from ._errors import (
    ConnectError,
    ConnectTimeout,
    ProxyError,
    ReadError,
    RemoteProtocolError,
    TLSError,
)
from ._http11 import ResponseParser

if TYPE_CHECKING:
    import ssl
    from collections.abc import Awaitable, Callable

    from ._proxy import Proxy

__all__ = ["default_ssl_context", "open_connection", "open_tcp_stream"]

_DEFAULT_SSL_CONTEXT: ssl.SSLContext | None = None


async def open_tcp_stream(host: str, port: int) -> trio.abc.Stream:
    """The default opener: :func:`trio.open_tcp_stream` (happy eyeballs, TCP_NODELAY)."""
    return await trio.open_tcp_stream(host, port)


def default_ssl_context() -> ssl.SSLContext:
    """One verifying context shared by every transport: building one loads and parses the
    system's whole CA bundle."""
    global _DEFAULT_SSL_CONTEXT
    if _DEFAULT_SSL_CONTEXT is None:
        import ssl

        _DEFAULT_SSL_CONTEXT = ssl.create_default_context()
    return _DEFAULT_SSL_CONTEXT


async def open_connection(
    host: str,
    port: int,
    *,
    tls: bool,
    proxy: Proxy | None,
    ssl_context: ssl.SSLContext | None,
    open_stream: Callable[[str, int], Awaitable[trio.abc.Stream]],
    connect_timeout: float = math.inf,
) -> trio.abc.Stream:
    """A stream to ``host:port`` ready for HTTP: direct or through ``proxy``, TLS if ``tls``.

    For ``https`` through a proxy, asks it for a CONNECT tunnel first; for ``http`` through a
    proxy, the stream goes to the proxy (the caller sends absolute-form targets). Whatever was
    opened is closed again if a later step fails or is cancelled.

    Raises:
        ConnectTimeout: all of it took longer than ``connect_timeout`` seconds.
        ConnectError: the TCP connection failed (an OSError from ``open_stream``).
        ProxyError: the proxy could not be reached or refused the tunnel.
        TLSError: the handshake failed, for example a certificate that does not verify.
    """
    stream: trio.abc.Stream | None = None
    with trio.move_on_after(connect_timeout):
        stream = await _connect(host, port, tls, proxy, ssl_context, open_stream)
    if stream is None:
        raise ConnectTimeout(f"connecting to {host}:{port} took longer than the connect timeout")
    return stream


async def _connect(
    host: str,
    port: int,
    tls: bool,
    proxy: Proxy | None,
    ssl_context: ssl.SSLContext | None,
    open_stream: Callable[[str, int], Awaitable[trio.abc.Stream]],
) -> trio.abc.Stream:
    dial_host, dial_port = (proxy.host, proxy.port) if proxy is not None else (host, port)
    try:
        stream = await open_stream(dial_host, dial_port)
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        where = f"{dial_host}:{dial_port}"
        if proxy is not None:
            raise ProxyError(f"could not connect to the proxy {where}: {reason}") from exc
        raise ConnectError(f"could not connect to {where}: {reason}") from exc
    try:
        if proxy is not None and tls:
            await _tunnel(stream, host, port, proxy)
        if tls:
            stream = await _handshake(stream, host, port, ssl_context)
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    return stream


async def _tunnel(stream: trio.abc.Stream, host: str, port: int, proxy: Proxy) -> None:
    """Ask an http proxy for a CONNECT tunnel to ``host:port``."""
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    request = f"CONNECT {authority} HTTP/1.1\r\nhost: {authority}\r\n"
    if proxy.authorization:
        request += f"proxy-authorization: {proxy.authorization}\r\n"
    parser = ResponseParser()
    parser.start("CONNECT")
    try:
        await stream.send_all(f"{request}\r\n".encode("latin-1"))
        while (head := parser.read_head()) is None:
            chunk = await stream.receive_some()
            if chunk:
                parser.feed(chunk)
            else:
                parser.feed_eof()
    except (trio.BrokenResourceError, trio.ClosedResourceError, ReadError) as exc:
        raise ProxyError("the proxy closed the connection instead of opening a tunnel") from exc
    except RemoteProtocolError as exc:
        raise ProxyError("the proxy answered CONNECT with malformed HTTP") from exc
    if not 200 <= head.status < 300:
        raise ProxyError(f"the proxy refused a tunnel to {authority} (status {head.status})")
    if parser.buffered:
        raise ProxyError("the proxy sent data before the TLS handshake")


async def _handshake(
    stream: trio.abc.Stream, host: str, port: int, ssl_context: ssl.SSLContext | None
) -> trio.SSLStream[trio.abc.Stream]:
    import ssl

    context = ssl_context or default_ssl_context()
    # https_compatible: servers often close without a TLS close_notify; a body framed by
    # content-length or chunked encoding is complete either way.
    tls = trio.SSLStream(stream, context, server_hostname=host, https_compatible=True)
    try:
        await tls.do_handshake()
    except trio.BrokenResourceError as exc:
        cause = exc.__cause__
        if isinstance(cause, ssl.SSLError):
            reason = getattr(cause, "verify_message", None) or cause.reason or str(cause)
            raise TLSError(f"TLS with {host}:{port} failed: {reason}") from exc
        raise ConnectError(f"{host}:{port} closed the connection during the TLS handshake") from exc
    return tls
