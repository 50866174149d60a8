"""sluice from asyncio: the trio runtime, run as a guest of the running asyncio loop.

::

    async with sluice.aio.open_runtime(config) as rt:
        reply = await rt.chat(ChatRequest(model="sim:sim-small", messages="hi"))
        async with rt.stream(request) as call:
            async for event in call:
                ...

The surface is the trio API's (:class:`sluice.Runtime`), with the same classes of events,
results and errors. The actors stay trio: every runtime on a loop shares one trio guest run
on the loop's own thread (:mod:`sluice._guest`), so there is no second event loop and no
thread hop per call. Cancelling the asyncio task that waits on a call abandons the call and
its HTTP request, as leaving its block does in trio. Leaving ``open_runtime``'s block lets
the calls in flight finish (as in trio); leaving it with an exception stops them at once.

This module loads on first use of ``sluice.aio``: ``import sluice`` does not load asyncio.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

import trio

from ._cursor import AsyncEventCursor
from ._doors import (
    DoorLedger,
    LedgerCore,
    Link,
    awaited,
    relay_embed_many,
    relay_map,
    relay_stream,
)
from ._errors import RuntimeClosed, SluiceError
from ._guest import Guest, Pipe, await_host, run_in_trio
from ._messages import as_request
from ._runtime import MapOutcome, RuntimeStatistics
from ._runtime import Runtime as TrioRuntime
from ._runtime import open_runtime as open_trio_runtime

if TYPE_CHECKING:
    import os

    from ._cache import ResponseCache
    from ._config import RuntimeConfig
    from ._embed_many import EmbedOutcome  # noqa: F401 (named in EmbedOutcomes's base)
    from ._embeddings import EmbedRequest, EmbedResult
    from ._jobs.batch import BatchSummary
    from ._ledger.book import LedgerTotals
    from ._mail import EventBatch
    from ._messages import ChatRequest, ChatResult, Message

__all__ = [
    "CallStream",
    "EmbedOutcomes",
    "Ledger",
    "MapOutcomes",
    "Runtime",
    "open_runtime",
    "run_batch",
]

T = TypeVar("T")

_STREAM_WINDOW = 8
"""Event batches a stream's consumer may leave unread before the call waits for it."""
_MAP_WINDOW = 2
"""Batches of outcomes a map's consumer may leave unread (each holds at most
``max_in_flight`` outcomes, so at most ``2 * max_in_flight`` wait, as in trio)."""


class _Link(Link[T]):
    """A stream's or map's :class:`Link` to the asyncio side: a :class:`Pipe` and the future
    the opener awaits."""

    def __init__(self, loop: asyncio.AbstractEventLoop, window: int) -> None:
        super().__init__()
        self.pipe: Pipe[T] = Pipe(loop, window)
        self.submitted: asyncio.Future[None] = loop.create_future()

    async def put(self, item: T) -> None:
        await self.pipe.put(item)

    def end(self) -> None:
        self.pipe.end()

    def opened(self, error: BaseException | None = None) -> bool:
        if self.submitted.done():
            return False
        if error is None:
            self.submitted.set_result(None)
        else:
            self.submitted.set_exception(error)
        return True

    def close(self, reason: str) -> None:
        if not self.pipe.ended:
            self.scope.cancel(reason=reason)


class CallStream(AsyncEventCursor):
    """The consumer's end of one call: ``async for event in call``; then ``result`` or
    ``error``. Created by :meth:`Runtime.stream`, like :class:`sluice.CallStream`."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._link: _Link[EventBatch] = _Link(loop, _STREAM_WINDOW)

    async def _next_batch(self) -> EventBatch | None:
        link = self._link
        batch = await link.pipe.get()
        closing = link.closing_error
        assert closing is None or isinstance(closing, SluiceError)
        return self._arrived(batch, closing)


class _Outcomes(Generic[T]):
    """Outcomes handed over from trio in batches: ``async for o in outcomes``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._link: _Link[list[T]] = _Link(loop, _MAP_WINDOW)
        self._batch: list[T] = []
        self._pos = 0

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T:
        while self._pos >= len(self._batch):
            batch = await self._link.pipe.get()
            if batch is None:
                error, self._link.closing_error = self._link.closing_error, None
                if error is not None:
                    raise error
                raise StopAsyncIteration
            self._batch, self._pos = batch, 0
        outcome = self._batch[self._pos]
        self._pos += 1
        return outcome


class MapOutcomes(_Outcomes[MapOutcome]):
    """The outcomes of :meth:`Runtime.map`, in completion order: ``async for o in outcomes``."""


class EmbedOutcomes(_Outcomes["EmbedOutcome"]):
    """The outcomes of :meth:`Runtime.embed_many`, one per input in input order:
    ``async for o in outcomes``."""


class _HostRequests(Generic[T]):
    """An asyncio async iterable (of requests, or texts), read from trio (one asyncio step
    per item)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, requests: AsyncIterable[T]) -> None:
        self._loop = loop
        self._iterator = aiter(requests)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T:
        more, request = await await_host(self._loop, _next_request(self._iterator))
        if not more:
            raise StopAsyncIteration
        assert request is not None
        return request


async def _next_request(iterator: AsyncIterator[T]) -> tuple[bool, T | None]:
    try:
        return True, await anext(iterator)
    except StopAsyncIteration:
        return False, None


class Ledger(DoorLedger):
    """The TokenLedger from asyncio (``rt.ledger``): the methods of
    :class:`sluice.actors._token_ledger.TokenLedgerHandle`."""

    totals = awaited(LedgerCore.totals)
    rows = awaited(LedgerCore.rows)
    snapshot = awaited(LedgerCore.snapshot)
    flush = awaited(LedgerCore.flush)


def _here(fn: Callable[[], T]) -> T:
    """Read trio's state from asyncio: the guest runs on the loop's own thread."""
    return fn()


class Runtime:
    """The handle to a running sluice from asyncio. Created by :func:`open_runtime`.

    Every method is the trio :class:`sluice.Runtime`'s, awaited from asyncio.
    """

    def __init__(self, guest: Guest, config: RuntimeConfig | None) -> None:
        self._guest = guest
        self._loop = guest.loop
        self._config = config
        self._trio: TrioRuntime | None = None
        self._calls: trio.Nursery | None = None
        self._closing = False
        self._scope = trio.CancelScope()
        self._close = trio.Event()
        self._opened: asyncio.Future[None] = guest.loop.create_future()
        self._closed: asyncio.Future[None] = guest.loop.create_future()
        self._ledger: Ledger | None = None

    @property
    def config(self) -> RuntimeConfig:
        assert self._trio is not None
        return self._trio.config

    @property
    def cache(self) -> ResponseCache | None:
        """The response cache (``statistics()``, ``clear()``); None while no call used it."""
        return None if self._trio is None else self._trio.cache

    @property
    def ledger(self) -> Ledger:
        """The TokenLedger: ``snapshot(...)``, ``totals()``, ``flush()``, ``budgets()``,
        ``job``."""
        if self._ledger is None:
            assert self._trio is not None
            self._ledger = Ledger(self._trio.ledger, self._run, _here)
        return self._ledger

    def _spawn(self, fn: Callable[..., Awaitable[object]], *args: Any) -> None:
        calls = self._calls
        if calls is None or self._closing:
            raise RuntimeClosed("the runtime has stopped; open a new one")
        if asyncio.get_running_loop() is not self._loop:
            raise RuntimeError(
                "this sluice.aio runtime belongs to another event loop; open one per loop "
                "(or use sluice.sync from other threads)"
            )
        try:
            calls.start_soon(fn, *args)
        except RuntimeError as exc:  # the nursery is closed: the runtime has ended
            raise RuntimeClosed("the runtime has stopped; open a new one") from exc

    async def _run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        return await run_in_trio(self._spawn, fn, *args)

    async def chat(
        self,
        request: ChatRequest | str,
        messages: str | Iterable[Message] | None = None,
        **fields: Any,
    ) -> ChatResult:
        """Run one call to its end and return the result (see :meth:`sluice.Runtime.chat`).

        Raises:
            CallError: the call failed (after whatever retries the policy allowed).
            ConfigError: the model names an unknown provider, or one without a key.
        """
        assert self._trio is not None
        result: ChatResult = await self._run(self._trio.chat, as_request(request, messages, fields))
        return result

    @asynccontextmanager
    async def stream(
        self,
        request: ChatRequest | str,
        messages: str | Iterable[Message] | None = None,
        **fields: Any,
    ) -> AsyncIterator[CallStream]:
        """Submit one call and stream its events (see :meth:`sluice.Runtime.stream`).

        Leaving the block before the last event abandons the call and its HTTP request.

        Raises:
            ConfigError: the model names an unknown provider, or one without a key.
        """
        assert self._trio is not None
        call = CallStream(self._loop)
        link = call._link
        self._spawn(relay_stream, self._trio, as_request(request, messages, fields), link)
        try:
            await link.submitted
            call.call_id = link.call_id
            yield call
        finally:
            link.close("the consumer of the stream left")

    @asynccontextmanager
    async def map(
        self,
        requests: Iterable[ChatRequest] | AsyncIterable[ChatRequest],
        *,
        max_in_flight: int = 256,
    ) -> AsyncIterator[MapOutcomes]:
        """Run many calls, at most ``max_in_flight`` at once; yield outcomes as they finish
        (see :meth:`sluice.Runtime.map`). ``requests`` may be an asyncio async iterable.

        Leaving the block early cancels the calls still running.
        """
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        assert self._trio is not None
        source: Iterable[ChatRequest] | AsyncIterable[ChatRequest] = requests
        if isinstance(requests, AsyncIterable):
            source = _HostRequests(self._loop, requests)
        outcomes = MapOutcomes(self._loop)
        link = outcomes._link
        self._spawn(relay_map, self._trio, source, max_in_flight, link)
        try:
            yield outcomes
        finally:
            link.close("the consumer of Runtime.map left")

    async def embed(
        self, request: EmbedRequest | str, input: str | Iterable[str] | None = None, **fields: Any
    ) -> EmbedResult:
        """One embedding call, every input in one request (see :meth:`sluice.Runtime.embed`).

        Raises:
            CallError: the call failed (after whatever retries the policy allowed).
            ConfigError: the model names an unknown provider, or one without a key.
        """
        from ._embed_calls import as_embed_request  # the embedding layer, on first use

        assert self._trio is not None
        embed = as_embed_request(request, input, fields)
        result: EmbedResult = await self._run(self._trio.embed, embed)
        return result

    @asynccontextmanager
    async def embed_many(
        self,
        texts: Iterable[str] | AsyncIterable[str],
        *,
        model: str,
        batch_size: int | None = None,
        max_in_flight: int = 4,
        **fields: Any,
    ) -> AsyncIterator[EmbedOutcomes]:
        """Embed many inputs packed into requests; yield their outcomes, one per input in
        input order (see :meth:`sluice.Runtime.embed_many`). ``texts`` may be an asyncio
        async iterable. An unknown model or a provider without embeddings raises at the first
        outcome. Leaving the block early cancels the requests still running."""
        assert self._trio is not None
        source: Iterable[str] | AsyncIterable[str] = texts
        if isinstance(texts, AsyncIterable):
            source = _HostRequests(self._loop, texts)
        outcomes = EmbedOutcomes(self._loop)
        link = outcomes._link
        options = dict(fields, model=model, batch_size=batch_size, max_in_flight=max_in_flight)
        self._spawn(relay_embed_many, self._trio, source, options, link)
        try:
            yield outcomes
        finally:
            link.close("the consumer of Runtime.embed_many left")

    async def statistics(self) -> RuntimeStatistics:
        """What is in flight now, per actor (see :class:`sluice.RuntimeStatistics`)."""
        assert self._trio is not None
        stats: RuntimeStatistics = await self._run(self._trio.statistics)
        return stats

    async def ledger_totals(self) -> dict[str, LedgerTotals]:
        """Calls, tokens and cost so far per ``provider:model``."""
        assert self._trio is not None
        totals: dict[str, LedgerTotals] = await self._run(self._trio.ledger_totals)
        return totals

    async def _serve(self, options: dict[str, Any]) -> None:
        """The trio half of :func:`open_runtime`: hold the trio runtime open until told."""
        try:
            with self._scope:
                async with (
                    open_trio_runtime(self._config, **options) as rt,
                    trio.open_nursery() as calls,
                ):
                    self._trio, self._calls = rt, calls
                    if not self._opened.done():  # else the opener was cancelled: close
                        self._opened.set_result(None)
                        await self._close.wait()
        except Exception as exc:
            if not self._opened.done():
                self._opened.set_exception(exc)
            self._closed.set_exception(exc)
            self._closed.exception()  # marked retrieved; _finish reads it
            return
        finally:
            self._closing = True
            if not self._opened.done():
                self._opened.set_exception(RuntimeClosed("the runtime stopped while opening"))
            if not self._closed.done():
                self._closed.set_result(None)

    async def _finish(self, *, hard: bool) -> BaseException | None:
        """Close the trio runtime (draining calls unless ``hard``); its error, if any.

        A cancelled wait turns into a hard stop and is re-raised once the runtime has ended,
        so the loop never outlives the trio tasks it hosts.
        """
        self._closing = True
        if hard:
            self._scope.cancel(reason="the sluice.aio runtime's block raised")
        self._close.set()
        cancelled = False
        while not self._closed.done():
            try:
                await asyncio.wait([self._closed])
            except asyncio.CancelledError:
                cancelled = True
                self._scope.cancel(reason="the task closing the sluice.aio runtime was cancelled")
        if cancelled:
            raise asyncio.CancelledError
        return self._closed.exception()


@asynccontextmanager
async def open_runtime(
    config: RuntimeConfig | None = None, **options: Any
) -> AsyncIterator[Runtime]:
    """Start the runtime inside the running asyncio loop; stop it when the block ends.

    Takes the arguments of :func:`sluice.open_runtime`. On a normal exit, calls still running
    are finished before the block returns; if the block raises (or is cancelled), they are
    cancelled. Several runtimes may be open on one loop at once.

    Raises:
        ActorCrashed: an actor crashed more often than its restart limit allows.
        RuntimeError: the loop's thread already runs trio.
    """
    guest = await Guest.acquire()
    try:
        rt = Runtime(guest, config)
        assert guest.nursery is not None
        guest.nursery.start_soon(rt._serve, options)
        try:
            await rt._opened
        except asyncio.CancelledError:
            await rt._finish(hard=True)
            raise
        try:
            yield rt
        except BaseException:
            await rt._finish(hard=True)
            raise
        error = await rt._finish(hard=False)
        if error is not None:
            raise error
    finally:
        await guest.release()


async def run_batch(
    input: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    runtime: Runtime | None = None,
    **options: Any,
) -> BatchSummary:
    """:func:`sluice.run_batch` from asyncio: same arguments, same guarantees.

    With ``runtime`` (an open ``sluice.aio`` runtime) the batch runs on it; otherwise it opens
    its own, as :func:`sluice.run_batch` does. Cancelling the awaiting task cancels the batch
    (every line written is whole, and a resume does the rest).
    """
    from ._jobs.batch import run_batch as run_trio_batch

    if runtime is not None:
        assert runtime._trio is not None
        batch = functools.partial(run_trio_batch, input, output, runtime=runtime._trio, **options)
        summary: BatchSummary = await runtime._run(batch)
        return summary
    guest = await Guest.acquire()
    try:
        assert guest.nursery is not None
        batch = functools.partial(run_trio_batch, input, output, **options)
        summary = await run_in_trio(guest.nursery.start_soon, batch)
        return summary
    finally:
        await guest.release()
