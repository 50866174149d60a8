"""A provider stand-in of the suite's own: it records every request and replays scripted bytes.

Independent of sluice and of its simulator: a trio TCP listener on 127.0.0.1 that reads each
request with h11, keeps its method, path, headers and JSON body, and answers with the next
scripted :class:`Reply` (status, headers and body pieces, each piece written on its own so a
streamed body arrives in several reads, as a provider's does). Tests hand it recorded provider
bytes (``tests/conformance_data``) or bytes written in a provider's exact shape, and assert on
what the gateway sent upstream and what it passed back.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import attrs
import h11
import orjson
import trio

__all__ = ["Received", "RecordingUpstream", "Reply", "json_reply", "sse_reply"]


@attrs.frozen
class Reply:
    status: int
    headers: tuple[tuple[str, str], ...]
    pieces: tuple[bytes, ...]


@attrs.frozen
class Received:
    method: str
    path: str
    headers: dict[str, str]
    """Lower-case names; a repeated header's values joined with ``, ``."""
    body: Any


def sse_reply(body: bytes, status: int = 200) -> Reply:
    """An event stream replayed one event per write."""
    events = [e + b"\n\n" for e in body.replace(b"\r\n", b"\n").split(b"\n\n") if e.strip()]
    return Reply(status, (("content-type", "text/event-stream"),), tuple(events))


def json_reply(body: bytes, status: int = 200) -> Reply:
    return Reply(status, (("content-type", "application/json"),), (body,))


class RecordingUpstream:
    """``port = await nursery.start(upstream.serve)``; then script :meth:`reply` and read
    :attr:`received`."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self._script: deque[Reply] = deque()

    def reply(self, *replies: Reply) -> None:
        """Answer the next requests with these, in order."""
        self._script.extend(replies)

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        async with stream:
            while True:
                request, body = await _read_request(conn, stream)
                if request is None:
                    return
                self.received.append(_received(request, body))
                reply = self._script.popleft() if self._script else _NO_SCRIPT
                await _send(conn, stream, reply)
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()


_NO_SCRIPT = Reply(500, (("content-type", "application/json"),), (b'{"error":"unscripted"}',))


async def _read_request(
    conn: h11.Connection, stream: trio.SocketStream
) -> tuple[h11.Request | None, bytes]:
    request = None
    body = []
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(65536)
            conn.receive_data(data)
            if not data and request is None:
                return None, b""
            continue
        if isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage):
            return request, b"".join(body)
        elif isinstance(event, h11.ConnectionClosed):
            return None, b""


def _received(request: h11.Request, body: bytes) -> Received:
    headers: dict[str, str] = {}
    for name, value in request.headers:
        key, text = name.decode().lower(), value.decode()
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return Received(
        request.method.decode(),
        request.target.decode(),
        headers,
        orjson.loads(body) if body else None,
    )


async def _send(conn: h11.Connection, stream: trio.SocketStream, reply: Reply) -> None:
    headers = [(k.encode(), v.encode()) for k, v in reply.headers]
    headers.append((b"transfer-encoding", b"chunked"))
    await stream.send_all(conn.send(h11.Response(status_code=reply.status, headers=headers)))
    for piece in reply.pieces:
        await stream.send_all(conn.send(h11.Data(data=piece)))
    await stream.send_all(conn.send(h11.EndOfMessage()))
