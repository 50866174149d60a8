"""Both transports over real loopback sockets: the simulator, TLS with a test CA, idle closes.

Real clock, short ``trio.fail_after`` deadlines, behaviour asserted rather than timing.
"""

from __future__ import annotations

import functools
import gc
import ssl
import warnings
from typing import TYPE_CHECKING

import orjson
import pytest
import trio
import trio.testing
import trustme

from sluice.simulator import SimulatorConfig, serve_simulator
from sluice.transport import (
    ConnectError,
    FastTransport,
    HttpxTransport,
    TLSError,
    TransportStatistics,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sluice.transport import HotResponse, HotTransport

DEADLINE = 10
CHAT = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True})
HEADERS = (("content-type", "application/json"), ("authorization", "Bearer sk-loopback"))


async def read_all(response: HotResponse) -> bytes:
    pieces = []
    while piece := await response.read_some():
        pieces.append(piece)
    await response.aclose()
    return b"".join(pieces)


def sse_events(body: bytes) -> list[bytes]:
    return [line[6:] for line in body.split(b"\n") if line.startswith(b"data: ")]


@pytest.mark.parametrize("kind", ["fast", "httpx"])
async def test_streaming_chat_against_the_simulator(kind: str, nursery: trio.Nursery) -> None:
    with trio.fail_after(DEADLINE):
        port = await nursery.start(serve_simulator, SimulatorConfig(output_tokens=20))
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        transport: HotTransport = (
            FastTransport(trust_env=False) if kind == "fast" else HttpxTransport(trust_env=False)
        )
        try:
            for _ in range(3):
                response = await transport.send("POST", url, HEADERS, CHAT)
                assert response.status == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                events = sse_events(await read_all(response))
                assert events[-1] == b"[DONE]"
                chunks = [orjson.loads(e) for e in events[:-1]]
                assert len(chunks) == 22
                assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
            if isinstance(transport, FastTransport):
                assert transport.statistics() == TransportStatistics(1, 1, 0, 0)
        finally:
            await transport.aclose()


async def test_leaving_an_httpx_stream_early_does_not_warn(nursery: trio.Nursery) -> None:
    """encode/httpx#3686, against httpx's real connection pool rather than a mock."""
    config = SimulatorConfig(output_tokens=200, tokens_per_second=200)
    with trio.fail_after(DEADLINE), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        port = await nursery.start(serve_simulator, config)
        transport = HttpxTransport(trust_env=False)
        response = await transport.send(
            "POST", f"http://127.0.0.1:{port}/v1/chat/completions", HEADERS, CHAT
        )
        assert await response.read_some()
        await response.aclose()
        gc.collect()
        await trio.testing.wait_all_tasks_blocked()  # the collected generators' finalizers ran
        await transport.aclose()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


async def test_fast_transport_notices_a_kept_alive_connection_the_server_closed() -> None:
    """Over real sockets an idle connection's end-of-file is seen before anything is sent."""
    served: list[int] = []
    closed = trio.Event()

    async def one_reply_per_connection(stream: trio.SocketStream) -> None:
        served.append(1)
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                data += await stream.receive_some()
            await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        closed.set()

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                functools.partial(trio.serve_tcp, one_reply_per_connection, 0, host="127.0.0.1")
            )
            port = listeners[0].socket.getsockname()[1]
            transport = FastTransport(trust_env=False)
            url = f"http://127.0.0.1:{port}/"
            assert await read_all(await transport.send("GET", url, (), b"")) == b"ok"
            await closed.wait()  # the server has closed: its FIN is on the client's socket
            assert await read_all(await transport.send("GET", url, (), b"")) == b"ok"
            assert len(served) == 2
            await transport.aclose()
            nursery.cancel_scope.cancel()


async def test_connection_refused_is_a_connect_error() -> None:
    with trio.fail_after(DEADLINE):
        listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
        port = listener.socket.getsockname()[1]
        await listener.aclose()
        transport = FastTransport(trust_env=False)
        with pytest.raises(ConnectError, match=f"127.0.0.1:{port}"):
            await transport.send("GET", f"http://127.0.0.1:{port}/", (), b"")


# -- TLS ------------------------------------------------------------------------------------


async def serve_tls(
    ca: trustme.CA, nursery: trio.Nursery
) -> tuple[int, Callable[[], Awaitable[None]]]:
    """A one-route HTTPS server on 127.0.0.1 with a certificate from ``ca``."""
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(server_context)

    async def handler(stream: trio.SocketStream) -> None:
        tls = trio.SSLStream(stream, server_context, server_side=True)
        try:
            data = b""
            while True:
                while b"\r\n\r\n" not in data:
                    more = await tls.receive_some()
                    if not more:
                        return
                    data += more
                _, _, data = data.partition(b"\r\n\r\n")
                await tls.send_all(
                    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                    b"9\r\ndata: hi\n\r\n0\r\n\r\n"
                )
        except trio.BrokenResourceError:
            pass  # the client rejected our certificate
        finally:
            await trio.aclose_forcefully(tls)

    listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]

    async def stop() -> None:
        nursery.cancel_scope.cancel()

    return port, stop


async def test_tls_verifies_against_the_given_ca() -> None:
    ca = trustme.CA()
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            port, stop = await serve_tls(ca, nursery)
            transport = FastTransport(ssl_context=client_context, trust_env=False)
            for _ in range(2):
                response = await transport.send("GET", f"https://127.0.0.1:{port}/", (), b"")
                assert await read_all(response) == b"data: hi\n"
            assert transport.statistics().connections == 1
            await transport.aclose()
            await stop()


async def test_tls_without_the_ca_fails_verification() -> None:
    ca = trustme.CA()
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            port, stop = await serve_tls(ca, nursery)
            transport = FastTransport(trust_env=False)  # the system's default trust store
            with pytest.raises(TLSError, match=r"certificate verify failed|self.signed|issuer"):
                await transport.send("GET", f"https://127.0.0.1:{port}/", (), b"")
            assert transport.statistics().connections == 0
            await stop()


async def test_tls_hostname_mismatch_fails() -> None:
    ca = trustme.CA()
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            port, stop = await serve_tls(ca, nursery)

            async def wrong_name(host: str, port: int) -> trio.abc.Stream:
                return await trio.open_tcp_stream("127.0.0.1", port)

            transport = FastTransport(
                ssl_context=client_context, open_stream=wrong_name, trust_env=False
            )
            with pytest.raises(TLSError):
                await transport.send("GET", f"https://api.example:{port}/", (), b"")
            await stop()


async def test_httpx_adapter_maps_tls_failures_too() -> None:
    ca = trustme.CA()
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            port, stop = await serve_tls(ca, nursery)
            transport = HttpxTransport(trust_env=False)
            with pytest.raises(TLSError):
                await transport.send("GET", f"https://127.0.0.1:{port}/", (), b"")
            await transport.aclose()
            await stop()
