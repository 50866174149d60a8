"""The simulator as a real HTTP/1.1 server (trio + h11).

Each connection serves requests one after another (keep-alive, pipelining allowed) until the
client closes it or asks to. h11 parses the requests; responses are framed here, from headers
the app already built, which avoids h11's per-header validation on the hot path. Streams use
chunked transfer encoding, JSON bodies ``Content-Length``. The response head goes out in the
same write as the first body piece; a body that is ready at once (JSON, or an unpaced stream)
goes out with its head and terminator in one write. A :class:`SimulatedDisconnect` closes the
socket without finishing the body; a :class:`SimulatedReset` closes it without any response.
"""

from __future__ import annotations

import functools
import http
from typing import TYPE_CHECKING

import h11
import trio

from ._app import SimulatedDisconnect, SimulatedReset, SimulatorApp
from ._wire import error_body

if TYPE_CHECKING:
    from ._app import SimResponse
    from ._config import SimulatorConfig

__all__ = ["run_simulator", "serve_connection", "serve_simulator"]

_RECEIVE_SIZE = 65536
_STATUS_LINES = {
    s.value: b"HTTP/1.1 %d %s\r\n" % (s.value, s.phrase.encode()) for s in http.HTTPStatus
}
_CHUNKED = b"transfer-encoding: chunked\r\n"
_CLOSE = b"connection: close\r\n"
_LAST_CHUNK = b"0\r\n\r\n"
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Draining:
    """Requests being answered, and whether the server is shutting down: then a connection
    closes after its current response instead of waiting for another request."""

    __slots__ = ("busy", "idle", "stopping")

    def __init__(self) -> None:
        self.busy = 0
        self.stopping = False
        self.idle = trio.Event()
        """Set when the server is stopping and no request is under way."""

    def stop(self) -> None:
        self.stopping = True
        if not self.busy:
            self.idle.set()

    def finished(self) -> None:
        """One request was answered."""
        self.busy -= 1
        if self.stopping and not self.busy:
            self.idle.set()


async def serve_connection(
    app: SimulatorApp, stream: trio.abc.Stream, draining: Draining | None = None
) -> None:
    """Serve HTTP/1.1 requests arriving on ``stream`` until either side ends the connection.

    Closes ``stream`` on return. A malformed request gets a 400 and the connection closes; a
    client that goes away mid-response is not an error. HTTP/1.0 clients get one response per
    connection. With ``draining``, the requests under way are counted in it, and once it is
    ``stopping`` the connection closes after the response under way.
    """
    conn = h11.Connection(h11.SERVER)
    try:
        while True:
            event = await _next_event(conn, stream)
            if isinstance(event, h11.ConnectionClosed):
                return
            assert isinstance(event, h11.Request), event
            if draining is not None:
                draining.busy += 1
                try:
                    keep_alive = await _answer(app, conn, stream, event)
                finally:
                    draining.finished()
                if not keep_alive or draining.stopping:
                    return
            elif not await _answer(app, conn, stream, event):
                return
            # h11 only parsed the request; a fresh parser takes over any pipelined bytes.
            leftover, closed = conn.trailing_data
            conn = h11.Connection(h11.SERVER)
            if leftover:
                conn.receive_data(leftover)
            if closed:
                conn.receive_data(b"")  # b"" tells h11 the peer has closed
    except h11.RemoteProtocolError as exc:
        await _reject(conn, stream, exc)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await stream.aclose()


async def _answer(
    app: SimulatorApp, conn: h11.Connection, stream: trio.abc.Stream, event: h11.Request
) -> bool:
    """Read the body of request ``event``, answer it; return whether to keep the connection."""
    if conn.they_are_waiting_for_100_continue:
        await stream.send_all(_CONTINUE)
    chunks = []
    while not isinstance(part := await _next_event(conn, stream), h11.EndOfMessage):
        assert isinstance(part, h11.Data), part
        chunks.append(part.data)
    headers = list(event.headers)
    http11 = event.http_version == b"1.1"
    try:
        response = await app.handle(
            event.method.decode("ascii"),
            event.target.decode("latin-1"),
            headers,
            b"".join(chunks),
        )
    except SimulatedReset:
        return False  # closes the connection with nothing sent
    return await _send_response(
        stream,
        response,
        http11=http11,
        keep_alive=http11 and not _asks_to_close(headers),
        head_only=event.method == b"HEAD",
    )


async def _next_event(conn: h11.Connection, stream: trio.abc.Stream) -> object:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        data = await stream.receive_some(_RECEIVE_SIZE)
        conn.receive_data(data if isinstance(data, bytes) else bytes(data))


def _asks_to_close(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(name == b"connection" and b"close" in value.lower() for name, value in headers)


async def _send_response(
    stream: trio.abc.Stream,
    response: SimResponse,
    *,
    http11: bool,
    keep_alive: bool,
    head_only: bool,
) -> bool:
    """Send ``response``; return whether the connection can carry another request.

    Without a ``content-length`` header the body is chunked (HTTP/1.1) or delimited by closing
    the connection (HTTP/1.0). A cut body (:class:`SimulatedDisconnect`) always ends the
    connection.
    """
    sized = any(name == b"content-length" for name, _ in response.headers)
    chunked = not sized and http11
    keep_alive = keep_alive and (sized or chunked)
    parts = [_STATUS_LINES.get(response.status) or b"HTTP/1.1 %d \r\n" % response.status]
    parts.extend(b"%s: %s\r\n" % pair for pair in response.headers)
    if chunked:
        parts.append(_CHUNKED)
    if not keep_alive:
        parts.append(_CLOSE)
    parts.append(b"\r\n")
    head = b"".join(parts)
    if head_only:
        await stream.send_all(head)
        return keep_alive
    if response.content is not None:
        body = _chunk(response.content) + _LAST_CHUNK if chunked else response.content
        await stream.send_all(head + body)
        return keep_alive
    pending: bytes | None = head
    try:
        async for piece in response.body:
            data = _chunk(piece) if chunked else piece
            if pending is not None:
                data, pending = pending + data, None
            await stream.send_all(data)
    except SimulatedDisconnect:
        if pending is not None:  # cut before any body: the head still goes out
            await stream.send_all(pending)
        return False
    if chunked or pending is not None:
        await stream.send_all((pending or b"") + (_LAST_CHUNK if chunked else b""))
    return keep_alive


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b""


async def _reject(
    conn: h11.Connection, stream: trio.abc.Stream, exc: h11.RemoteProtocolError
) -> None:
    """Answer a malformed request with 400 (or h11's hint) if no response was started."""
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    status = exc.error_status_hint
    content = error_body(f"Malformed HTTP request: {exc}", "invalid_request_error")
    head = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(content)),
    ]
    line = _STATUS_LINES.get(status) or b"HTTP/1.1 %d \r\n" % status
    data = line + b"".join(b"%s: %s\r\n" % pair for pair in head) + _CLOSE + b"\r\n" + content
    try:
        await stream.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


def _as_app(app_or_config: SimulatorApp | SimulatorConfig | None) -> SimulatorApp:
    if isinstance(app_or_config, SimulatorApp):
        return app_or_config
    return SimulatorApp(app_or_config)


async def serve_simulator(
    config: SimulatorConfig | SimulatorApp | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    stop: trio.Event | None = None,
    drain: float = 5.0,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on ``host:port`` and serve the simulator until cancelled, or until ``stop``.

    ``port=0`` picks a free port. Reports the bound port through ``task_status.started``, so
    ``port = await nursery.start(serve_simulator, config)`` returns once connections are
    accepted. Passing a :class:`SimulatorApp` lets the caller watch its counters. When
    ``stop`` is set, the listeners close (no new connections), each connection closes after
    the response under way, and the function returns once none is under way, or after
    ``drain`` seconds at most (then the rest are cut off).
    """
    app = _as_app(config)
    listeners = await trio.open_tcp_listeners(port, host=host)
    if port == 0:  # each address family would get its own random port; keep one
        for extra in listeners[1:]:
            await extra.aclose()
        listeners = listeners[:1]
    bound = listeners[0].socket.getsockname()[1]
    draining = Draining()

    async def handler(stream: trio.SocketStream) -> None:
        await serve_connection(app, stream, draining)

    async with trio.open_nursery() as connections:
        async with trio.open_nursery() as accepting:
            await accepting.start(
                functools.partial(trio.serve_listeners, handler_nursery=connections),
                handler,
                listeners,
            )
            task_status.started(bound)
            if stop is None:
                await trio.sleep_forever()
            await stop.wait()
            accepting.cancel_scope.cancel()
        for listener in listeners:
            await listener.aclose()
        draining.stop()
        with trio.move_on_after(drain):
            await draining.idle.wait()
        connections.cancel_scope.cancel()  # idle keep-alive connections, and any overrun


async def run_simulator(
    config: SimulatorConfig | SimulatorApp | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    stop: trio.Event | None = None,
    drain: float = 5.0,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled (or ``stop``, then draining as :func:`serve_simulator` says),
    after printing ``sluice simulator listening on http://HOST:PORT/v1``.

    This is what ``sluice sim --port P`` runs. Reports the bound port (after printing) through
    ``task_status``, like :func:`serve_simulator`.
    """
    async with trio.open_nursery() as nursery:
        serve = functools.partial(serve_simulator, host=host, port=port, stop=stop, drain=drain)
        bound = await nursery.start(serve, config)
        shown = f"[{host}]" if ":" in host else host
        print(f"sluice simulator listening on http://{shown}:{bound}/v1", flush=True)
        task_status.started(bound)
