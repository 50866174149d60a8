"""The consumer's handles: the event stream of one call, and the outcomes of a map.

A :class:`CallStream` reads the batches the Supervisor and the ProviderActor put in the call's
event channel (one wake-up for a burst); :func:`feed_map` is :meth:`Runtime.map`'s task, which
pulls requests only as slots free up and hands each one exactly one :class:`MapOutcome`. A
mapped call is quiet and has no event channel: the Supervisor puts its final batch straight
into its end (:class:`_MapEnd`), which hands the outcome over.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, TypeAlias

import attrs
import trio

from sluice.actors._tell import put, take

from ._call_result import outcome_of
from ._cursor import AsyncEventCursor
from ._errors import SluiceError
from ._mail import EventSink
from ._messages import ChatRequest, ChatResult
from ._record import Value

if TYPE_CHECKING:
    from ._mail import Call, EventBatch

__all__ = [
    "CallEnded",
    "CallStream",
    "Followed",
    "MapOutcome",
    "MapOutcomes",
    "SubmitQuiet",
    "feed_map",
    "replayed",
]


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


class Followed(CallStream):
    """A streamed call read as its events arrive: the call's :class:`EventSink` itself, so each
    batch is read (:meth:`read`) in the step of the task that puts it (the Supervisor's, the
    provider's, right after its network read) and the consumer's task is not woken per batch;
    it waits once, for the call's end (:meth:`wait`, or :meth:`next_events`, which then gives
    None). No memory channel. For sluice's load tester (``sluice._jobs.loadtest.follow``),
    submitted by ``Runtime.submit_followed``; a send after :meth:`leave` is refused as if a
    channel's consumer had left."""

    def __init__(self) -> None:
        AsyncEventCursor.__init__(self)
        self._on_result = None
        self._closed = False
        self._left = False
        self._end: trio.Event | None = None

    def bind(self, call: Call) -> None:
        """The call this follows (told before the Supervisor has it)."""
        self.call_id = call.call_id

    def read(self, batch: EventBatch) -> None:
        """Read ``batch``, which just arrived (called in the putting task's step)."""
        raise NotImplementedError

    def send_nowait(self, batch: EventBatch) -> None:
        if self._left:
            raise trio.ClosedResourceError("the call's consumer has left")
        self.read(batch)
        self._arrived(batch)

    async def send(self, batch: EventBatch) -> None:
        self.send_nowait(batch)  # never full: read as it comes

    def close(self) -> None:
        self._closed = True
        if self._end is not None:
            self._end.set()

    def leave(self) -> None:
        """The consumer is done: no more batches are taken."""
        self._left = True

    async def _next_batch(self) -> EventBatch | None:
        if not self._closed:  # else no checkpoint: the end is already here
            self._end = trio.Event()
            await self._end.wait()
        return self._arrived(None)


@attrs.frozen(eq=False, repr=False)
class MapOutcome(Value):
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
    from ._mail import EventBatch  # made with the union of the events, which a hit's load

    send, receive = trio.open_memory_channel[EventBatch](1)
    send.send_nowait(replay_events(hit, quiet=quiet))
    send.close()
    return CallStream(hit.call_id, receive), receive


SubmitQuiet: TypeAlias = Callable[
    [ChatRequest, EventSink, "Callable[[Call], None] | None"], Awaitable["Call | None"]
]
"""Submits a request as a quiet call whose final batch goes to the given end, telling the
callback the call before the Supervisor has it, and returns the call; None when the request
goes through the response cache (it then takes ``chat``)."""
CallEnded: TypeAlias = Callable[["Call", ChatResult | None, SluiceError | None], None]
"""Told how each call ended (the observer), once its outcome is handed over or it is left."""


class _MapFeed:
    """What :func:`feed_map` shares with the ends of its calls (:class:`_MapEnd`)."""

    __slots__ = ("closed", "ended", "in_flight", "nursery", "send", "slots")

    def __init__(
        self,
        send: trio.MemorySendChannel[MapOutcome],
        slots: trio.Semaphore,
        nursery: trio.Nursery,
        ended: CallEnded,
    ) -> None:
        self.send = send
        self.slots = slots
        self.nursery = nursery
        self.ended = ended
        self.in_flight: set[_MapEnd] = set()
        """The quiet calls whose outcome is not handed over yet: abandoned if the map is left."""
        self.closed = False


class _MapEnd:
    """The end of one mapped call, given to the Supervisor as the call's :class:`EventSink`:
    its one final batch becomes the request's :class:`MapOutcome`, handed over and its slot
    freed right there, in the Supervisor's task for the call. So a mapped call costs the map
    no task of its own, and no event channel.

    The outcome channel has room for every call in flight; when a slow consumer lets it fill,
    the Supervisor's ``put`` waits in :meth:`send` (the slot stays held meanwhile, as it did
    while a task per call waited). A second batch is refused as if the consumer had left."""

    __slots__ = ("call", "feed", "index", "request")

    def __init__(self, feed: _MapFeed, index: int, request: ChatRequest) -> None:
        self.feed = feed
        self.index = index
        self.request = request
        self.call: Call | None = None

    def bind(self, call: Call) -> None:
        self.call = call

    def _outcome(self, batch: EventBatch) -> MapOutcome:
        if self not in self.feed.in_flight:
            raise trio.ClosedResourceError("the call's outcome was handed over or left")
        assert self.call is not None
        result, error = outcome_of(batch, self.call.call_id)
        return MapOutcome(self.index, self.request, result, error)

    def send_nowait(self, batch: EventBatch) -> None:
        outcome = self._outcome(batch)
        self.feed.send.send_nowait(outcome)
        self._handed(outcome)

    async def send(self, batch: EventBatch) -> None:
        outcome = self._outcome(batch)
        await self.feed.send.send(outcome)
        self._handed(outcome)

    def close(self) -> None:
        """The Supervisor is done with the call. One that ended without an outcome (the
        runtime stopped under it) still gets one, unless the map was left."""
        feed = self.feed
        call = self.call
        if call is None or self not in feed.in_flight:
            return  # never submitted (its submitter has it), or already handed over
        if call.abandoned or feed.closed:
            self.call = None
            feed.in_flight.discard(self)
            feed.slots.release()
            return
        outcome = self._outcome(())
        try:
            feed.send.send_nowait(outcome)
        except trio.WouldBlock:
            feed.nursery.start_soon(self._hand_over, outcome)
            return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        self._handed(outcome)

    async def _hand_over(self, outcome: MapOutcome) -> None:
        try:
            await self.feed.send.send(outcome)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        self._handed(outcome)

    def _handed(self, outcome: MapOutcome) -> None:
        feed, call = self.feed, self.call
        assert call is not None
        self.call = None  # the call holds this end: no cycle left for the collector
        feed.in_flight.discard(self)
        feed.slots.release()
        feed.ended(call, outcome.result, outcome.error)


async def feed_map(
    chat: Callable[[ChatRequest], Awaitable[ChatResult]],
    submit: SubmitQuiet,
    ended: CallEnded,
    requests: Iterable[ChatRequest] | AsyncIterable[ChatRequest],
    send: trio.MemorySendChannel[MapOutcome],
    max_in_flight: int,
) -> None:
    """:meth:`Runtime.map`'s task: pull each request as a slot frees up, submit it as a quiet
    call (``submit``; a request answered through the response cache runs with ``chat`` in a
    task of its own) and hand its one outcome to ``send``; return (closing ``send``) once
    every request pulled has its outcome. Cancelled (the consumer left), it abandons every
    call still running."""
    slots = trio.Semaphore(max_in_flight)
    index = 0
    async with send, trio.open_nursery() as calls:
        feed = _MapFeed(send, slots, calls, ended)

        async def start(request: ChatRequest) -> None:
            nonlocal index
            # Looked at first: a full map waits here for every call, and a WouldBlock raised
            # and caught each time costs more than the check.
            if slots.value:
                slots.acquire_nowait()
            else:
                await slots.acquire()
            at = index
            index += 1
            end = _MapEnd(feed, at, request)
            feed.in_flight.add(end)
            try:
                # The end learns its call before the Supervisor can end it (``_MapEnd.bind``).
                submitted = await submit(request, end, end.bind)
            except SluiceError as exc:
                feed.in_flight.discard(end)
                try:
                    await put(send, MapOutcome(at, request, None, exc))
                except trio.BrokenResourceError:
                    pass  # the consumer left
                finally:
                    slots.release()
                return
            except BaseException:
                feed.in_flight.discard(end)
                slots.release()
                raise
            if submitted is None:  # through the response cache: the ordinary way
                feed.in_flight.discard(end)
                calls.start_soon(_one, chat, at, request, send, slots)

        try:
            # Two plain loops rather than one async generator over both kinds: a generator
            # left unfinished by a cancelled map would be finalized by the garbage collector.
            if isinstance(requests, AsyncIterable):
                async for request in requests:
                    await start(request)
            else:
                for request in requests:
                    await start(request)
            # Every slot free again: every outcome handed over.
            for _ in range(max_in_flight):
                try:
                    slots.acquire_nowait()
                except trio.WouldBlock:
                    await slots.acquire()
        finally:
            feed.closed = True
            for end in [*feed.in_flight]:
                feed.in_flight.discard(end)
                left, end.call = end.call, None
                if left is not None:
                    left.abandon()
                    ended(left, None, None)


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
