"""HttpxTransport: the hot-path interface over ``httpx.AsyncClient``.

The fallback for what :class:`~.pool.FastTransport` does not cover (HTTP/2, SOCKS and HTTPS
proxies, anything configured on an httpx client), and the baseline it is measured against.
httpx's exceptions become the transport errors of :mod:`.errors` in exactly one place,
:func:`_translate`.

The body is read from ``response.stream`` directly rather than through ``aiter_bytes()``, and
content decoding (gzip, deflate) is done here, so no extra async generators are stacked on
httpx's own. httpx's stream is itself a chain of async generators, and closing only the
outermost one leaves the inner ones to be garbage-collected half-run, which trio reports as a
``ResourceWarning`` (encode/httpx#3686). So a response abandoned mid-body is closed by resuming
the chain inside an already-cancelled cancel scope: the innermost read raises ``Cancelled``,
which unwinds (and so finishes) every generator in the chain, each closing what it holds.
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, cast

import httpx
import trio

from ._decoding import decompressor_for
from ._errors import (
    ConnectError,
    ConnectTimeout,
    ProxyError,
    ReadError,
    RemoteProtocolError,
    ResponseTimeout,
    TLSError,
    TransportError,
    WriteError,
)

if TYPE_CHECKING:
    import ssl
    from collections.abc import AsyncIterator

    from ._phases import HttpPhases

__all__ = ["HttpxResponse", "HttpxTransport"]

# A chain that keeps yielding buffered data without ever reaching an await is drained this
# far before falling back to closing only its outer generator.
_MAX_DRAIN_STEPS = 10_000

_READING = 0
_COMPLETE = 1
_ABANDONED = 2


class HttpxResponse:
    """A response from :class:`HttpxTransport` (implements :class:`~.base.HotResponse`)."""

    __slots__ = ("_decoder", "_iterator", "_response", "_started", "_state", "headers", "status")

    def __init__(self, response: httpx.Response) -> None:
        self.status = response.status_code
        headers: dict[str, str] = {}
        for name, value in response.headers.multi_items():
            old = headers.get(name)
            headers[name] = value if old is None else f"{old}, {value}"
        self.headers = headers
        self._response = response
        self._iterator: AsyncIterator[bytes] | None = None
        self._state = _READING
        self._started = False
        self._decoder = decompressor_for(headers.get("content-encoding"))

    def __repr__(self) -> str:
        return f"<HttpxResponse status={self.status}>"

    async def read_some(self) -> bytes:
        """The next piece of the body (decompressed); ``b""`` once it is complete.

        An exception (including a cancellation) ends the response, as :meth:`aclose` does:
        later calls raise :class:`trio.ClosedResourceError` rather than pretend the body ended.

        Raises:
            ReadError: the connection broke before the end of the body.
            RemoteProtocolError: malformed framing or compressed data.
        """
        if self._state != _READING:
            await trio.lowlevel.checkpoint()
            if self._state == _ABANDONED:
                raise trio.ClosedResourceError("the response was closed before its end")
            return b""
        iterator = self._iterator
        if iterator is None:
            stream = cast("httpx.AsyncByteStream", self._response.stream)
            iterator = self._iterator = stream.__aiter__()
        decoder = self._decoder
        try:
            while True:
                try:
                    raw = await iterator.__anext__()
                except StopAsyncIteration:
                    tail = decoder.finish() if decoder is not None else b""
                    self._state = _COMPLETE
                    await self._response.aclose()
                    return tail
                if raw:
                    self._started = True
                    data = decoder.decode(raw) if decoder is not None else raw
                    if data:
                        return data
        except httpx.HTTPError as exc:
            self._state = _ABANDONED
            raise _translate(exc, body_started=self._started) from exc
        except BaseException:
            self._state = _ABANDONED
            raise

    async def aclose(self) -> None:
        """Give the connection back to httpx (closing it if the body was not read to its end).

        Idempotent; callers close under a shielded cancel scope, as with any transport.
        """
        iterator, self._iterator = self._iterator, None
        if self._state == _READING:
            self._state = _ABANDONED
        if iterator is not None and self._state == _ABANDONED:
            await _unwind(iterator)
        await self._response.aclose()


class HttpxTransport:
    """The hot-path interface over an ``httpx.AsyncClient`` (implements ``HotTransport``).

    Args:
        client: the client to send through; it stays the caller's to close. When None, one
            is built from the other arguments and closed by :meth:`aclose`.
        max_connections: connection limit of the built client.
        keepalive_expiry: idle seconds before the built client closes a kept-alive connection.
        connect_timeout: the built client's connect timeout (no other timeouts: callers use
            cancel scopes).
        ssl_context: the built client's verification context (default: httpx's).
        trust_env: whether the built client reads proxies and certificates from the
            environment.
        head_timeout: seconds from sending a request until its response head has arrived
            (a given client's own timeouts apply too); None, the default, for no limit.
            Raises :class:`ResponseTimeout` when it passes. httpx does not tell when the
            head's first byte came, so unlike :class:`~.pool.FastTransport`'s this counts
            the server's thinking time too; the runtime leaves it unset and bounds that wait
            with its first-token deadline.
    """

    def __init__(
        self,
        client: httpx.AsyncClient | None = None,
        *,
        max_connections: int = 100,
        keepalive_expiry: float = 5.0,
        connect_timeout: float | None = 10.0,
        ssl_context: ssl.SSLContext | None = None,
        trust_env: bool = True,
        head_timeout: float | None = None,
    ) -> None:
        self._head_timeout = math.inf if head_timeout is None else head_timeout
        self._owned = client is None
        if client is None:
            client = httpx.AsyncClient(
                limits=httpx.Limits(
                    max_connections=max_connections,
                    max_keepalive_connections=max_connections,
                    keepalive_expiry=keepalive_expiry,
                ),
                timeout=httpx.Timeout(None, connect=connect_timeout),
                verify=ssl_context if ssl_context is not None else True,
                trust_env=trust_env,
            )
        self._client = client

    async def send(
        self,
        method: str,
        url: str,
        headers: tuple[tuple[str, str], ...],
        body: bytes,
        *,
        phases: HttpPhases | None = None,
    ) -> HttpxResponse:
        """Send a request and wait for the response head (see ``HotTransport.send``).

        Asks for ``accept-encoding: gzip, deflate`` unless ``headers`` set it, since those are
        the codings :meth:`HttpxResponse.read_some` decodes. httpx does not say when it
        connected or whether it reused a connection, so ``phases`` is only started over:
        its phases stay unknown (None) rather than estimated.
        """
        if phases is not None:
            phases.begin(trio.current_time())
        if not any(name.lower() == "accept-encoding" for name, _ in headers):
            headers = (*headers, ("accept-encoding", "gzip, deflate"))
        client = self._client
        try:
            request = client.build_request(method, url, headers=headers, content=body)
            with trio.move_on_after(self._head_timeout):
                response = await client.send(request, stream=True)
                return HttpxResponse(response)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise _translate(exc, body_started=False) from exc
        raise ResponseTimeout(
            f"the response head did not arrive within {self._head_timeout:g} s (head_timeout)"
        )

    async def aclose(self) -> None:
        """Close the client if this transport built it."""
        if self._owned:
            await self._client.aclose()


async def _unwind(iterator: AsyncIterator[bytes]) -> None:
    """Finish every generator in httpx's stream chain (see the module docstring)."""
    with trio.CancelScope() as scope:
        scope.cancel()
        for _ in range(_MAX_DRAIN_STEPS):
            try:
                await iterator.__anext__()
            except StopAsyncIteration:
                return
            except Exception:
                return  # the chain ended by an error: each generator in it has finished
    if scope.cancelled_caught:
        return
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()


def _translate(exc: httpx.HTTPError | httpx.InvalidURL, *, body_started: bool) -> TransportError:
    """The transport error for an httpx exception: the one place where they are mapped."""
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, (httpx.ConnectTimeout, httpx.PoolTimeout)):
        return ConnectTimeout(f"connecting timed out: {detail}")
    if isinstance(exc, httpx.ProxyError):
        return ProxyError(f"proxy error: {detail}")
    if isinstance(exc, httpx.ConnectError):
        if _caused_by_tls(exc):
            return TLSError(f"TLS failed: {detail}")
        return ConnectError(f"could not connect: {detail}")
    if isinstance(exc, (httpx.UnsupportedProtocol, httpx.InvalidURL)):
        return ConnectError(f"the URL is not usable: {detail}")
    if isinstance(exc, (httpx.DecodingError, httpx.RemoteProtocolError)):
        return RemoteProtocolError(f"malformed response: {detail}")
    if isinstance(exc, (httpx.WriteError, httpx.WriteTimeout)):
        return WriteError(f"the connection broke while sending: {detail}")
    if isinstance(exc, (httpx.ReadError, httpx.ReadTimeout, httpx.CloseError)):
        return ReadError(f"the connection broke while reading: {detail}", body_started=body_started)
    return TransportError(f"the request failed: {detail}")


def _caused_by_tls(exc: BaseException) -> bool:
    ssl = sys.modules.get("ssl")  # if ssl was never imported, no TLS error can have happened
    if ssl is None:
        return False
    seen: BaseException | None = exc
    for _ in range(8):  # httpx -> httpcore -> trio -> ssl is three links
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
