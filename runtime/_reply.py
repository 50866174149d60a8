"""A one-shot answer from an actor to the one task that asked: lighter than a memory channel.

Every attempt and every admission is a question with exactly one answer. A trio memory channel
pair made for each (a state with a deque and two task tables, a send and a receive end) costs
far more to make, and to hold while a stream is open, than one slot and one waiting task. A
:class:`Reply` keeps the parts of a channel's contract the actors rely on:

* the answerer's ``send_nowait`` raises :class:`trio.BrokenResourceError` once the asker has
  left (:meth:`Reply.leave`), :class:`trio.ClosedResourceError` once the answerer closed it,
  and :class:`trio.WouldBlock` for a second answer; it never waits;
* the answerer's :meth:`Reply.close` (also as ``with reply:``) without an answer makes the
  asker's ``receive`` raise :class:`trio.EndOfChannel`: the question will never be answered;
* the asker's ``receive`` returns at once when the answer is already there (no checkpoint:
  its caller's next wait is one, as with :func:`sluice.actors._tell.take`), and otherwise
  waits, cancellably, for the answer or the close;
* another task of the asker's side may stop the wait (:meth:`Reply.cancel`, what a consumer
  that leaves calls on whatever its call waits under): the asker's ``receive`` then raises
  :class:`WaitStopped` unless the answer is already there. It is a wait that a consumer
  can end without a cancel scope of its own, which costs more than the rest of the question.

Make one as ``Reply()`` and give the type to the variable (``reply: Reply[T] = Reply()``):
``Reply[T]()`` tries to set ``__orig_class__`` on the slotted object, an AttributeError raised
and caught on every question.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import trio

__all__ = ["FinalReply", "Reply", "WaitStopped"]

T = TypeVar("T")

_EMPTY = object()


class WaitStopped(Exception):
    """The asker's wait was stopped (:meth:`Reply.cancel`) before an answer came."""


class Reply(Generic[T]):
    """A slot for one answer, written by one actor, read by one waiting task."""

    __slots__ = ("_closed", "_left", "_stopped", "_value", "_waiter")

    def __init__(self) -> None:
        self._value: object = _EMPTY
        self._waiter: trio.lowlevel.Task | None = None
        self._closed = False
        self._left = False
        self._stopped = False

    # -- the answering side -------------------------------------------------------------------

    def send_nowait(self, value: T) -> None:
        """Answer; never waits.

        Raises:
            trio.ClosedResourceError: the answerer already closed the reply.
            trio.BrokenResourceError: the asker has left; nobody will read the answer.
            trio.WouldBlock: there already is an answer.
        """
        if self._closed:
            raise trio.ClosedResourceError("the reply was closed")
        if self._left:
            raise trio.BrokenResourceError("the asker has left")
        if self._value is not _EMPTY:
            raise trio.WouldBlock
        self._value = value
        self._wake()

    def close(self) -> None:
        """The answerer is done: an asker still waiting without an answer gets
        :class:`trio.EndOfChannel`. Twice is harmless."""
        self._closed = True
        self._wake()

    def __enter__(self) -> Reply[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the asking side ----------------------------------------------------------------------

    def receive_nowait(self) -> T:
        """The answer, if it has come (taken: a second call does not see it).

        Raises:
            trio.WouldBlock: no answer yet, and the answerer has not closed the reply.
            trio.EndOfChannel: the answerer closed the reply without answering.
        """
        value = self._value
        if value is not _EMPTY:
            self._value = _EMPTY
            return value  # type: ignore[return-value]  # a T (no cast: it costs a call)
        if self._closed:
            raise trio.EndOfChannel
        raise trio.WouldBlock

    async def receive(self) -> T:
        """Wait for the answer (see :meth:`receive_nowait` for what ends the wait).

        Raises:
            WaitStopped: :meth:`cancel` stopped the wait before the answer came.
            trio.EndOfChannel: the answerer closed the reply without answering.
            trio.BusyResourceError: another task is already waiting on this reply.
        """
        # Looked at rather than tried: the answer is usually still to come, and a WouldBlock
        # raised and caught on every question costs more than the rest of the wait.
        if self._value is _EMPTY and not self._closed and not self._stopped:
            if self._waiter is not None:
                raise trio.BusyResourceError("another task is already waiting for this reply")
            self._waiter = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(self._abort)
        if self._stopped and self._value is _EMPTY:
            raise WaitStopped
        return self.receive_nowait()

    def cancel(self) -> None:
        """Stop the asker's wait (from another task of the asker's side): its ``receive``
        raises :class:`WaitStopped` unless the answer is there. The reply stays open for the
        answerer: the asker decides what to do with an answer that comes anyway (it leaves,
        as after any wait). Harmless twice, or after the wait."""
        self._stopped = True
        self._wake()

    def leave(self) -> None:
        """The asker will not read the answer: a later ``send_nowait`` raises
        :class:`trio.BrokenResourceError`, so the answerer can undo what it granted."""
        self._left = True

    def _abort(self, _: object) -> trio.lowlevel.Abort:
        self._waiter = None
        return trio.lowlevel.Abort.SUCCEEDED

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            trio.lowlevel.reschedule(waiter)


class FinalReply(Reply[T]):
    """A :class:`Reply` that takes one answer and then counts as closed: a second answer raises
    :class:`trio.ClosedResourceError`, as a channel whose reader has what it needs would. The
    end of a quiet call that one task waits for (``Runtime.chat``): the Supervisor sends its
    one final batch (``send`` never waits) and closes it when the call's task ends."""

    __slots__ = ()

    def send_nowait(self, value: T) -> None:
        """Answer once (see :meth:`Reply.send_nowait`); then the reply counts as closed."""
        super().send_nowait(value)
        self._closed = True

    async def send(self, value: T) -> None:
        """:meth:`send_nowait`: an answer never waits."""
        self.send_nowait(value)
