"""The consumer's handles: the event stream of one call, and the outcomes of a map.

A :class:`CallStream` reads the batches the Supervisor and the ProviderActor put in the call's
event channel (one wake-up for a burst); :func:`feed_map` is :meth:`Runtime.map`'s task, which
pulls requests only as slots free up and hands each one exactly one :class:`MapOutcome`.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable, Iterable

import attrs
import trio

from sluice.actors._tell import put, take

from ._cursor import AsyncEventCursor
from ._errors import SluiceError
from ._mail import EventBatch
from ._messages import ChatRequest, ChatResult
from ._record import Record

__all__ = ["CallStream", "MapOutcome", "MapOutcomes", "feed_map", "replayed"]


class CallStream(AsyncEventCursor):
    """The consumer's end of one call: iterate it for events; then read ``result`` or ``error``.

    Created by :meth:`Runtime.stream`, never directly. Leaving the ``async with`` block early
    abandons the call: its HTTP request is cancelled and nothing else is disturbed.
    """

    def __init__(
        self,
        call_id: str,
        receive: trio.MemoryReceiveChannel[EventBatch],
        on_result: Callable[[ChatResult], None] | None = None,
    ) -> None:
        super().__init__(call_id)
        self._receive = receive
        self._on_result = on_result
        """Told the result when ``Completed`` arrives (the response cache stores it)."""

    async def _next_batch(self) -> EventBatch | None:
        receive = self._receive
        try:
            batch = await take(receive)
        except trio.EndOfChannel:
            return self._arrived(None)
        # Take whatever else has arrived too: one wake-up for a burst of batches.
        while True:
            try:
                more = receive.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                break
            batch = [*batch, *more]
        return self._arrived(batch)

    def _completed(self, result: ChatResult) -> None:
        if self._on_result is not None:
            self._on_result(result)

    async def next_events(self) -> EventBatch | None:
        """The next events that arrived together (what one or more network reads decoded);
        None once the call has ended (``result`` or ``error`` is then set).

        For relays that write one message per burst (the gateway, the asyncio and blocking
        doors); do not mix with iteration.
        """
        return await self._next_batch()


@attrs.frozen(repr=False)
class MapOutcome(Record):
    """One finished request of :meth:`Runtime.map`: exactly one of ``result`` and ``error``."""

    index: int
    """Position of the request in the input."""
    request: ChatRequest
    result: ChatResult | None
    error: SluiceError | None


class MapOutcomes:
    """The outcomes of :meth:`Runtime.map`, in completion order: ``async for o in outcomes``."""

    def __init__(self, receive: trio.MemoryReceiveChannel[MapOutcome]) -> None:
        self._receive = receive

    def __aiter__(self) -> MapOutcomes:
        return self

    async def __anext__(self) -> MapOutcome:
        try:
            return await take(self._receive)
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    async def next_batch(self) -> list[MapOutcome] | None:
        """The next outcome and every other one already there (one wake-up for a burst);
        None once every request has its outcome. For the front doors, which pass outcomes to
        another event loop or thread in batches."""
        receive = self._receive
        try:
            batch = [await take(receive)]
        except trio.EndOfChannel:
            return None
        while True:
            try:
                batch.append(receive.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                return batch


def replayed(
    hit: ChatResult, quiet: bool
) -> tuple[CallStream, trio.MemoryReceiveChannel[EventBatch]]:
    """A stream that holds a cache hit's events, ready to be read, and its channel."""
    from ._cache import replay_events

    send, receive = trio.open_memory_channel[EventBatch](1)
    send.send_nowait(replay_events(hit, quiet=quiet))
    send.close()
    return CallStream(hit.call_id, receive), receive


async def feed_map(
    chat: Callable[[ChatRequest], Awaitable[ChatResult]],
    requests: Iterable[ChatRequest] | AsyncIterable[ChatRequest],
    send: trio.MemorySendChannel[MapOutcome],
    max_in_flight: int,
) -> None:
    """:meth:`Runtime.map`'s task: pull each request as a slot frees up, run it with ``chat``
    and hand its one outcome to ``send``; return (closing ``send``) once every request pulled
    has its outcome."""
    slots = trio.Semaphore(max_in_flight)
    index = 0
    async with send, trio.open_nursery() as calls:

        async def start(request: ChatRequest) -> None:
            nonlocal index
            try:
                slots.acquire_nowait()
            except trio.WouldBlock:
                await slots.acquire()
            calls.start_soon(_one, chat, index, request, send, slots)
            index += 1

        # Two plain loops rather than one async generator over both kinds: a generator
        # left unfinished by a cancelled map would be finalized by the garbage collector.
        if isinstance(requests, AsyncIterable):
            async for request in requests:
                await start(request)
        else:
            for request in requests:
                await start(request)

async def _one(
    chat: Callable[[ChatRequest], Awaitable[ChatResult]],
    index: int,
    request: ChatRequest,
    send: trio.MemorySendChannel[MapOutcome],
    slots: trio.Semaphore,
) -> None:
    # The slot is held until the outcome is handed over, so a slow consumer holds back
    # new calls: at most max_in_flight running plus max_in_flight waiting to be taken.
    # ``send`` is feed_map's own end, shared (no clone per call): feed_map closes it once
    # its nursery, this task included, is done.
    try:
        try:
            outcome = MapOutcome(index, request, await chat(request), None)
        except SluiceError as exc:
            outcome = MapOutcome(index, request, None, exc)
        try:
            await put(send, outcome)
        except trio.BrokenResourceError:
            pass  # the consumer left
    finally:
        slots.release()
