"""RedisQuotaStore on its own: what several processes share, and what a killed one leaves.

Two stores on one Redis stand for two processes. ``clock="caller"`` gives the script the
test's times, so lapses are checked exactly without waiting for them.
"""

from __future__ import annotations

import uuid

import coredis

from sluice._limits.cost import Cost
from sluice._limits.redis_store import RedisQuotaStore
from sluice._limits.store import BudgetAsk, BudgetRefused, Reservation, WindowSpec

SPECS = (WindowSpec("requests", 2, 10.0),)


def two_stores(client: coredis.Redis, **options: object) -> tuple[RedisQuotaStore, ...]:
    prefix = f"unit-{uuid.uuid4().hex}"
    return tuple(
        RedisQuotaStore(client, prefix=prefix, clock="caller", **options)  # type: ignore[arg-type]
        for _ in range(2)
    )


async def test_a_window_is_shared_and_the_wait_is_exact(redis_url):
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        a, b = two_stores(client)
        assert isinstance(await a.reserve("k", SPECS, Cost(), 0.0), Reservation)
        assert isinstance(await b.reserve("k", SPECS, Cost(), 1.0), Reservation)
        assert await a.reserve("k", SPECS, Cost(), 2.5) == 7.5
        assert isinstance(await b.reserve("k", SPECS, Cost(), 10.0), Reservation)


async def test_slots_held_by_a_killed_process_lapse(redis_url):
    """A process that stops renewing (kill -9) frees its pending slot ``lapse`` s later."""
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        a, b = two_stores(client, lapse=30.0, poll=0.05)
        held = await a.reserve("k", (), Cost(), 0.0, caps=(1, None))
        assert isinstance(held, Reservation)
        assert await b.reserve("k", (), Cost(), 1.0, caps=(1, None)) == 0.05
        # a is never heard from again: at 30 s its hold lapses.
        wait = await b.reserve("k", (), Cost(), 29.99, caps=(1, None))
        assert wait == 30.0 - 29.99  # polls no later than the lapse
        assert isinstance(await b.reserve("k", (), Cost(), 30.0, caps=(1, None)), Reservation)


async def test_an_ended_attempt_frees_its_slot_on_the_next_round_trip(redis_url):
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        a, b = two_stores(client)
        held = await a.reserve("k", (), Cost(), 0.0, caps=(None, 1))
        assert isinstance(held, Reservation)
        await a.end(held)
        assert a.round_trips == 1  # queued, not sent on its own
        await a.flush(0.5)
        assert isinstance(await b.reserve("k", (), Cost(), 1.0, caps=(None, 1)), Reservation)


async def test_a_shared_budget_waits_for_settlements_then_refuses(redis_url):
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        a, b = two_stores(client)
        accounts = (("global", 1000, None),)
        first = await a.reserve("k", (), Cost(), 0.0, budget=BudgetAsk("h1", 600, 10, accounts))
        assert isinstance(first, Reservation)
        # 600 reserved of 1000: 600 more fit only if the first spends less. Wait.
        assert (
            await b.reserve("k", (), Cost(), 0.1, budget=BudgetAsk("h2", 600, 10, accounts)) == 0.05
        )
        await a.settle_budget("h1", 500, 10)
        await a.flush(0.2)
        refused = await b.reserve("k", (), Cost(), 0.3, budget=BudgetAsk("h3", 600, 10, accounts))
        assert refused == BudgetRefused("global", "usd", 500)
        assert isinstance(
            await b.reserve("k", (), Cost(), 0.4, budget=BudgetAsk("h4", 500, 10, accounts)),
            Reservation,
        )


async def test_a_budget_hold_of_a_killed_process_is_charged_in_full_when_it_lapses(redis_url):
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        a, b = two_stores(client, lapse=30.0)
        accounts = (("global", 1000, None),)
        await a.reserve("k", (), Cost(), 0.0, budget=BudgetAsk("h1", 400, 10, accounts))
        # a dies. Before the lapse b waits for it; after, a's 400 count as spent.
        assert (
            await b.reserve("k", (), Cost(), 1.0, budget=BudgetAsk("h2", 700, 1, accounts)) == 0.05
        )
        refused = await b.reserve("k", (), Cost(), 31.0, budget=BudgetAsk("h3", 700, 1, accounts))
        assert refused == BudgetRefused("global", "usd", 600)


async def test_the_server_clock_is_used_unless_the_caller_gives_one(redis_url):
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        store = RedisQuotaStore(client, prefix=f"clock-{uuid.uuid4().hex}")
        specs = (WindowSpec("requests", 1, 5.0),)
        assert isinstance(await store.reserve("k", specs, Cost(), 123456.0), Reservation)
        wait = await store.reserve("k", specs, Cost(), -99.0)  # the given times are ignored
        assert isinstance(wait, float) and 4.0 < wait <= 5.0


async def test_forget_drops_the_local_note_of_a_key_only_once_its_cooldown_is_over(redis_url):
    """The RateLimiter drops keys at rest; a shared store drops only what this process noted
    (Redis expires the key's own state), and never a cooldown still running."""
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        a, b = two_stores(client)
        assert await a.cooldown("k", 5.0, 0.0) == 5.0
        assert not a.forget("k", SPECS, 4.9)
        assert await a.cooldown_left("k", 4.9) > 0
        assert a.forget("k", SPECS, 5.0)
        assert await a.cooldown_left("k", 1.0) == 0.0  # the note is gone
        # The shared cooldown is Redis's: the other process's admission still waits it out.
        assert await b.reserve("k", SPECS, Cost(), 1.0) == 4.0
