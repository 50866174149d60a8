"""Response bodies that release their bytes on trio's clock.

Each is a plain async iterator (not an async generator), so a front end that stops reading
early leaves nothing for the garbage collector to finalize. A body that ends in a cut raises
:class:`SimulatedDisconnect` where the server drops the connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ["Body", "ScheduledBody", "SimulatedDisconnect", "TrickleBody"]


class SimulatedDisconnect(Exception):
    """Raised by a response body at the point where the server drops the connection.

    Front ends translate it: the HTTP server closes the socket without finishing the body,
    the httpx transport raises ``httpx.RemoteProtocolError``.
    """


class Body:
    """Yields ``slots[i]`` at ``start + i * interval`` (slot 0 at once), then ends or cuts.

    A reader that falls behind gets every slot already due in one piece, so a slow consumer
    costs fewer, larger writes rather than a backlog of small ones.
    """

    __slots__ = ("_cut", "_interval", "_next", "_slots", "_start")

    def __init__(
        self, slots: list[bytes], *, start: float = 0.0, interval: float = 0.0, cut: bool = False
    ) -> None:
        self._slots = slots
        self._start = start
        self._interval = interval
        self._cut = cut
        self._next = 0

    def __aiter__(self) -> Body:
        return self

    async def __anext__(self) -> bytes:
        i = self._next
        if i >= len(self._slots):
            if self._cut:
                raise SimulatedDisconnect("the simulator dropped the connection mid-body")
            raise StopAsyncIteration
        interval = self._interval
        if not interval:
            self._next = i + 1
            return self._slots[i]
        start = self._start
        if i:
            await trio.sleep_until(start + i * interval)
        now = trio.current_time()
        end = i + 1
        while end < len(self._slots) and start + end * interval <= now:
            end += 1
        self._next = end
        return self._slots[i] if end == i + 1 else b"".join(self._slots[i:end])


class ScheduledBody:
    """Yields ``pieces[i]`` at ``times[i]`` (absolute trio times), then ends or cuts.

    Like :class:`Body`, a reader that falls behind gets the pieces already due together.
    """

    __slots__ = ("_cut", "_next", "_pieces", "_times")

    def __init__(self, pieces: list[bytes], times: list[float], *, cut: bool = False) -> None:
        self._pieces = pieces
        self._times = times
        self._cut = cut
        self._next = 0

    def __aiter__(self) -> ScheduledBody:
        return self

    async def __anext__(self) -> bytes:
        i = self._next
        if i >= len(self._pieces):
            if self._cut:
                raise SimulatedDisconnect("the simulator dropped the connection mid-body")
            raise StopAsyncIteration
        await trio.sleep_until(self._times[i])
        now = trio.current_time()
        end = i + 1
        while end < len(self._pieces) and self._times[end] <= now:
            end += 1
        self._next = end
        return self._pieces[i] if end == i + 1 else b"".join(self._pieces[i:end])


class TrickleBody:
    """Passes ``inner``'s bytes on ``size`` bytes at a time, at least ``interval`` apart.

    The first piece goes out as soon as ``inner`` releases it; a cut of ``inner`` is passed on
    after the bytes before it.
    """

    __slots__ = ("_due", "_inner", "_interval", "_pending", "_size")

    def __init__(self, inner: AsyncIterator[bytes], *, size: int, interval: float) -> None:
        self._inner = inner
        self._size = size
        self._interval = interval
        self._pending = b""
        self._due: float | None = None

    def __aiter__(self) -> TrickleBody:
        return self

    async def __anext__(self) -> bytes:
        while not self._pending:
            self._pending = await self._inner.__anext__()
        if self._due is not None:
            await trio.sleep_until(self._due)
        piece, self._pending = self._pending[: self._size], self._pending[self._size :]
        self._due = trio.current_time() + self._interval
        return piece
