"""FastTransport: sluice's own HTTP/1.1 client over trio, with a keep-alive connection pool.

Built for many concurrent streamed calls at low CPU cost: no task per connection, no timers,
one small object per connection (its stream and a :class:`~.http11.ResponseParser`), and body
bytes handed to the caller in the pieces the network delivered.

Guarantees:

* One pool per origin (scheme, host, port), holding at most ``max_connections`` connections;
  requests beyond that wait in FIFO order for a connection to come free.
* A connection is reused only after its previous response was read to the end and the server
  allowed reuse (HTTP/1.1, no ``connection: close``, no stray bytes after the body). Anything
  else — an error, a cancellation, a response closed before its end — closes the connection.
* A connection idle for longer than ``keepalive_expiry`` seconds is closed, never reused. Idle
  connections are checked when their origin is next used (and closed by :meth:`aclose`); there
  is no background task.
* There is no hidden retry of a request. The one exception is connection management: when a
  *reused* keep-alive connection fails before a single response byte arrives (the write fails,
  or the read meets end-of-file or a reset), the request is sent once more on a new connection.
  Servers close idle keep-alive connections whenever they like, and the request can only have
  raced with that close; a server that read the request and then died without answering looks
  the same, which is the trade-off every keep-alive client makes (aiohttp and urllib3 do the
  same). A fresh connection is never retried.
* Two timeouts: ``connect_timeout`` (TCP, proxy tunnel and TLS handshake) and
  ``head_timeout``: once the first byte of a response head has arrived, the whole head must
  follow within that many seconds, so a server trickling its head a byte at a time cannot hold
  a request forever. It is counted from the first byte, not from the request, because a
  non-streamed LLM reply may rightly take minutes before its head; and a head that arrives
  in one piece (nearly all of them) costs no cancel scope. Callers enforce every other
  deadline (waiting for the reply, idle streams) with cancel scopes; a cancellation at any
  point closes the connection involved and frees its slot, so the pool stays consistent.
* TLS through :class:`trio.SSLStream`, verifying certificates with
  ``ssl.create_default_context()`` unless an ``ssl_context`` is given.
* Proxies: see :mod:`.proxy` (``http://`` proxies only; others raise :class:`ProxyError`).
"""

from __future__ import annotations

import math
import os
from collections import deque
from typing import TYPE_CHECKING, Any

import trio

from ._connect import open_connection, open_tcp_stream
from ._errors import ConnectError, ReadError, ResponseTimeout, TransportError, WriteError
from ._http11 import MAX_HEAD_SIZE, ResponseParser, encode_request_head
from ._proxy import environ_proxies, select_proxy
from ._urls import host_header, split_url

if TYPE_CHECKING:
    import ssl
    from collections.abc import Awaitable, Callable

    from ._http11 import ResponseHead
    from ._phases import HttpPhases
    from ._proxy import Proxy
    from ._statistics import TransportStatistics

__all__ = ["FastResponse", "FastTransport", "TransportStatistics"]

_MAX_INLINE_BODY = 65536  # larger bodies go out in a second write instead of being copied
_MAX_ROUTES = 256
_BODYLESS_METHODS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS", "TRACE", "CONNECT"})


def __getattr__(name: str) -> Any:
    # The statistics' snapshot loads with the first question (sluice.transport._statistics).
    if name == "TransportStatistics":
        from ._statistics import TransportStatistics

        return TransportStatistics
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _StaleConnection(Exception):
    """A reused connection failed before any response byte arrived (see the module docstring)."""


class _Connection:
    __slots__ = ("drained", "fd", "idle_since", "parser", "phases", "raw_fd", "stream")

    def __init__(self, stream: trio.abc.Stream, max_head_size: int) -> None:
        self.stream = stream
        self.parser = ResponseParser(max_head_size=max_head_size)
        self.idle_since = 0.0
        self.fd = _fileno(stream)
        self.raw_fd = stream.socket.fileno() if isinstance(stream, trio.SocketStream) else -1
        """The socket itself when nothing sits between it and us (no TLS), else -1."""
        self.drained = True
        """The last read emptied the socket (or a request was just sent)."""
        self.phases: HttpPhases | None = None
        """The record of the request in flight, when its caller asked for one: the end of
        its body is noted there when the connection is released."""

    def write_now(self, data: bytes) -> bytes:
        """Write what of ``data`` (a request head, and its body when small) a plain TCP
        socket takes at once; what is left for ``send_all`` (all of it on other streams).

        A request meets an empty socket buffer, so that one non-blocking ``write`` nearly
        always takes it all, and the trip through trio's scheduler that ``send_all`` makes is
        skipped (the wait for the reply that follows is the checkpoint). Not a coroutine: the
        usual request is sent without one.

        Raises:
            trio.BrokenResourceError: the connection broke.
        """
        fd = self.raw_fd
        if fd < 0:
            return data
        try:
            sent = os.write(fd, data)
        except BlockingIOError:
            return data
        except OSError as exc:  # EPIPE, ECONNRESET: the server closed the connection
            raise trio.BrokenResourceError(f"the connection broke: {exc}") from exc
        return b"" if sent == len(data) else data[sent:]

    def read_now(self, size: int) -> bytes | None:
        """One read of the plain TCP socket, once it was waited for; None if it had nothing
        after all (it is drained then). A reader of a plain socket waits until it is readable
        and then reads once, in its own frame (see :meth:`FastResponse.read_some` and
        :meth:`FastTransport._head_piece`): trio's ``receive_some`` tries the read first,
        which on a socket the previous read drained is a failed system call per piece (one
        wasted call per chunk on paced streams, where every read drains the socket). TLS and
        in-memory streams go through ``receive_some``.

        Raises:
            trio.BrokenResourceError: the connection broke.
        """
        try:
            data = os.read(self.raw_fd, size)
        except BlockingIOError:
            self.drained = True
            return None
        except OSError as exc:
            raise trio.BrokenResourceError(f"the connection broke: {exc}") from exc
        self.drained = len(data) < size
        return data


class _Pool:
    """The connections to one origin."""

    __slots__ = (
        "busy",
        "extra_headers",
        "host",
        "host_header",
        "idle",
        "port",
        "proxy",
        "slots",
        "tls",
    )

    def __init__(
        self, scheme: str, host: str, port: int, proxy: Proxy | None, max_connections: int
    ) -> None:
        self.host = host
        self.port = port
        self.tls = scheme == "https"
        self.host_header = host_header(scheme, host, port)
        self.proxy = proxy
        # Credentials for a proxy that sees plain http requests travel with each request.
        self.extra_headers: tuple[tuple[str, str], ...] = ()
        if proxy is not None and proxy.authorization and not self.tls:
            self.extra_headers = (("proxy-authorization", proxy.authorization),)
        # One token per connection a request may hold; trio's Semaphore hands tokens to
        # waiters in FIFO order and never to a newcomer while someone waits.
        self.slots = trio.Semaphore(max_connections)
        self.idle: deque[_Connection] = deque()  # oldest on the left
        self.busy = 0


class FastResponse:
    """A response whose head has arrived (implements :class:`~.base.HotResponse`)."""

    __slots__ = ("_abandoned", "_conn", "_pool", "_transport", "headers", "status")

    def __init__(
        self, transport: FastTransport, pool: _Pool, conn: _Connection, head: ResponseHead
    ) -> None:
        self.status = head.status
        self.headers = head.headers
        self._transport = transport
        self._pool = pool
        self._conn: _Connection | None = conn
        self._abandoned = False

    def __repr__(self) -> str:
        return f"<FastResponse status={self.status}>"

    @property
    def holds_connection(self) -> bool:
        """Whether :meth:`aclose` has anything to do: False once the body was read to its end
        (the connection went back to the pool then) or the response was given up."""
        return self._conn is not None

    async def read_some(self) -> bytes:
        """The next piece of the body (de-chunked, decompressed); ``b""`` once it is complete.

        The connection goes back to the pool as soon as the end of the body is parsed. An
        exception (including a cancellation) closes the connection and ends the response:
        later calls raise :class:`trio.ClosedResourceError`.

        Raises:
            ReadError: the connection broke or closed before the end of the body.
            RemoteProtocolError: the body's framing or compression is malformed.
        """
        conn = self._conn
        if conn is None:
            # No checkpoint: the read that completed the body waited already, and a reader's
            # loop ends here (a checkpoint would cost every response a trip through trio's
            # scheduler for nothing).
            if self._abandoned:
                raise trio.ClosedResourceError("the response was closed before its end")
            return b""
        parser = conn.parser
        size = self._transport._receive_size
        fd = conn.raw_fd
        try:
            while True:
                data = parser.read_body()
                if parser.done:
                    break
                if data:
                    return data
                # The plain socket read in this frame (see _Connection.read_now): one
                # coroutine frame less per open stream while it waits, and per read.
                chunk: bytes | bytearray | None
                if fd < 0:
                    chunk = await conn.stream.receive_some(size)
                else:
                    if conn.drained:
                        await trio.lowlevel.wait_readable(fd)
                    else:
                        await trio.lowlevel.checkpoint()
                    chunk = conn.read_now(size)
                    if chunk is None:
                        continue
                if chunk:
                    parser.feed(chunk)
                else:
                    parser.feed_eof()
        except BaseException as exc:
            self._conn = None
            self._abandoned = True
            await self._transport._drop(self._pool, conn)
            if isinstance(exc, (trio.BrokenResourceError, trio.ClosedResourceError)):
                raise ReadError(
                    "the connection broke while reading the response body",
                    body_started=parser.body_started,
                ) from exc
            raise
        self._conn = None
        await self._transport._release(self._pool, conn)
        return data

    async def aclose(self) -> None:
        """Release the connection: to the pool if the body was read to its end, else closed.

        A body that has fully arrived but was not read still lets the connection be reused.
        Idempotent, and safe under cancellation (it never waits for the network).
        """
        conn = self._conn
        if conn is None:
            return
        self._conn = None
        parser = conn.parser
        try:
            while not parser.done and parser.read_body():
                pass
        except TransportError:
            pass
        if parser.done:
            await self._transport._release(self._pool, conn)
        else:
            self._abandoned = True
            await self._transport._drop(self._pool, conn)


class FastTransport:
    """sluice's trio-native HTTP/1.1 transport (implements :class:`~.base.HotTransport`).

    Args:
        max_connections: the most connections open to one origin at once.
        keepalive_expiry: seconds an idle connection may wait for reuse before it is closed.
        connect_timeout: seconds allowed to open a connection (including the proxy tunnel and
            the TLS handshake); None for no limit. Raises :class:`ConnectTimeout` when it
            passes.
        ssl_context: verifies servers for ``https``; default ``ssl.create_default_context()``.
        proxy: an ``http://`` proxy URL for every request; None to read the environment
            (``https_proxy``, ``http_proxy``, ``all_proxy``, ``no_proxy``) when
            ``trust_env`` is true.
        trust_env: read proxy settings from the environment (once, here).
        open_stream: opens a byte stream to ``(host, port)``; default
            :func:`trio.open_tcp_stream`. Tests pass in-memory streams.
        receive_size: the most bytes asked of the stream per read.
        max_head_size: the largest response head accepted.
        head_timeout: seconds from the first byte of a response head until the whole head
            has arrived; None for no limit. Raises :class:`ResponseTimeout` when it passes.
    """

    def __init__(
        self,
        *,
        max_connections: int = 100,
        keepalive_expiry: float = 5.0,
        connect_timeout: float | None = 10.0,
        ssl_context: ssl.SSLContext | None = None,
        proxy: str | None = None,
        trust_env: bool = True,
        open_stream: Callable[[str, int], Awaitable[trio.abc.Stream]] | None = None,
        receive_size: int = 65536,
        max_head_size: int = MAX_HEAD_SIZE,
        head_timeout: float | None = 60.0,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if head_timeout is not None and not head_timeout > 0:
            raise ValueError("head_timeout must be above 0, or None")
        self._head_timeout = head_timeout
        self._max_connections = max_connections
        self._keepalive_expiry = keepalive_expiry
        self._connect_timeout = math.inf if connect_timeout is None else connect_timeout
        self._ssl_context = ssl_context
        self._proxy = proxy
        self._proxy_settings = environ_proxies(os.environ) if trust_env else {}
        self._open_stream = open_stream if open_stream is not None else open_tcp_stream
        self._receive_size = receive_size
        self._max_head_size = max_head_size
        self._pools: dict[tuple[str, str, int], _Pool] = {}
        self._routes: dict[str, tuple[_Pool, str]] = {}
        self._closed = False

    async def __aenter__(self) -> FastTransport:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def statistics(self) -> TransportStatistics:
        """Connections open, idle and in use, and requests waiting, over every origin."""
        from ._statistics import TransportStatistics  # loaded by the first question

        idle = busy = waiters = 0
        for pool in self._pools.values():
            idle += len(pool.idle)
            busy += pool.busy
            waiters += pool.slots.statistics().tasks_waiting
        return TransportStatistics(connections=idle + busy, idle=idle, in_use=busy, waiters=waiters)

    async def send(
        self,
        method: str,
        url: str,
        headers: tuple[tuple[str, str], ...],
        body: bytes,
        *,
        phases: HttpPhases | None = None,
    ) -> FastResponse:
        """Send a request and wait for the head of its final response.

        The caller must :meth:`FastResponse.aclose` the response (or read it to the end).
        Interim 1xx responses are skipped; a response without a body (HEAD, 204, 304) has
        already given its connection back when this returns. With ``phases``, the moments
        of the exchange are noted there as they happen (:class:`~.phases.HttpPhases`): the
        connection (and whether it was reused), the request sent, the head parsed, and the
        end of the body once it is read; without, none of that work is done.

        Raises:
            ConnectError, TLSError, ProxyError, ConnectTimeout: no connection could be opened
                (an unusable URL is a ConnectError too).
            WriteError: the connection broke while sending.
            ReadError: the connection broke or closed before the response head.
            ResponseTimeout: the response head was not complete ``head_timeout`` seconds
                after its first byte.
            RemoteProtocolError: the response head is malformed.
            ValueError: a header name or value cannot be sent (CR, LF or NUL in it).
            trio.ClosedResourceError: :meth:`aclose` was called.
        """
        if self._closed:
            raise trio.ClosedResourceError("the transport is closed")
        if phases is not None:
            phases.begin(trio.current_time())
        route = self._routes.get(url)
        if route is None:
            route = self._route(url)
        pool, target = route
        data, rest = _request_bytes(pool, method, target, headers, body)
        slots = pool.slots
        if slots.value:
            slots.acquire_nowait()  # the common case skips acquire()'s extra task switch
        else:
            await slots.acquire()
        try:
            if self._closed:
                raise trio.ClosedResourceError("the transport is closed")
            if phases is not None:
                phases.connecting = trio.current_time()
            conn, reused = await self._checkout(pool)
            if phases is not None:
                phases.connected = trio.current_time()
                phases.reused = reused
                conn.phases = phases
            # The exchange awaited from here, not from a method of its own: a frame less that
            # each request holds while it waits for its head.
            stale = False
            try:
                response_head = await self._exchange(conn, method, data, rest, reused)
            except _StaleConnection:
                stale = True  # handled below, outside the except clause
            except BaseException:
                await self._close(pool, conn)
                raise
            if stale:
                conn, response_head = await self._resend(pool, conn, method, data, rest, phases)
        except BaseException:
            slots.release()
            raise
        response = FastResponse(self, pool, conn, response_head)
        if conn.parser.done:
            response._conn = None
            await self._release(pool, conn)
        return response

    @property
    def keepalive_expiry(self) -> float:
        return self._keepalive_expiry

    async def sweep(self) -> None:
        """Close the connections that have sat idle longer than ``keepalive_expiry``.

        Otherwise an expired connection is closed only when its origin is next used, and a
        runtime that bursts and then idles would keep thousands of sockets open (seen with
        10,000 streams in benchmarks/open_streams.py). The ProviderActor calls this every
        ``keepalive_expiry`` seconds.
        """
        now = trio.current_time()
        # A copy: closing awaits, and a send meanwhile may add an origin (a moved base URL).
        for pool in list(self._pools.values()):
            idle = pool.idle
            while idle and now - idle[0].idle_since > self._keepalive_expiry:
                await trio.aclose_forcefully(idle.popleft().stream)

    async def aclose(self) -> None:
        """Close every idle connection; connections in use close when their response ends."""
        self._closed = True
        for pool in list(self._pools.values()):  # a copy, as in sweep
            while pool.idle:
                await trio.aclose_forcefully(pool.idle.pop().stream)

    # -- routing ----------------------------------------------------------------------------

    def _route(self, url: str) -> tuple[_Pool, str]:
        try:
            scheme, host, port, target = split_url(url)
        except ValueError as exc:
            raise ConnectError(f"the URL is not usable: {exc}") from None
        key = (scheme, host, port)
        pool = self._pools.get(key)
        if pool is None:
            proxy = select_proxy(
                scheme, host, port, explicit=self._proxy, settings=self._proxy_settings
            )
            pool = _Pool(scheme, host, port, proxy, self._max_connections)
            self._pools[key] = pool
        if pool.proxy is not None and not pool.tls:
            target = f"http://{pool.host_header}{target}"  # absolute-form for the proxy
        if len(self._routes) >= _MAX_ROUTES:
            self._routes.clear()
        self._routes[url] = (pool, target)
        return pool, target

    # -- connections ------------------------------------------------------------------------

    async def _resend(
        self,
        pool: _Pool,
        stale: _Connection,
        method: str,
        data: bytes,
        rest: bytes,
        phases: HttpPhases | None,
    ) -> tuple[_Connection, ResponseHead]:
        """The request once more, on a new connection: the reused one, ``stale``, had been
        closed by the server before any byte of a response (see the module docstring for
        why sending once more on a new connection is connection management, not a retry)."""
        await self._close(pool, stale)
        conn = await self._open(pool)
        if phases is not None:
            phases.connected = trio.current_time()
            phases.reused = False
            conn.phases = phases
        try:
            return conn, await self._exchange(conn, method, data, rest, False)
        except BaseException:
            await self._close(pool, conn)
            raise

    async def _exchange(
        self, conn: _Connection, method: str, data: bytes, rest: bytes, reused: bool
    ) -> ResponseHead:
        parser = conn.parser
        parser.start(method)
        stream = conn.stream
        try:
            left = conn.write_now(data)
            if left:
                await stream.send_all(left)
            if rest:
                await stream.send_all(rest)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            if reused:
                raise _StaleConnection from exc
            raise WriteError("the connection broke while sending the request") from exc
        conn.drained = True  # the reply takes a round trip at least: wait before reading
        phases = conn.phases
        if phases is not None:
            phases.sent = trio.current_time()
        received = False
        begun = math.inf  # when the first byte of the head being read came (inf: none yet)
        timeout = self._head_timeout
        while True:
            head = parser.read_head()
            if head is not None:
                if phases is not None:
                    phases.headers = trio.current_time()
                return head
            if timeout is not None and parser.buffered:
                # Part of a head is here and the rest is not: from now on the head must be
                # complete within head_timeout of its first byte. A head that comes in one
                # piece, the usual case, never gets this far and costs no cancel scope.
                if begun == math.inf:
                    begun = trio.current_time()
                with trio.move_on_at(begun + timeout):
                    received |= await self._head_piece(conn, reused, received)
                    continue
                raise ResponseTimeout(
                    f"the response head was not complete {timeout:g} s after its first byte "
                    "(head_timeout)"
                )
            begun = math.inf  # nothing of a head yet (or an interim response just ended)
            received |= await self._head_piece(conn, reused, received)

    async def _head_piece(self, conn: _Connection, reused: bool, received: bool) -> bool:
        """Read the next piece of a response head into the parser; True if it held bytes.

        Raises:
            _StaleConnection: a reused connection failed before any response byte.
            ReadError: the connection broke.
        """
        fd = conn.raw_fd
        chunk: bytes | bytearray | None
        try:
            # Written out (see _Connection.read_now): one coroutine less per response head.
            if fd < 0:
                chunk = await conn.stream.receive_some(self._receive_size)
            else:
                while True:
                    if conn.drained:
                        await trio.lowlevel.wait_readable(fd)
                    else:
                        await trio.lowlevel.checkpoint()
                    chunk = conn.read_now(self._receive_size)
                    if chunk is not None:
                        break
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            if reused and not received:
                raise _StaleConnection from exc
            raise ReadError("the connection broke before the response head") from exc
        if chunk:
            conn.parser.feed(chunk)
            return True
        if reused and not received:
            raise _StaleConnection
        conn.parser.feed_eof()
        return False

    async def _checkout(self, pool: _Pool) -> tuple[_Connection, bool]:
        """A connection for one request: the most recently used idle one, else a new one."""
        idle = pool.idle
        if idle:
            now = trio.current_time()
            expiry = self._keepalive_expiry
            while idle and now - idle[0].idle_since > expiry:
                await trio.aclose_forcefully(idle.popleft().stream)
            while idle:
                conn = idle.pop()
                # Servers close idle connections after seconds, not milliseconds: skip the
                # poll() system call for a connection that was busy a moment ago (a stale one
                # still gets its single reconnect when the first read finds end-of-file).
                if (
                    now - conn.idle_since > _CHECK_IDLE_AFTER
                    and conn.fd >= 0
                    and _readable(conn.fd)
                ):
                    # End-of-file (or bytes nobody asked for) arrived while it sat idle.
                    await trio.aclose_forcefully(conn.stream)
                    continue
                pool.busy += 1
                return conn, True
        return await self._open(pool), False

    async def _open(self, pool: _Pool) -> _Connection:
        stream = await open_connection(
            pool.host,
            pool.port,
            tls=pool.tls,
            proxy=pool.proxy,
            ssl_context=self._ssl_context,
            open_stream=self._open_stream,
            connect_timeout=self._connect_timeout,
        )
        pool.busy += 1
        return _Connection(stream, self._max_head_size)

    async def _release(self, pool: _Pool, conn: _Connection) -> None:
        """A response ended: pool its connection if reusable, else close it; free the slot."""
        pool.busy -= 1
        phases = conn.phases
        if phases is not None:
            phases.done = trio.current_time()
            conn.phases = None
        try:
            if conn.parser.reusable and not self._closed:
                conn.idle_since = trio.current_time()
                pool.idle.append(conn)
            else:
                await trio.aclose_forcefully(conn.stream)
        finally:
            pool.slots.release()

    async def _drop(self, pool: _Pool, conn: _Connection) -> None:
        """A response was abandoned or failed: close its connection and free the slot."""
        try:
            await self._close(pool, conn)
        finally:
            pool.slots.release()

    async def _close(self, pool: _Pool, conn: _Connection) -> None:
        pool.busy -= 1
        await trio.aclose_forcefully(conn.stream)


def _request_bytes(
    pool: _Pool, method: str, target: str, headers: tuple[tuple[str, str], ...], body: bytes
) -> tuple[bytes, bytes]:
    """A request's bytes for ``pool``: the head with the body when it is small (one write),
    else the head and the body apart (the body not copied)."""
    if pool.extra_headers:
        headers = headers + pool.extra_headers
    length = len(body)
    head = encode_request_head(
        method,
        target,
        pool.host_header,
        headers,
        length if length or method not in _BODYLESS_METHODS else None,
    )
    if length <= _MAX_INLINE_BODY:
        return head + body, b""
    return head, body


_CHECK_IDLE_AFTER = 1.0
"""Seconds idle after which a pooled connection is checked for end-of-file before reuse."""


def _fileno(stream: trio.abc.Stream) -> int:
    """The socket under ``stream``, to check idle connections for end-of-file; -1 if none."""
    if isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    if isinstance(stream, trio.SocketStream):
        return stream.socket.fileno()
    return -1


def _readable(fd: int) -> bool:
    """Whether the idle socket ``fd`` has something to read (end-of-file, most likely)."""
    import select

    # poll, not select: select cannot take descriptors above FD_SETSIZE (1024), and a pool
    # serving thousands of streams has plenty of those.
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))
