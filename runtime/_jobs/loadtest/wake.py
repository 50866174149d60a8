"""Waking the load tester's scheduler on time: at a request's due instant, to the microsecond
the kernel gives, without burning the CPU the requests need.

trio sleeps in epoll, whose timeout is whole milliseconds rounded up, so ``trio.sleep_until``
wakes up to a millisecond late: a whole send-lag budget. The old remedy, sleeping to just
before the deadline and then yielding in a loop until it passes, is precise but spends the
client's CPU on every request (a loop iteration of trio per yield) and takes the core away
from the worker processes and the server beside it.

On Linux a ``timerfd`` does it properly: a kernel timer with nanosecond resolution, armed for
the deadline, is a file descriptor that becomes readable when it fires, so trio's epoll wakes
at that moment like for any other I/O, and the waiting task runs in the batch that follows.
Nothing runs while waiting. Several tasks may wait at once, each until its own deadline (the
load tester's senders of the next few requests), each on a timer of its own from a pool.
Where there is no timerfd (another OS, a libc without it) the spin is kept as the fallback,
and on a test's virtual clock a plain ``trio.sleep_until`` is exact already.

Every waker returns only once ``trio.current_time() >= deadline``: never early.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING, Protocol

import trio

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["MAX_TIMERS", "SPIN_MARGIN", "TAIL", "TAIL_RATE", "Waker", "open_waker", "tail_for"]

SPIN_MARGIN = 0.0012
"""The fallback's spin: it sleeps until this many seconds before the deadline (trio's sleeps
end on epoll's whole milliseconds, rounded up) and yields in a loop for the rest."""

MAX_TIMERS = 64
"""Timers a :class:`_TimerFd` opens at most (file descriptors: a trace's burst of thousands
of requests due at one instant must not run the process out of them); tasks waiting beyond
them sleep on trio's own timeout."""

TAIL = 0.0002
"""At low rates the timerfd is armed this many seconds before the deadline and the rest is
spent yielding in a loop: an idle machine's core takes its time to wake up for a timer (a
virtual machine's most of all), and a process that is running need not be woken. It costs
the CPU of that tail per request (of trio's loop passes, less when other tasks run)."""

TAIL_RATE = 200.0
"""Requests per second of one process at most for :data:`TAIL`: above it the tails' CPU
would be taken from the requests, and a busy loop is seldom idle when one falls due."""

TAIL_ENV = "SLUICE_LOADTEST_TAIL"
"""Seconds of the tail instead of :func:`tail_for`'s choice (``0``: none): for comparing."""

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC


class Waker(Protocol):
    """Sleeps until a trio time, returning at it or (as little as it can) after it; any
    number of tasks at once."""

    async def sleep_until(self, deadline: float) -> None: ...

    async def nap_until(self, deadline: float) -> None:
        """Sleep until ``deadline`` as cheaply as it can, maybe a little after it (no spin):
        for the scheduler, which starts senders ahead of time and needs no precision. Never
        returns early; a cancellation ends it like any sleep."""
        ...

    def close(self) -> None: ...


class _Plain:
    """``trio.sleep_until``: exact on a virtual clock, where time only moves when all sleep."""

    async def sleep_until(self, deadline: float) -> None:
        await trio.sleep_until(deadline)

    async def nap_until(self, deadline: float) -> None:
        await trio.sleep_until(deadline)

    def close(self) -> None:
        pass


class _Spin:
    """The fallback without a timerfd: sleep to :data:`SPIN_MARGIN` before the deadline, then
    yield until it passes (other tasks run meanwhile)."""

    async def sleep_until(self, deadline: float) -> None:
        now = trio.current_time
        await trio.sleep_until(deadline - SPIN_MARGIN)
        while now() < deadline:
            await trio.lowlevel.checkpoint()

    async def nap_until(self, deadline: float) -> None:
        await trio.sleep_until(deadline)

    def close(self) -> None:
        pass


class _TimerFd:
    """Linux timerfds armed for each deadline and waited on through trio's epoll: one per
    task waiting at the moment (kept in a pool and reused), so the senders of the next few
    requests can each wait for their own due time."""

    def __init__(self, new: Callable[[], int], arm: _Arm, tail: float = 0.0) -> None:
        self._tail = tail
        """Seconds before the deadline the timer is armed for, yielding in a loop after it."""
        self._new = new
        self._arm = arm
        self._free: list[int] = []
        self._fds: list[int] = []
        self._now: Callable[[], float] | None = None
        """The running clock's reading (bound at the first wait: two calls fewer per read
        than ``trio.current_time``)."""

    @property
    def fds(self) -> tuple[int, ...]:
        """The timers made so far (open until :meth:`close`)."""
        return tuple(self._fds)

    async def sleep_until(self, deadline: float) -> None:
        if self._tail:
            now = trio.current_time
            await self._sleep_until(deadline - self._tail)
            while now() < deadline:
                await trio.lowlevel.checkpoint()
        else:
            await self._sleep_until(deadline)

    async def nap_until(self, deadline: float) -> None:
        """On a timer of the pool, without the tail: a wait on a file descriptor costs the
        loop a fraction of what ``trio.sleep_until``'s cancel scope and deadline do."""
        await self._sleep_until(deadline)

    async def _sleep_until(self, deadline: float) -> None:
        now = self._now
        if now is None:
            now = self._now = trio.lowlevel.current_clock().current_time
        left = deadline - now()
        if left <= 0:
            await trio.lowlevel.checkpoint()
            return
        if self._free:
            fd = self._free.pop()
        elif len(self._fds) < MAX_TIMERS:
            fd = self._new()
            self._fds.append(fd)
        else:  # a burst due at once: epoll's milliseconds for those past the pool
            await trio.sleep_until(deadline)
            return
        try:
            while left > 0:
                self._arm(fd, left)  # a new value also clears a stale expiry's count
                await trio.lowlevel.wait_readable(fd)
                try:  # (not contextlib.suppress: three calls more per wait)
                    os.read(fd, 8)  # the expiry count: clears the readiness
                except BlockingIOError:
                    pass
                left = deadline - now()
        finally:
            self._free.append(fd)

    def close(self) -> None:
        for fd in self._fds:
            trio.lowlevel.notify_closing(fd)
            os.close(fd)
        self._fds.clear()
        self._free.clear()


class _Arm(Protocol):
    def __call__(self, fd: int, seconds: float) -> None: ...


def _timerfd() -> tuple[Callable[[], int], _Arm] | None:
    """A function that makes a non-blocking timerfd on the monotonic clock (trio's system
    clock reads the same clock) and the function that arms one ``seconds`` from now; None
    where there is none. Python 3.13 has them in :mod:`os`; before, libc is called through
    :mod:`ctypes`."""
    if not sys.platform.startswith("linux"):
        return None
    create = getattr(os, "timerfd_create", None)
    if create is not None:  # Python 3.13+
        settime = os.timerfd_settime  # type: ignore[attr-defined,unused-ignore]

        def new_os() -> int:
            fd: int = create(_CLOCK_MONOTONIC, flags=_TFD_NONBLOCK | _TFD_CLOEXEC)
            return fd

        def arm_os(fd: int, seconds: float) -> None:
            settime(fd, initial=max(seconds, 1e-9))

        return new_os, arm_os
    return _timerfd_ctypes()


def _timerfd_ctypes() -> tuple[Callable[[], int], _Arm] | None:
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        create, settime = libc.timerfd_create, libc.timerfd_settime
    except (OSError, AttributeError):
        return None

    class Timespec(ctypes.Structure):
        _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))

    class Itimerspec(ctypes.Structure):
        _fields_ = (("it_interval", Timespec), ("it_value", Timespec))

    create.argtypes = (ctypes.c_int, ctypes.c_int)
    settime.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)

    def new_ctypes() -> int:
        fd: int = create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error))
        return fd

    try:
        os.close(new_ctypes())  # libc has the call but the kernel may not
    except OSError:
        return None
    spec = Itimerspec()
    pointer = ctypes.addressof(spec)
    value = spec.it_value

    def arm_ctypes(fd: int, seconds: float) -> None:
        whole = int(seconds)
        nanos = int((seconds - whole) * 1e9)
        value.tv_sec, value.tv_nsec = whole, max(nanos, 1 if whole == 0 else 0)
        if settime(fd, 0, pointer, None) != 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error))

    return new_ctypes, arm_ctypes


def _virtual(clock: trio.abc.Clock) -> bool:
    """True for a test's :class:`trio.testing.MockClock` (looked up, not imported: importing
    :mod:`trio.testing` imports pytest where it is installed, into every ``sluice`` run)."""
    testing = sys.modules.get("trio.testing")
    return testing is not None and isinstance(clock, testing.MockClock)


def tail_for(rate: float | None) -> float:
    """The timer's :data:`TAIL` for one process sending ``rate`` requests per second (None:
    a trace or a ramp, whose rate varies: no tail)."""
    chosen = os.environ.get(TAIL_ENV)
    if chosen:
        return float(chosen)
    return TAIL if rate is not None and rate <= TAIL_RATE else 0.0


@contextlib.contextmanager
def open_waker(rate: float | None = None) -> Iterator[Waker]:
    """The best :class:`Waker` for the running trio clock, its timer closed on exit;
    ``rate``: this process's requests per second, for :func:`tail_for`."""
    if _virtual(trio.lowlevel.current_clock()):
        yield _Plain()
        return
    made = _timerfd()
    waker: Waker = _Spin() if made is None else _TimerFd(*made, tail=tail_for(rate))
    try:
        yield waker
    finally:
        waker.close()
