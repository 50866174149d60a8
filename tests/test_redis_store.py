"""RedisQuotaStore on its own: what several processes share, and what a killed one leaves.

Two stores on one Redis stand for two processes. ``clock="caller"`` gives the script the
test's times, so lapses are checked exactly without waiting for them.
"""

from __future__ import annotations

import uuid

import coredis

from sluice._limits.cost import Cost
from sluice._limits.headers import Learned
from sluice._limits.redis_store import RedisQuotaStore
from sluice._limits.store import (
    BudgetAsk,
    BudgetRefused,
    MemoryQuotaStore,
    Reservation,
    WindowSpec,
)
from sluice._limits.view import WindowViews, parse_usage

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


async def test_usage_is_what_the_last_answer_reported_with_its_age(redis_url):
    """Statistics read the store's view of the windows (no round trip): the admission's answer
    fills it, and it ages until the next one."""
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        a, b = two_stores(client)
        assert a.usage("k", 0.0) == {} and a.usage_age("k", 0.0) == 0.0  # nothing known yet
        await a.reserve("k", SPECS, Cost(), 0.0)
        await a.reserve("k", SPECS, Cost(), 1.0)
        trips = a.round_trips
        assert a.usage("k", 4.0) == {"requests/10s": (2, 2)}
        assert a.usage_age("k", 4.0) == 3.0
        assert a.round_trips == trips  # read without asking Redis
        # The other process learns the full window from its answer to wait.
        assert await b.reserve("k", SPECS, Cost(), 2.0) == 8.0
        assert b.usage("k", 2.0) == {"requests/10s": (2, 2)}


async def test_a_read_of_the_views_brings_other_processes_use_and_learned_limits(redis_url):
    """``read_views`` (the background task's refresh) reads every key whose view is old in one
    run; a key not reported lately is read, a recent one is not."""
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        a, b = two_stores(client, refresh=1.0)
        tokens = (WindowSpec("total_tokens", 1000, 60.0), *SPECS)
        await a.reserve("k", tokens, Cost(input_tokens=100, output_tokens=50), 0.0)
        await a.reserve("other", SPECS, Cost(), 0.0)
        await b.reserve("k", tokens, Cost(input_tokens=10, output_tokens=10), 0.5)
        assert a.usage("k", 0.5) == {"total_tokens/60s": (150, 1000), "requests/10s": (1, 2)}
        trips = a.round_trips
        await a.read_views(0.9)  # every view is under a second old: nothing to read
        assert a.round_trips == trips  # and nothing queued to flush either
        await a.read_views(1.0)
        assert a.round_trips == trips + 1  # both keys in one run
        assert a.usage("k", 1.0) == {"total_tokens/60s": (170, 1000), "requests/10s": (2, 2)}
        assert a.usage("other", 1.0) == {"requests/10s": (1, 2)}
        assert a.usage_age("k", 1.0) == 0.0
        # A limit another process learned from headers shows too (a per-minute window);
        # entries leave their window.
        await b.learn("k", tokens, [Learned("requests", 1, None, None)], 2.0)
        await a.read_views(11.0)
        assert a.usage("k", 11.0) == {
            "total_tokens/60s": (170, 1000),
            "requests/10s": (0, 2),
            "requests/60s": (0, 1),
        }


async def test_settlements_show_in_the_view_exactly_as_the_memory_store_counts_them(redis_url):
    specs = (WindowSpec("total_tokens", 1000, 60.0), WindowSpec("output_tokens", 500, 60.0))
    memory = MemoryQuotaStore()
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        redis, _ = two_stores(client)
        for store in (memory, redis):
            first = await store.reserve("k", specs, Cost(input_tokens=100, output_tokens=200), 0.0)
            assert isinstance(first, Reservation)
            await store.settle(first, Cost(input_tokens=100, output_tokens=20))
            await store.reserve("k", specs, Cost(input_tokens=5, output_tokens=5), 1.0)
        await redis.flush(1.0)
        await redis.read_views(2.0)
        want = {"total_tokens/60s": (130, 1000), "output_tokens/60s": (25, 500)}
        assert memory.usage("k", 2.0) == want
        assert redis.usage("k", 2.0) == want


async def test_a_forgotten_key_leaves_the_view_and_a_read_under_way_does_not_bring_it_back(
    redis_url,
):
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        a, _ = two_stores(client)
        await a.reserve("k", SPECS, Cost(), 0.0)
        assert len(a.views) == 1
        assert a.forget("k", SPECS, 20.0)
        assert len(a.views) == 0 and a.usage("k", 20.0) == {}
        a.views.use("k", [])
        a.views.forget("k")
        a.views.note("k", "requests:10.0:1:2", 21.0)  # an answer for a key dropped meanwhile
        assert len(a.views) == 0
        trips = a.round_trips
        await a.read_views(30.0)
        assert a.round_trips == trips  # no key in use: no read


def test_the_views_read_the_never_reported_then_the_oldest_first_and_at_most_so_many():
    views = WindowViews()
    for key, at in (("old", 1.0), ("new", 5.0), ("older", 0.0)):
        views.use(key, [key])
        views.note(key, "", at)
    views.use("unknown", ["unknown"])
    first = [("unknown", ["unknown"]), ("older", ["older"]), ("old", ["old"])]
    assert views.stale(6.0, 1.0, 3) == first  # "new" is due too, past the most asked for
    assert views.stale(5.5, 1.0, 10) == first  # "new" is half a second old
    # A read asked for before the report the view holds (it overlapped an admission) loses.
    views.note("new", "requests:60.0:3:10", 4.0)
    assert views.usage("new") == {} and views.age("new", 6.0) == 1.0
    views.note("new", "requests:60.0:3:10", 5.5)
    assert views.usage("new") == {"requests/60s": (3, 10)} and views.age("new", 6.0) == 0.5
    assert parse_usage("requests:60.0:3:10,total_tokens:1.5:0:900") == {
        "requests/60s": (3, 10),
        "total_tokens/1.5s": (0, 900),
    }
