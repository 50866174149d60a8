"""A gateway in front of the simulator, driven over trio memory streams (virtual time safe).

The gateway's real HTTP server loop serves each connection of a test client (sluice's own
HTTP/1.1 client over ``memory_stream_pair``); the runtime behind it reaches the simulator's
real server loop the same way. Real bytes on both sides, no sockets.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import orjson
import trio
import trio.testing

import sluice
from sluice._gateway import GatewaySettings, KeyRing, Server, ServerLimits, open_gateway
from sluice.simulator import SimulatorApp, SimulatorConfig
from sluice.simulator._server import serve_connection as serve_simulator_connection
from sluice.transport import FastTransport

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from sluice._gateway import Gateway

CONFIG = {"ledger": {"persist": False}}


class Harness:
    """The gateway, its HTTP server, the simulator app behind it, and a client."""

    def __init__(self, gateway: Gateway, server: Server, sim: SimulatorApp, nursery: Any) -> None:
        self.gateway = gateway
        self.server = server
        self.sim = sim
        self.nursery = nursery
        self.sim_closed: list[float] = []
        """When each simulator connection ended (trio time)."""
        self.sim_closed_event = trio.Event()

        async def open_stream(host: str, port: int) -> trio.abc.Stream:
            return self.connect()

        self.client = FastTransport(open_stream=open_stream, max_connections=1000)

    def connect(
        self,
    ) -> trio.StapledStream[trio.testing.MemorySendStream, trio.testing.MemoryReceiveStream]:
        """A new raw connection to the gateway."""
        client, server = trio.testing.memory_stream_pair()
        self.nursery.start_soon(self.server.serve_connection, server)
        return client

    async def call(
        self,
        path: str,
        body: Any,
        *,
        token: str | None = None,
        headers: tuple[tuple[str, str], ...] = (),
        method: str = "POST",
    ) -> tuple[int, dict[str, str], bytes]:
        """One request; the whole response."""
        sent = list(headers)
        if token is not None:
            sent.append(("authorization", f"Bearer {token}"))
        data = b"" if body is None else orjson.dumps(body)
        if data:
            sent.append(("content-type", "application/json"))
        response = await self.client.send(method, f"http://gateway.test{path}", tuple(sent), data)
        try:
            chunks = []
            while piece := await response.read_some():
                chunks.append(piece)
        finally:
            await response.aclose()
        return response.status, dict(response.headers), b"".join(chunks)


@contextlib.asynccontextmanager
async def gateway_harness(
    *,
    keys: KeyRing | None = None,
    sim: SimulatorConfig | None = None,
    settings: GatewaySettings | None = None,
    limits: ServerLimits | None = None,
    config: dict[str, Any] | None = None,
    **runtime_options: Any,
) -> AsyncIterator[Harness]:
    app = SimulatorApp(sim or SimulatorConfig())
    async with trio.open_nursery() as nursery:
        harness_box: list[Harness] = []

        async def serve_sim(stream: trio.abc.Stream) -> None:
            try:
                await serve_simulator_connection(app, stream)
            finally:
                harness_box[0].sim_closed.append(trio.current_time())
                harness_box[0].sim_closed_event.set()

        async def open_sim(host: str, port: int) -> trio.abc.Stream:
            client, server = trio.testing.memory_stream_pair()
            nursery.start_soon(serve_sim, server)
            return client

        transport = FastTransport(open_stream=open_sim, max_connections=1000)
        async with open_gateway(
            sluice.load_config(config or CONFIG),
            keys=keys,
            settings=settings,
            transport=transport,
            catch_bugs=False,
            **runtime_options,
        ) as gateway:
            server = Server(gateway.handle, limits, vet=gateway.vet)
            gateway.server = server
            harness = Harness(gateway, server, app, nursery)
            harness_box.append(harness)
            try:
                yield harness
            finally:
                await harness.client.aclose()
                await transport.aclose()
        nursery.cancel_scope.cancel()


def chat_body(model: str = "sim:sim-small", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


def messages_body(model: str = "sim:sim-small", **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi"}],
        **extra,
    }


ANTHROPIC = (("anthropic-version", "2023-06-01"),)
