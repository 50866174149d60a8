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
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import trio

from ._errors import RuntimeClosed, SluiceError
from ._events import CallEvent, Completed, Failed
from ._portal import Outcome, Portal, RequestFeed, ThreadPipe
from ._runtime import MapOutcome, RuntimeStatistics, _as_request
from ._runtime import Runtime as TrioRuntime
from ._runtime import open_runtime as open_trio_runtime

if TYPE_CHECKING:
    import datetime as dt
    import os
    from collections.abc import Iterable, Iterator, Sequence
    from types import TracebackType

    from sluice.actors._token_ledger import TokenLedgerHandle

    from ._cache import ResponseCache
    from ._config import RuntimeConfig
    from ._jobs.batch import BatchSummary
    from ._ledger.book import Dimension, LedgerKey, LedgerSummary, LedgerTotals
    from ._ledger.budget import BudgetStatus
    from ._mail import EventBatch
    from ._messages import ChatRequest, ChatResult, Message

__all__ = [
    "CallStream",
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


class _Link(Generic[T]):
    """What a stream's or map's trio task shares with its reader. The task never holds the
    reader's object itself, so a reader dropped without being closed is collected, and its
    ``__del__`` abandons the call."""

    __slots__ = ("call_id", "closing_error", "opened", "pipe", "scope")

    def __init__(self, portal: Portal, window: int) -> None:
        self.call_id = ""
        self.opened: Outcome[None] = Outcome()
        self.pipe: ThreadPipe[T] = ThreadPipe(portal, window)
        self.scope = trio.CancelScope()
        self.closing_error: BaseException | None = None
        """The call's error when it ended without Failed; a map's error."""

    def close(self, portal: Portal) -> None:
        if not self.pipe.ended:
            try:
                portal.soon(self.scope.cancel)
            except RuntimeClosed:
                pass


class CallStream:
    """The reader's end of one call: ``for event in call``; then ``result`` or ``error``.

    Created by :meth:`Runtime.stream`. Also a context manager: leaving the block (or calling
    :meth:`close`) before the last event abandons the call.
    """

    def __init__(self, portal: Portal) -> None:
        self.result: ChatResult | None = None
        """The winning attempt's result, once ``Completed`` has been read."""
        self.error: SluiceError | None = None
        """The call's error, once ``Failed`` has been read."""
        self._portal = portal
        self._link: _Link[EventBatch] = _Link(portal, _STREAM_WINDOW)
        self._batch: EventBatch = ()
        self._pos = 0

    @property
    def call_id(self) -> str:
        return self._link.call_id

    def __iter__(self) -> CallStream:
        return self

    def __next__(self) -> CallEvent:
        while self._pos >= len(self._batch):
            batch = self._link.pipe.get()
            if batch is None:
                if self.result is None and self.error is None:
                    closing = self._link.closing_error
                    assert closing is None or isinstance(closing, SluiceError)
                    self.error = closing or RuntimeClosed(
                        f"call {self.call_id} ended without a result"
                    )
                raise StopIteration
            last = batch[-1]
            if isinstance(last, Completed):
                self.result = last.result
            elif isinstance(last, Failed):
                self.error = last.error
            self._batch, self._pos = batch, 0
        event = self._batch[self._pos]
        self._pos += 1
        return event

    def wait(self) -> ChatResult:
        """Skip the remaining events and return the result.

        Raises:
            CallError: the call failed.
        """
        for _ in self:
            pass
        if self.result is not None:
            return self.result
        assert self.error is not None
        raise self.error

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


async def _stream_task(rt: TrioRuntime, request: ChatRequest, link: _Link[EventBatch]) -> None:
    """The trio half of :meth:`Runtime.stream`: submit, then pass each batch on."""
    pipe = link.pipe
    try:
        with link.scope:
            async with rt.stream(request) as inner:
                link.call_id = inner.call_id
                link.opened.set(None)
                while (batch := await inner._next_batch()) is not None:
                    await pipe.put(batch)
                link.closing_error = inner.error
    except Exception as exc:
        link.opened.set(None, exc)
    finally:
        link.opened.set(None, RuntimeClosed("the runtime has stopped; open a new one"))
        pipe.end()


class MapOutcomes:
    """The outcomes of :meth:`Runtime.map`, in completion order: ``for o in outcomes``.

    Also a context manager: leaving the block (or :meth:`close`) early cancels the calls
    still running.
    """

    def __init__(self, portal: Portal) -> None:
        self._portal = portal
        self._link: _Link[list[MapOutcome]] = _Link(portal, _MAP_WINDOW)
        self._feed: RequestFeed | None = None
        self._batch: list[MapOutcome] = []
        self._pos = 0

    def __iter__(self) -> MapOutcomes:
        return self

    def __next__(self) -> MapOutcome:
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

    def __enter__(self) -> MapOutcomes:
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


async def _map_task(
    rt: TrioRuntime,
    requests: Iterable[ChatRequest] | RequestFeed,
    max_in_flight: int,
    link: _Link[list[MapOutcome]],
) -> None:
    """The trio half of :meth:`Runtime.map`: run it, pass outcomes on in batches."""
    pipe = link.pipe
    try:
        with link.scope:
            async with rt.map(requests, max_in_flight=max_in_flight) as inner:
                while (batch := await inner.next_batch()) is not None:
                    await pipe.put(batch)
    except Exception as exc:
        link.closing_error = exc
    finally:
        pipe.end()


class Ledger:
    """The TokenLedger from blocking code (``rt.ledger``)."""

    def __init__(self, portal: Portal, handle: TokenLedgerHandle) -> None:
        self._portal = portal
        self._handle = handle

    @property
    def job(self) -> str:
        """The runtime's job (run id), recorded with every call that names no other."""
        return self._handle.job

    def budgets(self) -> list[BudgetStatus]:
        """Each budget's limit, spending, reservations in flight and refusals, as of now."""
        return self._portal.call(_sync_in_trio, self._handle.budgets)

    def totals(self) -> dict[str, LedgerTotals]:
        """Totals per ``provider:model`` (rows loaded from the store included)."""
        return self._portal.call(self._handle.totals)

    def rows(self) -> list[tuple[LedgerKey, LedgerTotals]]:
        """A copy of every row: per UTC day, provider, model, tag and job."""
        return self._portal.call(self._handle.rows)

    def snapshot(
        self,
        by: Sequence[Dimension] = ("provider", "model"),
        *,
        since: str | dt.date | None = None,
        until: str | dt.date | None = None,
    ) -> list[LedgerSummary]:
        """Totals grouped by ``by`` over the UTC days ``since`` to ``until`` inclusive."""
        snapshot = functools.partial(self._handle.snapshot, by, since=since, until=until)
        return self._portal.call(snapshot)

    def flush(self) -> None:
        """Return once everything recorded so far is in the store."""
        self._portal.call(self._handle.flush)


async def _sync_in_trio(fn: Any) -> Any:
    return fn()


class Runtime:
    """The handle to a running sluice from blocking code. Created by :func:`open_runtime`;
    safe to share between threads."""

    def __init__(self, rt: TrioRuntime, portal: Portal) -> None:
        self._trio = rt
        self._portal = portal
        self.ledger = Ledger(portal, rt.ledger)
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
        return self._portal.call(self._trio.chat, _as_request(request, messages, fields))

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
        request = _as_request(request, messages, fields)
        link = call._link
        self._portal.start(link.opened.closed, _stream_task, self._trio, request, link)
        try:
            link.opened.wait()
        except BaseException:
            call.close()
            raise
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
        self._portal.start(link.pipe.end, _map_task, self._trio, source, max_in_flight, link)
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
