"""The trio runtime on a background thread, reached from any other thread: what
:mod:`sluice.sync` is built on.

A call crosses with trio's thread portal primitive (``TrioToken.run_sync_soon``, on which
``trio.from_thread`` is built): the caller's thread asks the trio thread to start a task and
then sleeps on a lock until that task hands back the outcome, so a call costs one wake-up
each way. Streams and map outcomes come back through :class:`ThreadPipe` in batches. A caller
interrupted while it waits (Ctrl-C in the main thread) cancels its task before the exception
leaves the call.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import trio

from ._errors import RuntimeClosed

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

__all__ = ["Outcome", "Portal", "RequestFeed", "ThreadPipe"]

T = TypeVar("T")

_CLOSED = "the runtime has stopped; open a new one"


class Outcome(Generic[T]):
    """One outcome, handed once from the trio thread to the thread waiting for it (later
    hand-overs are ignored)."""

    __slots__ = ("_error", "_lock", "_set", "_value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._set = False
        self._value: T | None = None
        self._error: BaseException | None = None

    def set(self, value: T | None, error: BaseException | None = None) -> bool:
        """Hand the outcome over; False (and nothing changes) if one was handed over before."""
        if self._set:
            return False
        self._set = True
        self._value, self._error = value, error
        self._lock.release()
        return True

    def closed(self) -> None:
        """The runtime has ended without taking the task."""
        self.set(None, RuntimeClosed(_CLOSED))

    def wait(self) -> T:
        """Block until the outcome is handed over; return it or raise it."""
        self._lock.acquire()  # interruptible: Ctrl-C in the main thread leaves from here
        self._lock.release()  # a second wait returns at once
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


class Portal:
    """Starts tasks in the trio thread's call nursery from other threads."""

    def __init__(self, token: trio.lowlevel.TrioToken, nursery: trio.Nursery) -> None:
        self._token = token
        self._nursery = nursery
        self.closing = False

    def soon(self, fn: Callable[..., object], *args: Any) -> None:
        """Run the sync ``fn(*args)`` in the trio thread soon (safe from any thread).

        Raises:
            RuntimeClosed: the trio thread has ended.
        """
        try:
            self._token.run_sync_soon(fn, *args)
        except trio.RunFinishedError as exc:
            raise RuntimeClosed(_CLOSED) from exc

    def start(
        self, on_closed: Callable[[], None], fn: Callable[..., Awaitable[object]], *args: Any
    ) -> None:
        """Start the trio task ``fn(*args)`` (safe from any thread). The task must handle its
        own errors; if the runtime has closed by the time the trio thread gets to it,
        ``on_closed()`` is called there instead.

        Raises:
            RuntimeClosed: the runtime is closing or has ended.
        """
        if self.closing:
            raise RuntimeClosed(_CLOSED)
        self.soon(self._start, on_closed, fn, args)

    def _start(
        self,
        on_closed: Callable[[], None],
        fn: Callable[..., Awaitable[object]],
        args: tuple[Any, ...],
    ) -> None:
        try:
            self._nursery.start_soon(fn, *args)
        except RuntimeError:  # the call nursery has closed: the runtime has ended
            on_closed()

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``fn(*args)`` as a trio task; block until it ends; return or raise its outcome.

        A caller interrupted while it waits (KeyboardInterrupt) cancels the task first.
        """
        waiter: Outcome[T] = Outcome()
        scope = trio.CancelScope()
        self.start(waiter.closed, _deliver, fn, args, scope, waiter)
        try:
            return waiter.wait()
        except BaseException:
            try:
                self.soon(scope.cancel)
            except RuntimeClosed:
                pass
            raise


async def _deliver(
    fn: Callable[..., Awaitable[T]],
    args: tuple[Any, ...],
    scope: trio.CancelScope,
    settle: Outcome[T],
) -> None:
    try:
        with scope:
            value = await fn(*args)
    except Exception as exc:
        settle.set(None, exc)
        return
    except BaseException:
        settle.set(None, RuntimeClosed("the runtime stopped before the call ended"))
        raise
    if scope.cancelled_caught:
        settle.set(None, RuntimeClosed("the call was cancelled"))
    else:
        settle.set(value)


class ThreadPipe(Generic[T]):
    """Items from one trio producer to one consumer thread, at most ``window`` unread.

    The producer waits (in trio) only while the consumer is a whole window behind; it is
    woken once the consumer has read half of it.
    """

    def __init__(self, portal: Portal, window: int) -> None:
        self._portal = portal
        self._window = window
        self._cond = threading.Condition(threading.Lock())
        self._items: deque[T] = deque()
        self._room: trio.Event | None = None
        self.ended = False
        """The producer has finished (or given up)."""

    # The trio side.

    async def put(self, item: T) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify()
            room = None
            if len(self._items) >= self._window:
                room = self._room = trio.Event()
        if room is not None:
            await room.wait()

    def end(self) -> None:
        with self._cond:
            self.ended = True
            self._cond.notify()

    # The consumer's side.

    def get(self) -> T | None:
        """The next item, or None once the producer has ended and every item was read."""
        item = self.get_or_feed(None)
        assert not isinstance(item, RequestFeed)
        return item

    def get_or_feed(self, feed: RequestFeed | None) -> T | RequestFeed | None:
        """Like :meth:`get`, but returns ``feed`` instead whenever it asks for requests (so
        the consumer's thread can read them from the user's iterable, then wait again)."""
        with self._cond:
            while True:
                if feed is not None and feed.hungry:  # first: keep the calls flowing
                    return feed
                if self._items:
                    break
                if self.ended:
                    return None
                self._cond.wait()
            item = self._items.popleft()
            room = None
            if self._room is not None and len(self._items) <= self._window // 2:
                room, self._room = self._room, None
        if room is not None:
            try:
                self._portal.soon(room.set)
            except RuntimeClosed:
                pass
        return item


class RequestFeed:
    """A map's requests, read by the thread that reads its outcomes, as trio asks for them.

    The trio map pulls a request whenever a slot frees up; this feed hands it one from a
    buffer, and when the buffer is empty marks itself hungry and wakes the reading thread
    (:meth:`ThreadPipe.get_or_feed`), which refills it (:meth:`refill`) with up to
    ``ahead`` requests. So the user's iterable runs in the user's own thread, never blocks
    trio, and at most ``ahead`` requests wait in memory.
    """

    def __init__(self, pipe: ThreadPipe[Any], iterator: Iterator[Any], ahead: int) -> None:
        self._cond = pipe._cond
        self._portal = pipe._portal
        self._iterator = iterator
        self._ahead = ahead
        self._buffer: deque[Any] = deque()
        self._exhausted = False
        self._arrived: trio.Event | None = None
        self.hungry = False
        """The map waits for a request and the buffer is empty."""

    def __aiter__(self) -> RequestFeed:
        return self

    async def __anext__(self) -> Any:
        while True:
            with self._cond:
                if self._buffer:
                    return self._buffer.popleft()
                if self._exhausted:
                    raise StopAsyncIteration
                self.hungry = True
                arrived = self._arrived = trio.Event()
                self._cond.notify_all()
            await arrived.wait()

    def refill(self) -> None:
        """Read up to ``ahead`` requests (in the calling thread) and hand them over.

        An exception from the user's iterable ends the feed and propagates to the caller.
        """
        pulled: list[Any] = []
        exhausted = False
        try:
            for _ in range(self._ahead):
                pulled.append(next(self._iterator))
        except StopIteration:
            exhausted = True
        except BaseException:
            exhausted = True
            raise
        finally:
            with self._cond:
                self._buffer.extend(pulled)
                self._exhausted = exhausted
                self.hungry = False
                arrived, self._arrived = self._arrived, None
            if arrived is not None:
                try:
                    self._portal.soon(arrived.set)
                except RuntimeClosed:
                    pass
