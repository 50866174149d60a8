"""The RateLimiter actor on its own, under the autojump clock, with exact times."""

from __future__ import annotations

import random

import pytest
import trio
import trio.testing

from sluice._config import RateLimitConfig, WindowLimit
from sluice._errors import RateLimited, TooLargeForQuota
from sluice._limits.cost import Cost
from sluice._limits.store import MemoryQuotaStore
from sluice._mail import GetLimiterStats, KeyStatistics, RateLimiterMsg, Settle
from sluice._messages import Usage
from sluice.actors._rate_limiter import RateLimiterHandle, run_rate_limiter

from .helpers import virtual_deadline

ONE = Cost(1, 0, 0)


async def start_limiter(nursery: trio.Nursery, seed: int = 0) -> RateLimiterHandle:
    send, inbox = trio.open_memory_channel[RateLimiterMsg](0)
    await nursery.start(run_rate_limiter, inbox, random.Random(seed), MemoryQuotaStore())
    return RateLimiterHandle(send)


async def admit_and_finish(limiter, key, limits, cost=ONE, usage=None, signal="ok", **kw):
    admission = await limiter.acquire(key, limits, cost, kw.pop("priority", "interactive"))
    await limiter.settle(Settle(admission.ticket, signal, usage, **kw))
    return admission


@virtual_deadline(600)
async def test_600_per_minute_with_2000_queued_admits_exactly_600_per_window(
    autojump_clock, nursery
):
    limiter = await start_limiter(nursery)
    limits = RateLimitConfig(requests_per_minute=600)
    times: list[float] = []

    async def one() -> None:
        await admit_and_finish(limiter, "k", limits)
        times.append(trio.current_time())

    async with trio.open_nursery() as calls:
        for _ in range(2000):
            calls.start_soon(one)
    assert len(times) == 2000
    assert max(times) == 180.0  # 600 at 0, 60, 120 and the last 200 at 180: the theoretical end
    for start in sorted(set(times)):
        assert sum(1 for t in times if start <= t < start + 60) <= 600
    assert [times.count(t) for t in (0.0, 60.0, 120.0, 180.0)] == [600, 600, 600, 200]


@virtual_deadline(600)
async def test_token_estimates_that_were_too_high_are_refunded(autojump_clock, nursery):
    limiter = await start_limiter(nursery)
    limits = RateLimitConfig(tokens_per_minute=1000)
    first = await limiter.acquire("k", limits, Cost(1, 100, 800))
    admitted: list[float] = []

    async def second() -> None:
        await limiter.acquire("k", limits, Cost(1, 100, 400))
        admitted.append(trio.current_time())

    nursery.start_soon(second)
    await trio.sleep(5)
    assert admitted == []  # 900 reserved + 500 does not fit in 1000
    # the first call really used 150 tokens: 750 are refunded and the second fits at once
    await limiter.settle(Settle(first.ticket, "ok", Usage(input_tokens=100, output_tokens=50)))
    await trio.testing.wait_all_tasks_blocked()
    assert admitted == [5.0]


@virtual_deadline(600)
async def test_without_refund_the_token_window_waits_for_expiry(autojump_clock, nursery):
    limiter = await start_limiter(nursery)
    limits = RateLimitConfig(tokens_per_minute=1000)
    await limiter.acquire("k", limits, Cost(1, 100, 800))
    await limiter.acquire("k", limits, Cost(1, 100, 400))
    assert trio.current_time() == 60.0


@virtual_deadline(60)
async def test_a_call_larger_than_the_window_fails_at_once(autojump_clock, nursery):
    limiter = await start_limiter(nursery)
    limits = RateLimitConfig(output_tokens_per_minute=1000)
    with pytest.raises(TooLargeForQuota, match="2000 output tokens"):
        await limiter.acquire("k", limits, Cost(1, 10, 2000))
    assert trio.current_time() == 0.0


@virtual_deadline(60)
async def test_pending_slot_is_held_until_the_first_chunk(autojump_clock, nursery):
    limiter = await start_limiter(nursery)
    limits = RateLimitConfig(max_pending=1)
    first = await limiter.acquire("k", limits, ONE)
    admitted_at: list[float] = []

    async def second() -> None:
        await limiter.acquire("k", limits, ONE)
        admitted_at.append(trio.current_time())

    nursery.start_soon(second)
    await trio.sleep(5)
    assert admitted_at == []
    await limiter.release(first.ticket)
    await limiter.release(first.ticket)  # twice is harmless: it must not free a second slot
    await trio.testing.wait_all_tasks_blocked()
    assert admitted_at == [5.0]
    stats = (await limiter.statistics())["k"]
    assert stats.pending == 1 and stats.open_streams == 2


@virtual_deadline(60)
async def test_open_streams_are_held_until_the_end(autojump_clock, nursery):
    limiter = await start_limiter(nursery)
    limits = RateLimitConfig(max_open_streams=1)
    first = await limiter.acquire("k", limits, ONE)
    await limiter.release(first.ticket)  # first chunk: does not free the stream
    with trio.move_on_after(3) as blocked:
        await limiter.acquire("k", limits, ONE)
    assert blocked.cancelled_caught  # the second stream waited the whole 3 s
    assert (await limiter.statistics())["k"].open_streams == 1
    await limiter.settle(Settle(first.ticket, "ok"))
    with trio.fail_after(0.001):
        await limiter.acquire("k", limits, ONE)


@virtual_deadline(60)
async def test_a_429_on_one_key_leaves_another_running(autojump_clock, nursery):
    limiter = await start_limiter(nursery)
    limits = RateLimitConfig(cooldown_jitter=0)
    await admit_and_finish(limiter, "a", limits, signal="rate_limited", wait=30.0)
    with trio.fail_after(0.001):
        await admit_and_finish(limiter, "b", limits)
    await limiter.acquire("a", limits, ONE)
    assert trio.current_time() == 30.0


@virtual_deadline(60)
async def test_an_ask_that_will_not_wait_out_a_cooldown_is_refused_with_what_is_left(
    autojump_clock, nursery
):
    """A proxy's call (``fail_on_cooldown``) gets the 429 at once, with the seconds left of the
    provider's pause as retry_after; once the pause is over it is admitted as usual."""
    limiter = await start_limiter(nursery)
    limits = RateLimitConfig(cooldown_jitter=0)
    await admit_and_finish(limiter, "k", limits, signal="rate_limited", wait=7.0)
    await trio.sleep(2.5)
    with pytest.raises(RateLimited) as caught:
        await limiter.acquire("k", limits, ONE, fail_on_cooldown=True)
    assert trio.current_time() == 2.5  # refused without waiting
    assert caught.value.retry_after == 4.5 and caught.value.status == 429
    assert caught.value.retryable  # a rate limit, not an exhausted quota
    await limiter.acquire("k", limits, ONE)  # an ask that waits, waits
    assert trio.current_time() == 7.0
    with trio.fail_after(0.001):
        await limiter.acquire("k", limits, ONE, fail_on_cooldown=True)


@virtual_deadline(60)
async def test_429_without_a_wait_uses_the_default_cooldown(autojump_clock, nursery):
    limiter = await start_limiter(nursery)
    limits = RateLimitConfig(default_cooldown=7, cooldown_jitter=0)
    await admit_and_finish(limiter, "k", limits, signal="rate_limited")
    await limiter.acquire("k", limits, ONE)
    assert trio.current_time() == 7.0


@virtual_deadline(60)
async def test_waiters_after_a_cooldown_are_spread_over_the_jitter_interval(
    autojump_clock, nursery
):
    limiter = await start_limiter(nursery, seed=11)
    limits = RateLimitConfig(cooldown_jitter=2.0)
    await admit_and_finish(limiter, "k", limits, signal="rate_limited", wait=10.0)
    times: list[float] = []

    async def waiter() -> None:
        await limiter.acquire("k", limits, ONE)
        times.append(trio.current_time())

    async with trio.open_nursery() as waiters:
        for _ in range(20):
            waiters.start_soon(waiter)
    assert len(times) == 20
    assert all(10.0 <= t <= 12.0 for t in times)
    assert len(set(times)) == 20  # nobody wakes together
    assert max(times) - min(times) > 1.0
    # after the spread, admissions are immediate again
    start = trio.current_time()
    await limiter.acquire("k", limits, ONE)
    assert trio.current_time() == start


@virtual_deadline(600)
async def test_quota_exhausted_fails_fast_instead_of_pausing(autojump_clock, nursery):
    limiter = await start_limiter(nursery)
    limits = RateLimitConfig(max_cooldown=60)
    await admit_and_finish(limiter, "k", limits, signal="rate_limited", wait=3600.0)
    with pytest.raises(RateLimited) as caught:
        await limiter.acquire("k", limits, ONE)
    assert caught.value.quota == "quota" and not caught.value.retryable
    assert "max_cooldown" in caught.value.message
    assert trio.current_time() == 0.0
    await admit_and_finish(limiter, "other", limits, signal="rate_limited", quota=True)
    with pytest.raises(RateLimited, match="exhausted"):
        await limiter.acquire("other", limits, ONE)
    await trio.sleep(61)  # the exhaustion is bounded by max_cooldown
    await limiter.acquire("k", limits, ONE)


async def _hold_one_slot(limiter, limits):
    """Admit one call and keep its pending slot, so later calls queue."""
    return await limiter.acquire("k", limits, ONE)


@virtual_deadline(600)
async def test_interactive_calls_overtake_a_batch_backlog(autojump_clock, nursery):
    limiter = await start_limiter(nursery)
    limits = RateLimitConfig(max_pending=1, aging=10.0)
    holder = await _hold_one_slot(limiter, limits)
    order: list[str] = []

    async def call(name: str, priority: str) -> None:
        admission = await limiter.acquire("k", limits, ONE, priority)  # type: ignore[arg-type]
        order.append(name)
        await trio.sleep(1)
        await limiter.settle(Settle(admission.ticket, "ok"))

    async with trio.open_nursery() as calls:
        for i in range(20):
            calls.start_soon(call, f"b{i}", "batch")
            await trio.testing.wait_all_tasks_blocked()  # queue in a known order
        await trio.sleep(2)
        for i in range(3):
            calls.start_soon(call, f"i{i}", "interactive")
            await trio.testing.wait_all_tasks_blocked()
        await limiter.settle(Settle(holder.ticket, "ok"))
    assert order == ["i0", "i1", "i2"] + [f"b{i}" for i in range(20)]


@virtual_deadline(600)
async def test_batch_calls_still_progress_under_a_stream_of_interactive_calls(
    autojump_clock, nursery
):
    """Ageing: a batch call beats interactive calls that arrived ``aging`` seconds after it."""
    limiter = await start_limiter(nursery)
    limits = RateLimitConfig(max_pending=1, aging=10.0)
    holder = await _hold_one_slot(limiter, limits)
    order: list[str] = []

    async def call(name: str, priority: str) -> None:
        admission = await limiter.acquire("k", limits, ONE, priority)  # type: ignore[arg-type]
        order.append(name)
        await trio.sleep(1)
        await limiter.settle(Settle(admission.ticket, "ok"))

    async def interactive_stream() -> None:
        for i in range(30):
            nursery_calls.start_soon(call, f"i{i}", "interactive")
            await trio.sleep(1)

    async with trio.open_nursery() as nursery_calls:
        for i in range(5):
            nursery_calls.start_soon(call, f"b{i}", "batch")
            await trio.testing.wait_all_tasks_blocked()  # queue in a known order
        nursery_calls.start_soon(interactive_stream)
        await trio.sleep(0.5)
        await limiter.settle(Settle(holder.ticket, "ok"))
    interactive_before = [f"i{i}" for i in range(11)]
    batch = [f"b{i}" for i in range(5)]
    interactive_after = [f"i{i}" for i in range(11, 30)]
    assert order == interactive_before + batch + interactive_after


@virtual_deadline(60)
async def test_waiter_cancelled_in_queue_consumes_nothing(autojump_clock, nursery):
    limiter = await start_limiter(nursery)
    limits = RateLimitConfig(max_pending=1, requests_per_minute=2)
    first = await limiter.acquire("k", limits, ONE)
    with trio.move_on_after(1) as gave_up:
        await limiter.acquire("k", limits, ONE)  # gives up while queued
    assert gave_up.cancelled_caught
    stats = (await limiter.statistics())["k"]
    assert stats.queued["interactive"] == 0
    await limiter.release(first.ticket)
    with trio.fail_after(0.001):
        await limiter.acquire("k", limits, ONE)  # the second request of the window is free
    assert (await limiter.statistics())["k"].windows["requests/60s"] == (2, 2)


@virtual_deadline(600)
async def test_learned_header_limits_lower_the_effective_rate(autojump_clock, nursery):
    limiter = await start_limiter(nursery)
    limits = RateLimitConfig(requests_per_minute=100)
    headers = {
        "x-ratelimit-limit-requests": "10",
        "x-ratelimit-remaining-requests": "2",
        "x-ratelimit-reset-requests": "30s",
    }
    await admit_and_finish(limiter, "k", limits, headers=headers)
    times = []
    for _ in range(3):
        await admit_and_finish(limiter, "k", limits)
        times.append(trio.current_time())
    # the provider said 2 left until 30 s from now: two now, the third when its budget resets
    assert times == [0.0, 0.0, 30.0]
    stats = (await limiter.statistics())["k"]
    assert stats.windows["requests/60s"][1] == 10  # the configured 100 is only a ceiling


@virtual_deadline(600)
async def test_adaptive_limit_restarts_from_one_up_to_half_on_429_and_recovers(
    autojump_clock, nursery
):
    limiter = await start_limiter(nursery)
    limits = RateLimitConfig(max_pending=8, adaptive=True, cooldown_jitter=0)
    admissions = [await limiter.acquire("k", limits, ONE) for _ in range(8)]
    assert (await limiter.statistics())["k"].pending_limit == 8
    await limiter.settle(Settle(admissions[0].ticket, "rate_limited", wait=1.0))
    await limiter.settle(Settle(admissions[1].ticket, "rate_limited", wait=1.0))  # same round
    stats = (await limiter.statistics())["k"]
    assert stats.pending_limit == 1  # slow start after the cooldown, up to threshold 4
    for a in admissions[2:]:
        await limiter.settle(Settle(a.ticket, "ok"))
    assert (await limiter.statistics())["k"].pending_limit == 4
    for _ in range(20):
        await admit_and_finish(limiter, "k", limits)
    grown = (await limiter.statistics())["k"].pending_limit
    assert grown is not None and 4 < grown <= 8


@virtual_deadline(600)
async def test_window_counts_from_the_reply_so_it_stays_behind_the_providers(
    autojump_clock, nursery
):
    """The provider counts a request when it arrives, after our admission: counting ours from
    the first chunk means the next burst can never reach it before its window has moved on."""
    limiter = await start_limiter(nursery)
    limits = RateLimitConfig(windows=(WindowLimit(dimension="requests", limit=2, per=10.0),))
    first = await limiter.acquire("k", limits, ONE)
    second = await limiter.acquire("k", limits, ONE)
    await trio.sleep(1.5)
    await limiter.release(first.ticket)  # replies 1.5 s after admission
    await limiter.settle(Settle(second.ticket, "failed"))  # an error reply, same
    await limiter.acquire("k", limits, ONE)
    assert trio.current_time() == 11.5


@virtual_deadline(600)
async def test_a_reload_to_a_lower_limit_holds_the_next_call_to_it(autojump_clock, nursery):
    """Five calls under 1,000 a minute, then a reload to 2 a minute: the five still count, so
    the next calls wait until they leave the window (at 60), then go two a minute."""
    limiter = await start_limiter(nursery)
    fast = RateLimitConfig(requests_per_minute=1000)
    for _ in range(5):
        await admit_and_finish(limiter, "sim:m", fast)
    await limiter.relimit({"sim": RateLimitConfig(requests_per_minute=2)})
    times = [(await admit_and_finish(limiter, "sim:m", fast)).at for _ in range(3)]
    assert times == [60.0, 60.0, 120.0]
    assert (await limiter.statistics())["sim:m"].windows["requests/60s"] == (1, 2)


@virtual_deadline(600)
async def test_a_reload_to_a_higher_limit_admits_a_waiting_call_at_once(autojump_clock, nursery):
    limiter = await start_limiter(nursery)
    slow = RateLimitConfig(requests_per_minute=2)
    for _ in range(2):
        await admit_and_finish(limiter, "sim:m", slow)
    admitted: list[float] = []

    async def third() -> None:
        admitted.append((await admit_and_finish(limiter, "sim:m", slow)).at)

    nursery.start_soon(third)
    await trio.sleep(10)
    assert admitted == []  # waiting for the window, until 60
    await limiter.relimit({"sim": RateLimitConfig(requests_per_minute=100)})
    await trio.testing.wait_all_tasks_blocked()
    assert admitted == [10.0]


@virtual_deadline(3600)
async def test_a_learned_limit_rises_with_the_headers_and_lapses_without_them(
    autojump_clock, nursery
):
    limiter = await start_limiter(nursery)
    limits = RateLimitConfig(requests_per_minute=100)
    one = {"x-ratelimit-limit-requests": "1"}
    await admit_and_finish(limiter, "k", limits, headers=one)
    # The provider says 1 a minute, then (its tier went up) 5 a minute.
    raised = await admit_and_finish(
        limiter, "k", limits, headers={"x-ratelimit-limit-requests": "5"}
    )
    times = [(await admit_and_finish(limiter, "k", limits)).at for _ in range(5)]
    assert raised.at == 60.0 and times == [60.0, 60.0, 60.0, 60.0, 120.0]
    # No reply has reported a limit since 60: 720 s later the configured 100 alone holds.
    await trio.sleep(780.0 - trio.current_time())
    times = [(await admit_and_finish(limiter, "k", limits)).at for _ in range(100)]
    assert times == [780.0] * 100
    # A configured limit below a learned one wins.
    ten = {"x-ratelimit-limit-requests": "10"}
    await admit_and_finish(limiter, "j", RateLimitConfig(requests_per_minute=1), headers=ten)
    at = (await admit_and_finish(limiter, "j", RateLimitConfig(requests_per_minute=1))).at
    assert at == 840.0


@virtual_deadline(60)
async def test_a_statistics_request_whose_asker_gave_up_is_dropped(autojump_clock, nursery):
    """A scrape waits only so long for statistics, then closes its reply channel: the limiter
    drops the answer and carries on (it must not crash and lose its keys)."""
    send, inbox = trio.open_memory_channel[RateLimiterMsg](0)
    await nursery.start(run_rate_limiter, inbox, random.Random(0), MemoryQuotaStore())
    limiter = RateLimiterHandle(send)
    await admit_and_finish(limiter, "k", RateLimitConfig(requests_per_minute=2))
    reply_to, reply = trio.open_memory_channel[dict[str, KeyStatistics]](1)
    with reply_to, reply:
        reply_to.close()  # what RateLimiterHandle.statistics does when cancelled
        await send.send(GetLimiterStats(reply_to))
    assert (await limiter.statistics())["k"].windows["requests/60s"] == (1, 2)
