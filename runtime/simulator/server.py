"""The simulator as a real HTTP/1.1 server (trio + h11).

Each connection serves requests one after another (keep-alive) until the client closes it or
asks to. Streams use chunked transfer encoding, JSON bodies ``Content-Length``. The response
head goes out in the same write as the first body piece; a body that is ready at once (JSON, or
an unpaced stream) goes out with its head and terminator in a single write. A
:class:`SimulatedDisconnect` closes the socket without finishing the body.
"""

from __future__ import annotations

import functools
import http
from typing import TYPE_CHECKING

import h11
import trio

from .app import SimulatedDisconnect, SimulatorApp
from .wire import error_body

if TYPE_CHECKING:
    from .app import SimResponse
    from .config import SimulatorConfig

__all__ = ["run_simulator", "serve_connection", "serve_simulator"]

_RECEIVE_SIZE = 65536
_REASONS = {s.value: s.phrase.encode() for s in http.HTTPStatus}


async def serve_connection(app: SimulatorApp, stream: trio.abc.Stream) -> None:
    """Serve HTTP/1.1 requests arriving on ``stream`` until either side ends the connection.

    Closes ``stream`` on return. A malformed request gets a 400 and the connection closes;
    a client that goes away mid-response is not an error.
    """
    conn = h11.Connection(h11.SERVER)
    try:
        while True:
            event = await _next_event(conn, stream)
            if isinstance(event, h11.ConnectionClosed):
                return
            assert isinstance(event, h11.Request), event
            if conn.they_are_waiting_for_100_continue:
                continue_ = h11.InformationalResponse(status_code=100, headers=[])
                await stream.send_all(conn.send(continue_) or b"")
            chunks = []
            while not isinstance(part := await _next_event(conn, stream), h11.EndOfMessage):
                assert isinstance(part, h11.Data), part
                chunks.append(part.data)
            response = await app.handle(
                event.method.decode("ascii"),
                event.target.decode("ascii"),
                list(event.headers),
                b"".join(chunks),
            )
            if not await _send_response(conn, stream, response):
                return
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()
    except h11.RemoteProtocolError as exc:
        await _reject(conn, stream, exc)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await stream.aclose()


async def _next_event(conn: h11.Connection, stream: trio.abc.Stream) -> object:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        data = await stream.receive_some(_RECEIVE_SIZE)
        conn.receive_data(data if isinstance(data, bytes) else bytes(data))


async def _send_response(
    conn: h11.Connection, stream: trio.abc.Stream, response: SimResponse
) -> bool:
    """Send ``response``; False when the body was cut (the caller then closes)."""
    head = conn.send(
        h11.Response(
            status_code=response.status,
            headers=response.headers,
            reason=_REASONS.get(response.status, b""),
        )
    )
    assert head is not None
    if response.content is not None:
        body = conn.send(h11.Data(data=response.content))
        end = conn.send(h11.EndOfMessage())
        assert body is not None
        assert end is not None
        await stream.send_all(b"".join((head, body, end)))
        return True
    pending: bytes | None = head
    try:
        async for piece in response.body:
            data = conn.send(h11.Data(data=piece))
            assert data is not None
            if pending is not None:
                data, pending = pending + data, None
            await stream.send_all(data)
    except SimulatedDisconnect:
        return False
    end = conn.send(h11.EndOfMessage())
    assert end is not None
    await stream.send_all(end if pending is None else pending + end)
    return True


async def _reject(
    conn: h11.Connection, stream: trio.abc.Stream, exc: h11.RemoteProtocolError
) -> None:
    """Answer a malformed request with 400 (or h11's hint) if a response can still be sent."""
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    status = exc.error_status_hint
    content = error_body(f"Malformed HTTP request: {exc}", "invalid_request_error")
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(content)),
        (b"connection", b"close"),
    ]
    try:
        head = conn.send(
            h11.Response(status_code=status, headers=headers, reason=_REASONS.get(status, b""))
        )
        body = conn.send(h11.Data(data=content))
        end = conn.send(h11.EndOfMessage())
        assert head is not None
        assert body is not None
        assert end is not None
        await stream.send_all(head + body + end)
    except (h11.LocalProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
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
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on ``host:port`` and serve the simulator until cancelled.

    ``port=0`` picks a free port. Reports the bound port through ``task_status.started``, so
    ``port = await nursery.start(serve_simulator, config)`` returns once connections are
    accepted. Passing a :class:`SimulatorApp` lets the caller watch its counters.
    """
    app = _as_app(config)
    listeners = await trio.open_tcp_listeners(port, host=host)
    if port == 0:  # each address family would get its own random port; keep one
        for extra in listeners[1:]:
            await extra.aclose()
        listeners = listeners[:1]
    bound = listeners[0].socket.getsockname()[1]

    async def handler(stream: trio.SocketStream) -> None:
        await serve_connection(app, stream)

    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, handler, listeners)
        task_status.started(bound)


async def run_simulator(
    config: SimulatorConfig | SimulatorApp | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
) -> None:
    """Serve until cancelled, after printing ``sluice simulator listening on http://HOST:PORT/v1``.

    This is what ``sluice sim --port P`` runs.
    """
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(
            functools.partial(serve_simulator, host=host, port=port), config
        )
        shown = f"[{host}]" if ":" in host else host
        print(f"sluice simulator listening on http://{shown}:{bound}/v1", flush=True)
