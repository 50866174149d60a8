"""``Runtime.embed_many``'s tasks: inputs packed into requests, run a few at once, and every
input's outcome handed to the consumer in input order.

Memory is bounded, whatever the size of the input: a request holds a *slot* from when it is
packed until its outcomes are handed over, and inputs are read only while a slot is free, so
at most ``max_in_flight`` requests' inputs and vectors (plus the one being packed) are held.
Outcomes come out in input order: a request that finished early waits for the ones before it
(and holds its slot meanwhile, which is what bounds the read-ahead). A request that fails
fails only its own inputs: each gets the error, and the rest go on.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import attrs
import trio

from ._errors import BadRequest, SluiceError
from ._record import Record

if TYPE_CHECKING:
    from ._embed_packing import Packer
    from ._embeddings import EmbedRequest, EmbedResult

__all__ = ["EmbedOutcome", "EmbedOutcomes", "feed_embed_many"]


@attrs.frozen(repr=False)
class EmbedOutcome(Record):
    """One input of :meth:`Runtime.embed_many`: exactly one of ``vector`` and ``error``."""

    index: int
    """Position of the input in the input."""
    text: str
    vector: Sequence[float] | None
    error: SluiceError | None
    """The error of the request the input was sent in (its other inputs share it)."""


class EmbedCounts:
    """What an ``embed_many`` has done so far (its emitting task writes, anyone reads)."""

    __slots__ = ("failed", "inputs", "requests")

    def __init__(self) -> None:
        self.requests = 0
        """Requests sent that ended (each is one embedding call, its retries included)."""
        self.inputs = 0
        """Inputs whose outcome was handed over."""
        self.failed = 0
        """Of those, inputs whose request failed."""


class EmbedOutcomes:
    """The outcomes of :meth:`Runtime.embed_many`, one per input in input order:
    ``async for outcome in outcomes``. ``requests``, ``inputs`` and ``failed`` count what was
    handed over so far."""

    def __init__(
        self, receive: trio.MemoryReceiveChannel[list[EmbedOutcome]], counts: EmbedCounts
    ) -> None:
        self._receive = receive
        self._counts = counts
        self._batch: list[EmbedOutcome] = []
        self._pos = 0

    @property
    def requests(self) -> int:
        return self._counts.requests

    @property
    def inputs(self) -> int:
        return self._counts.inputs

    @property
    def failed(self) -> int:
        return self._counts.failed

    def __aiter__(self) -> EmbedOutcomes:
        return self

    async def __anext__(self) -> EmbedOutcome:
        while self._pos >= len(self._batch):
            try:
                self._batch = await self._receive.receive()
            except trio.EndOfChannel:
                raise StopAsyncIteration from None
            self._pos = 0
        outcome = self._batch[self._pos]
        self._pos += 1
        return outcome

    async def next_batch(self) -> list[EmbedOutcome] | None:
        """The outcomes of the next request, in order (None once every input has its
        outcome). For the front doors, which pass outcomes on in batches; do not mix with
        iteration."""
        try:
            return await self._receive.receive()
        except trio.EndOfChannel:
            return None


class _Request:
    """One packed request while it runs: its inputs, and then its vectors or its error."""

    __slots__ = ("done", "error", "first", "sent", "texts", "vectors")

    def __init__(self, first: int, texts: list[str], error: SluiceError | None = None) -> None:
        self.first = first
        self.texts = texts
        self.sent = error is None
        """It goes to the provider (an input that is no string fails without a request)."""
        self.vectors: Sequence[Sequence[float]] = ()
        self.error = error
        self.done = trio.Event()
        if error is not None:
            self.done.set()


async def feed_embed_many(
    embed: Callable[[EmbedRequest], Awaitable[EmbedResult]],
    texts: Iterable[str] | AsyncIterable[str],
    template: EmbedRequest,
    packer: Packer,
    max_in_flight: int,
    send: trio.MemorySendChannel[list[EmbedOutcome]],
    counts: EmbedCounts,
) -> None:
    """``embed_many``'s task: pack ``texts`` with ``packer``, run each request as ``template``
    with those inputs through ``embed`` (at most ``max_in_flight`` held at once), and hand
    each request's outcomes to ``send`` in input order; return (closing ``send``) once every
    input read has its outcome."""
    slots = trio.Semaphore(max_in_flight)
    order_send, order_receive = trio.open_memory_channel[_Request](max_in_flight)
    first = 0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_hand_over, order_receive, send, slots, counts)

        async def start(request: _Request) -> None:
            nonlocal first
            await slots.acquire()
            first += len(request.texts)
            if not request.done.is_set():
                nursery.start_soon(_run, embed, template, request)
            await order_send.send(request)

        async def take(text: object) -> None:
            if type(text) is not str:
                waiting = packer.flush()
                if waiting is not None:
                    await start(_Request(first, waiting))
                error = BadRequest(f"input {first} is a {type(text).__name__}, not a string")
                await start(_Request(first, [repr(text)], error))
                return
            closed = packer.add(text)
            if closed is not None:
                await start(_Request(first, closed))

        with order_send:
            # Two plain loops rather than one async generator over both kinds (as in map).
            if isinstance(texts, AsyncIterable):
                async for text in texts:
                    await take(text)
            else:
                for text in texts:
                    await take(text)
            last = packer.flush()
            if last is not None:
                await start(_Request(first, last))


async def _run(
    embed: Callable[[EmbedRequest], Awaitable[EmbedResult]],
    template: EmbedRequest,
    request: _Request,
) -> None:
    try:
        result = await embed(attrs.evolve(template, input=request.texts))
        request.vectors = result.vectors
    except SluiceError as exc:
        request.error = exc
    finally:
        request.done.set()


async def _hand_over(
    order: trio.MemoryReceiveChannel[_Request],
    send: trio.MemorySendChannel[list[EmbedOutcome]],
    slots: trio.Semaphore,
    counts: EmbedCounts,
) -> None:
    """Hand each request's outcomes over in the order the requests were packed, freeing its
    slot once the consumer has them."""
    with send, order:
        async for request in order:
            await request.done.wait()
            first, error = request.first, request.error
            if error is None:
                outcomes = [
                    EmbedOutcome(first + i, text, vector, None)
                    for i, (text, vector) in enumerate(
                        zip(request.texts, request.vectors, strict=True)
                    )
                ]
            else:
                outcomes = [
                    EmbedOutcome(first + i, text, None, error)
                    for i, text in enumerate(request.texts)
                ]
                counts.failed += len(outcomes)
            counts.requests += request.sent
            counts.inputs += len(outcomes)
            try:
                await send.send(outcomes)
            except trio.BrokenResourceError:
                return  # the consumer left
            slots.release()
