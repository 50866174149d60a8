"""The RateLimiter drops quota keys whose state carries nothing, and only those: under the
autojump clock, with exact times, against a limiter that never drops a key."""

from __future__ import annotations

import gc
import random
import tracemalloc

import trio
import trio.testing

from sluice._config import RateLimitConfig
from sluice._limits.cost import Cost
from sluice._limits.store import MemoryQuotaStore
from sluice._mail import RateLimiterMsg, Settle
from sluice.actors._rate_limiter import KEYS_KEPT, RateLimiterHandle, run_rate_limiter
from sluice.actors._tell import MAILBOX_BUFFER

from .helpers import virtual_deadline

ONE = Cost(1, 0, 0)
PER_MINUTE_2 = RateLimitConfig(requests_per_minute=2, cooldown_jitter=0.0, max_cooldown=1000.0)


async def start_limiter(nursery: trio.Nursery, keys_kept: int) -> RateLimiterHandle:
    send, inbox = trio.open_memory_channel[RateLimiterMsg](0)
    await nursery.start(
        lambda task_status: run_rate_limiter(
            inbox,
            random.Random(0),
            MemoryQuotaStore(),
            keys_kept=keys_kept,
            task_status=task_status,
        )
    )
    return RateLimiterHandle(send)


async def once(limiter: RateLimiterHandle, key: str, limits: RateLimitConfig, **settle) -> float:
    """One attempt under ``key``: admitted, settled; returns when it was admitted."""
    admission = await limiter.acquire(key, limits, ONE)
    await limiter.settle(Settle(admission.ticket, settle.pop("signal", "ok"), **settle))
    return admission.at


async def held_keys(limiter: RateLimiterHandle) -> set[str]:
    return set(await limiter.statistics())


@virtual_deadline(1000)
async def test_keys_with_empty_windows_are_dropped_once_many_and_busy_ones_stay(
    autojump_clock, nursery
):
    limiter = await start_limiter(nursery, keys_kept=4)
    for i in range(4):
        await once(limiter, f"k{i}", PER_MINUTE_2)
    await once(limiter, "k4", PER_MINUTE_2)  # a sweep: every window still counts its call
    assert await held_keys(limiter) == {"k0", "k1", "k2", "k3", "k4"}
    await trio.sleep(60)  # the calls at 0 leave their windows at 60
    for i in range(5, 8):
        await once(limiter, f"k{i}", PER_MINUTE_2)
    assert len(await held_keys(limiter)) == 8  # at 2 x the 4 busy ones of the last sweep
    await once(limiter, "k8", PER_MINUTE_2)  # a sweep: k0-k4 are at rest
    assert await held_keys(limiter) == {"k5", "k6", "k7", "k8"}


@virtual_deadline(1000)
async def test_a_key_with_anything_left_in_it_is_never_dropped(autojump_clock, nursery):
    limiter = await start_limiter(nursery, keys_kept=1)
    adaptive = RateLimitConfig(max_pending=8, adaptive=True, cooldown_jitter=0.0)
    await once(limiter, "open", PER_MINUTE_2)
    open_stream = await limiter.acquire("open", PER_MINUTE_2, ONE)  # never settled
    await once(limiter, "cooling", PER_MINUTE_2, signal="rate_limited", wait=500.0)
    await once(limiter, "learned", PER_MINUTE_2, headers={"x-ratelimit-limit-requests": "1"})
    await once(limiter, "exhausted", PER_MINUTE_2, signal="rate_limited", quota=True, wait=400.0)
    await once(limiter, "slowed", adaptive, signal="overloaded")
    await once(limiter, "waiting", PER_MINUTE_2)
    await once(limiter, "waiting", PER_MINUTE_2)
    waited: list[float] = []

    async def third() -> None:
        waited.append(await once(limiter, "waiting", PER_MINUTE_2))

    nursery.start_soon(third)
    await trio.testing.wait_all_tasks_blocked()
    named = {"open", "cooling", "learned", "exhausted", "slowed", "waiting"}
    await trio.sleep(59)  # the waiter is still waiting (its window frees at 60)
    assert await swept(limiter, "new-1") & named == named
    await trio.sleep(301)  # 360: every window is empty; the cooldown runs to 500
    assert waited == [60.0]
    # The waiter's key is at rest now; the exhausted quota runs to 400; the others still hold
    # something: an open stream, a cooldown, a learned limit, an adaptive limit below its cap.
    assert await swept(limiter, "new-2") & named == named - {"waiting"}
    await trio.sleep(200)  # 560: the cooldown and the exhaustion are over
    await limiter.settle(Settle(open_stream.ticket, "ok"))
    assert await swept(limiter, "new-3") & named == {"learned", "slowed"}


async def swept(limiter: RateLimiterHandle, prefix: str) -> set[str]:
    """The keys held after enough new keys (``prefix-N``) that one of them swept."""
    held = len(await held_keys(limiter))
    for i in range(2 * held):  # a sweep runs by 2 x the keys held at the last one
        await once(limiter, f"{prefix}-{i}", PER_MINUTE_2)
    return await held_keys(limiter)


@virtual_deadline(100_000)
async def test_a_dropped_key_made_again_admits_exactly_as_one_never_dropped(
    autojump_clock, nursery
):
    """Two limiters, one dropping keys at rest at every chance and one never, see the same
    calls at the same times: bursts over full windows, a cooldown with its spread, idle gaps
    shorter and longer than the window. Every admission time is equal."""
    dropping = await start_limiter(nursery, keys_kept=1)
    keeping = await start_limiter(nursery, keys_kept=10**9)
    spread = RateLimitConfig(requests_per_minute=3, cooldown_jitter=2.0)
    rng = random.Random(7)
    seen: dict[str, list[tuple[str, float]]] = {"dropping": [], "keeping": []}

    async def step(name: str, limiter: RateLimiterHandle, key: str, n: int) -> None:
        out = seen[name]

        async def call(**settle: object) -> None:
            out.append((key, await once(limiter, key, spread, **settle)))

        async with trio.open_nursery() as calls:
            if n < 0:
                calls.start_soon(lambda: call(signal="rate_limited", wait=3.0))
            for _ in range(max(n, 0)):
                calls.start_soon(call)
        await once(limiter, f"filler-{len(out)}", spread)  # a new key: a sweep each time

    plan = [(rng.choice("abc"), rng.randint(1, 7), rng.choice([0, 5, 61, 200])) for _ in range(40)]
    plan.insert(10, ("a", -1, 0))  # a 429 with a 3 s wait: a cooldown and a spread follow
    plan.insert(11, ("a", 5, 0))
    for key, n, gap in plan:
        async with trio.open_nursery() as both:
            both.start_soon(step, "dropping", dropping, key, n)
            both.start_soon(step, "keeping", keeping, key, n)
        await trio.sleep(gap)
    assert len(seen["dropping"]) == sum(max(n, 1) for _, n, _ in plan)
    assert sorted(seen["dropping"]) == sorted(seen["keeping"])
    assert len(await held_keys(dropping)) < len(await held_keys(keeping))


NAMES = 100_000
BATCH = 100


@virtual_deadline(NAMES + 600)
async def test_a_hundred_thousand_keys_leave_at_most_the_kept_number(autojump_clock, nursery):
    """One quota key per model name, 100,000 names in bursts of 100 a hundred seconds apart
    (so at most 100 keys count a call in their one-minute window at any time): the limiter
    and its store hold at most KEYS_KEPT keys throughout, and nothing is left in flight."""
    store = MemoryQuotaStore()
    send, inbox = trio.open_memory_channel[RateLimiterMsg](MAILBOX_BUFFER)
    await nursery.start(
        lambda task_status: run_rate_limiter(
            inbox, random.Random(0), store, task_status=task_status
        )
    )
    limiter = RateLimiterHandle(send)
    limits = RateLimitConfig(key="model", requests_per_minute=10)
    high = 0
    for start in range(0, NAMES, BATCH):
        async with trio.open_nursery() as calls:
            for i in range(start, start + BATCH):
                calls.start_soon(once, limiter, f"sim:m-{i}", limits)
        high = max(high, len(await held_keys(limiter)))
        await trio.sleep(BATCH)
    assert BATCH < high <= KEYS_KEPT  # sweeps ran: at most twice the busy keys, within the cap
    stats = await limiter.statistics()
    assert len(stats) <= KEYS_KEPT
    assert len(store._windows) <= KEYS_KEPT and len(store._cooldowns) <= KEYS_KEPT
    assert all(
        s.pending == s.open_streams == 0 and not any(s.queued.values()) for s in stats.values()
    )


BUSY = 2000
KEY_BYTES = 1500
"""What a quota key with one admission in its window may cost, in the limiter and its store
(a key used to cost several kilobytes: three wait deques, a spread deque and two window
deques, each a 64-slot block however little it holds)."""


@virtual_deadline(600)
async def test_a_key_with_one_call_in_its_window_costs_little_memory(autojump_clock, nursery):
    """Keys that must be kept (each counts a call in its one-minute window) are small: what
    one caller-chosen model name costs until its window empties (then a sweep drops it, as
    the tests above show)."""
    store = MemoryQuotaStore()
    send, inbox = trio.open_memory_channel[RateLimiterMsg](MAILBOX_BUFFER)
    await nursery.start(
        lambda task_status: run_rate_limiter(
            inbox, random.Random(0), store, task_status=task_status
        )
    )
    limiter = RateLimiterHandle(send)
    limits = RateLimitConfig(key="model", requests_per_minute=10)
    await once(limiter, "sim:warm", limits)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(BUSY):
            await once(limiter, f"sim:m-{i}", limits)
        await trio.testing.wait_all_tasks_blocked()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(store._windows) > BUSY  # every key is busy: none could be dropped
    assert grown / BUSY < KEY_BYTES, grown / BUSY
