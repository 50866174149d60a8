"""Hostile and broken HTTP servers for the transport and runtime tests.

A :class:`Hostile` serves every connection sluice's transport opens with one scripted
behaviour, over a trio *lockstep* stream pair: the server's ``send_all`` waits until the client
has read the bytes, so an endless server holds no more than one piece in memory and a test
can measure the client's memory alone. No sockets, so ``autojump_clock`` is safe.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio
import trio.testing

from sluice import RetryConfig, RuntimeConfig
from sluice._config import ProviderConfig, ReplyLimits, Secret
from sluice._messages import Deadlines

Behaviour = Callable[[trio.abc.Stream], Awaitable[None]]

PIECE = 65536


class Hostile:
    """Runs ``behaviour`` on the server end of every connection; counts the requests read."""

    def __init__(self, nursery: trio.Nursery, behaviour: Behaviour) -> None:
        self._nursery = nursery
        self._behaviour = behaviour
        self.requests = 0
        self.sent = 0
        """Bytes the behaviours managed to send (the client read them all: lockstep)."""

    async def open_stream(self, host: str, port: int) -> trio.abc.Stream:
        client, server = trio.testing.lockstep_stream_pair()
        self._nursery.start_soon(self._serve, server)
        return client

    async def _serve(self, stream: trio.abc.Stream) -> None:
        try:
            await read_request(stream)
            self.requests += 1
            await self._behaviour(_Counting(stream, self))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client gave up: what the test wants
        finally:
            await trio.aclose_forcefully(stream)


class _Counting(trio.abc.Stream):
    def __init__(self, inner: trio.abc.Stream, owner: Hostile) -> None:
        self._inner = inner
        self._owner = owner

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._inner.send_all(data)
        self._owner.sent += len(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self._inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self._inner.aclose()


async def read_request(stream: trio.abc.Stream) -> bytes:
    """Read one request (head and content-length body); return its head."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = await stream.receive_some(PIECE)
        if not data:
            raise trio.BrokenResourceError("the client closed before a request")
        buf += data
    head, _, body = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        data = await stream.receive_some(PIECE)
        if not data:
            raise trio.BrokenResourceError("the client closed inside the request body")
        body += data
    return head


def hostile_config(
    protocol: str = "openai",
    *,
    max_attempts: int = 3,
    deadlines: Deadlines | None = None,
    base_url: str = "http://hostile.test/v1",
    **limits: Any,
) -> RuntimeConfig:
    """A runtime with one provider ``h`` at a hostile server; by default no deadline at all,
    so only the reply limits (``limits`` over their defaults) bound a call."""
    return RuntimeConfig(
        providers={
            "h": ProviderConfig(
                protocol=protocol,  # type: ignore[arg-type]
                base_url=base_url,
                api_key=Secret("sk-hostile-test"),
                breaker=None,
            )
        },
        retry=RetryConfig(max_attempts=max_attempts, base_delay=0.5, jitter=0.0),
        deadlines=deadlines if deadlines is not None else Deadlines(),
        reply_limits=ReplyLimits(**limits),
    )


def head(
    content_type: str = "text/event-stream", *, extra: str = "", status: str = "200 OK"
) -> bytes:
    """A response head whose body runs to the end of the connection."""
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\nconnection: close\r\n{extra}\r\n"
    ).encode()


async def forever(stream: trio.abc.Stream, first: bytes, piece: bytes) -> None:
    """Send ``first``, then ``piece`` again and again until the client closes."""
    await stream.send_all(first)
    while True:
        await stream.send_all(piece)
