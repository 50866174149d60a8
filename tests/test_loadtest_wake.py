"""The load tester's scheduler wakes (:mod:`sluice._jobs.loadtest.wake`): exactly at each
deadline on a virtual clock, and on the real clock never before it, through a Linux timerfd
where there is one (no spinning), or the spin fallback."""

from __future__ import annotations

import errno
import os
import sys

import pytest
import trio
import trio.testing

from sluice._jobs.loadtest import wake
from sluice._jobs.loadtest.wake import open_waker

LINUX = sys.platform.startswith("linux")


async def test_a_virtual_clock_wakes_exactly_at_each_deadline(autojump_clock) -> None:
    with trio.fail_after(100), open_waker() as waker:
        assert isinstance(waker, wake._Plain)
        start = trio.current_time()
        for offset in (0.0005, 0.25, 0.2500001, 7.0):
            await waker.sleep_until(start + offset)
            assert trio.current_time() == start + offset


async def _never_early(waker: wake.Waker) -> None:
    now = trio.current_time
    start = now()
    for step in (0.0003, 0.0021, 0.0107, 0.0004):
        start += step
        await waker.sleep_until(start)
        assert now() >= start
    before = now()
    await waker.sleep_until(before - 1.0)  # already due: returns at once (a checkpoint)
    assert now() - before < 1.0


@pytest.mark.skipif(not LINUX, reason="timerfd is Linux's")
async def test_the_real_clock_wakes_through_a_timerfd_never_early() -> None:
    with trio.fail_after(10), open_waker() as waker:
        assert isinstance(waker, wake._TimerFd)
        await _never_early(waker)
        fds = waker.fds
    assert len(fds) == 1  # one task waited at a time: one timer, reused
    assert waker.fds == ()
    with pytest.raises(OSError, match="Bad file descriptor") as closed:
        os.fstat(fds[0])  # closed on exit
    assert closed.value.errno == errno.EBADF


@pytest.mark.skipif(not LINUX, reason="timerfd is Linux's")
async def test_the_ctypes_timerfd_works_where_os_has_none() -> None:
    made = wake._timerfd_ctypes()
    assert made is not None
    waker = wake._TimerFd(*made)
    try:
        with trio.fail_after(10):
            await _never_early(waker)
    finally:
        waker.close()


@pytest.mark.skipif(not LINUX, reason="timerfd is Linux's")
async def test_a_cancelled_wait_leaves_the_timer_reusable() -> None:
    with trio.fail_after(10), open_waker() as waker:
        with trio.move_on_after(0.005):
            await waker.sleep_until(trio.current_time() + 60)
        await _never_early(waker)


async def test_the_spin_fallback_never_wakes_early() -> None:
    with trio.fail_after(10):
        await _never_early(wake._Spin())


@pytest.mark.skipif(not LINUX, reason="timerfd is Linux's")
async def test_tasks_waiting_at_once_each_wake_at_their_own_deadline_on_their_own_timer() -> None:
    woke: dict[int, float] = {}
    with trio.fail_after(10), open_waker() as waker:
        assert isinstance(waker, wake._TimerFd)
        start = trio.current_time()
        due = {0: start + 0.030, 1: start + 0.010, 2: start + 0.020}

        async def sleeper(name: int) -> None:
            await waker.sleep_until(due[name])
            woke[name] = trio.current_time()

        async with trio.open_nursery() as nursery:
            for name in due:
                nursery.start_soon(sleeper, name)
        assert len(waker.fds) == 3  # three waited at once
        assert sorted(woke, key=woke.__getitem__) == [1, 2, 0]
        assert all(woke[name] >= due[name] for name in due)
        await _never_early(waker)  # the pool's timers are reused
        assert len(waker.fds) == 3


@pytest.mark.skipif(not LINUX, reason="timerfd is Linux's")
async def test_a_burst_past_the_pool_of_timers_sleeps_on_trios_timeout_never_early(
    monkeypatch,
) -> None:
    monkeypatch.setattr(wake, "MAX_TIMERS", 2)
    woke: list[float] = []
    with trio.fail_after(10), open_waker() as waker:
        assert isinstance(waker, wake._TimerFd)
        due = trio.current_time() + 0.01

        async def sleeper() -> None:
            await waker.sleep_until(due)
            woke.append(trio.current_time())

        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(sleeper)
        assert len(waker.fds) == 2  # no more file descriptors than the pool's
    assert len(woke) == 5 and min(woke) >= due


def test_the_tail_is_for_low_rates_only(monkeypatch) -> None:
    # A process at 200/s or less spins the last TAIL seconds; above, or with no mean rate
    # (a trace, a ramp), it does not; the variable overrides either way.
    monkeypatch.delenv(wake.TAIL_ENV, raising=False)
    assert wake.tail_for(wake.TAIL_RATE) == wake.TAIL
    assert wake.tail_for(25.0) == wake.TAIL
    assert wake.tail_for(wake.TAIL_RATE + 1) == 0.0
    assert wake.tail_for(None) == 0.0
    monkeypatch.setenv(wake.TAIL_ENV, "0")
    assert wake.tail_for(25.0) == 0.0
    monkeypatch.setenv(wake.TAIL_ENV, "0.0005")
    assert wake.tail_for(1000.0) == 0.0005


@pytest.mark.skipif(not LINUX, reason="timerfd is Linux's")
async def test_a_timerfd_with_a_tail_never_wakes_early() -> None:
    made = wake._timerfd()
    assert made is not None
    waker = wake._TimerFd(*made, tail=wake.TAIL)
    try:
        with trio.fail_after(10):
            await _never_early(waker)
    finally:
        waker.close()
