"""The RateLimiter's tray: an attempt's first chunk and successful end, told while no ask waits,
do not wake the actor; it applies them when it next wakes, at the times they were told, so
every window, slot and statistic comes out as if it had woken for each. While an ask waits,
or for a failure, they go through the mailbox at once. The actor alone, on virtual time."""

from __future__ import annotations

import functools
import random

import trio
import trio.testing

from sluice._config import RateLimitConfig
from sluice._limits.cost import Cost
from sluice._limits.store import MemoryQuotaStore
from sluice._mail import RateLimiterMsg, Settle
from sluice.actors._limiter_handle import LimiterTray
from sluice.actors._rate_limiter import RateLimiterHandle, run_rate_limiter

from .helpers import virtual_deadline

ONE = Cost(1, 0, 0)


class Steps(trio.abc.Instrument):
    def __init__(self) -> None:
        self.count = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name == "limiter":
            self.count += 1


async def start(nursery: trio.Nursery) -> tuple[RateLimiterHandle, LimiterTray]:
    send, inbox = trio.open_memory_channel[RateLimiterMsg](16)
    tray = LimiterTray()
    limiter = functools.partial(run_rate_limiter, tray=tray)
    await nursery.start(limiter, inbox, random.Random(0), MemoryQuotaStore(), name="limiter")
    return RateLimiterHandle(send, tray=tray), tray


@virtual_deadline(600)
async def test_an_end_nobody_waits_for_waits_in_the_tray_and_counts_when_it_was_told(
    autojump_clock, nursery
):
    limiter, tray = await start(nursery)
    limits = RateLimitConfig(requests_per_minute=1)
    first = await limiter.acquire("k", limits, ONE)  # at 0
    await trio.sleep(10)
    steps = Steps()
    trio.lowlevel.add_instrument(steps)
    await limiter.release(first.ticket)  # the first chunk at 10: the request counts from then
    await limiter.settle(Settle(first.ticket, "ok"))
    await trio.sleep(20)
    trio.lowlevel.remove_instrument(steps)
    assert steps.count == 0 and len(tray.items) == 2  # nothing woke the actor
    (stats,) = (await limiter.statistics()).values()  # a question takes the tray first
    assert (stats.pending, stats.open_streams) == (0, 0)
    assert tray.items == []
    # Applied at 30, when the actor woke, the first request would count from 30, and the
    # next one wait for 90.
    second = await limiter.acquire("k", limits, ONE)
    assert (second.at, trio.current_time()) == (70.0, 70.0)


@virtual_deadline(600)
async def test_while_an_ask_waits_a_first_chunk_frees_its_slot_at_once(autojump_clock, nursery):
    limiter, tray = await start(nursery)
    limits = RateLimitConfig(max_pending=1)
    first = await limiter.acquire("k", limits, ONE)
    admitted: list[float] = []

    async def second() -> None:
        admitted.append((await limiter.acquire("k", limits, ONE)).at)

    nursery.start_soon(second)
    await trio.sleep(5)
    assert admitted == [] and not tray.open  # the second ask waits for the slot
    await limiter.release(first.ticket)
    assert tray.items == []  # through the mailbox
    await trio.testing.wait_all_tasks_blocked()
    assert admitted == [5.0]


@virtual_deadline(600)
async def test_a_failed_end_goes_through_the_mailbox_and_cools_down_from_when_it_came(
    autojump_clock, nursery
):
    limiter, tray = await start(nursery)
    limits = RateLimitConfig(cooldown_jitter=0.0)
    first = await limiter.acquire("k", limits, ONE)
    await trio.testing.wait_all_tasks_blocked()
    assert tray.open  # nothing waits
    await limiter.settle(Settle(first.ticket, "rate_limited", wait=30.0))
    assert tray.items == []
    await trio.sleep(10)
    (stats,) = (await limiter.statistics()).values()
    assert stats.cooldown_left == 20.0
