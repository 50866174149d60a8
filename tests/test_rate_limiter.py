"""The RateLimiter actor on its own, under the autojump clock."""

import random

import trio
import trio.testing

from sluice.actors.rate_limiter import RateLimiterHandle, run_rate_limiter
from sluice.config import RateLimitConfig
from sluice.mail import RateLimiterMsg

from .helpers import virtual_deadline


async def _limiter(nursery: trio.Nursery, seed: int = 0) -> RateLimiterHandle:
    send, inbox = trio.open_memory_channel[RateLimiterMsg](0)
    await nursery.start(run_rate_limiter, inbox, random.Random(seed))
    return RateLimiterHandle(send)


@virtual_deadline(600)
async def test_requests_per_minute_window_spaces_admissions(autojump_clock, nursery):
    limiter = await _limiter(nursery)
    limits = RateLimitConfig(requests_per_minute=2)
    times = []
    for _ in range(5):
        admission = await limiter.acquire("k", limits)
        await limiter.release(admission.ticket)
        times.append(trio.current_time())
    assert times == [0.0, 0.0, 60.0, 60.0, 120.0]


@virtual_deadline(60)
async def test_pending_slot_is_held_until_released(autojump_clock, nursery):
    limiter = await _limiter(nursery)
    limits = RateLimitConfig(max_pending=1)
    first = await limiter.acquire("k", limits)
    admitted_at: list[float] = []

    async def second():
        await limiter.acquire("k", limits)
        admitted_at.append(trio.current_time())

    nursery.start_soon(second)
    await trio.sleep(5)
    assert admitted_at == []
    await limiter.release(first.ticket)
    await limiter.release(first.ticket)  # twice is harmless: it must not free a second slot
    await trio.testing.wait_all_tasks_blocked()
    assert admitted_at == [5.0]


@virtual_deadline(60)
async def test_keys_do_not_block_each_other(autojump_clock, nursery):
    limiter = await _limiter(nursery)
    limits = RateLimitConfig(max_pending=1)
    await limiter.acquire("a", limits)
    await limiter.cooldown("a", 30)
    with trio.fail_after(0.001):
        await limiter.acquire("b", limits)


@virtual_deadline(60)
async def test_cooldown_pauses_the_key_for_its_time_plus_bounded_jitter(autojump_clock, nursery):
    limiter = await _limiter(nursery, seed=3)
    limits = RateLimitConfig(cooldown_jitter=0.5)
    await limiter.cooldown("k", 2.0)  # unknown key yet: nothing to pause
    first = await limiter.acquire("k", limits)
    await limiter.release(first.ticket)
    await limiter.cooldown("k", 2.0)
    await limiter.acquire("k", limits)
    waited = trio.current_time()
    assert 2.0 <= waited <= 2.5


@virtual_deadline(60)
async def test_waiter_cancelled_in_queue_takes_no_slot(autojump_clock, nursery):
    limiter = await _limiter(nursery)
    limits = RateLimitConfig(max_pending=1)
    first = await limiter.acquire("k", limits)
    with trio.move_on_after(1):
        await limiter.acquire("k", limits)  # gives up while queued
    await limiter.release(first.ticket)
    with trio.fail_after(0.001):
        await limiter.acquire("k", limits)
