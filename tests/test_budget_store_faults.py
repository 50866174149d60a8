"""Shared budgets through store faults, store by store: a real ``redis-server`` paused, or
restarted without its data, under :class:`FallbackQuotaStore` (two stores stand for two
processes; ``clock="caller"`` gives the script the test's times)."""

from __future__ import annotations

import os
import signal
import uuid
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Literal

import coredis

from sluice._limits.cost import Cost
from sluice._limits.fallback import FallbackQuotaStore
from sluice._limits.redis_store import RedisQuotaStore
from sluice._limits.store import BudgetAsk, Reservation

if TYPE_CHECKING:
    from tests.redis_server import RedisServer

MAX = 10_000
GLOBAL = (("global", MAX, None),)


async def stores(
    stack: AsyncExitStack, url: str, mode: Literal["fail", "local"] = "local", n: int = 2
) -> list[FallbackQuotaStore]:
    prefix = f"faults-{uuid.uuid4().hex}"
    out = []
    for _ in range(n):
        client = await stack.enter_async_context(
            coredis.Redis.from_url(url, decode_responses=True, connect_timeout=0.5)
        )
        primary = RedisQuotaStore(client, prefix=prefix, clock="caller", timeout=0.5)
        out.append(FallbackQuotaStore(primary, mode, 0.25))
    return out


async def spend(store: FallbackQuotaStore, hold: str, worst: int, actual: int, now: float) -> bool:
    """One attempt: reserve ``worst``, settle ``actual``; False when it was not admitted."""
    got = await store.reserve("k", (), Cost(), now, budget=BudgetAsk(hold, worst, 0, GLOBAL))
    if not isinstance(got, Reservation):
        return False
    await store.settle_budget(hold, actual, 0)
    await store.end(got)
    if not store.is_local:
        await store.primary.flush(now)
    return True


async def spent(store: FallbackQuotaStore) -> int:
    client = store.primary._client
    return int(await client.hget("{" + store.primary.prefix + "}:b:global", "sm") or 0)


async def test_paused_redis_leaves_a_share_of_what_was_left_and_gets_the_spend_once(
    redis_server: RedisServer,
):
    async with AsyncExitStack() as stack:
        a, b = await stores(stack, redis_server.url)
        assert await spend(a, "a1", 2_000, 2_000, 0.0)
        assert await spend(b, "b1", 2_000, 2_000, 0.1)  # b now knows 2,000 spent, 2,000 held
        assert redis_server.process is not None
        os.kill(redis_server.process.pid, signal.SIGSTOP)
        try:
            # b's share: a quarter of 10,000 - 2,000 - 2,000 (its own hold, in flight then).
            assert await spend(b, "b2", 1_000, 1_000, 1.0)  # the store times out: local
            assert b.is_local
            assert await spend(b, "b3", 500, 400, 1.1)
            assert not await spend(b, "b4", 101, 101, 1.2)  # 1,400 of its 1,500 spent
            # It waits for Redis, asked again 0.5 s after it first failed (at 1.0).
            ask = BudgetAsk("b4", 101, 0, GLOBAL)
            assert await b.reserve("k", (), Cost(), 1.2, budget=ask) == 1.5 - 1.2
        finally:
            os.kill(redis_server.process.pid, signal.SIGCONT)
        assert b.is_local  # until its retry time
        assert await spend(b, "b5", 100, 100, 5.0)  # back: the 1,400 booked with this one
        assert not b.is_local
        assert await spent(b) == 2_000 + 2_000 + 1_400 + 100
        # Sent again (a reply lost after Redis applied it), a booking counts once.
        b.primary.queue_booking("again", [("global", 50, 0)])
        b.primary.queue_booking("again", [("global", 50, 0)])
        await b.primary.flush(5.1)
        assert await spent(b) == 5_550


async def test_redis_restarted_empty_has_its_budgets_rebuilt_before_any_new_spend(
    redis_server: RedisServer,
):
    async with AsyncExitStack() as stack:
        a, b = await stores(stack, redis_server.url, mode="fail")
        assert await spend(a, "a1", 3_000, 3_000, 0.0)
        assert await spend(b, "b1", 2_000, 1_500, 0.1)
        assert await spend(a, "a2", 1_000, 1_000, 0.2)  # a knows 4,500 spent, 1,000 held
        redis_server.stop()
        redis_server.start()  # without persistence: every key is gone
        assert await spend(a, "a3", 100, 100, 1.0)
        # a's floor (5,500: spent and held as last known) beats its own spend (4,000).
        assert (a.rebuilds, await spent(a)) == (1, 5_500 + 100)
        assert await spend(b, "b2", 100, 100, 1.1)
        # b adds its own 1,500: the processes' own spend (5,500) does not pass a's floor.
        assert (b.rebuilds, await spent(b)) == (1, 5_700)
        # Restarted once more, both have done all the spending there was (5,700).
        redis_server.stop()
        redis_server.start()
        assert await spend(b, "b3", 100, 100, 2.0)  # b's floor: what it knew, 5,600 + 100
        assert await spent(b) == 5_700 + 100
        assert await spend(a, "a4", 100, 100, 2.1)  # a's floor and both own spends: 5,700
        assert await spent(a) == 5_700 + 100 + 100


async def test_budget_accounts_deleted_under_a_live_store_are_lost_history_too(
    redis_server: RedisServer,
):
    async with AsyncExitStack() as stack:
        (a,) = await stores(stack, redis_server.url, n=1)
        assert await spend(a, "a1", 3_000, 3_000, 0.0)
        client = a.primary._client
        await client.delete(["{" + a.primary.prefix + "}:b:global"])
        assert await spend(a, "a2", 100, 100, 1.0)
        assert (a.rebuilds, await spent(a)) == (1, 3_000 + 100)


async def test_spend_of_an_outage_that_ends_in_an_empty_store_is_in_the_rebuild_not_booked(
    redis_server: RedisServer,
):
    async with AsyncExitStack() as stack:
        (a,) = await stores(stack, redis_server.url, n=1)
        assert await spend(a, "a1", 2_000, 2_000, 0.0)
        redis_server.stop()
        assert await spend(a, "a2", 1_000, 700, 1.0)  # local: a share of 8,000
        assert a.is_local
        redis_server.start()
        assert await spend(a, "a3", 100, 100, 5.0)
        # Rebuilt: a's own 2,700 beats its floor (2,000); the booking of 700 was never sent.
        assert (a.rebuilds, await spent(a)) == (1, 2_700 + 100)


async def test_an_attempt_admitted_in_an_outage_and_ended_after_it_is_booked_when_it_ends(
    redis_server: RedisServer,
):
    async with AsyncExitStack() as stack:
        (a,) = await stores(stack, redis_server.url, n=1)
        assert await spend(a, "a1", 1_000, 1_000, 0.0)
        assert redis_server.process is not None
        os.kill(redis_server.process.pid, signal.SIGSTOP)
        try:
            ask = BudgetAsk("a2", 500, 0, GLOBAL)
            assert isinstance(await a.reserve("k", (), Cost(), 1.0, budget=ask), Reservation)
            assert a.is_local
        finally:
            os.kill(redis_server.process.pid, signal.SIGCONT)
        assert await spend(a, "a3", 100, 100, 5.0)
        assert not a.is_local
        await a.settle_budget("a2", 400, 0)  # the last call of the run, say
        await a.primary.flush(5.1)
        assert await spent(a) == 1_000 + 100 + 400


async def test_a_lost_run_id_over_budgets_that_kept_their_history_counts_nothing_twice(
    redis_server: RedisServer,
):
    async with AsyncExitStack() as stack:
        a, b = await stores(stack, redis_server.url)
        assert await spend(a, "a1", 3_000, 3_000, 0.0)
        assert await spend(b, "b1", 1_000, 1_000, 0.1)
        await a.primary._client.delete(["{" + a.primary.prefix + "}:run"])  # evicted, say
        assert await spend(a, "a2", 100, 100, 1.0)
        assert await spend(b, "b2", 100, 100, 1.1)
        assert (a.rebuilds, b.rebuilds, await spent(a)) == (1, 1, 4_200)


async def test_a_reservation_given_up_on_while_redis_was_paused_holds_nothing_once_it_runs(
    redis_server: RedisServer,
):
    async with AsyncExitStack() as stack:
        (a,) = await stores(stack, redis_server.url, n=1)
        assert await spend(a, "a1", 1_000, 1_000, 0.0)
        assert redis_server.process is not None
        os.kill(redis_server.process.pid, signal.SIGSTOP)
        try:
            # Sent, then given up on after the timeout: Redis runs it when it wakes.
            assert await spend(a, "a2", 2_000, 2_000, 1.0)  # admitted locally instead
        finally:
            os.kill(redis_server.process.pid, signal.SIGCONT)
        assert await spend(a, "a3", 100, 100, 5.0)
        account = "{" + a.primary.prefix + "}:b:global"
        held = await a.primary._client.hget(account, "rm")
        assert (await spent(a), int(held or 0)) == (1_000 + 2_000 + 100, 0)
