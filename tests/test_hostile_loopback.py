"""Hostile servers on real loopback sockets, against sluice's own HTTP client and the runtime.

The real clock, short limits and a generous ``fail_after`` guard: these check behaviour (the
named error, the connection closed, how much the server managed to send), never timing. The
virtual-time twins with exact times are in ``test_hostile_servers.py``.
"""

from __future__ import annotations

import functools

import pytest
import trio

import sluice
from sluice import ChatRequest
from sluice.transport import (
    FastTransport,
    RemoteProtocolError,
    ResponseTimeout,
    ResponseTooLarge,
)

from .hostile import hostile_config, read_request

MiB = 1024 * 1024


class Loopback:
    """A raw TCP server on 127.0.0.1 that runs ``behaviour`` on each connection."""

    def __init__(self, behaviour) -> None:
        self.behaviour = behaviour
        self.sent = 0
        self.requests = 0
        self.port = 0

    async def start(self, nursery: trio.Nursery) -> None:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, self._serve, 0, host="127.0.0.1")
        )
        self.port = listeners[0].socket.getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def send(self, stream: trio.SocketStream, data: bytes) -> None:
        await stream.send_all(data)
        self.sent += len(data)

    async def _serve(self, stream: trio.SocketStream) -> None:
        try:
            await read_request(stream)
            self.requests += 1
            await self.behaviour(self, stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


async def trickle(server: Loopback, stream: trio.SocketStream) -> None:
    for byte in b"HTTP/1.1 200 OK\r\nx-slow: " + b"a" * 10_000:
        await server.send(stream, bytes([byte]))
        await trio.sleep(0.05)


async def endless_headers(server: Loopback, stream: trio.SocketStream) -> None:
    await server.send(stream, b"HTTP/1.1 200 OK\r\n")
    block = (b"x-pad: " + b"a" * 1000 + b"\r\n") * 64
    while server.sent < 200_000_000:
        await server.send(stream, block)


async def endless_line(server: Loopback, stream: trio.SocketStream) -> None:
    await server.send(stream, b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: ")
    block = b"x" * 65536
    while True:
        await server.send(stream, block)


def sends(data: bytes):
    async def behaviour(server: Loopback, stream: trio.SocketStream) -> None:
        await server.send(stream, data)
        await trio.sleep(30)

    return behaviour


async def test_a_trickled_head_meets_the_head_timeout_over_loopback(nursery):
    server = Loopback(trickle)
    await server.start(nursery)
    async with FastTransport(head_timeout=0.3, trust_env=False) as transport:
        with trio.fail_after(10), pytest.raises(ResponseTimeout, match=r"not complete 0\.3 s"):
            await transport.send("POST", server.url + "/chat/completions", (), b"{}")
        assert transport.statistics().connections == 0
    assert server.sent < 100


async def test_200_mb_of_headers_are_refused_after_the_head_limit_over_loopback(nursery):
    server = Loopback(endless_headers)
    await server.start(nursery)
    async with FastTransport(trust_env=False) as transport:
        with trio.fail_after(10), pytest.raises(ResponseTooLarge, match="head is larger"):
            await transport.send("POST", server.url + "/chat/completions", (), b"{}")
    assert server.sent < 16 * MiB  # socket buffers, not 200 MB


async def read_whole(transport: FastTransport, url: str) -> None:
    response = await transport.send("POST", url, (), b"{}")
    try:
        while await response.read_some():
            pass
    finally:
        await response.aclose()


@pytest.mark.parametrize(
    ("data", "error", "words"),
    [
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nffffffffffffffff\r\n",
            ResponseTooLarge,
            "4 GiB limit",
        ),
        (b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n", RemoteProtocolError, "content-length"),
        (b"\x16\x03\x01\x02\x00garbage", RemoteProtocolError, "does not start with HTTP/"),
    ],
    ids=["chunk size 2^64-1", "negative content-length", "garbage"],
)
async def test_absurd_replies_are_refused_over_loopback(nursery, data, error, words):
    server = Loopback(sends(data))
    await server.start(nursery)
    async with FastTransport(trust_env=False) as transport:
        with trio.fail_after(10), pytest.raises(error, match=words):
            await read_whole(transport, server.url + "/x")
        assert transport.statistics().connections == 0


async def test_an_endless_sse_line_ends_the_call_over_loopback(nursery):
    server = Loopback(endless_line)
    await server.start(nursery)
    cfg = hostile_config(base_url=server.url, max_line_bytes=1 * MiB)
    with trio.fail_after(20):
        async with sluice.open_runtime(cfg) as rt:
            with pytest.raises(sluice.ProtocolError) as caught:
                await rt.chat(ChatRequest(model="h:m", messages="hi"))
    assert caught.value.message == (
        "an SSE line is larger than the 1 MiB limit (reply_limits.max_line_bytes)"
    )
    assert server.requests == 1  # terminal: not retried
    assert server.sent < 16 * MiB
