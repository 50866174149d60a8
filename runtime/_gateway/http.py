"""The gateway's HTTP/1.1 server on trio, hardened against slow and idle clients.

Why our own server rather than hypercorn: the gateway's hot path is one small JSON request in
and a stream of small SSE chunks out, and every microsecond spent framing them is added
latency. Measured (``benchmarks/gateway_server.py``, the same 20-chunk streaming app, busy
2-vCPU box): this loop ~0.5 ms of server CPU per request, hypercorn's trio worker ~1.4-1.8 ms,
and hypercorn fell behind at 200 requests/s; since one reader per connection and direct socket
writes, ~0.22 ms (21 writes a request). Request heads are parsed by
:mod:`.request_head` (~17 us against h11's ~100 us; h11 still reads chunked and
``expect: 100-continue`` requests); responses are framed here, the head written together with
the first chunk, each write tried on the socket at once (see :meth:`Responder._send`). While a
response is produced the connection's reader watches the client, so a client that goes away
cancels its upstream call at once (an ASGI server tells the app only when it next writes).

Limits (:class:`ServerLimits`): the size of a request head and body; a header timeout that
runs from a request's first byte to the end of its head (a client sending one byte a second
is cut off when it passes); a body timeout; a keep-alive idle timeout between requests; a cap
on requests per connection; a cap on open connections (past it, new ones get a 503 and are
closed); and a graceful drain (:meth:`Server.drain`): stop accepting, close idle connections,
let requests in flight finish (up to ``drain_timeout``) with ``connection: close``.
"""

from __future__ import annotations

import http
import logging
import math
import os
from typing import TYPE_CHECKING

import attrs
import h11
import trio
from attrs.validators import ge, gt

from .._record import Record
from .request_head import HeadError, parse_head

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

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
    """One parsed request. Header names are lower-case (h11 normalizes them)."""

    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes

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
    :meth:`finish` a chunked stream. The head goes out with the first body bytes."""

    __slots__ = ("_fd", "_head", "_stream", "_write_timeout", "keep_alive", "started", "status")

    def __init__(
        self,
        stream: trio.abc.Stream,
        keep_alive: bool,
        write_timeout: float = math.inf,
        fd: int = -1,
    ) -> None:
        self._stream = stream
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
        """Begin a chunked response; the head is sent with the first :meth:`write`."""
        self._head = self._head_bytes(status, headers, _CHUNKED)
        self.status = status

    async def write(self, data: bytes) -> None:
        """Send ``data`` as one chunk (with the head, the first time)."""
        if not data:
            return
        chunk = b"%x\r\n%s\r\n" % (len(data), data)
        head = self._head
        if head is not None:
            self._head = None
            chunk = head + chunk
        self.started = True
        await self._send(chunk)

    async def finish(self, data: bytes = b"") -> None:
        """Send ``data`` (if any) and the last chunk."""
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
        stream's bookkeeping and a trip through trio's scheduler (about half the cost of a
        write) are skipped. What it leaves goes the usual way. The handler's other awaits
        (the runtime's event batches) are its checkpoints.
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
    ) -> None:
        self.handler = handler
        self.limits = limits if limits is not None else ServerLimits()
        self._reject_body = reject or _plain_reject
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
        try:
            await _Connection(self, stream).run()
        finally:
            self.connections -= 1
            if self.connections == 0:
                self._done.set()
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)

    async def _refuse(self, stream: trio.abc.Stream) -> None:
        self.refused[503] = self.refused.get(503, 0) + 1
        headers, body = self._reject_body(503, "the gateway is at its connection limit")
        head = _STATUS_LINES[503] + b"".join(b"%s: %s\r\n" % p for p in headers)
        head += b"content-length: %d\r\n" % len(body) + _CLOSE + b"\r\n"
        with trio.move_on_after(1):
            try:
                await stream.send_all(head + body)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
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


class _Connection:
    """One connection's request loop, and the one task that reads the client.

    Bytes read from the client collect in ``buffer``; a request is taken from its front (the
    rest, a pipelined request, stays there). Heads are parsed by :func:`parse_head`; a request
    with ``transfer-encoding`` or ``expect`` is read by h11 instead.

    Only :meth:`_read` receives from the stream, for the connection's whole life: it reads while
    the request loop waits for bytes, and while a response is produced with nothing buffered,
    which is how a client that goes away mid-response is noticed (its end cancels the
    response, and so the upstream call). Once bytes of a pipelined request are buffered during
    a response it stops reading until the loop takes them, so buffering stays bounded. One
    reader for the connection rather than a watcher task started and cancelled per request:
    that costs a task, a nursery and a cancellation per request, ~10% of the gateway's CPU.
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
        except _Rejected as exc:
            await self._send_error(exc.status, str(exc))
        except h11.RemoteProtocolError as exc:
            await self._send_error(exc.error_status_hint, f"malformed request: {exc}")
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
        if head.needs_h11:
            self.buffer = buf + self.buffer
            return await self._read_with_h11()
        length = head.content_length
        if length > limits.max_body_bytes:
            raise _Rejected(413, f"request body over {limits.max_body_bytes} bytes")
        start = end + 4
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
        keep_alive = head.http_version == b"1.1" and not any(
            name == b"connection" and b"close" in value.lower() for name, value in head.headers
        )
        request = Request(head.method, head.target, head.headers, buf[start:stop])
        return request, keep_alive

    async def _read_with_h11(self) -> tuple[Request, bool] | None:
        """Read one request with h11 (chunked bodies, ``100 Continue``)."""
        limits = self.limits
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_header_bytes)
        conn.receive_data(self.buffer)
        self.buffer = b""
        event = conn.next_event()
        assert isinstance(event, h11.Request), event  # the whole head is in the buffer
        headers = list(event.headers)
        if conn.they_are_waiting_for_100_continue:
            await self.stream.send_all(_CONTINUE)
        body_deadline = trio.current_time() + limits.body_timeout
        chunks: list[bytes] = []
        size = 0
        while True:
            part: object = conn.next_event()
            while part is h11.NEED_DATA:
                data = await self._receive(body_deadline, 408, "request body took too long")
                conn.receive_data(data)
                part = conn.next_event()
            if isinstance(part, h11.EndOfMessage):
                break
            if isinstance(part, h11.ConnectionClosed):
                return None
            assert isinstance(part, h11.Data), part
            size += len(part.data)
            if size > limits.max_body_bytes:
                raise _Rejected(413, f"request body over {limits.max_body_bytes} bytes")
            chunks.append(bytes(part.data))
        self.buffer = bytes(conn.trailing_data[0]) + self.buffer
        keep_alive = event.http_version == b"1.1" and not any(
            name == b"connection" and b"close" in value.lower() for name, value in headers
        )
        return Request(event.method, event.target, headers, b"".join(chunks)), keep_alive

    async def _answer(self, request: Request, keep_alive: bool) -> bool:
        """Run the handler, cancelled if the client goes away; False when the connection
        must end.

        Nothing the handler raises ends the server: a client gone mid-write ends this
        connection; a bug is logged and answered with 500 if no response had started.
        """
        responder = Responder(self.stream, keep_alive, self.limits.write_timeout, self.fd)
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
                    log.exception(
                        "the gateway failed to answer %s %r", request.method, request.path
                    )
                    failed = True
                    if not responder.started:
                        await self._send_error(500, "internal error in the gateway", refusal=False)
        finally:
            self._responding = None
            server.active -= 1
        if failed or self._gone or not responder.started:
            return False
        return responder.keep_alive

    async def _send_error(self, status: int, message: str, *, refusal: bool = True) -> None:
        """Answer ``status`` and close; ``refusal``: count it in ``Server.refused`` (the
        request never reached the handler)."""
        if refusal:
            refused = self.server.refused
            refused[status] = refused.get(status, 0) + 1
        headers, body = self.server._reject_body(status, message)
        head = (_STATUS_LINES.get(status) or b"HTTP/1.1 %d \r\n" % status) + b"".join(
            b"%s: %s\r\n" % p for p in headers
        )
        head += b"content-length: %d\r\n" % len(body) + _CLOSE + b"\r\n"
        with trio.move_on_after(1):
            try:
                await self.stream.send_all(head + body)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def serve_connection(server: Server, stream: trio.abc.Stream) -> None:
    """Serve ``stream`` (any trio stream: tests use memory streams) with ``server``."""
    await server.serve_connection(stream)
