"""The batch cursor under every door's ``CallStream``: where the reader is in a call's event
batches, and how the call ended.

A call's events arrive in batches (what one or more network reads decoded). The trio stream
takes them from its channel, the asyncio and blocking doors from the pipe their trio task fills;
each hands every batch to :meth:`EventCursor._arrived` and is read through the cursor (with
``async for``, or ``for`` in the blocking door). So what ``result`` and ``error`` hold after a
batch, and what a call that ends without ``Completed`` or ``Failed`` reports, is decided here
once, and iteration and ``wait`` are written once per colour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

from . import _events as events
from ._errors import RuntimeClosed
from ._events import Completed

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._errors import SluiceError
    from ._events import CallEvent
    from ._messages import ChatResult

__all__ = ["AsyncEventCursor", "BlockingEventCursor", "EventCursor"]


class EventCursor:
    """A call's events, batch by batch, and its outcome once its last batch has arrived.

    Subclasses fetch the batches and pass each one through :meth:`_arrived` (None once there
    are no more); iteration walks the current batch with ``_batch`` and ``_pos`` inline (one
    comparison per event, no call).
    """

    def __init__(self, call_id: str = "") -> None:
        self.call_id = call_id
        self.result: ChatResult | None = None
        """The winning attempt's result, once ``Completed`` has been received."""
        self.error: SluiceError | None = None
        """The call's error, once ``Failed`` has been received."""
        self._batch: Sequence[CallEvent] = ()
        self._pos = 0

    def _arrived(
        self, batch: Sequence[CallEvent] | None, closing: SluiceError | None = None
    ) -> Sequence[CallEvent] | None:
        """Note ``batch`` (None: the call's events have ended) and return it.

        A batch ending in ``Completed`` or ``Failed`` sets ``result`` or ``error``. A call
        whose events end without either gets ``closing`` (the error its producer saw), else
        :class:`RuntimeClosed`: every call that ends has exactly one of the two.
        """
        if batch is None:
            if self.result is None and self.error is None:
                self.error = closing or RuntimeClosed(f"call {self.call_id} ended without a result")
            return None
        last = batch[-1]
        if isinstance(last, Completed):
            self.result = last.result
            self._completed(last.result)
        elif isinstance(last, events.Failed):  # (a map's loads the rarer events on a failure)
            self.error = last.error
        return batch

    def _completed(self, result: ChatResult) -> None:
        """Told the result when ``Completed`` arrives (the trio stream's cache stores it)."""

    def _outcome(self) -> ChatResult:
        """The result, once the events have ended.

        Raises:
            CallError: the call failed.
        """
        if self.result is not None:
            return self.result
        assert self.error is not None
        raise self.error


class AsyncEventCursor(EventCursor):
    """An :class:`EventCursor` read with ``async for`` (the trio and asyncio streams): a
    subclass supplies :meth:`_next_batch`, which fetches the next batch and passes it
    through :meth:`_arrived`."""

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> CallEvent:
        while self._pos >= len(self._batch):
            batch = await self._next_batch()
            if batch is None:
                raise StopAsyncIteration
            self._batch, self._pos = batch, 0
        event = self._batch[self._pos]
        self._pos += 1
        return event

    async def _next_batch(self) -> Sequence[CallEvent] | None:
        """The next batch, noted by :meth:`_arrived`; None once the events have ended."""
        raise NotImplementedError

    async def wait(self) -> ChatResult:
        """Skip the remaining events and return the result.

        Raises:
            CallError: the call failed.
        """
        while await self._next_batch() is not None:
            pass
        return self._outcome()


class BlockingEventCursor(EventCursor):
    """An :class:`EventCursor` read with ``for`` (the blocking door's stream): a subclass
    supplies :meth:`_next_batch`, as for :class:`AsyncEventCursor`, without ``await``."""

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> CallEvent:
        while self._pos >= len(self._batch):
            batch = self._next_batch()
            if batch is None:
                raise StopIteration
            self._batch, self._pos = batch, 0
        event = self._batch[self._pos]
        self._pos += 1
        return event

    def _next_batch(self) -> Sequence[CallEvent] | None:
        """The next batch, noted by :meth:`_arrived`; None once the events have ended."""
        raise NotImplementedError

    def wait(self) -> ChatResult:
        """Skip the remaining events and return the result.

        Raises:
            CallError: the call failed.
        """
        while self._next_batch() is not None:
            pass
        return self._outcome()
