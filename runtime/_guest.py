"""trio as a guest of a running asyncio loop: what :mod:`sluice.aio` is built on.

trio allows one run per thread, so every ``sluice.aio`` runtime on one asyncio loop shares one
guest run (:class:`Guest`), started by the first runtime opened on the loop and ended when the
last one closes; a runtime opened later starts a fresh one. The guest runs on the loop's own
thread: trio's code runs in callbacks the loop schedules, and only trio's wait for I/O sits in
a helper thread of trio's. So the two sides share objects without locks:

* asyncio to trio: sync-coloured trio calls made from asyncio code (``nursery.start_soon``,
  ``CancelScope.cancel``, ``Event.set``) act at once and wake the guest if it was idle;
* trio to asyncio: trio code completes asyncio futures directly (``set_result``), which costs
  no more than a ``call_soon``.

:class:`Pipe` carries a trio producer's items (event batches, map outcomes) to an asyncio
consumer without a hop per item: the consumer is woken only when it waits, and the producer
only when the consumer let it fall a whole window behind.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import outcome
import trio

from ._errors import RuntimeClosed

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["Guest", "Pipe", "await_host", "deliver", "run_in_trio"]

T = TypeVar("T")

_GUESTS: dict[asyncio.AbstractEventLoop, Guest] = {}
"""The guest run of each loop that has one (an entry leaves when its run has ended)."""


class Guest:
    """One trio guest run on one asyncio loop, shared by the runtimes opened on that loop.

    Get it with :meth:`acquire` and give it back with :meth:`release`: the run ends (and
    :meth:`release` returns) once the last user has given it back, so the loop never outlives
    a trio run it hosts.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._users = 0
        self._stopping = False
        self._started: asyncio.Future[None] = loop.create_future()
        self._done: asyncio.Future[None] = loop.create_future()
        self._stop = trio.Event()
        self.nursery: trio.Nursery | None = None
        """Where the runtimes' own tasks run; set once the run has started."""

    @classmethod
    async def acquire(cls) -> Guest:
        """The running loop's guest run, started if it has none (or only one that is ending).

        Raises:
            RuntimeError: this thread already runs trio (say, as ``trio.run``'s host).
        """
        loop = asyncio.get_running_loop()
        while True:
            guest = _GUESTS.get(loop)
            if guest is None:
                break
            if not guest._stopping:
                guest._users += 1
                await guest._wait_started()
                return guest
            await asyncio.shield(guest._done)  # the last user is leaving: let that run end
        guest = _GUESTS[loop] = cls(loop)
        guest._users = 1
        try:
            trio.lowlevel.start_guest_run(
                guest._main,
                run_sync_soon_threadsafe=loop.call_soon_threadsafe,
                run_sync_soon_not_threadsafe=loop.call_soon,
                done_callback=guest._finished,
                # asyncio may own the signal wakeup fd (add_signal_handler); trio must not
                # take it over, and needs no signals of its own here.
                host_uses_signal_set_wakeup_fd=True,
            )
        except RuntimeError as exc:
            del _GUESTS[loop]
            raise RuntimeError(
                "sluice.aio needs an asyncio loop whose thread does not already run trio; "
                "under trio, use sluice.open_runtime"
            ) from exc
        await guest._wait_started()
        return guest

    async def _wait_started(self) -> None:
        try:
            await asyncio.shield(self._started)
        except BaseException:  # cancelled (or the run failed to start): not a user after all
            await self.release()
            raise

    async def release(self) -> None:
        """Give the run back; the last user waits here until the run has ended."""
        self._users -= 1
        if self._users > 0:
            return
        self._stopping = True
        self._stop.set()
        await asyncio.shield(self._done)

    async def _main(self) -> None:
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            self._started.set_result(None)
            await self._stop.wait()
            # Every user has released the run, so their tasks have ended; anything left
            # (a task spawned after its runtime closed) must not keep the loop waiting.
            nursery.cancel_scope.cancel(reason="the last sluice.aio runtime closed")

    def _finished(self, result: outcome.Outcome[None]) -> None:
        if _GUESTS.get(self.loop) is self:
            del _GUESTS[self.loop]
        self._stopping = True
        if not self._started.done():
            self._started.set_exception(RuntimeClosed("the trio guest run ended at start"))
        if isinstance(result, outcome.Error):
            self._done.set_exception(result.error)
            self._done.exception()  # retrieved: a user that waits sees it again
        else:
            self._done.set_result(None)


async def deliver(
    future: asyncio.Future[T],
    scope: trio.CancelScope,
    fn: Callable[..., Awaitable[T]],
    *args: Any,
) -> None:
    """Run ``fn(*args)`` within ``scope`` and settle ``future`` with what it returns or raises.

    Every path settles the future unless the asyncio side already gave up on it: a task that
    ends without an outcome (its runtime was stopped hard) reports :class:`RuntimeClosed`.
    """
    try:
        with scope:
            result = await fn(*args)
    except Exception as exc:
        if not future.done():
            future.set_exception(exc)
        return
    except BaseException:
        if not future.done():
            future.set_exception(RuntimeClosed("the runtime stopped before the call ended"))
        raise
    if future.done():
        return
    if scope.cancelled_caught:
        future.set_exception(RuntimeClosed("the runtime stopped before the call ended"))
    else:
        future.set_result(result)


async def run_in_trio(spawn: Callable[..., None], fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """From asyncio: run ``fn(*args)`` as a trio task started by ``spawn``; return its result.

    Cancelling the awaiting asyncio task cancels the trio task (without waiting for it), as
    leaving a cancel scope would in trio. Exceptions arrive as themselves.
    """
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    scope = trio.CancelScope()
    spawn(deliver, future, scope, fn, *args)
    try:
        return await future
    except asyncio.CancelledError:
        scope.cancel(reason="the asyncio task awaiting it was cancelled")
        raise


async def await_host(loop: asyncio.AbstractEventLoop, awaitable: Awaitable[T]) -> T:
    """From trio: await an asyncio awaitable (as an asyncio task) and return its result.

    Cancelling the trio task cancels the asyncio task.
    """
    task = trio.lowlevel.current_task()
    future = asyncio.ensure_future(awaitable, loop=loop)
    aborted = False

    def done(f: asyncio.Future[T]) -> None:
        if not aborted:
            trio.lowlevel.reschedule(task, outcome.capture(f.result))

    def abort(_: Any) -> trio.lowlevel.Abort:
        nonlocal aborted
        aborted = True
        future.cancel()
        return trio.lowlevel.Abort.SUCCEEDED

    future.add_done_callback(done)
    result: T = await trio.lowlevel.wait_task_rescheduled(abort)
    return result


class Pipe(Generic[T]):
    """Items from one trio producer to one asyncio consumer, at most ``window`` unread.

    The producer blocks (in trio) only when ``window`` items are unread; the consumer (in
    asyncio) is woken only when it waits for an item. Pass batches, not single events, so
    a burst costs one wake-up.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, window: int) -> None:
        self._loop = loop
        self._window = window
        self._items: deque[T] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._room: trio.Event | None = None
        self.ended = False
        """The producer has finished (or given up): no item will follow those unread."""

    # The trio side.

    async def put(self, item: T) -> None:
        """Hand ``item`` over; wait while the consumer is a whole window behind."""
        self._items.append(item)
        self._wake()
        if len(self._items) >= self._window:
            room = self._room = trio.Event()
            await room.wait()

    def end(self) -> None:
        """No more items (idempotent)."""
        self.ended = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    # The asyncio side.

    async def get(self) -> T | None:
        """The next item, or None once the producer has ended and every item was read."""
        items = self._items
        while not items:
            if self.ended:
                return None
            waiter = self._waiter = self._loop.create_future()
            await waiter
        item = items.popleft()
        room = self._room
        if room is not None:
            self._room = None
            room.set()
        return item
