"""Shared quotas that stay right as time passes and configs change (issue 29).

Keys that go idle past every TTL, a restart with a higher limit, keys the previous version of
the script left, a script that fails, and hours of calls with long idle gaps. The Redis tests
on the real clock assert behaviour; those that need exact times give the script the caller's
(virtual) clock.
"""

from __future__ import annotations

import logging
import random
import uuid

import coredis
import pytest
import trio
import trio.testing
from coredis.exceptions import ResponseError

import sluice
from sluice import RetryConfig, RuntimeConfig
from sluice._config import LedgerConfig, ProviderConfig, RateLimitConfig
from sluice._errors import InternalError
from sluice._limits.cost import Cost
from sluice._limits.fallback import FallbackQuotaStore
from sluice._limits.headers import Learned
from sluice._limits.redis_store import RedisQuotaStore
from sluice._limits.redis_wire import script_failed
from sluice._limits.store import LEARNED_FOR, Reservation, WindowSpec
from sluice._mail import RateLimiterMsg
from sluice.actors._rate_limiter import RateLimiterHandle, run_rate_limiter
from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport

from .previous_quota_script import PREVIOUS_QUOTA_SCRIPT

MODEL = "sim:sim-small"


def shared_config(url: str, prefix: str, rpm: int | None = None) -> RuntimeConfig:
    return RuntimeConfig(
        providers={"sim": ProviderConfig(rate_limit=RateLimitConfig(requests_per_minute=rpm))},
        retry=RetryConfig(jitter=0.0),
        ledger=LedgerConfig(persist=False),
        store=url,
        store_prefix=prefix,
    )


async def quota_keys(client: coredis.Redis, prefix: str) -> dict[str, int]:
    """Every key of the prefix's quota keys, with its TTL in ms (-1: none)."""
    keys = await client.keys("{" + prefix + "}:q:*")
    return {str(k): int(await client.pttl(k)) for k in keys}


async def test_a_quota_key_idle_past_every_ttl_admits_the_next_call(redis_url):
    """The repro: three calls (the simulator reports its limits, so they are learned), every
    key expires as if the key sat idle, and the next call is admitted."""
    prefix = f"idle-{uuid.uuid4().hex}"
    sim = SimulatorApp(SimulatorConfig(rpm=100))  # x-ratelimit-* headers on every reply
    with trio.fail_after(30):
        async with (
            coredis.Redis.from_url(redis_url, decode_responses=True) as client,
            sluice.open_runtime(
                shared_config(redis_url, prefix), transport=mock_transport(sim)
            ) as rt,
        ):
            for _ in range(3):
                await rt.chat(MODEL, "hi")
            await trio.sleep(0.3)  # the settlements are flushed (they renew the windows' TTLs)
            keys = await quota_keys(client, prefix)
            assert any(k.endswith(":L") for k in keys)  # a limit was learned from the headers
            assert all(ttl > 0 for ttl in keys.values()), keys  # every key expires
            for key in keys:
                await client.pexpire(key, 1)
            await trio.sleep(0.01)
            assert await quota_keys(client, prefix) == {}
            reply = await rt.chat(MODEL, "after the idle gap")
            assert reply.text
            assert sim.chat_requests_seen == 4


async def test_keys_of_the_previous_version_idle_past_their_ttl_admit_again(redis_url):
    """The state that broke the previous script: its learned-window list outlives the windows
    it names. That script fails on it; this one admits, at the configured limit."""
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        prefix = f"old-{uuid.uuid4().hex}"
        store = RedisQuotaStore(client, prefix=prefix, clock="caller")
        current = store._script
        store._script = client.register_script(PREVIOUS_QUOTA_SCRIPT)  # the previous version
        specs = (WindowSpec("requests", 100, 60.0),)
        await store.learn("k", specs, [Learned("total_tokens", 1000, None, None)], 0.0)
        for at in (0.0, 1.0, 2.0):
            assert isinstance(await store.reserve("k", specs, Cost(1, 10, 10), at), Reservation)
        keys = await quota_keys(client, prefix)
        assert keys[f"{{{prefix}}}:q:k:m"] == -1  # the previous version's leak
        for key, ttl in keys.items():
            if ttl > 0:
                await client.pexpire(key, 1)
        await trio.sleep(0.01)
        assert list(await quota_keys(client, prefix)) == [f"{{{prefix}}}:q:k:m"]
        with pytest.raises(InternalError, match="attempt to compare nil with number"):
            await store.reserve("k", specs, Cost(1, 10, 10), 800.0)
        store._script = current
        got = [await store.reserve("k", specs, Cost(1, 10, 10), 800.0) for _ in range(100)]
        assert all(isinstance(g, Reservation) for g in got)  # the old learned 1000 tpm is gone
        assert await store.reserve("k", specs, Cost(1, 10, 10), 800.0) == 60.0
        assert all(ttl > 0 for ttl in (await quota_keys(client, prefix)).values())


async def test_a_restarted_store_with_a_higher_limit_admits_at_the_new_rate_at_once(redis_url):
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        prefix = f"restart-{uuid.uuid4().hex}"
        before = RedisQuotaStore(client, prefix=prefix, clock="caller")
        slow = (WindowSpec("requests", 2, 60.0),)
        assert isinstance(await before.reserve("k", slow, Cost(), 0.0), Reservation)
        assert isinstance(await before.reserve("k", slow, Cost(), 1.0), Reservation)
        assert await before.reserve("k", slow, Cost(), 2.0) == 58.0
        after = RedisQuotaStore(client, prefix=prefix, clock="caller")  # a new process
        fast = (WindowSpec("requests", 100, 60.0),)
        got = [await after.reserve("k", fast, Cost(), 2.0) for _ in range(98)]
        assert all(isinstance(g, Reservation) for g in got)
        assert await after.reserve("k", fast, Cost(), 2.0) == 58.0  # 100 in the window now
        # The old process, still on its old config, is held to its own lower limit.
        assert await before.reserve("k", slow, Cost(), 3.0) == 59.0  # when 98 leave


async def test_a_restarted_runtime_with_a_higher_limit_does_not_wait_under_the_old_one(
    redis_url,
):
    prefix = f"restart-rt-{uuid.uuid4().hex}"
    sim = SimulatorApp(SimulatorConfig())
    with trio.fail_after(20):
        async with sluice.open_runtime(
            shared_config(redis_url, prefix, rpm=2), transport=mock_transport(sim)
        ) as rt:
            await rt.chat(MODEL, "one")
            await rt.chat(MODEL, "two")  # the window is full for a minute
        started = trio.current_time()
        async with sluice.open_runtime(
            shared_config(redis_url, prefix, rpm=100), transport=mock_transport(sim)
        ) as rt:
            for _ in range(5):
                await rt.chat(MODEL, "at the new rate")
        assert trio.current_time() - started < 10  # no wait for the old window to clear
    assert sim.chat_requests_seen == 7


async def test_a_failing_script_is_a_bug_for_that_call_not_an_outage(redis_url, caplog):
    """A key of the wrong type makes the script fail: the call under it is refused with
    InternalError (naming the script's error), other keys are admitted, nothing goes local."""
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        prefix = f"bug-{uuid.uuid4().hex}"
        store = FallbackQuotaStore(RedisQuotaStore(client, prefix=prefix), "local", 0.25)
        await client.set(f"{{{prefix}}}:q:broken:L", "not a hash")
        send, inbox = trio.open_memory_channel[RateLimiterMsg](0)
        limits = RateLimitConfig(requests_per_minute=10)
        with trio.fail_after(10), caplog.at_level(logging.ERROR, "sluice._limits"):
            async with trio.open_nursery() as nursery:
                await nursery.start(run_rate_limiter, inbox, random.Random(0), store)
                limiter = RateLimiterHandle(send)
                with pytest.raises(InternalError, match=r"quota script failed.*wrong kind"):
                    await limiter.acquire("broken", limits, Cost())
                await limiter.acquire("fine", limits, Cost())
                nursery.cancel_scope.cancel()
        assert store.switches == 0 and not store.is_local
        assert "quota script failed" in caplog.text
        # A Lua error in the script's own code reads the same way; an outage does not.
        broken = client.register_script("local x = nil; return x < 1")
        with pytest.raises(ResponseError) as raised:
            await broken(keys=[f"{{{prefix}}}:x"], args=[])
        assert script_failed(raised.value)
        assert not script_failed(ResponseError("LOADING Redis is loading the dataset"))


@pytest.fixture
def idle_autojump_clock() -> trio.testing.MockClock:
    """Virtual time that jumps only once every task has waited 5 ms of real time, so a round
    trip to Redis in flight is seldom taken for idleness (and when it is, the store's timeout
    is a virtual hour, and the jump only reaches the next timer)."""
    return trio.testing.MockClock(autojump_threshold=0.005)


async def test_six_hours_of_calls_with_idle_gaps_past_every_ttl(
    redis_url, idle_autojump_clock, caplog
):
    """A runtime on the Redis store (through the fallback that fails calls when Redis fails),
    limits learned from the simulator's headers, calls every few minutes for 6 hours of
    virtual time with idle gaps of up to 25 minutes. Redis lives through the same time: each
    gap shortens every key's TTL by its length and deletes the keys it outlives. No call is
    refused, no store error or warning is logged, every key has a TTL throughout, and while
    the learned limit is fresh no call draws a 429."""
    clock = idle_autojump_clock
    rng = random.Random(29)
    prefix = f"soak-{uuid.uuid4().hex}"
    sim = SimulatorApp(SimulatorConfig(rpm=3))  # the server's limit, learned from its headers
    config = RuntimeConfig(
        providers={"sim": ProviderConfig(rate_limit=RateLimitConfig(requests_per_minute=1000))},
        retry=RetryConfig(jitter=0.0),
        ledger=LedgerConfig(persist=False),
    )
    calls = retries = 0
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        redis = RedisQuotaStore(client, prefix=prefix, clock="caller", timeout=3600.0)
        store = FallbackQuotaStore(redis, "fail", 0.25)
        async with (
            sluice.open_runtime(config, transport=mock_transport(sim), quota_store=store) as rt,
        ):
            caplog.set_level(logging.WARNING, "sluice")
            while trio.current_time() < 6 * 3600:
                gap = rng.choice([90.0, 180.0, 300.0, 900.0, 1500.0])
                keys = await quota_keys(client, prefix)
                assert all(ttl > 0 for ttl in keys.values()), keys
                for key, ttl in keys.items():
                    if ttl <= gap * 1000:
                        await client.delete([key])
                    else:
                        await client.pexpire(key, ttl - int(gap * 1000))
                clock.jump(gap)
                burst = rng.randint(1, 5)  # more than the 3 a minute learned: some wait
                async with trio.open_nursery() as nursery:
                    for _ in range(burst):
                        nursery.start_soon(rt.chat, MODEL, "hi")
                calls += burst
                retried = sim.chat_requests_seen - calls - retries
                retries += retried
                if calls > burst and gap < LEARNED_FOR:
                    assert retried == 0  # the learned 3 a minute held: no 429
    # Every call ended in a reply (one refused would have failed the burst). Only a burst after
    # a gap longer than a learned limit holds may go past the server's 3 a minute, and its
    # 429s were retried.
    assert calls > 60 and sim.chat_requests_seen == calls + retries
    assert store.switches == 0
    assert [r.getMessage() for r in caplog.records if r.name.startswith("sluice")] == []


async def test_a_failing_key_does_not_cost_other_keys_their_queued_settlements(redis_url):
    """Settlements ride on the next script run, whatever key it serves. When that run fails
    because of its own key, the settlements are still applied."""
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        prefix = f"bug-ops-{uuid.uuid4().hex}"
        store = RedisQuotaStore(client, prefix=prefix, clock="caller")
        await client.set(f"{{{prefix}}}:q:broken:L", "not a hash")
        specs = (WindowSpec("output_tokens", 100, 60.0),)
        held = await store.reserve("fine", specs, Cost(1, 0, 100), 0.0)
        assert isinstance(held, Reservation)
        await store.settle(held, Cost(1, 0, 10))  # queued: 90 tokens refunded
        with pytest.raises(InternalError):
            await store.reserve("broken", specs, Cost(1, 0, 1), 1.0)
        assert isinstance(await store.reserve("fine", specs, Cost(1, 0, 90), 2.0), Reservation)


async def test_the_fallback_store_forgets_a_key_once_its_windows_are_empty(redis_url):
    """Forgetting reads the local share's windows: a key stays while an admission it mirrored
    is in its window, and goes once the window has passed."""
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        redis = RedisQuotaStore(client, prefix=f"forget-{uuid.uuid4().hex}", clock="caller")
        store = FallbackQuotaStore(redis, "local", 0.25)
        specs = [WindowSpec("requests", 4, 60.0)]
        with trio.fail_after(10):
            got = await store.reserve("k", specs, Cost(1, 0, 0), 0.0)
        assert isinstance(got, Reservation)
        assert not store.forget("k", specs, 1.0)
        assert store.forget("k", specs, 61.0)
