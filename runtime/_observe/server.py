"""``GET /metrics`` over HTTP/1.1, served by a trio task inside the runtime.

A scrape is tiny and rare, so the server reads one request head per connection, answers it and
closes: no keep-alive, no body, nothing for a client to hold open. The answer is rendered
after a fresh snapshot of the runtime's statistics (``render``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from .metrics import CONTENT_TYPE

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["serve_metrics"]

log = logging.getLogger("sluice.metrics")

_MAX_HEAD = 16 * 1024
_READ_TIMEOUT = 10.0


async def serve_metrics(
    render: Callable[[], Awaitable[bytes]],
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; ``task_status.started`` gets the bound port."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    log.info("serving metrics on http://%s:%d/metrics", host, bound)

    async def handle(stream: trio.SocketStream) -> None:
        try:
            await _answer(stream, render)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, handle, listeners)
        task_status.started(bound)


async def _answer(stream: trio.SocketStream, render: Callable[[], Awaitable[bytes]]) -> None:
    head = b""
    with trio.move_on_after(_READ_TIMEOUT):
        while b"\r\n\r\n" not in head and len(head) < _MAX_HEAD:
            piece = await stream.receive_some(4096)
            if not piece:
                break
            head += piece
    line = head.split(b"\r\n", 1)[0].split()
    if len(line) < 2:
        return
    method, target = line[0], line[1].split(b"?", 1)[0]
    if method not in (b"GET", b"HEAD"):
        await _send(stream, b"405 Method Not Allowed", b"only GET\n", b"text/plain")
    elif target not in (b"/metrics", b"/"):
        await _send(stream, b"404 Not Found", b"see /metrics\n", b"text/plain")
    else:
        body = await render()
        await _send(
            stream,
            b"200 OK",
            b"" if method == b"HEAD" else body,
            CONTENT_TYPE.encode(),
            length=len(body),
        )


async def _send(
    stream: trio.SocketStream,
    status: bytes,
    body: bytes,
    content_type: bytes,
    *,
    length: int | None = None,
) -> None:
    size = len(body) if length is None else length
    head = (
        b"HTTP/1.1 "
        + status
        + b"\r\nContent-Type: "
        + content_type
        + b"\r\nContent-Length: "
        + str(size).encode()
        + b"\r\nConnection: close\r\n\r\n"
    )
    await stream.send_all(head + body)
