"""The gateway's HTTP/1.1 server on trio, hardened against slow and idle clients.

Why our own server rather than hypercorn: the gateway's hot path is one small JSON request in
and a stream of small SSE chunks out, and every microsecond spent framing them is added
latency. An ASGI server adds a hop through the ASGI interface and h11's per-event objects to
every request and chunk; this loop does neither, and ``benchmarks/gateway_server.py`` measures
it against hypercorn's trio worker on the same streaming app (benchmarks/README.md has the
figures). Request heads are parsed by :mod:`.request_head`, chunked bodies by :mod:`.chunked`;
responses are framed here, the head written together with the first chunk, each write tried
on the socket at once (see :meth:`Responder._send`). While a response is produced the
connection's reader watches the client, so a client that goes away cancels its upstream call
at once (an ASGI server tells the app only when it next writes).

Every response carries ``x-request-id``: the client's own when it sent a sane one, else one
made here. A streamed response to an HTTP/1.0 client is not chunked (HTTP/1.0 has no chunks):
its body runs to the end of the connection. A client that sends ``expect: 100-continue`` gets
``100 Continue`` only once its head is accepted: its length by the limits, the rest by the
server's ``vet`` (the gateway checks the API key there), so a refused client never sends its
body.

Nothing a client sends can end the server: each connection runs behind one barrier that turns
an unexpected exception (a bug) into a 500 (or a closed connection, once a response has
started), a log line with its traceback and a count in :attr:`Server.internal_errors`; the
listener never sees it.

Limits (:class:`ServerLimits`): the size of a request head and body; a header timeout that
runs from a request's first byte to the end of its head (a client sending one byte a second
is cut off when it passes); a body timeout; a keep-alive idle timeout between requests; a cap
on requests per connection; a cap on open connections (past it, new ones get a 503 and are
closed); and a graceful drain (:meth:`Server.drain`): stop accepting, close idle connections,
let requests in flight finish (up to ``drain_timeout``) with ``connection: close``.
"""

from __future__ import annotations

import contextlib
import http
import logging
import math
import os
import secrets
from typing import TYPE_CHECKING

import attrs
import trio
from attrs.validators import ge, gt

from .._record import Record
from .chunked import ChunkedBody
from .request_head import Head, HeadError, parse_head

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    Refusal = tuple[int, list[tuple[bytes, bytes]], bytes]
    """``(status, headers, body)`` of a response that refuses a request."""

log = logging.getLogger("sluice._gateway")

__all__ = ["Request", "Responder", "Server", "ServerLimits", "serve_connection"]

_RECEIVE_SIZE = 65536
_STATUS_LINES = {
    s.value: b"HTTP/1.1 %d %s\r\n" % (s.value, s.phrase.encode()) for s in http.HTTPStatus
}
_CHUNKED = b"transfer-encoding: chunked\r\n"
_CLOSE = b"connection: close\r\n"
_LAST_CHUNK = b"0\r\n\r\n"
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


@attrs.frozen(kw_only=True, repr=False)
class ServerLimits(Record):
    """What one client may hold or send; every limit applies per connection or request."""

    max_header_bytes: int = attrs.field(default=16384, validator=ge(1024))
    """Request line plus headers; a longer head gets 431."""
    max_body_bytes: int = attrs.field(default=16 * 1024 * 1024, validator=ge(1))
    """A larger body gets 413 (images and documents travel inline, hence the size)."""
    header_timeout: float = attrs.field(default=10.0, validator=gt(0))
    """Seconds from a request's first byte to the end of its head."""
    body_timeout: float = attrs.field(default=30.0, validator=gt(0))
    """Seconds from the end of the head to the end of the body."""
    keepalive_timeout: float = attrs.field(default=75.0, validator=gt(0))
    """Seconds a connection may sit idle before (or between) requests."""
    max_requests_per_connection: int = attrs.field(default=10000, validator=ge(1))
    max_connections: int = attrs.field(default=10000, validator=ge(1))
    """Open connections at most; past it a new connection gets 503 and is closed."""
    write_timeout: float = attrs.field(default=60.0, validator=gt(0))
    """Seconds a response write may wait for a client that does not read; then the
    connection (and its upstream call) ends."""
    drain_timeout: float = attrs.field(default=30.0, validator=ge(0))
    """On drain, seconds requests in flight get to finish before they are cancelled."""


@attrs.frozen(repr=False)
class Request(Record):
    """One parsed request. Header names are lower-case."""

    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    request_id: bytes = b""
    """The ``x-request-id`` its response carries (the client's, or one the server made)."""
    http_version: bytes = b"1.1"

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    @property
    def path(self) -> bytes:
        return self.target.partition(b"?")[0]


class Responder:
    """Writes one response: :meth:`send` a whole one, or :meth:`start`, :meth:`write` and
    :meth:`finish` a stream. The head goes out with the first body bytes, ``x-request-id``
    in it.

    A stream is chunked, except with ``chunked=False`` (an HTTP/1.0 client): then its body
    is sent as it is and ends with the connection (``connection: close``)."""

    __slots__ = (
        "_chunked",
        "_fd",
        "_head",
        "_request_id",
        "_stream",
        "_write_timeout",
        "keep_alive",
        "started",
        "status",
    )

    def __init__(
        self,
        stream: trio.abc.Stream,
        keep_alive: bool,
        write_timeout: float = math.inf,
        fd: int = -1,
        *,
        request_id: bytes = b"",
        chunked: bool = True,
    ) -> None:
        self._stream = stream
        self._request_id = request_id
        self._chunked = chunked
        self._fd = fd
        """The socket under ``stream`` (-1: none): writes try it directly first."""
        self._write_timeout = write_timeout
        self.keep_alive = keep_alive
        """Whether the connection may carry another request after this one."""
        self.started = False
        """True once any byte of the response was handed to the stream."""
        self.status = 0
        """The response's status once :meth:`send` or :meth:`start` chose it (0 before)."""
        self._head: bytes | None = None

    def _head_bytes(self, status: int, headers: list[tuple[bytes, bytes]], extra: bytes) -> bytes:
        parts = [_STATUS_LINES.get(status) or b"HTTP/1.1 %d \r\n" % status]
        parts.extend(b"%s: %s\r\n" % pair for pair in headers)
        if self._request_id:
            parts.append(b"x-request-id: %s\r\n" % self._request_id)
        parts.append(extra)
        if not self.keep_alive:
            parts.append(_CLOSE)
        parts.append(b"\r\n")
        return b"".join(parts)

    async def send(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """Send a complete response with ``content-length``."""
        head = self._head_bytes(status, headers, b"content-length: %d\r\n" % len(body))
        self.started = True
        self.status = status
        await self._send(head + body)

    def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        """Begin a streamed response; the head is sent with the first :meth:`write`."""
        if self._chunked:
            self._head = self._head_bytes(status, headers, _CHUNKED)
        else:
            self.keep_alive = False  # the end of the connection ends the body
            self._head = self._head_bytes(status, headers, b"")
        self.status = status

    async def write(self, data: bytes) -> None:
        """Send ``data`` as one chunk (with the head, the first time)."""
        if not data:
            return
        chunk = b"%x\r\n%s\r\n" % (len(data), data) if self._chunked else data
        head = self._head
        if head is not None:
            self._head = None
            chunk = head + chunk
        self.started = True
        await self._send(chunk)

    async def finish(self, data: bytes = b"") -> None:
        """Send ``data`` (if any) and the last chunk (unchunked: nothing more, and the
        connection closes)."""
        if not self._chunked:
            out = data
        else:
            out = b"%x\r\n%s\r\n" % (len(data), data) + _LAST_CHUNK if data else _LAST_CHUNK
        head = self._head
        if head is not None:
            self._head = None
            out = head + out
        self.started = True
        await self._send(out)

    async def _send(self, data: bytes) -> None:
        """Send ``data``; a client that takes none of it for ``write_timeout`` seconds is
        treated as gone (:class:`trio.BrokenResourceError`), so it cannot hold its upstream
        call and connection by not reading.

        On a socket, one non-blocking ``write`` first: a client that reads keeps room in the
        socket's buffer, so that write usually takes everything, and the timeout scope, the
        stream's bookkeeping and a trip through trio's scheduler (a large part of what a write
        through the stream costs) are skipped. What it leaves goes the usual way. The handler's
        other awaits (the runtime's event batches) are its checkpoints.
        """
        fd = self._fd
        if fd >= 0:
            try:
                sent = os.write(fd, data)
            except BlockingIOError:
                sent = 0
            except OSError as exc:  # EPIPE, ECONNRESET: the client is gone
                raise trio.BrokenResourceError(f"the client went away: {exc}") from None
            if sent == len(data):
                return
            data = data[sent:]
        with trio.move_on_after(self._write_timeout) as scope:
            await self._stream.send_all(data)
        if scope.cancelled_caught:
            raise trio.BrokenResourceError("the client stopped reading")


class _Rejected(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Server:
    """Connections of one listening gateway: the cap, the drain, and their statistics."""

    def __init__(
        self,
        handler: Callable[[Request, Responder], Awaitable[None]],
        limits: ServerLimits | None = None,
        *,
        reject: Callable[[int, str], tuple[list[tuple[bytes, bytes]], bytes]] | None = None,
        vet: Callable[[Request], Refusal | None] | None = None,
    ) -> None:
        """``handler`` answers each request; ``reject(status, message)`` gives the headers
        and body of the server's own refusals (plain text by default); ``vet(request)``,
        asked about a request whose client waits for ``100 Continue`` (its ``body`` still
        empty), returns a refusal to send instead, or None to let the body come."""
        self.handler = handler
        self.limits = limits if limits is not None else ServerLimits()
        self._reject_body = reject or _plain_reject
        self.vet = vet
        self.internal_errors = 0
        """Unexpected exceptions (bugs) caught per request or connection, each logged with
        its traceback."""
        self._id_prefix = secrets.token_hex(6).encode()
        self._ids = 0
        self.connections = 0
        """Connections open now."""
        self.active = 0
        """Requests being answered now."""
        self.draining = False
        self.refused: dict[int, int] = {}
        """Per status, requests (or connections, past the cap) refused before reaching the
        handler: malformed, too large, too slow, over the connection cap."""
        self._idle: set[trio.CancelScope] = set()
        self._done = trio.Event()
        self._done.set()

    async def serve_listener(
        self,
        listener: trio.SocketListener,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept connections from ``listener`` until :meth:`drain` or cancellation; return
        once every connection has ended."""
        try:
            async with trio.open_nursery() as nursery:
                task_status.started()
                while not self.draining:
                    try:
                        stream = await listener.accept()
                    except OSError as exc:  # EMFILE and friends: back off, keep serving
                        if exc.errno is None:
                            raise
                        await trio.sleep(0.05)
                        continue
                    except (trio.ClosedResourceError, trio.BrokenResourceError):
                        break
                    nursery.start_soon(self.serve_connection, stream)
        finally:
            with trio.CancelScope(shield=True):
                await listener.aclose()

    async def serve_connection(self, stream: trio.abc.Stream) -> None:
        """Serve requests on ``stream`` until either side ends it; closes it on return."""
        if self.connections >= self.limits.max_connections or self.draining:
            await self._refuse(stream)
            return
        self.connections += 1
        if self.connections == 1:
            self._done = trio.Event()
        connection = _Connection(self, stream)
        try:
            await connection.run()
        except Exception:  # the barrier: a bug ends this connection, never the server
            self.internal_errors += 1
            log.exception("the gateway's HTTP server failed on a connection")
            responder = connection.responder
            if responder is None or not responder.started:
                with contextlib.suppress(Exception):
                    await connection.send_error(500, "internal error in the gateway", False)
        finally:
            self.connections -= 1
            if self.connections == 0:
                self._done.set()
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)

    def new_request_id(self) -> bytes:
        """A request id unique to this server (a random prefix and a count): no per-request
        randomness to pay for."""
        self._ids += 1
        return b"%s-%x" % (self._id_prefix, self._ids)

    async def _refuse(self, stream: trio.abc.Stream) -> None:
        self.refused[503] = self.refused.get(503, 0) + 1
        headers, body = self._reject_body(503, "the gateway is at its connection limit")
        await _send_closing(stream, 503, headers, body, self.new_request_id())
        await trio.aclose_forcefully(stream)

    async def drain(self) -> None:
        """Stop taking requests: idle connections close now, busy ones after their response.

        Returns when every connection has ended or ``drain_timeout`` has passed (the caller
        then cancels what is left).
        """
        self.draining = True
        for scope in list(self._idle):
            scope.cancel()
        with trio.move_on_after(self.limits.drain_timeout):
            await self._done.wait()


def _plain_reject(status: int, message: str) -> tuple[list[tuple[bytes, bytes]], bytes]:
    return [(b"content-type", b"text/plain")], message.encode() + b"\n"


async def _send_closing(
    stream: trio.abc.Stream,
    status: int,
    headers: list[tuple[bytes, bytes]],
    body: bytes,
    request_id: bytes,
) -> None:
    """Send a whole response with ``connection: close``; a client that does not take it
    within a second, or is gone, is let go."""
    head = (_STATUS_LINES.get(status) or b"HTTP/1.1 %d \r\n" % status) + b"".join(
        b"%s: %s\r\n" % p for p in headers
    )
    head += b"x-request-id: %s\r\ncontent-length: %d\r\n" % (request_id, len(body))
    with trio.move_on_after(1):
        try:
            await stream.send_all(head + _CLOSE + b"\r\n" + body)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


class _Connection:
    """One connection's request loop, and the one task that reads the client.

    Bytes read from the client collect in ``buffer``; a request is taken from its front (the
    rest, a pipelined request, stays there). Heads are parsed by :func:`parse_head`, chunked
    bodies by :class:`ChunkedBody`.

    Only :meth:`_read` receives from the stream, for the connection's whole life: it reads while
    the request loop waits for bytes, and while a response is produced with nothing buffered,
    which is how a client that goes away mid-response is noticed (its end cancels the
    response, and so the upstream call). Once bytes of a pipelined request are buffered during
    a response it stops reading until the loop takes them, so buffering stays bounded. One
    reader for the connection rather than a watcher task started and cancelled per request:
    that would cost a task, a nursery and a cancellation per request, a share of the gateway's
    CPU that ``benchmarks/gateway_server.py`` shows.
    """

    def __init__(self, server: Server, stream: trio.abc.Stream) -> None:
        self.server = server
        self.stream = stream
        self.limits = server.limits
        self.buffer = b""
        self.served = 0
        self.fd = stream.socket.fileno() if isinstance(stream, trio.SocketStream) else -1
        """The socket's descriptor, for :class:`Responder`'s direct writes (-1: not a socket)."""
        self._eof = False
        """The client closed (or broke) its side; nothing more will arrive."""
        self._gone = False
        """The client went away while a response was being produced."""
        self._responding: trio.CancelScope | None = None
        self._waiting = False
        """The request loop waits in :meth:`_take` for bytes."""
        self._arrived = trio.Event()
        self._room: trio.Event | None = None
        """Set by :meth:`_take` to wake the reader paused on a full buffer."""
        self.request_id = b""
        """The id of the request being read or answered (its refusals carry it too)."""
        self.responder: Responder | None = None
        """The response being written, until it is done (the barrier asks if it started)."""

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._read)
            try:
                await self._serve()
            finally:
                nursery.cancel_scope.cancel()

    async def _serve(self) -> None:
        try:
            while True:
                request = await self._read_request()
                if request is None:
                    return
                self.served += 1
                keep_alive = (
                    request[1]
                    and not self.server.draining
                    and self.served < self.limits.max_requests_per_connection
                )
                if not await self._answer(request[0], keep_alive) or not keep_alive:
                    return
                self.responder = None
        except _Rejected as exc:
            await self.send_error(exc.status, str(exc))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def _read(self) -> None:
        """Read the client until it closes (see the class docstring)."""
        stream = self.stream
        while True:
            while self.buffer and not self._waiting:  # a pipelined request waits its turn
                room = self._room = trio.Event()
                await room.wait()
            try:
                data = await stream.receive_some(_RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                self._eof = True
                scope = self._responding
                if scope is not None:
                    self._gone = True
                    scope.cancel()
                self._arrived.set()
                return
            self.buffer += data
            if self._waiting:
                self._arrived.set()

    async def _take(self) -> bytes:
        """The bytes read since the last take, waiting for some; b"" once the client closed.
        Cancellable (the callers' timeouts)."""
        if not self.buffer and not self._eof:
            self._arrived = trio.Event()
            self._waiting = True
            room = self._room
            if room is not None:
                room.set()
            try:
                await self._arrived.wait()
            finally:
                self._waiting = False
        data, self.buffer = self.buffer, b""
        room = self._room
        if room is not None:
            self._room = None
            room.set()
        return data

    async def _receive(self, deadline: float, status: int, message: str) -> bytes:
        with trio.move_on_at(deadline) as scope:
            data = await self._take()
        if scope.cancelled_caught:
            raise _Rejected(status, message)
        return data

    async def _read_request(self) -> tuple[Request, bool] | None:
        """The next request and whether its client allows keep-alive; None when the client
        closed (or idled out, or the server drains) between requests."""
        limits = self.limits
        self.request_id = b""
        buf, self.buffer = self.buffer, b""
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if not buf:
                # Idle: wait for the first byte, cancellable by a drain.
                if self.server.draining:
                    return None
                scope = trio.move_on_after(limits.keepalive_timeout)
                self.server._idle.add(scope)
                try:
                    with scope:
                        buf = await self._take()
                finally:
                    self.server._idle.discard(scope)
                if scope.cancelled_caught or not buf:
                    return None
            head_deadline = trio.current_time() + limits.header_timeout
            while (end := buf.find(b"\r\n\r\n")) < 0:
                if len(buf) > limits.max_header_bytes:
                    raise _Rejected(431, f"request head over {limits.max_header_bytes} bytes")
                data = await self._receive(head_deadline, 408, "request head took too long")
                if not data:
                    return None
                buf += data
        if end > limits.max_header_bytes:
            raise _Rejected(431, f"request head over {limits.max_header_bytes} bytes")
        try:
            head = parse_head(buf[:end])
        except HeadError as exc:
            raise _Rejected(exc.status, f"malformed request: {exc}") from None
        self.request_id = head.request_id or self.server.new_request_id()
        length = head.content_length
        if length > limits.max_body_bytes:
            raise _Rejected(413, f"request body over {limits.max_body_bytes} bytes")
        start = end + 4
        if head.expect_continue and not await self._continue(head, len(buf) > start):
            return None
        if head.chunked:
            body = await self._read_chunked(buf[start:])
            if body is None:
                return None
        else:
            stop = start + length
            if len(buf) < stop:
                body_deadline = trio.current_time() + limits.body_timeout
                parts = [buf]
                have = len(buf)
                while have < stop:
                    data = await self._receive(body_deadline, 408, "request body took too long")
                    if not data:
                        return None
                    parts.append(data)
                    have += len(data)
                buf = b"".join(parts)
            self.buffer = buf[stop:] + self.buffer
            body = buf[start:stop]
        keep_alive = head.http_version == b"1.1" and not any(
            name == b"connection" and b"close" in value.lower() for name, value in head.headers
        )
        request = Request(
            head.method, head.target, head.headers, body, self.request_id, head.http_version
        )
        return request, keep_alive

    async def _continue(self, head: Head, body_sent: bool) -> bool:
        """Answer a client waiting for ``100 Continue``: the server's ``vet`` refusal (then
        False: the connection ends, the body unread), else 100 if no body byte has come."""
        vet = self.server.vet
        if vet is not None:
            refusal = vet(Request(head.method, head.target, head.headers, b"", self.request_id))
            if refusal is not None:
                status, headers, body = refusal
                refused = self.server.refused
                refused[status] = refused.get(status, 0) + 1
                await _send_closing(self.stream, status, headers, body, self.request_id)
                return False
        if not body_sent and (head.chunked or head.content_length):
            with trio.move_on_after(self.limits.write_timeout) as scope:
                await self.stream.send_all(_CONTINUE)
            if scope.cancelled_caught:
                raise trio.BrokenResourceError("the client stopped reading")
        return True

    async def _read_chunked(self, data: bytes) -> bytes | None:
        """The chunked body starting with ``data``; None when the client closed first."""
        limits = self.limits
        body = ChunkedBody(limits.max_body_bytes, limits.max_header_bytes)
        deadline = trio.current_time() + limits.body_timeout
        try:
            while not body.feed(data):
                data = await self._receive(deadline, 408, "request body took too long")
                if not data:
                    return None
        except HeadError as exc:
            raise _Rejected(exc.status, str(exc)) from None
        self.buffer = body.rest + self.buffer
        return body.body

    async def _answer(self, request: Request, keep_alive: bool) -> bool:
        """Run the handler, cancelled if the client goes away; False when the connection
        must end.

        Nothing the handler raises ends the server: a client gone mid-write ends this
        connection; a bug is logged and answered with 500 if no response had started.
        """
        responder = self.responder = Responder(
            self.stream,
            keep_alive,
            self.limits.write_timeout,
            self.fd,
            request_id=request.request_id,
            chunked=request.http_version == b"1.1",
        )
        server = self.server
        server.active += 1
        failed = False
        scope = self._responding = trio.CancelScope()
        if self._eof:  # it sent the request and closed at once
            self._gone = True
            scope.cancel()
        try:
            with scope:
                try:
                    await server.handler(request, responder)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    failed = True
                except Exception:
                    server.internal_errors += 1
                    log.exception(
                        "the gateway failed to answer %s %r", request.method, request.path
                    )
                    failed = True
                    if not responder.started:
                        await self.send_error(500, "internal error in the gateway", False)
        finally:
            self._responding = None
            server.active -= 1
        if failed or self._gone or not responder.started:
            return False
        return responder.keep_alive

    async def send_error(self, status: int, message: str, refusal: bool = True) -> None:
        """Answer ``status`` and close; ``refusal``: count it in ``Server.refused`` (the
        request never reached the handler)."""
        server = self.server
        if refusal:
            server.refused[status] = server.refused.get(status, 0) + 1
        headers, body = server._reject_body(status, message)
        await _send_closing(
            self.stream, status, headers, body, self.request_id or server.new_request_id()
        )


async def serve_connection(server: Server, stream: trio.abc.Stream) -> None:
    """Serve ``stream`` (any trio stream: tests use memory streams) with ``server``."""
    await server.serve_connection(stream)
