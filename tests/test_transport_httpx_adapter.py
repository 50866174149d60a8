"""HttpxTransport over ``httpx.MockTransport``: bodies, decoding, early close, error mapping."""

from __future__ import annotations

import gc
import gzip
import ssl
import warnings
from typing import TYPE_CHECKING

import httpx
import pytest
import trio
import trio.testing

from sluice.transport import (
    ConnectError,
    ConnectTimeout,
    HttpPhases,
    HttpxTransport,
    ProxyError,
    ReadError,
    RemoteProtocolError,
    ResponseTimeout,
    TLSError,
    TransportError,
    WriteError,
)

from .helpers import virtual_deadline

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from sluice.transport._httpx_adapter import HttpxResponse

URL = "https://api.test/v1/chat/completions"
SSE = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'


def transport_for(
    handler: Callable[[httpx.Request], httpx.Response],
) -> tuple[HttpxTransport, httpx.AsyncClient]:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return HttpxTransport(client), client


async def read_all(response: HttpxResponse) -> list[bytes]:
    pieces = []
    while piece := await response.read_some():
        pieces.append(piece)
    await response.aclose()
    return pieces


def paced(*pieces: bytes, gap: float = 0.5) -> AsyncIterator[bytes]:
    async def body() -> AsyncIterator[bytes]:
        for piece in pieces:
            await trio.sleep(gap)
            yield piece

    return body()


@virtual_deadline(10)
async def test_status_headers_and_body_pieces(autojump_clock: trio.testing.MockClock) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200,
            headers=[("X-Request-Id", "r1"), ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2")],
            content=paced(SSE, SSE),
        )

    transport, client = transport_for(handler)
    response = await transport.send("POST", URL, (("authorization", "Bearer k"),), b"{}")
    assert response.status == 200
    assert response.headers["x-request-id"] == "r1"
    assert response.headers["set-cookie"] == "a=1, b=2"
    assert await read_all(response) == [SSE, SSE]
    assert trio.current_time() == 1.0
    assert await response.read_some() == b""
    assert seen[0].headers["accept-encoding"] == "gzip, deflate"
    assert seen[0].headers["authorization"] == "Bearer k"
    assert seen[0].content == b"{}"
    await transport.aclose()
    assert not client.is_closed  # a client passed in stays the caller's


@virtual_deadline(10)
async def test_accept_encoding_given_by_the_caller_is_kept(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=b"x")

    transport, _ = transport_for(handler)
    await read_all(await transport.send("GET", URL, (("Accept-Encoding", "identity"),), b""))
    assert seen[0].headers.get_list("accept-encoding") == ["identity"]


@virtual_deadline(10)
async def test_gzip_body_is_decoded(autojump_clock: trio.testing.MockClock) -> None:
    packed = gzip.compress(SSE * 30)

    def handler(request: httpx.Request) -> httpx.Response:
        pieces = [packed[i : i + 40] for i in range(0, len(packed), 40)]
        return httpx.Response(200, headers={"content-encoding": "gzip"}, content=paced(*pieces))

    transport, _ = transport_for(handler)
    response = await transport.send("POST", URL, (), b"{}")
    assert b"".join(await read_all(response)) == SSE * 30


@virtual_deadline(10)
async def test_corrupt_gzip_is_a_protocol_error(autojump_clock: trio.testing.MockClock) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-encoding": "gzip"}, content=paced(b"not gzip"))

    transport, _ = transport_for(handler)
    response = await transport.send("GET", URL, (), b"")
    with pytest.raises(RemoteProtocolError):
        await response.read_some()
    await response.aclose()


@virtual_deadline(10)
async def test_leaving_a_stream_early_closes_every_generator_cleanly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """encode/httpx#3686: closing only the outer generator would leave inner ones to warn."""
    closed = trio.Event()

    async def endless() -> AsyncIterator[bytes]:
        try:
            while True:
                await trio.sleep(0.5)
                yield SSE
        finally:
            closed.set()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=endless())

    transport, _ = transport_for(handler)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        response = await transport.send("POST", URL, (), b"{}")
        assert await response.read_some() == SSE
        assert await response.read_some() == SSE
        with trio.CancelScope(shield=True):
            await response.aclose()
        assert closed.is_set()
        gc.collect()
        await trio.testing.wait_all_tasks_blocked()
    assert [str(w.message) for w in caught] == []
    await response.aclose()  # idempotent


@virtual_deadline(10)
async def test_cancelled_read_then_close_is_clean(autojump_clock: trio.testing.MockClock) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=paced(SSE, SSE, gap=5))

    transport, _ = transport_for(handler)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        response = await transport.send("POST", URL, (), b"{}")
        with trio.move_on_after(1) as interrupted:
            await response.read_some()
        assert interrupted.cancelled_caught
        await response.aclose()
        gc.collect()
        await trio.testing.wait_all_tasks_blocked()
    assert [str(w.message) for w in caught] == []


def _raise(exc: Exception) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    return handler


def _tls_failure() -> httpx.ConnectError:
    try:
        try:
            raise ssl.SSLCertVerificationError(1, "certificate verify failed")
        except ssl.SSLError as inner:
            raise httpx.ConnectError("certificate verify failed") from inner
    except httpx.ConnectError as exc:
        return exc


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (httpx.ConnectTimeout("slow"), ConnectTimeout),
        (httpx.PoolTimeout("pool"), ConnectTimeout),
        (httpx.ConnectError("refused"), ConnectError),
        (_tls_failure(), TLSError),
        (httpx.ProxyError("no"), ProxyError),
        (httpx.UnsupportedProtocol("ftp"), ConnectError),
        (httpx.ReadError("reset"), ReadError),
        (httpx.WriteError("reset"), WriteError),
        (httpx.RemoteProtocolError("bad"), RemoteProtocolError),
        (httpx.DecodingError("bad"), RemoteProtocolError),
        (httpx.LocalProtocolError("odd"), TransportError),
    ],
)
@virtual_deadline(10)
async def test_send_maps_httpx_errors(
    autojump_clock: trio.testing.MockClock, raised: Exception, expected: type[Exception]
) -> None:
    transport, _ = transport_for(_raise(raised))
    with pytest.raises(expected) as info:
        await transport.send("POST", URL, (), b"{}")
    assert type(info.value) is expected
    assert info.value.__cause__ is raised
    if isinstance(info.value, ReadError):
        assert not info.value.body_started


@pytest.mark.parametrize("url", ["ftp://api.test/", "http://\x00/"])
@virtual_deadline(10)
async def test_unusable_urls_are_connect_errors(
    autojump_clock: trio.testing.MockClock, url: str
) -> None:
    transport = HttpxTransport()
    with pytest.raises(ConnectError, match="not usable"):
        await transport.send("GET", url, (), b"")
    await transport.aclose()


@virtual_deadline(10)
async def test_connection_broken_mid_body_is_a_read_error_after_the_body_started(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield SSE
        await trio.sleep(1)
        raise httpx.ReadError("connection reset")

    transport, _ = transport_for(lambda request: httpx.Response(200, content=broken()))
    response = await transport.send("POST", URL, (), b"{}")
    assert await response.read_some() == SSE
    with pytest.raises(ReadError, match="connection reset") as info:
        await response.read_some()
    assert info.value.body_started
    await response.aclose()


@virtual_deadline(10)
async def test_built_client_is_closed_with_the_transport(
    autojump_clock: trio.testing.MockClock,
) -> None:
    transport = HttpxTransport(max_connections=3, keepalive_expiry=1.0, connect_timeout=2.0)
    client = transport._client
    assert client.timeout.connect == 2.0
    assert client.timeout.read is None
    await transport.aclose()
    assert client.is_closed


@virtual_deadline(10)
async def test_a_read_interrupted_by_cancellation_never_looks_like_the_end(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=paced(SSE, SSE, gap=5))

    transport, _ = transport_for(handler)
    response = await transport.send("POST", URL, (), b"{}")
    with trio.move_on_after(1) as interrupted:
        await response.read_some()
    assert interrupted.cancelled_caught
    with pytest.raises(trio.ClosedResourceError):
        await response.read_some()
    await response.aclose()
    with pytest.raises(trio.ClosedResourceError):
        await response.read_some()


@virtual_deadline(100)
async def test_a_head_that_never_comes_meets_the_head_timeout(autojump_clock):
    async def handler(request: httpx.Request) -> httpx.Response:
        await trio.sleep(1000)
        return httpx.Response(200)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        transport = HttpxTransport(client, head_timeout=12.5)
        with pytest.raises(ResponseTimeout, match=r"did not arrive within 12\.5 s"):
            await transport.send("POST", URL, (), b"{}")
    assert trio.current_time() == 12.5


async def test_httpx_says_nothing_of_its_phases_rather_than_guessing() -> None:
    # httpx reports neither when it connected nor whether it reused a connection: the
    # record is started over (a stale one from an earlier request would mislead) and its
    # phases stay unknown.
    transport, client = transport_for(lambda request: httpx.Response(200, content=b"ok"))
    phases = HttpPhases()
    phases.reused, phases.sent, phases.headers = True, 1.0, 2.0
    async with client:
        response = await transport.send("POST", URL, (), b"{}", phases=phases)
        assert await read_all(response) == [b"ok"]
    assert phases.started is not None
    assert phases.reused is None
    assert (phases.connect, phases.time_to_headers, phases.receive) == (None, None, None)
