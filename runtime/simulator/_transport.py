"""The simulator as an ``httpx.MockTransport``: the same app, no sockets.

Under trio's ``MockClock`` (pytest-trio's ``autojump_clock``) the simulated latency is
virtual, so runtime tests can drive a realistic provider in microseconds and assert exact
times. The response head arrives when :meth:`SimulatorApp.handle` returns; body pieces arrive
as the app releases them. A simulated disconnect surfaces as the error httpx raises for a
real cut body, and a simulated reset as the one it raises for a server that hangs up without
answering.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx

from ._app import SimulatedDisconnect, SimulatedReset, SimulatorApp

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ._config import SimulatorConfig

__all__ = ["DISCONNECT_MESSAGE", "RESET_MESSAGE", "mock_transport"]

DISCONNECT_MESSAGE = "peer closed connection without sending complete message body (simulated)"
"""Message of the ``httpx.RemoteProtocolError`` a simulated disconnect raises."""
RESET_MESSAGE = "Server disconnected without sending a response."
"""Message of the ``httpx.RemoteProtocolError`` a simulated reset raises (httpcore's own)."""


class _SimStream(httpx.AsyncByteStream):
    """Relays an app body to httpx; a plain iterator (not an async generator), so leaving
    early leaves nothing for the garbage collector to finalize."""

    def __init__(self, body: AsyncIterator[bytes], request: httpx.Request) -> None:
        self._body = body
        self._request = request

    def __aiter__(self) -> _SimStream:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._body.__anext__()
        except SimulatedDisconnect as exc:
            raise httpx.RemoteProtocolError(DISCONNECT_MESSAGE, request=self._request) from exc


def mock_transport(
    app_or_config: SimulatorApp | SimulatorConfig | None = None,
) -> httpx.MockTransport:
    """An httpx transport whose every request is answered by a :class:`SimulatorApp`.

    Pass an app to share its counters and fault dice with the caller, or a config (or
    nothing, for the defaults) to get a fresh app. Use it with ``httpx.AsyncClient`` under
    trio: ``httpx.AsyncClient(transport=mock_transport(cfg), base_url="http://sim/v1")``.
    """
    app = app_or_config if isinstance(app_or_config, SimulatorApp) else SimulatorApp(app_or_config)

    async def handler(request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        try:
            response = await app.handle(
                request.method, request.url.raw_path.decode("ascii"), request.headers.raw, body
            )
        except SimulatedReset as exc:
            raise httpx.RemoteProtocolError(RESET_MESSAGE, request=request) from exc
        stream: httpx.AsyncByteStream
        if request.method == "HEAD":
            stream = httpx.ByteStream(b"")
        elif response.content is not None:
            stream = httpx.ByteStream(response.content)  # not content=: that pre-reads the body
        else:
            stream = _SimStream(response.body, request)
        return httpx.Response(response.status, headers=response.headers, stream=stream)

    return httpx.MockTransport(handler)
