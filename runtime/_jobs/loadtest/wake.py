"""Waking the load tester's scheduler on time: at a request's due instant, to the microsecond
the kernel gives, without burning the CPU the requests need.

trio sleeps in epoll, whose timeout is whole milliseconds rounded up, so ``trio.sleep_until``
wakes up to a millisecond late: a whole send-lag budget. The old remedy, sleeping to just
before the deadline and then yielding in a loop until it passes, is precise but spends the
client's CPU on every request (a loop iteration of trio per yield) and takes the core away
from the worker processes and the server beside it.

On Linux a ``timerfd`` does it properly: a kernel timer with nanosecond resolution, armed for
the deadline, is a file descriptor that becomes readable when it fires, so trio's epoll wakes
at that moment like for any other I/O, and the scheduler task runs in the batch that follows.
Nothing runs while waiting. Where there is no timerfd (another OS, a libc without it) the
spin is kept as the fallback, and on a test's virtual clock a plain ``trio.sleep_until`` is
exact already.

Every waker returns only once ``trio.current_time() >= deadline``: never early.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING, Protocol

import trio

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["SPIN_MARGIN", "Waker", "open_waker"]

SPIN_MARGIN = 0.0012
"""The fallback's spin: it sleeps until this many seconds before the deadline (trio's sleeps
end on epoll's whole milliseconds, rounded up) and yields in a loop for the rest."""

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC


class Waker(Protocol):
    """Sleeps until a trio time, returning at it or (as little as it can) after it."""

    async def sleep_until(self, deadline: float) -> None: ...

    def close(self) -> None: ...


class _Plain:
    """``trio.sleep_until``: exact on a virtual clock, where time only moves when all sleep."""

    async def sleep_until(self, deadline: float) -> None:
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

    def close(self) -> None:
        pass


class _TimerFd:
    """A Linux timerfd, armed for each deadline and waited on through trio's epoll."""

    def __init__(self, fd: int, arm: _Arm) -> None:
        self._fd = fd
        self._arm = arm

    async def sleep_until(self, deadline: float) -> None:
        now = trio.current_time
        left = deadline - now()
        if left <= 0:
            await trio.lowlevel.checkpoint()
            return
        while left > 0:
            self._arm(self._fd, left)
            await trio.lowlevel.wait_readable(self._fd)
            with contextlib.suppress(BlockingIOError):
                os.read(self._fd, 8)  # the expiry count: clears the readiness
            left = deadline - now()

    def close(self) -> None:
        if self._fd >= 0:
            trio.lowlevel.notify_closing(self._fd)
            os.close(self._fd)
            self._fd = -1


class _Arm(Protocol):
    def __call__(self, fd: int, seconds: float) -> None: ...


def _timerfd() -> tuple[int, _Arm] | None:
    """A non-blocking timerfd on the monotonic clock (trio's system clock reads the same
    clock) and the function that arms it ``seconds`` from now; None where there is none.
    Python 3.13 has it in :mod:`os`; before, libc is called through :mod:`ctypes`."""
    if not sys.platform.startswith("linux"):
        return None
    create = getattr(os, "timerfd_create", None)
    if create is not None:  # Python 3.13+
        settime = os.timerfd_settime  # type: ignore[attr-defined,unused-ignore]
        fd = create(_CLOCK_MONOTONIC, flags=_TFD_NONBLOCK | _TFD_CLOEXEC)

        def arm_os(fd: int, seconds: float) -> None:
            settime(fd, initial=max(seconds, 1e-9))

        return fd, arm_os
    return _timerfd_ctypes()


def _timerfd_ctypes() -> tuple[int, _Arm] | None:
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
    fd = create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
    if fd < 0:
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

    return fd, arm_ctypes


def _virtual(clock: trio.abc.Clock) -> bool:
    """True for a test's :class:`trio.testing.MockClock` (looked up, not imported: importing
    :mod:`trio.testing` imports pytest where it is installed, into every ``sluice`` run)."""
    testing = sys.modules.get("trio.testing")
    return testing is not None and isinstance(clock, testing.MockClock)


@contextlib.contextmanager
def open_waker() -> Iterator[Waker]:
    """The best :class:`Waker` for the running trio clock, its timer closed on exit."""
    if _virtual(trio.lowlevel.current_clock()):
        yield _Plain()
        return
    made = _timerfd()
    waker: Waker = _Spin() if made is None else _TimerFd(*made)
    try:
        yield waker
    finally:
        waker.close()
