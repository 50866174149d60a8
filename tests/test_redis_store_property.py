"""The Redis store and the in-memory store admit at exactly the same virtual times.

One driver replays a random workload against each store: calls arrive with random costs and
ask until admitted (waiting exactly what the store says), their first chunk re-dates them,
their end settles them with a random real usage (or refunds them), 429s cool the key down and
replies report limits. The Redis store runs with ``clock="caller"``, so its script uses the
driver's virtual times instead of the server's clock; every admission time, refusal and
cooldown must match to the last bit.
"""

from __future__ import annotations

import heapq
import itertools
import uuid
from typing import cast

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


times = st.integers(0, 400).map(lambda n: n / 8)  # dyadic: exact in binary, like trio times


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
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
            specs.append(WindowSpec(dimension, limit, period))  # type: ignore[arg-type]
    calls = []
    for _ in range(draw(st.integers(1, 40))):
        cost = Cost(1, draw(st.integers(0, 300)), draw(st.integers(0, 200)))
        actual = draw(
            st.none() | st.builds(Cost, st.just(1), st.integers(0, 300), st.integers(0, 300))
        )
        calls.append(Call(draw(times), cost, draw(times) / 4, draw(times) / 5, actual))
    cooldowns = tuple(draw(st.lists(st.tuples(times, times.map(lambda t: t / 4)), max_size=2)))
    learned = []
    for _ in range(draw(st.integers(0, 4))):
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
        learned.append((draw(times), item))
    return Workload(tuple(specs), tuple(calls), cooldowns, tuple(learned))


async def replay(store: QuotaStore, workload: Workload) -> list[tuple[object, ...]]:
    """Every decision the store makes for the workload, with its virtual time."""
    key = "openai"
    log: list[tuple[object, ...]] = []
    seq = itertools.count()
    events: list[tuple[float, int, str, object]] = []
    for index, call in enumerate(workload.calls):
        heapq.heappush(events, (call.arrival, next(seq), "arrive", index))
    for when, seconds in workload.cooldowns:
        heapq.heappush(events, (when, next(seq), "cooldown", seconds))
    for when, item in workload.learned:
        heapq.heappush(events, (when, next(seq), "learn", item))
    waiting: list[int] = []
    retry_at = None
    while events:
        now, _, kind, data = heapq.heappop(events)
        if kind == "arrive":
            waiting.append(data)  # type: ignore[arg-type]
        elif kind == "cooldown":
            left = await store.cooldown(key, data, now)  # type: ignore[arg-type]
            log.append(("cooldown", now, left))
        elif kind == "learn":
            await store.learn(key, workload.specs, [data], now)  # type: ignore[list-item]
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
            got = await store.reserve(key, workload.specs, call.cost, now)
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
            if call.actual is not None:
                heapq.heappush(events, (now + call.first_chunk, next(seq), "redate", got))
            end = now + call.first_chunk + call.duration
            heapq.heappush(events, (end, next(seq), "end", (got, call.actual)))
    return log


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(workload=workloads())
async def test_redis_store_admits_exactly_when_the_memory_store_does(redis_url, workload):
    expected = await replay(MemoryQuotaStore(), workload)
    client = coredis.Redis.from_url(redis_url, decode_responses=True)
    async with client:
        store = RedisQuotaStore(client, prefix=f"prop-{uuid.uuid4().hex}", clock="caller")
        got = await replay(store, workload)
    assert got == expected
    decided = [entry for entry in got if entry[0] in ("admitted", "too large")]
    assert len(decided) == len(workload.calls)  # the replay ran every call to a decision
