"""FastTransport's pool against in-memory servers, under the autojump clock.

Every test connects through ``open_stream`` to a scripted server on a trio memory stream, so
the exact bytes on the wire and the exact virtual times are under the test's control. Each test
carries a trio-time deadline (``virtual_deadline``), so a deadlock fails fast.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import attrs
import pytest
import trio
import trio.testing

from sluice.transport import (
    ConnectError,
    ConnectTimeout,
    FastTransport,
    HttpPhases,
    ProxyError,
    ReadError,
    RemoteProtocolError,
    TransportStatistics,
    WriteError,
)

from .helpers import virtual_deadline

if TYPE_CHECKING:
    from sluice.transport import FastResponse

URL = "http://api.test/v1/chat/completions"
HEADERS = (("content-type", "application/json"), ("authorization", "Bearer sk-test"))
SSE = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'


def chunked(*chunks: bytes, trailer: bytes = b"") -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n" + trailer + b"\r\n"


def ok(body: bytes = b"ok", *extra: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in extra)
    return b"HTTP/1.1 200 OK\r\n%scontent-length: %d\r\n\r\n%s" % (head.encode(), len(body), body)


def stream_reply(*chunks: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunked(*chunks)


class Peer:
    """The server's end of one connection: reads requests, writes raw bytes."""

    def __init__(self, stream: trio.abc.Stream, index: int) -> None:
        self.stream = stream
        self.index = index
        self.buf = b""
        self.finished = trio.Event()
        """Set once the handler returned and the server closed its end."""

    async def request(self) -> bytes | None:
        """The next request (head and body), or None when the client closed."""
        while b"\r\n\r\n" not in self.buf:
            data = await self.stream.receive_some()
            if not data:
                return None
            self.buf += data
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        match = re.search(rb"(?im)^content-length: *(\d+)", head)
        length = int(match[1]) if match else 0
        while len(rest) < length:
            data = await self.stream.receive_some()
            if not data:
                return None
            rest += data
        self.buf = rest[length:]
        return head + b"\r\n\r\n" + rest[:length]

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def wait_closed(self) -> None:
        """Wait until the client closes its end."""
        while await self.stream.receive_some():
            pass


Handler = Callable[[Peer], Awaitable[None]]


@attrs.define
class Server:
    """Opens in-memory connections, each served by ``handler`` in the test's nursery."""

    nursery: trio.Nursery
    handler: Handler
    peers: list[Peer] = attrs.Factory(list)
    requests: list[bytes] = attrs.Factory(list)
    dialed: list[tuple[str, int]] = attrs.Factory(list)

    async def open_stream(self, host: str, port: int) -> trio.abc.Stream:
        self.dialed.append((host, port))
        client, server = trio.testing.memory_stream_pair()
        peer = Peer(server, len(self.peers))
        self.peers.append(peer)
        self.nursery.start_soon(self._serve, peer)
        return client

    async def _serve(self, peer: Peer) -> None:
        try:
            await self.handler(peer)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await peer.stream.aclose()
            peer.finished.set()

    def transport(self, **kwargs: object) -> FastTransport:
        return FastTransport(open_stream=self.open_stream, trust_env=False, **kwargs)  # type: ignore[arg-type]


def serve_each(server_reply: Callable[[bytes, Peer], bytes], log: list[bytes]) -> Handler:
    """A keep-alive handler answering every request with ``server_reply(request, peer)``."""

    async def handler(peer: Peer) -> None:
        while (request := await peer.request()) is not None:
            log.append(request)
            await peer.send(server_reply(request, peer))

    return handler


def keep_alive(reply: bytes, log: list[bytes] | None = None) -> Handler:
    return serve_each(lambda _request, _peer: reply, [] if log is None else log)


async def read_all(response: FastResponse) -> bytes:
    pieces = []
    while piece := await response.read_some():
        pieces.append(piece)
    await response.aclose()
    return b"".join(pieces)


async def fetch(transport: FastTransport, url: str = URL, method: str = "POST") -> bytes:
    response = await transport.send(method, url, HEADERS, b"{}")
    return await read_all(response)


# -- reuse, limits, expiry ------------------------------------------------------------------


@virtual_deadline(10)
async def test_keep_alive_connection_is_reused(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    log: list[bytes] = []
    server = Server(nursery, keep_alive(stream_reply(SSE, SSE), log))
    async with server.transport() as transport:
        for _ in range(3):
            assert await fetch(transport) == SSE * 2
        assert len(server.peers) == 1
        assert server.dialed == [("api.test", 80)]
        assert transport.statistics() == TransportStatistics(
            connections=1, idle=1, in_use=0, waiters=0
        )
    assert log[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"\r\nhost: api.test\r\n" in log[0]
    assert b"\r\ncontent-length: 2\r\n" in log[0]
    assert log[0].endswith(b"\r\n\r\n{}")


@virtual_deadline(10)
async def test_pool_limit_queues_waiters_in_fifo_order(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    server = Server(nursery, keep_alive(ok(b"done")))
    transport = server.transport(max_connections=2)
    got_head: list[int] = []
    finish = [trio.Event() for _ in range(5)]

    async def call(i: int) -> None:
        response = await transport.send("POST", URL, HEADERS, b"{}")
        got_head.append(i)
        await finish[i].wait()
        assert await read_all(response) == b"done"

    async with trio.open_nursery() as calls:
        for i in range(5):
            calls.start_soon(call, i)
            await trio.testing.wait_all_tasks_blocked()
        assert got_head == [0, 1]
        assert transport.statistics() == TransportStatistics(
            connections=2, idle=0, in_use=2, waiters=3
        )
        for i in (1, 0, 2, 3):
            finish[i].set()
            await trio.testing.wait_all_tasks_blocked()
        assert got_head == [0, 1, 2, 3, 4]
        finish[4].set()
    assert len(server.peers) == 2
    assert transport.statistics() == TransportStatistics(connections=2, idle=2, in_use=0, waiters=0)


@virtual_deadline(30)
async def test_idle_connection_expires(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    server = Server(nursery, keep_alive(ok()))
    transport = server.transport(keepalive_expiry=5.0)
    await fetch(transport)
    await trio.sleep(4.9)
    await fetch(transport)
    assert len(server.peers) == 1
    await trio.sleep(5.1)
    await fetch(transport)
    assert len(server.peers) == 2
    await trio.testing.wait_all_tasks_blocked()
    assert transport.statistics().connections == 1
    with trio.fail_after(1):
        await server.peers[0].finished.wait()  # the expired one was closed, not just dropped


@virtual_deadline(10)
async def test_cancelled_waiter_leaves_the_queue(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    server = Server(nursery, keep_alive(ok()))
    transport = server.transport(max_connections=1)
    held = await transport.send("GET", URL, (), b"")
    with trio.move_on_after(1) as gave_up:
        await transport.send("GET", URL, (), b"")
    assert gave_up.cancelled_caught  # it waited for the one connection, then left
    assert transport.statistics().waiters == 0
    assert await read_all(held) == b"ok"
    assert await fetch(transport) == b"ok"
    assert len(server.peers) == 1


# -- connections the server closed ----------------------------------------------------------


@virtual_deadline(10)
async def test_server_closing_a_kept_alive_connection_means_one_transparent_reconnect(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    log: list[bytes] = []

    async def one_request_per_connection(peer: Peer) -> None:
        request = await peer.request()
        assert request is not None
        log.append(request)
        await peer.send(ok(b"from %d" % peer.index))
        # Close without saying "connection: close", as servers do when an idle timer fires.

    server = Server(nursery, one_request_per_connection)
    transport = server.transport()
    assert await fetch(transport) == b"from 0"
    await trio.testing.wait_all_tasks_blocked()
    assert await fetch(transport) == b"from 1"
    assert len(server.peers) == 2
    assert len(log) == 2  # the server saw each request exactly once


@virtual_deadline(10)
async def test_reused_connection_closed_after_reading_the_request_is_retried_once(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    async def answer_once_then_hang_up(peer: Peer) -> None:
        if peer.index == 0:
            await peer.request()
            await peer.send(ok())
        await peer.request()  # read it, then close without a byte of answer

    server = Server(nursery, answer_once_then_hang_up)
    transport = server.transport()
    await fetch(transport)
    with pytest.raises(ReadError) as info:
        await fetch(transport)
    assert not info.value.body_started
    assert len(server.peers) == 2  # the reused one and exactly one fresh one
    assert transport.statistics() == TransportStatistics(0, 0, 0, 0)


@virtual_deadline(10)
async def test_fresh_connection_failure_is_not_retried(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    async def hang_up(peer: Peer) -> None:
        await peer.request()

    server = Server(nursery, hang_up)
    transport = server.transport()
    with pytest.raises(ReadError, match="before a complete response head"):
        await fetch(transport)
    assert len(server.peers) == 1


@virtual_deadline(10)
async def test_reused_connection_that_fails_after_a_response_byte_is_not_retried(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    async def half_a_head_the_second_time(peer: Peer) -> None:
        await peer.request()
        await peer.send(ok())
        await peer.request()
        await peer.send(b"HTTP/1.1 200 O")

    server = Server(nursery, half_a_head_the_second_time)
    transport = server.transport()
    await fetch(transport)
    with pytest.raises(ReadError):
        await fetch(transport)
    assert len(server.peers) == 1


@virtual_deadline(10)
async def test_write_to_a_closed_fresh_connection_is_a_write_error(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    async def close_at_once(peer: Peer) -> None:
        pass

    server = Server(nursery, close_at_once)

    async def open_closed(host: str, port: int) -> trio.abc.Stream:
        stream = await server.open_stream(host, port)
        await trio.testing.wait_all_tasks_blocked()
        return stream

    transport = FastTransport(open_stream=open_closed, trust_env=False)
    with pytest.raises(WriteError):
        await fetch(transport)


# -- broken responses never reuse their connection ------------------------------------------


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc", ReadError),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nabcdeXX", RemoteProtocolError),
        (b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: 4\r\n\r\nnope", None),
    ],
)
@virtual_deadline(10)
async def test_broken_response_closes_its_connection(
    autojump_clock: trio.testing.MockClock,
    nursery: trio.Nursery,
    reply: bytes,
    error: type[Exception] | None,
) -> None:
    async def broken_then_fine(peer: Peer) -> None:
        await peer.request()
        if peer.index == 0:
            await peer.send(reply)
            if error is ReadError:
                return
            await peer.wait_closed()
            return
        await peer.send(ok())

    server = Server(nursery, broken_then_fine)
    transport = server.transport()
    with pytest.raises(error or RemoteProtocolError) as info:
        await fetch(transport)
    if error is ReadError:
        assert isinstance(info.value, ReadError) and info.value.body_started
    assert transport.statistics() == TransportStatistics(0, 0, 0, 0)
    assert await fetch(transport) == b"ok"
    assert len(server.peers) == 2


@pytest.mark.parametrize(
    "reply",
    [
        ok(b"x", "connection: close"),
        b"HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\nx",
        ok(b"x") + b"unexpected",
        b"HTTP/1.1 200 OK\r\n\r\nx",  # read-to-close
    ],
)
@virtual_deadline(10)
async def test_unreusable_responses_close_their_connection(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery, reply: bytes
) -> None:
    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(reply)

    server = Server(nursery, handler)
    transport = server.transport()
    assert await fetch(transport) == b"x"
    assert await fetch(transport) == b"x"
    assert len(server.peers) == 2
    assert transport.statistics().connections == 0


# -- cancellation -----------------------------------------------------------------------------


@virtual_deadline(10)
async def test_cancellation_mid_body_closes_the_connection(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    async def first_chunk_then_stall(peer: Peer) -> None:
        await peer.request()
        if peer.index == 0:
            await peer.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            await peer.send(chunked(SSE)[:-5])
            await peer.wait_closed()
        else:
            await peer.send(stream_reply(SSE))

    server = Server(nursery, first_chunk_then_stall)
    transport = server.transport()
    response = await transport.send("POST", URL, HEADERS, b"{}")
    assert await response.read_some() == SSE
    with trio.move_on_after(2) as scope:
        await response.read_some()
    assert scope.cancelled_caught
    assert transport.statistics() == TransportStatistics(0, 0, 0, 0)
    with pytest.raises(trio.ClosedResourceError):
        await response.read_some()
    await response.aclose()  # idempotent
    with trio.fail_after(1):
        await server.peers[0].finished.wait()
    assert await fetch(transport) == SSE
    assert len(server.peers) == 2


@virtual_deadline(10)
async def test_cancellation_while_waiting_for_the_head_closes_the_connection(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    async def slow_first(peer: Peer) -> None:
        await peer.request()
        if peer.index == 0:
            await peer.wait_closed()
        else:
            await peer.send(ok())

    server = Server(nursery, slow_first)
    transport = server.transport(max_connections=1)
    with trio.move_on_after(3):
        await fetch(transport)
    assert trio.current_time() == 3.0
    assert transport.statistics() == TransportStatistics(0, 0, 0, 0)
    assert await fetch(transport) == b"ok"  # the slot was freed
    assert len(server.peers) == 2


@virtual_deadline(10)
async def test_response_closed_early_closes_the_connection_unless_the_body_is_all_there(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(ok(b"a short error body", "content-type: application/json"))
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
        await peer.wait_closed()

    server = Server(nursery, handler)
    transport = server.transport()
    first = await transport.send("POST", URL, HEADERS, b"{}")
    await first.aclose()  # never read, but fully arrived: the connection is reusable
    assert transport.statistics().idle == 1
    second = await transport.send("POST", URL, HEADERS, b"{}")
    assert len(server.peers) == 1
    await second.aclose()
    assert transport.statistics() == TransportStatistics(0, 0, 0, 0)


# -- bodies end to end ------------------------------------------------------------------------


@virtual_deadline(10)
async def test_chunked_edge_cases_dribbled_byte_by_byte(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    reply = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Request-Id: r1\r\n\r\n"
        b"1A;ext=1\r\n" + b"a" * 26 + b"\r\n"
        b"00000b\r\n" + b"b" * 11 + b"\r\n"
        b"0\r\nX-Trailer: t\r\n\r\n"
    )

    async def dribble(peer: Peer) -> None:
        while await peer.request() is not None:
            for i in range(len(reply)):
                await peer.send(reply[i : i + 1])
                await trio.sleep(0.001)

    server = Server(nursery, dribble)
    transport = server.transport()
    for _ in range(2):
        response = await transport.send("POST", URL, HEADERS, b"{}")
        assert response.status == 200
        assert response.headers["x-request-id"] == "r1"
        assert await read_all(response) == b"a" * 26 + b"b" * 11
    assert len(server.peers) == 1


@virtual_deadline(10)
async def test_gzip_stream_is_decoded(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    payload = SSE * 40
    packed = gzip.compress(payload)
    pieces = [packed[i : i + 50] for i in range(0, len(packed), 50)]
    reply = (
        b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n"
        + chunked(*pieces)
    )
    log: list[bytes] = []
    server = Server(nursery, keep_alive(reply, log))
    transport = server.transport()
    assert await fetch(transport) == payload
    assert b"\r\naccept-encoding: gzip\r\n" in log[0]


@pytest.mark.parametrize(("method", "status"), [("HEAD", 200), ("GET", 204), ("GET", 304)])
@virtual_deadline(10)
async def test_bodyless_responses_release_their_connection_at_once(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery, method: str, status: int
) -> None:
    reply = b"HTTP/1.1 %d X\r\ncontent-length: 5\r\n\r\n" % status
    log: list[bytes] = []
    server = Server(nursery, keep_alive(reply, log))
    transport = server.transport()
    response = await transport.send(method, URL, (), b"")
    assert transport.statistics().idle == 1
    assert await response.read_some() == b""
    await response.aclose()
    assert b"content-length" not in log[0]


@virtual_deadline(10)
async def test_large_body_is_sent_in_full(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    log: list[bytes] = []
    server = Server(nursery, keep_alive(ok(), log))
    transport = server.transport()
    body = bytes(range(256)) * 1000
    response = await transport.send("POST", URL, HEADERS, body)
    await read_all(response)
    assert log[0].endswith(b"\r\n\r\n" + body)


# -- connecting -------------------------------------------------------------------------------


@virtual_deadline(30)
async def test_connect_timeout(autojump_clock: trio.testing.MockClock) -> None:
    async def never(host: str, port: int) -> trio.abc.Stream:
        await trio.sleep_forever()
        raise AssertionError

    transport = FastTransport(open_stream=never, connect_timeout=7.5, trust_env=False)
    with pytest.raises(ConnectTimeout, match=r"api\.test:80"):
        await fetch(transport)
    assert trio.current_time() == 7.5
    assert transport.statistics() == TransportStatistics(0, 0, 0, 0)


@virtual_deadline(10)
async def test_connect_error(autojump_clock: trio.testing.MockClock) -> None:
    async def refuse(host: str, port: int) -> trio.abc.Stream:
        raise OSError(111, "Connection refused")

    transport = FastTransport(open_stream=refuse, trust_env=False)
    with pytest.raises(ConnectError, match=r"api\.test:80: Connection refused"):
        await fetch(transport)
    with pytest.raises(ConnectError, match="not usable"):
        await fetch(transport, "ftp://api.test/")


@virtual_deadline(10)
async def test_closed_transport_refuses_requests(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    server = Server(nursery, keep_alive(ok()))
    transport = server.transport()
    await fetch(transport)
    await transport.aclose()
    assert transport.statistics().connections == 0
    with trio.fail_after(1):
        await server.peers[0].finished.wait()
    with pytest.raises(trio.ClosedResourceError):
        await fetch(transport)


def test_statistics_is_frozen() -> None:
    stats = FastTransport(trust_env=False).statistics()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        stats.idle = 3  # type: ignore[misc]


# -- proxies ----------------------------------------------------------------------------------


@virtual_deadline(10)
async def test_http_target_through_an_http_proxy_uses_absolute_form(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    log: list[bytes] = []
    server = Server(nursery, keep_alive(ok(), log))
    transport = FastTransport(
        open_stream=server.open_stream, proxy="http://user:p%40ss@proxy.test:3128", trust_env=False
    )
    await fetch(transport, "http://api.test:8080/v1/x?y=1")
    assert server.dialed == [("proxy.test", 3128)]
    assert log[0].startswith(b"POST http://api.test:8080/v1/x?y=1 HTTP/1.1\r\n")
    assert b"\r\nhost: api.test:8080\r\n" in log[0]
    assert b"\r\nproxy-authorization: Basic dXNlcjpwQHNz\r\n" in log[0]


@virtual_deadline(10)
async def test_https_target_through_an_http_proxy_asks_for_a_tunnel(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    log: list[bytes] = []
    server = Server(
        nursery,
        keep_alive(b"HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n", log),
    )
    transport = FastTransport(
        open_stream=server.open_stream, proxy="proxy.test:3128", trust_env=False
    )
    with pytest.raises(ProxyError, match=r"refused a tunnel to api\.test:443 \(status 407\)"):
        await fetch(transport, "https://api.test/v1")
    assert log == [b"CONNECT api.test:443 HTTP/1.1\r\nhost: api.test:443\r\n\r\n"]
    assert transport.statistics() == TransportStatistics(0, 0, 0, 0)


@virtual_deadline(10)
async def test_unsupported_proxy_scheme_from_the_environment(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "socks5://user:secret@proxy.test:1080")
    monkeypatch.setenv("no_proxy", "internal.test")
    transport = FastTransport()
    with pytest.raises(ProxyError, match='transport = "httpx"') as info:
        await fetch(transport, "https://api.test/v1")
    assert "secret" not in str(info.value)
    assert "http://" in str(info.value)


@virtual_deadline(10)
async def test_tls_through_a_connect_tunnel(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    import ssl

    import trustme

    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("api.test").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    seen: list[bytes] = []

    async def proxy_then_tls_server(peer: Peer) -> None:
        connect = await peer.request()
        assert connect is not None
        seen.append(connect)
        await peer.send(b"HTTP/1.1 200 Connection established\r\n\r\n")
        tls = trio.SSLStream(peer.stream, server_context, server_side=True)
        inner = Peer(tls, peer.index)
        while (request := await inner.request()) is not None:
            seen.append(request)
            await inner.send(stream_reply(SSE))

    server = Server(nursery, proxy_then_tls_server)
    transport = FastTransport(
        open_stream=server.open_stream,
        proxy="http://u:p@proxy.test:8080",
        ssl_context=client_context,
        trust_env=False,
    )
    for _ in range(2):
        assert await fetch(transport, "https://api.test/v1/chat") == SSE
    assert len(server.peers) == 1
    assert seen[0] == (
        b"CONNECT api.test:443 HTTP/1.1\r\nhost: api.test:443\r\n"
        b"proxy-authorization: Basic dTpw\r\n\r\n"
    )
    assert seen[1].startswith(b"POST /v1/chat HTTP/1.1\r\n")
    assert b"proxy-authorization" not in seen[1]  # credentials go to the proxy only
    await transport.aclose()


async def test_sweep_closes_connections_idle_past_their_expiry(autojump_clock, nursery):
    """An origin not used again still has its expired idle connections closed by sweep()."""
    from sluice.simulator import SimulatorApp
    from tests.helpers import memory_transport

    with trio.fail_after(60):
        transport = memory_transport(SimulatorApp(), nursery)
        response = await transport.send(
            "POST",
            "http://sim/v1/chat/completions",
            (("content-type", "application/json"),),
            b'{"model":"m","messages":[{"role":"user","content":"hi"}]}',
        )
        while await response.read_some():
            pass
        await response.aclose()
        assert transport.statistics().idle == 1
        await transport.sweep()
        assert transport.statistics().idle == 1  # not expired yet
        await trio.sleep(transport.keepalive_expiry + 0.1)
        await transport.sweep()
        assert transport.statistics().idle == 0
        await transport.aclose()


# -- HTTP phases, noted only when the caller asks -----------------------------------------------

CONNECT_DELAY, THINK, TRICKLE = 0.05, 0.2, 0.1


def slow_connect(server: Server) -> Callable[[str, int], Awaitable[trio.abc.Stream]]:
    """``server.open_stream`` that takes ``CONNECT_DELAY`` seconds, as a TCP handshake would."""

    async def open_stream(host: str, port: int) -> trio.abc.Stream:
        await trio.sleep(CONNECT_DELAY)
        return await server.open_stream(host, port)

    return open_stream


def thinking_server(*, requests_per_connection: int = 1000) -> Handler:
    """Answers each request after ``THINK`` s with its head, then two chunks ``TRICKLE`` s
    apart, the last one ``TRICKLE`` s after that; closes after ``requests_per_connection``."""

    async def handler(peer: Peer) -> None:
        for _ in range(requests_per_connection):
            if await peer.request() is None:
                return
            await trio.sleep(THINK)
            await peer.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            await trio.sleep(TRICKLE)
            await peer.send(chunked(SSE)[: -len(b"0\r\n\r\n")])
            await trio.sleep(TRICKLE)
            await peer.send(b"0\r\n\r\n")

    return handler


async def measured(transport: FastTransport, phases: HttpPhases) -> bytes:
    response = await transport.send("POST", URL, HEADERS, b"{}", phases=phases)
    return await read_all(response)


@virtual_deadline(10)
async def test_phases_of_a_new_then_a_reused_connection(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    server = Server(nursery, thinking_server())
    transport = FastTransport(open_stream=slow_connect(server), trust_env=False)
    first, second = HttpPhases(), HttpPhases()
    start = trio.current_time()
    assert await measured(transport, first) == SSE
    assert first.started == start and first.pool_wait == 0
    assert first.reused is False
    assert first.connect == pytest.approx(CONNECT_DELAY, abs=1e-9)
    assert first.sent == first.connected
    assert first.time_to_headers == pytest.approx(THINK, abs=1e-9)
    assert first.receive == pytest.approx(2 * TRICKLE, abs=1e-9)
    assert first.done == trio.current_time()

    assert await measured(transport, second) == SSE
    assert second.reused is True
    assert second.connect is None  # nothing was opened
    assert second.connected == second.connecting == second.started
    assert second.time_to_headers == pytest.approx(THINK, abs=1e-9)
    assert second.receive == pytest.approx(2 * TRICKLE, abs=1e-9)
    assert len(server.peers) == 1
    assert "reused=True connect=- headers=200.000ms receive=200.000ms" in repr(second)


@virtual_deadline(10)
async def test_a_request_without_a_record_touches_no_earlier_record(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    # The record rides on the connection until its body ends; a later request on the same
    # connection that asked for none must find it gone, not stamp its own end on it.
    server = Server(nursery, thinking_server())
    transport = FastTransport(open_stream=slow_connect(server), trust_env=False)
    phases = HttpPhases()
    await measured(transport, phases)
    ended = phases.done
    assert await fetch(transport) == SSE
    assert phases.done == ended
    assert phases.receive == pytest.approx(2 * TRICKLE, abs=1e-9)


@virtual_deadline(10)
async def test_a_stale_pooled_connection_replaced_counts_as_a_new_one(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    server = Server(nursery, thinking_server(requests_per_connection=1))
    transport = FastTransport(open_stream=slow_connect(server), trust_env=False)
    await measured(transport, HttpPhases())
    await trio.testing.wait_all_tasks_blocked()  # the server has closed the pooled one
    phases = HttpPhases()
    await measured(transport, phases)
    assert len(server.peers) == 2
    assert phases.reused is False
    assert phases.connect == pytest.approx(CONNECT_DELAY, abs=1e-9)
    assert phases.time_to_headers == pytest.approx(THINK, abs=1e-9)


@virtual_deadline(10)
async def test_waiting_for_a_connection_slot_is_not_connect_time(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    server = Server(nursery, thinking_server())
    transport = FastTransport(open_stream=slow_connect(server), trust_env=False, max_connections=1)
    first, second = HttpPhases(), HttpPhases()
    async with trio.open_nursery() as calls:
        calls.start_soon(measured, transport, first)
        await trio.testing.wait_all_tasks_blocked()
        calls.start_soon(measured, transport, second)
    # The second waited for the first's whole exchange, then reused its connection.
    assert second.pool_wait == pytest.approx(CONNECT_DELAY + THINK + 2 * TRICKLE, abs=1e-9)
    assert second.reused is True and second.connect is None
    assert first.reused is False and first.connect == pytest.approx(CONNECT_DELAY, abs=1e-9)


@virtual_deadline(10)
async def test_phases_of_failed_and_bodyless_responses(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    async def cut_mid_body(peer: Peer) -> None:
        await peer.request()
        await trio.sleep(THINK)
        await peer.send(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf")

    transport = Server(nursery, cut_mid_body).transport()
    broken = HttpPhases()
    with pytest.raises(ReadError):
        await measured(transport, broken)
    assert broken.time_to_headers == pytest.approx(THINK, abs=1e-9)
    assert broken.done is None and broken.receive is None  # the body never ended

    head_only = HttpPhases()
    transport = Server(nursery, keep_alive(b"HTTP/1.1 204 No Content\r\n\r\n")).transport()
    response = await transport.send("GET", URL, (), b"", phases=head_only)
    assert head_only.receive == 0  # released with its head
    await response.aclose()

    refused = HttpPhases()
    with pytest.raises(ConnectError):
        await transport.send("GET", "ftp://nowhere/", (), b"", phases=refused)
    assert refused.reused is None and refused.connect is None


@virtual_deadline(10)
async def test_a_record_reused_for_another_request_starts_over(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    server = Server(nursery, thinking_server())
    transport = FastTransport(open_stream=slow_connect(server), trust_env=False)
    phases = HttpPhases()
    await measured(transport, phases)
    assert phases.reused is False
    await trio.sleep(1)
    response = await transport.send("POST", URL, HEADERS, b"{}", phases=phases)
    assert phases.reused is True and phases.connect is None
    assert phases.done is None and phases.receive is None  # this one's body is still due
    await read_all(response)
    assert phases.receive == pytest.approx(2 * TRICKLE, abs=1e-9)


class _SlowClose(trio.abc.Stream):
    """A client stream whose close waits for ``gate`` (even when cancelled): the pool's
    sweep or aclose is caught at an await between two connections."""

    def __init__(self, inner: trio.abc.Stream, closing: trio.Event, gate: trio.Event) -> None:
        self._inner = inner
        self._closing = closing
        self._gate = gate

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self._inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        self._closing.set()
        with trio.CancelScope(shield=True):
            await self._gate.wait()
        await self._inner.aclose()


@pytest.mark.parametrize("closing", ["sweep", "aclose"])
@virtual_deadline(600)
async def test_an_origin_added_while_the_pools_close_connections_is_no_error(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery, closing: str
) -> None:
    server = Server(nursery, keep_alive(ok(b"done")))
    entered, gate = trio.Event(), trio.Event()

    async def open_stream(host: str, port: int) -> trio.abc.Stream:
        stream = await server.open_stream(host, port)
        return _SlowClose(stream, entered, gate) if host == "a.test" else stream

    transport = FastTransport(open_stream=open_stream, trust_env=False)
    assert await fetch(transport, "http://a.test/v1/x") == b"done"
    await trio.sleep(transport.keepalive_expiry + 1)
    async with trio.open_nursery() as closers:
        closers.start_soon(transport.sweep if closing == "sweep" else transport.aclose)
        await entered.wait()  # the sweep is closing a.test's connection
        if closing == "sweep":
            assert await fetch(transport, "http://b.test/v1/x") == b"done"  # a new origin
        else:
            with pytest.raises(trio.ClosedResourceError):
                await fetch(transport, "http://b.test/v1/x")  # refused, yet its pool is made
        gate.set()
    assert server.dialed[0] == ("a.test", 80)
    assert transport.statistics().idle == (1 if closing == "sweep" else 0)
    await transport.aclose()
