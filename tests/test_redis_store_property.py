"""The Redis store and the in-memory store admit at exactly the same virtual times.

One driver replays a random workload against each store: calls arrive with random costs and
ask until admitted (waiting exactly what the store says), their first chunk re-dates them,
their end settles them with a random real usage (or refunds them), 429s cool the key down,
replies report limits (rising and falling), and the configured limits change (a reload). The
workload comes in bursts separated by idle gaps longer than the keys' TTLs, and Redis is made
to live through those gaps: every key's TTL is shortened by the virtual time that passed (and
a key whose TTL runs out is deleted), so state that expires too early shows as a different
decision, and a key left without a TTL fails the test. The Redis store runs with
``clock="caller"``, so its script uses the driver's virtual times instead of the server's
clock; every admission time, refusal and cooldown must match to the last bit. A second test
starts the workload on the previous version of the script and finishes it on this one.
"""

from __future__ import annotations

import heapq
import itertools
import uuid
from typing import TYPE_CHECKING, cast

import attrs
import coredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice._limits.cost import Cost
from sluice._limits.headers import Learned
from sluice._limits.redis_store import RedisQuotaStore
from sluice._limits.store import (
    BudgetRefused,
    MemoryQuotaStore,
    QuotaStore,
    Reservation,
    TooLarge,
    WindowSpec,
)

from .previous_quota_script import PREVIOUS_QUOTA_SCRIPT

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable


@attrs.frozen
class Call:
    arrival: float
    cost: Cost
    first_chunk: float
    duration: float
    actual: Cost | None  # None: never sent, refund everything


@attrs.frozen
class Workload:
    specs: tuple[WindowSpec, ...]
    calls: tuple[Call, ...]
    cooldowns: tuple[tuple[float, float], ...]  # (when, seconds)
    learned: tuple[tuple[float, Learned], ...]
    relimits: tuple[tuple[float, tuple[WindowSpec, ...]], ...]  # (when, the new specs)


IDLE = 700.0
"""Bursts start this far apart: past every window's keys' TTL (602 s for a 1 s window, 720 s
for a 60 s one) and across the 720 s a learned limit holds."""

bursts = st.integers(0, 2).map(lambda n: n * IDLE)
at_times = st.builds(lambda burst, t: burst + t, bursts, st.integers(0, 400).map(lambda n: n / 8))
times = st.integers(0, 400).map(lambda n: n / 8)  # dyadic: exact in binary, like trio times


@st.composite
def window_specs(draw: st.DrawFn) -> tuple[WindowSpec, ...]:
    dimensions = draw(
        st.lists(
            st.sampled_from(["requests", "input_tokens", "output_tokens", "total_tokens"]),
            min_size=1,
            max_size=3,
            unique=True,
        )
    )
    specs = []
    for dimension in dimensions:
        small = dimension == "requests"
        for period in draw(
            st.lists(st.sampled_from([1.0, 2.5, 6.0, 60.0]), min_size=1, max_size=2, unique=True)
        ):
            limit = draw(st.integers(1, 8) if small else st.integers(50, 600))
            sent = draw(st.booleans())  # counted from the send: never re-dated
            specs.append(WindowSpec(dimension, limit, period, sent))  # type: ignore[arg-type]
    return tuple(specs)


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    specs = draw(window_specs())
    calls = []
    for _ in range(draw(st.integers(1, 40))):
        cost = Cost(1, draw(st.integers(0, 300)), draw(st.integers(0, 200)))
        actual = draw(
            st.none() | st.builds(Cost, st.just(1), st.integers(0, 300), st.integers(0, 300))
        )
        calls.append(Call(draw(at_times), cost, draw(times) / 4, draw(times) / 5, actual))
    cooldowns = tuple(draw(st.lists(st.tuples(at_times, times.map(lambda t: t / 4)), max_size=2)))
    learned = []
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            dimension, limits, remaining = "requests", st.integers(0, 10), st.integers(0, 8)
        else:
            dimension, limits, remaining = "total_tokens", st.integers(0, 700), st.integers(0, 500)
        item = Learned(
            dimension,  # type: ignore[arg-type]
            draw(st.none() | limits),
            draw(st.none() | remaining),
            draw(st.none() | times),
        )
        learned.append((draw(at_times), item))
    relimits = tuple(draw(st.lists(st.tuples(at_times, window_specs()), max_size=2)))
    return Workload(specs, tuple(calls), cooldowns, tuple(learned), relimits)


async def replay(
    store: QuotaStore,
    workload: Workload,
    passed: Callable[[float, float], Awaitable[None]] | None = None,
    usage: list[dict[str, tuple[int, int]]] | None = None,
) -> list[tuple[object, ...]]:
    """Every decision the store makes for the workload, with its virtual time.

    ``passed(since, now)`` is awaited whenever virtual time has moved on, before the events of
    ``now``: a key written at ``since`` must age by exactly ``now - since``, not by time that
    went by before it was written.
    ``usage`` gets the store's ``usage()`` right after each admission.
    """
    key = "openai"
    specs = workload.specs
    last = 0.0
    log: list[tuple[object, ...]] = []
    seq = itertools.count()
    events: list[tuple[float, int, str, object]] = []
    for index, call in enumerate(workload.calls):
        heapq.heappush(events, (call.arrival, next(seq), "arrive", index))
    for when, seconds in workload.cooldowns:
        heapq.heappush(events, (when, next(seq), "cooldown", seconds))
    for when, item in workload.learned:
        heapq.heappush(events, (when, next(seq), "learn", item))
    for when, new in workload.relimits:
        heapq.heappush(events, (when, next(seq), "relimit", new))
    waiting: list[int] = []
    retry_at = None
    while events:
        now, _, kind, data = heapq.heappop(events)
        if passed is not None and now > last:
            # Aged at every step of time, so a key written at ``last`` loses exactly what
            # passed since; aged only after long steps, keys written since the previous
            # ageing would lose the time before they were written too, and go early.
            await passed(last, now)
            last = now
        if kind == "arrive":
            waiting.append(data)  # type: ignore[arg-type]
        elif kind == "cooldown":
            left = await store.cooldown(key, data, now)  # type: ignore[arg-type]
            log.append(("cooldown", now, left))
        elif kind == "learn":
            await store.learn(key, specs, [data], now)  # type: ignore[list-item]
        elif kind == "relimit":
            specs = data  # type: ignore[assignment]
            log.append(("relimit", now))
        elif kind == "redate":
            await store.redate(data, now)  # type: ignore[arg-type]
        elif kind == "end":
            reservation, actual = cast("tuple[Reservation, Cost | None]", data)
            await store.settle(reservation, actual if actual is not None else Cost(0, 0, 0))
            await store.end(reservation)
        elif kind == "retry" and data != retry_at:
            continue  # a stale timer
        while waiting:
            left = await store.cooldown_left(key, now)
            if left > 0:
                retry_at = now + left
                heapq.heappush(events, (retry_at, next(seq), "retry", retry_at))
                break
            index = waiting[0]
            call = workload.calls[index]
            got = await store.reserve(key, specs, call.cost, now)
            if isinstance(got, TooLarge):
                log.append(("too large", index, now, got.dimension, got.amount, got.limit))
                waiting.pop(0)
                continue
            assert not isinstance(got, BudgetRefused)  # the replay asks no budget
            if not isinstance(got, Reservation):
                retry_at = now + got
                heapq.heappush(events, (retry_at, next(seq), "retry", retry_at))
                break
            waiting.pop(0)
            log.append(("admitted", index, now))
            if usage is not None:
                usage.append(store.usage(key, now))
            if call.actual is not None:
                heapq.heappush(events, (now + call.first_chunk, next(seq), "redate", got))
            end = now + call.first_chunk + call.duration
            heapq.heappush(events, (end, next(seq), "end", (got, call.actual)))
    return log


def ageing(client: coredis.Redis, prefix: str) -> Callable[[float, float], Awaitable[list[str]]]:
    """What Redis lives through between two virtual times: each key of ``prefix`` loses that
    much of its TTL, and goes when nothing is left. Returns the keys without a TTL, except a
    window hash of the previous version that holds nothing but its limit (``l``). The store's
    run id (``{prefix}:run``) is one of them: it is kept for good (see
    ``sluice._limits.store_epoch``)."""
    script = client.register_script(
        """
        local forever = {}
        for _, k in ipairs(redis.call('KEYS', ARGV[1])) do
          local left = redis.call('PTTL', k)
          if left == -1 then
            local leftover = redis.call('TYPE', k)['ok'] == 'hash'
              and redis.call('HLEN', k) == 1 and redis.call('HEXISTS', k, 'l') == 1
            if not leftover then forever[#forever + 1] = k end
          elseif left <= tonumber(ARGV[2]) then
            redis.call('DEL', k)
          else
            redis.call('PEXPIRE', k, left - tonumber(ARGV[2]))
          end
        end
        return forever
        """
    )

    async def passed(since: float, now: float) -> list[str]:
        pattern = "{" + prefix + "}*"
        # Whole milliseconds that add up exactly: the steps telescope to the time since the start.
        step = round(now * 1000) - round(since * 1000)
        forever: object = await script(keys=[], args=[pattern, str(step)])
        return list(cast("list[str]", forever))

    return passed


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(workload=workloads())
async def test_redis_store_admits_exactly_when_the_memory_store_does(redis_url, workload):
    """The same decisions at the same times; and after each admission, the Redis store's view
    of the windows (from the admission's answer) is what the memory store counts."""
    in_memory: list[dict[str, tuple[int, int]]] = []
    expected = await replay(MemoryQuotaStore(), workload, usage=in_memory)
    client = coredis.Redis.from_url(redis_url, decode_responses=True)
    async with client:
        prefix = f"prop-{uuid.uuid4().hex}"
        store = RedisQuotaStore(client, prefix=prefix, clock="caller")
        age = ageing(client, prefix)

        async def passed(since: float, now: float) -> None:
            # Every key expires by itself but the store's run id, which must outlast any
            # idle time (else an idle deployment would look like a store that lost its data).
            assert set(await age(since, now)) <= {"{" + prefix + "}:run"}

        in_redis: list[dict[str, tuple[int, int]]] = []
        got = await replay(store, workload, passed, usage=in_redis)
    assert got == expected
    # The memory store also shows a window no limit names any more while it holds entries;
    # every window the view shows is exactly the memory store's.
    assert len(in_redis) == len(in_memory)
    for view, counted in zip(in_redis, in_memory, strict=True):
        assert view and view.items() <= counted.items()
    decided = [entry for entry in got if entry[0] in ("admitted", "too large")]
    assert len(decided) == len(workload.calls)  # the replay ran every call to a decision


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(workload=workloads(), upgrade_at=st.sampled_from([IDLE, 2 * IDLE]))
async def test_keys_left_by_the_previous_script_read_safely(redis_url, workload, upgrade_at):
    """The previous script serves the bursts before ``upgrade_at``; this one takes over its
    keys from there. The previous script gave the memory store's answers for calls,
    settlements and cooldowns, so before the upgrade the workload has nothing else; after it,
    the decisions must still match the memory store's, and once this script has run, every
    key it took over has a TTL."""
    workload = attrs.evolve(
        workload,
        learned=tuple(x for x in workload.learned if x[0] >= upgrade_at),
        relimits=tuple(x for x in workload.relimits if x[0] >= upgrade_at),
    )
    expected = await replay(MemoryQuotaStore(), workload)
    client = coredis.Redis.from_url(redis_url, decode_responses=True)
    async with client:
        prefix = f"prev-{uuid.uuid4().hex}"
        store = RedisQuotaStore(client, prefix=prefix, clock="caller")
        current = store._script
        store._script = client.register_script(PREVIOUS_QUOTA_SCRIPT)  # the previous version
        age = ageing(client, prefix)
        upgraded_after = -1  # the round trips made before the upgrade

        async def passed(since: float, now: float) -> None:
            nonlocal upgraded_after
            forever = await age(since, now)
            if store._script is not current and now >= upgrade_at:
                store._script = current
                upgraded_after = store.round_trips
            elif 0 <= upgraded_after < store.round_trips and now - since >= 60:
                # After an idle gap (within a burst a learning may run before the admission
                # that takes the key's older keys over).
                assert forever == ["{" + prefix + "}:run"]

        got = await replay(store, workload, passed)
    assert got == expected
