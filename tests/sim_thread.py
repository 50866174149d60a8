"""The simulator on loopback in a thread of its own, watching how each response ends.

For the front doors' tests (asyncio, threads, a FastAPI app): the code under test runs its own
event loop, so the simulator cannot share it. It tells, for every generation response, whether
its body was sent to the end or cut off because the client went away: a call abandoned on the
client's side shows up here as a ``cut`` response.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from typing import TYPE_CHECKING, Any

import trio

from sluice.simulator import SimResponse, SimulatorApp, SimulatorConfig
from sluice.simulator._server import serve_connection

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

_bodies: contextvars.ContextVar[list[_WatchedBody]] = contextvars.ContextVar("bodies")


class _WatchedBody:
    """A response body that notes whether it was read to the end."""

    def __init__(self, inner: AsyncIterator[bytes]) -> None:
        self._inner = inner
        self.finished = False

    def __aiter__(self) -> _WatchedBody:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._inner.__anext__()
        except StopAsyncIteration:
            self.finished = True
            raise


class _WatchingApp(SimulatorApp):
    def __init__(self, config: SimulatorConfig, changed: threading.Condition) -> None:
        super().__init__(config)
        self._changed = changed

    async def handle(self, method: str, path: str, headers: Any, body: bytes) -> SimResponse:
        response = await super().handle(method, path, headers, body)
        with self._changed:
            self._changed.notify_all()
        if response.content is not None or response.status != 200:
            return response
        watched = _WatchedBody(response.body)
        _bodies.get().append(watched)
        return SimResponse(response.status, response.headers, watched)


class WatchedSimulator:
    """Counts of the simulator's streamed responses, updated from the simulator's thread."""

    def __init__(self, config: SimulatorConfig) -> None:
        self._changed = threading.Condition()
        self.app = _WatchingApp(config, self._changed)
        self.url = ""
        self.started = 0
        """Streamed responses begun."""
        self.completed = 0
        """Streamed responses sent to the end."""
        self.cut = 0
        """Streamed responses whose connection ended before their body did."""

    async def _connection(self, stream: trio.SocketStream) -> None:
        bodies: list[_WatchedBody] = []
        _bodies.set(bodies)
        try:
            await serve_connection(self.app, stream)
        finally:
            with self._changed:
                for body in bodies:
                    self.started += 1
                    if body.finished:
                        self.completed += 1
                    else:
                        self.cut += 1
                self._changed.notify_all()

    def wait_for(
        self,
        *,
        requests: int | None = None,
        cut: int | None = None,
        completed: int | None = None,
        timeout: float = 10.0,
    ) -> None:
        """Wait until the counts reach these values: generation requests answered (their
        heads due), responses cut or completed (their connections must have closed)."""

        def reached() -> bool:
            return (
                (requests is None or self.app.chat_requests_seen >= requests)
                and (cut is None or self.cut >= cut)
                and (completed is None or self.completed >= completed)
            )

        with self._changed:
            assert self._changed.wait_for(reached, timeout), (
                f"wanted cut={cut} completed={completed}, have cut={self.cut} "
                f"completed={self.completed}"
            )


@contextlib.contextmanager
def simulator_thread(config: SimulatorConfig | None = None) -> Iterator[WatchedSimulator]:
    """Serve a watched simulator on 127.0.0.1 from a thread; yields it once it listens."""
    sim = WatchedSimulator(config or SimulatorConfig())
    ready = threading.Event()
    token: list[trio.lowlevel.TrioToken] = []
    scope = trio.CancelScope()

    async def main() -> None:
        token.append(trio.lowlevel.current_trio_token())
        with scope:
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            port = listeners[0].socket.getsockname()[1]
            sim.url = f"http://127.0.0.1:{port}/v1"
            async with trio.open_nursery() as nursery:
                await nursery.start(trio.serve_listeners, sim._connection, listeners)
                ready.set()
                await trio.sleep_forever()

    thread = threading.Thread(target=trio.run, args=(main,), name="simulator")
    thread.start()
    try:
        assert ready.wait(10), "the simulator did not start"
        yield sim
    finally:
        if token:
            with contextlib.suppress(trio.RunFinishedError):
                token[0].run_sync_soon(scope.cancel)
        thread.join(10)
