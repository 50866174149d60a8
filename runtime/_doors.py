"""The core under both front doors (:mod:`sluice.aio`, :mod:`sluice.sync`), written once.

A door runs the trio runtime somewhere its caller is not (a guest run on the asyncio loop, a
thread) and adapts three things to its caller's side; what they do is decided here:

* a stream or a map: a trio task (:func:`relay_stream`, :func:`relay_map`) runs the trio
  runtime's own ``stream`` or ``map`` and hands batches over a :class:`Link`, which each door
  implements with its pipe (:class:`sluice._guest.Pipe`, :class:`sluice._portal.ThreadPipe`);
  the reader's side reads events through the batch cursor of :mod:`sluice._cursor`;
* the ledger (``rt.ledger``): :class:`LedgerCore` holds the operations, their arguments and
  their documentation; a door's ``Ledger`` lists them, made ``awaited`` or ``blocking``.

Everything here uses only the trio runtime's public methods.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar

import trio

from ._errors import RuntimeClosed

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import AsyncIterable, Awaitable, Callable, Coroutine, Iterable, Sequence

    from sluice.actors._token_ledger import TokenLedgerHandle

    from ._embed_many import EmbedOutcome
    from ._ledger.book import Dimension, LedgerKey, LedgerTotals
    from ._ledger.budget import BudgetStatus
    from ._ledger.summary import LedgerSummary
    from ._mail import EventBatch
    from ._messages import ChatRequest
    from ._runtime import MapOutcome, Runtime

__all__ = [
    "DoorLedger",
    "LedgerCore",
    "Link",
    "awaited",
    "blocking",
    "relay_embed_many",
    "relay_map",
    "relay_stream",
]

T = TypeVar("T")
P = ParamSpec("P")
F = TypeVar("F", bound="Callable[..., Any]")

_CLOSED = "the runtime has stopped; open a new one"


class Link(Generic[T]):
    """What a door's trio task shares with the reader of one stream or map: the items it
    hands over (in batches), whether the call was submitted, and how it ended.

    The task holds the link, never the reader's object, so a reader that is dropped without
    being closed can be collected (the blocking door then abandons its call). A door
    implements :meth:`put`, :meth:`end` and :meth:`opened` with its pipe.
    """

    def __init__(self) -> None:
        self.call_id = ""
        """Set once the call has been submitted."""
        self.scope = trio.CancelScope()
        """Cancelled by the reader to abandon the call (or the map's calls)."""
        self.closing_error: BaseException | None = None
        """A stream's error when its events ended without ``Failed``; a map's exception."""

    async def put(self, item: T) -> None:
        """Hand ``item`` to the reader; wait while the reader is a whole window behind."""
        raise NotImplementedError

    def end(self) -> None:
        """No more items (idempotent)."""
        raise NotImplementedError

    def opened(self, error: BaseException | None = None) -> bool:
        """Tell the reader that the call was submitted (or, with ``error``, why not). Only
        the first word counts; False when the reader no longer waits for it."""
        raise NotImplementedError


async def relay_stream(rt: Runtime, request: ChatRequest, link: Link[EventBatch]) -> None:
    """The trio half of a door's ``stream``: submit ``request``, tell the reader, then hand
    over each batch of events as it arrives.

    Every path ends the link, and the reader always hears whether the call was submitted:
    a submission that fails passes on its error, a runtime that stops first
    :class:`RuntimeClosed`.
    """
    try:
        with link.scope:
            async with rt.stream(request) as inner:
                link.call_id = inner.call_id
                if not link.opened():  # the reader gave up while the call was submitted
                    return
                while (batch := await inner.next_events()) is not None:
                    await link.put(batch)
                link.closing_error = inner.error
    except Exception as exc:
        link.opened(exc)
    finally:
        link.opened(RuntimeClosed(_CLOSED))
        link.end()


async def relay_map(
    rt: Runtime,
    requests: Iterable[ChatRequest] | AsyncIterable[ChatRequest],
    max_in_flight: int,
    link: Link[list[MapOutcome]],
) -> None:
    """The trio half of a door's ``map``: run the trio runtime's map, hand its outcomes over
    in batches (one per burst), and its exception, if any, as ``link.closing_error``."""
    try:
        with link.scope:
            async with rt.map(requests, max_in_flight=max_in_flight) as inner:
                while (batch := await inner.next_batch()) is not None:
                    await link.put(batch)
    except Exception as exc:
        link.closing_error = exc
    finally:
        link.end()


async def relay_embed_many(
    rt: Runtime,
    texts: Iterable[str] | AsyncIterable[str],
    options: dict[str, Any],
    link: Link[list[EmbedOutcome]],
) -> None:
    """The trio half of a door's ``embed_many``, as :func:`relay_map` is of its ``map``: each
    request's outcomes handed over as one batch, in input order."""
    try:
        with link.scope:
            async with rt.embed_many(texts, **options) as inner:
                while (batch := await inner.next_batch()) is not None:
                    await link.put(batch)
    except Exception as exc:
        link.closing_error = exc
    finally:
        link.end()


class LedgerCore:
    """The TokenLedger as both doors show it (``rt.ledger``), in trio: each door's ``Ledger``
    runs these operations from its own side (:func:`awaited`, :func:`blocking`)."""

    def __init__(self, handle: TokenLedgerHandle) -> None:
        self.handle = handle

    async def totals(self) -> dict[str, LedgerTotals]:
        """Totals per ``provider:model`` (rows loaded from the store included)."""
        return await self.handle.totals()

    async def rows(self) -> list[tuple[LedgerKey, LedgerTotals]]:
        """A copy of every row: per UTC day, provider, model, tag and job."""
        return await self.handle.rows()

    async def snapshot(
        self,
        by: Sequence[Dimension] = ("provider", "model"),
        *,
        since: str | dt.date | None = None,
        until: str | dt.date | None = None,
    ) -> list[LedgerSummary]:
        """Totals grouped by ``by`` over the UTC days ``since`` to ``until`` inclusive."""
        return await self.handle.snapshot(by, since=since, until=until)

    async def flush(self) -> None:
        """Return once everything recorded so far is in the store."""
        await self.handle.flush()


class DoorLedger:
    """What each door's ``Ledger`` is built on: the :class:`LedgerCore`, the door's way to
    run a trio function from its side and return (or, in asyncio, await) its result, and its
    way to read the ledger's in-memory state there."""

    def __init__(
        self,
        handle: TokenLedgerHandle,
        run: Callable[..., Any],
        read: Callable[..., Any],
    ) -> None:
        self._core = LedgerCore(handle)
        self._run = run
        self._read = read

    @property
    def job(self) -> str:
        """The runtime's job (run id), recorded with every call that names no other."""
        return self._core.handle.job

    def budgets(self) -> list[BudgetStatus]:
        """Each budget's limit, spending, reservations in flight and refusals, as of now."""
        budgets: list[BudgetStatus] = self._read(self._core.handle.budgets)
        return budgets


def awaited(
    op: Callable[Concatenate[LedgerCore, P], Awaitable[T]],
) -> Callable[Concatenate[DoorLedger, P], Coroutine[Any, Any, T]]:
    """``op`` as a method of an asyncio door's ledger: awaited from the loop, run in trio."""

    async def method(self: DoorLedger, /, *args: P.args, **kwargs: P.kwargs) -> T:
        result: T = await self._run(functools.partial(op, self._core, *args, **kwargs))
        return result

    return _documented(method, op)


def blocking(
    op: Callable[Concatenate[LedgerCore, P], Awaitable[T]],
) -> Callable[Concatenate[DoorLedger, P], T]:
    """``op`` as a method of the blocking door's ledger: the calling thread waits while the
    runtime's thread runs it."""

    def method(self: DoorLedger, /, *args: P.args, **kwargs: P.kwargs) -> T:
        result: T = self._run(functools.partial(op, self._core, *args, **kwargs))
        return result

    return _documented(method, op)


def _documented(method: F, op: Callable[..., Any]) -> F:
    """``method`` named, documented and annotated as ``op`` (``help`` and the signature
    show the operation's own arguments)."""
    functools.update_wrapper(method, op, assigned=("__name__", "__doc__", "__annotations__"))
    return method
