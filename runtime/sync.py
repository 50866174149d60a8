"""sluice from blocking code: the trio runtime on one background thread.

::

    with sluice.sync.open_runtime(config) as rt:
        reply = rt.chat(ChatRequest(model="sim:sim-small", messages="hi"))
        for event in rt.stream(request):
            ...
        for outcome in rt.map(requests, max_in_flight=50):
            ...

    reply = sluice.sync.chat("sim:sim-small", "hi")   # a script's one call

The surface is the trio API's (:class:`sluice.Runtime`) without ``await``, with the same
classes of events, results and errors. Any number of threads may call one runtime at once
(a ``ThreadPoolExecutor``, a WSGI server): each call is a trio task on the runtime's thread,
reached through trio's thread portal (:mod:`sluice._portal`). Leaving the ``with`` block lets
the calls in flight finish and joins the thread; leaving it with an exception (Ctrl-C
included) cancels them first. A stream or map left before its end (``break``, ``close()``,
its ``with`` block, or garbage collection) abandons its calls and their HTTP requests.

This module loads on first use of ``sluice.sync``.
"""

from __future__ import annotations

import functools
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

import trio

from ._cursor import BlockingEventCursor
from ._doors import (
    DoorLedger,
    LedgerCore,
    Link,
    blocking,
    relay_embed_many,
    relay_map,
    relay_stream,
)
from ._errors import RuntimeClosed, SluiceError
from ._messages import as_request
from ._portal import Outcome, Portal, RequestFeed, ThreadPipe
from ._runtime import MapOutcome, RuntimeStatistics
from ._runtime import Runtime as TrioRuntime
from ._runtime import open_runtime as open_trio_runtime

if TYPE_CHECKING:
    import os
    from collections.abc import Iterable, Iterator
    from types import TracebackType

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
    "chat",
    "open_runtime",
    "run_batch",
]

T = TypeVar("T")

_STREAM_WINDOW = 8
"""Event batches a stream's reader may leave unread before the call waits for it."""
_MAP_WINDOW = 2
"""Batches of outcomes (each at most ``max_in_flight``) a map's reader may leave unread."""
_TEXTS_AHEAD = 256
"""Inputs of an ``embed_many`` the reading thread reads at a time, when the runtime asks."""


class _Link(Link[T]):
    """A stream's or map's :class:`Link` to the reading thread: a :class:`ThreadPipe` and
    the outcome the opener waits for."""

    def __init__(self, portal: Portal, window: int) -> None:
        super().__init__()
        self.pipe: ThreadPipe[T] = ThreadPipe(portal, window)
        self.submitted: Outcome[None] = Outcome()

    async def put(self, item: T) -> None:
        await self.pipe.put(item)

    def end(self) -> None:
        self.pipe.end()

    def opened(self, error: BaseException | None = None) -> bool:
        return self.submitted.set(None, error)

    def close(self, portal: Portal) -> None:
        if not self.pipe.ended:
            try:
                portal.soon(self.scope.cancel)
            except RuntimeClosed:
                pass


class CallStream(BlockingEventCursor):
    """The reader's end of one call: ``for event in call``; then ``result`` or ``error``.

    Created by :meth:`Runtime.stream`. Also a context manager: leaving the block (or calling
    :meth:`close`) before the last event abandons the call.
    """

    def __init__(self, portal: Portal) -> None:
        super().__init__()
        self._portal = portal
        self._link: _Link[EventBatch] = _Link(portal, _STREAM_WINDOW)

    def _next_batch(self) -> EventBatch | None:
        link = self._link
        batch = link.pipe.get()
        closing = link.closing_error
        assert closing is None or isinstance(closing, SluiceError)
        return self._arrived(batch, closing)

    def close(self) -> None:
        """Abandon the call if it has not ended (its HTTP request is cancelled)."""
        self._link.close(self._portal)

    def __enter__(self) -> CallStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class _Outcomes(Generic[T]):
    """Outcomes read in batches from the runtime's thread: ``for o in outcomes``; a context
    manager too, and leaving the block (or :meth:`close`) early cancels what still runs."""

    def __init__(self, portal: Portal) -> None:
        self._portal = portal
        self._link: _Link[list[T]] = _Link(portal, _MAP_WINDOW)
        self._feed: RequestFeed | None = None
        self._batch: list[T] = []
        self._pos = 0

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> T:
        while self._pos >= len(self._batch):
            batch = self._link.pipe.get_or_feed(self._feed)
            if isinstance(batch, RequestFeed):
                try:
                    batch.refill()
                except BaseException:
                    self.close()
                    raise
                continue
            if batch is None:
                error, self._link.closing_error = self._link.closing_error, None
                if error is not None:
                    raise error
                raise StopIteration
            self._batch, self._pos = batch, 0
        outcome = self._batch[self._pos]
        self._pos += 1
        return outcome

    def close(self) -> None:
        """Cancel the calls still running, if the outcomes were not all read."""
        self._link.close(self._portal)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class MapOutcomes(_Outcomes[MapOutcome]):
    """The outcomes of :meth:`Runtime.map`, in completion order: ``for o in outcomes``.

    Also a context manager: leaving the block (or :meth:`close`) early cancels the calls
    still running.
    """


class EmbedOutcomes(_Outcomes["EmbedOutcome"]):
    """The outcomes of :meth:`Runtime.embed_many`, one per input in input order:
    ``for o in outcomes``. Also a context manager: leaving the block (or :meth:`close`)
    early cancels the requests still running."""


class Ledger(DoorLedger):
    """The TokenLedger from blocking code (``rt.ledger``)."""

    totals = blocking(LedgerCore.totals)
    rows = blocking(LedgerCore.rows)
    snapshot = blocking(LedgerCore.snapshot)
    flush = blocking(LedgerCore.flush)


async def _sync_in_trio(fn: Any) -> Any:
    return fn()


class Runtime:
    """The handle to a running sluice from blocking code. Created by :func:`open_runtime`;
    safe to share between threads."""

    def __init__(self, rt: TrioRuntime, portal: Portal) -> None:
        self._trio = rt
        self._portal = portal
        self.ledger = Ledger(rt.ledger, portal.call, functools.partial(portal.call, _sync_in_trio))
        """The TokenLedger: ``snapshot(...)``, ``totals()``, ``flush()``, ``budgets()``,
        ``job``."""

    @property
    def config(self) -> RuntimeConfig:
        return self._trio.config

    @property
    def cache(self) -> ResponseCache | None:
        """The response cache; None while no call used it."""
        return self._trio.cache

    def chat(
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
        return self._portal.call(self._trio.chat, as_request(request, messages, fields))

    def stream(
        self,
        request: ChatRequest | str,
        messages: str | Iterable[Message] | None = None,
        **fields: Any,
    ) -> CallStream:
        """Submit one call; iterate the returned stream for its events.

        Returns once the call is submitted. Reading it to the end finishes the call; leaving
        earlier (``close()``, a ``with`` block, or dropping it) abandons it.

        Raises:
            ConfigError: the model names an unknown provider, or one without a key.
        """
        call = CallStream(self._portal)
        request = as_request(request, messages, fields)
        link = call._link
        self._portal.start(link.submitted.closed, relay_stream, self._trio, request, link)
        try:
            link.submitted.wait()
        except BaseException:
            call.close()
            raise
        call.call_id = link.call_id
        return call

    def map(
        self,
        requests: Iterable[ChatRequest],
        *,
        max_in_flight: int = 256,
    ) -> MapOutcomes:
        """Run many calls, at most ``max_in_flight`` at once; iterate the returned outcomes
        in completion order (see :meth:`sluice.Runtime.map`).

        Any iterable other than a list or tuple (a generator reading a file, say) is read by
        the thread that reads the outcomes, while it waits for them, as calls free up: at
        most ``max_in_flight`` requests are read ahead, and an exception it raises comes out
        of that thread's ``next()`` (the calls still running are cancelled).
        """
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        outcomes = MapOutcomes(self._portal)
        source: Iterable[ChatRequest] | RequestFeed = requests
        if not isinstance(requests, list | tuple):
            source = outcomes._feed = RequestFeed(
                outcomes._link.pipe, iter(requests), max_in_flight
            )
        link = outcomes._link
        self._portal.start(link.pipe.end, relay_map, self._trio, source, max_in_flight, link)
        return outcomes

    def embed(
        self, request: EmbedRequest | str, input: str | Iterable[str] | None = None, **fields: Any
    ) -> EmbedResult:
        """One embedding call, every input in one request (see :meth:`sluice.Runtime.embed`).

        Raises:
            CallError: the call failed (after whatever retries the policy allowed).
            ConfigError: the model names an unknown provider, or one without a key.
        """
        from ._embed_calls import as_embed_request  # the embedding layer, on first use

        return self._portal.call(self._trio.embed, as_embed_request(request, input, fields))

    def embed_many(
        self,
        texts: Iterable[str],
        *,
        model: str,
        batch_size: int | None = None,
        max_in_flight: int = 4,
        **fields: Any,
    ) -> EmbedOutcomes:
        """Embed many inputs packed into requests; iterate the returned outcomes, one per
        input in input order (see :meth:`sluice.Runtime.embed_many`).

        Any iterable other than a list or tuple is read by the thread that reads the
        outcomes, while it waits for them, a few hundred inputs at a time; an exception it
        raises comes out of that thread's ``next()``. An unknown model or a provider without
        embeddings raises there too, at the first ``next()``.
        """
        outcomes = EmbedOutcomes(self._portal)
        source: Iterable[str] | RequestFeed = texts
        if not isinstance(texts, list | tuple):
            source = outcomes._feed = RequestFeed(outcomes._link.pipe, iter(texts), _TEXTS_AHEAD)
        options = dict(fields, model=model, batch_size=batch_size, max_in_flight=max_in_flight)
        link = outcomes._link
        self._portal.start(link.pipe.end, relay_embed_many, self._trio, source, options, link)
        return outcomes

    def statistics(self) -> RuntimeStatistics:
        """What is in flight now, per actor (see :class:`sluice.RuntimeStatistics`)."""
        return self._portal.call(self._trio.statistics)

    def ledger_totals(self) -> dict[str, LedgerTotals]:
        """Calls, tokens and cost so far per ``provider:model``."""
        return self._portal.call(self._trio.ledger_totals)


class _Thread:
    """The runtime's thread: opens the trio runtime, serves calls until told to stop."""

    def __init__(self, config: RuntimeConfig | None, options: dict[str, Any]) -> None:
        self._config = config
        self._options = options
        self._opened: Outcome[tuple[TrioRuntime, Portal]] = Outcome()
        self._scope = trio.CancelScope()
        self._close: trio.Event | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self.portal: Portal | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="sluice runtime", daemon=True)

    def open(self) -> Runtime:
        self.thread.start()
        try:
            rt, portal = self._opened.wait()
        except BaseException:
            self.stop(hard=True)
            raise
        return Runtime(rt, portal)

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:
            self.error = exc
            self._opened.set(None, exc)
        finally:
            self._opened.set(None, RuntimeClosed("the runtime stopped while opening"))

    async def _main(self) -> None:
        self._close = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        with self._scope:
            async with (
                open_trio_runtime(self._config, **self._options) as rt,
                trio.open_nursery() as calls,
            ):
                self.portal = Portal(self._token, calls)
                self._opened.set((rt, self.portal))
                await self._close.wait()
                self.portal.closing = True

    def _signal(self, hard: bool) -> None:
        if hard:
            self._scope.cancel(reason="the sluice.sync runtime's block raised")
        if self._close is not None:
            self._close.set()

    def stop(self, *, hard: bool) -> None:
        """Stop the runtime (draining calls unless ``hard``) and join its thread.

        Interrupted while it waits (Ctrl-C), it stops hard, waits again, then re-raises.
        """
        if self.portal is not None:
            self.portal.closing = True
        interrupted: BaseException | None = None
        while True:
            token = self._token
            if token is not None:
                try:
                    token.run_sync_soon(self._signal, hard)
                except trio.RunFinishedError:
                    pass
            try:
                self.thread.join()
                break
            except BaseException as exc:
                interrupted, hard = exc, True
        if interrupted is not None:
            raise interrupted


@contextmanager
def open_runtime(config: RuntimeConfig | None = None, **options: Any) -> Iterator[Runtime]:
    """Start the runtime on a background thread; stop it and join the thread when the block
    ends.

    Takes the arguments of :func:`sluice.open_runtime`. On a normal exit, calls still running
    are finished first; if the block raises (KeyboardInterrupt included), they are cancelled.

    Raises:
        ActorCrashed: an actor crashed more often than its restart limit allows.
    """
    host = _Thread(config, options)
    rt = host.open()
    try:
        yield rt
    except BaseException:
        host.stop(hard=True)
        raise
    host.stop(hard=False)
    if host.error is not None:
        raise host.error


def chat(
    request: ChatRequest | str,
    messages: str | Iterable[Message] | None = None,
    *,
    config: RuntimeConfig | None = None,
    **fields: Any,
) -> ChatResult:
    """One call with a runtime of its own, for scripts: open, call, close.

    Raises:
        CallError: the call failed (after whatever retries the policy allowed).
        ConfigError: the model names an unknown provider, or one without a key.
    """
    with open_runtime(config) as rt:
        return rt.chat(request, messages, **fields)


def run_batch(
    input: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    runtime: Runtime | None = None,
    **options: Any,
) -> BatchSummary:
    """:func:`sluice.run_batch` from blocking code: same arguments, same guarantees.

    With ``runtime`` the batch runs on it; otherwise it opens its own.
    """
    from ._jobs.batch import run_batch as run_trio_batch

    if runtime is not None:
        batch = functools.partial(run_trio_batch, input, output, runtime=runtime._trio, **options)
        return runtime._portal.call(batch)
    summary: BatchSummary = trio.run(functools.partial(run_trio_batch, input, output, **options))
    return summary
