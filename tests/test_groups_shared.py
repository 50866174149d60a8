"""Model groups over a shared Redis store: routing sees the cooldowns other processes set.

Two runtimes in one test stand for two processes: each has its own RedisQuotaStore (its own
connection, its own view of the cooldowns) to the same ``redis-server``, and its own servers
(httpx.MockTransport) for the same three deployments. Real clock (Redis is a real socket):
the assertions are about where calls went and that none waited out the cooldown, not timing.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import httpx
import orjson
import trio

import sluice
from sluice import (
    BreakerConfig,
    ChatRequest,
    ModelGroup,
    ProviderConfig,
    RateLimited,
    RetryConfig,
)
from sluice._config import LedgerConfig, RuntimeConfig
from sluice._limits.redis_store import RedisQuotaStore, open_redis_store

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterable
    from contextlib import AbstractAsyncContextManager

HOSTS = ("x", "y", "z")
RETRY_AFTER = 20

WHOLE = orjson.dumps(
    {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
)


class Servers:
    """One process's view of the deployments: each answers at once; those in ``limited``
    answer 429 with a Retry-After."""

    def __init__(self, limited: Iterable[str] = (), failing: Iterable[str] = ()) -> None:
        self.limited = set(limited)
        self.failing = set(failing)
        """Answer 500; "hang" in it: accept and never answer."""
        self.arrivals: dict[str, int] = defaultdict(int)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        self.arrivals[host] += 1
        if host in self.failing:
            if "hang" in self.failing:
                await trio.sleep_forever()
            body = {"error": {"type": "server_error", "message": "down"}}
            return httpx.Response(500, json=body)
        if host in self.limited:
            body = {"error": {"type": "rate_limit_error", "message": "slow down"}}
            return httpx.Response(429, headers={"retry-after": str(RETRY_AFTER)}, json=body)
        return httpx.Response(200, headers={"content-type": "application/json"}, content=WHOLE)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)


def config(
    weights: dict[str, float], breaker: BreakerConfig | None = None, **group: Any
) -> RuntimeConfig:
    return RuntimeConfig(
        providers={h: ProviderConfig(base_url=f"http://{h}/v1", breaker=breaker) for h in HOSTS},
        groups={
            "g": ModelGroup(
                deployments=[{"model": f"{h}:m", "weight": weights.get(h, 1.0)} for h in HOSTS],
                strategy="weighted",
                **group,
            )
        },
        retry=RetryConfig(max_attempts=1, jitter=0.0),
        ledger=LedgerConfig(persist=False),
    )


@asynccontextmanager
async def two_stores(redis_url: str) -> AsyncIterator[tuple[RedisQuotaStore, RedisQuotaStore]]:
    """Two processes' stores (their own connections and views) on one Redis prefix."""
    prefix = f"groups-{uuid.uuid4().hex}"
    async with (
        open_redis_store(redis_url, prefix=prefix) as store_a,
        open_redis_store(redis_url, prefix=prefix) as store_b,
    ):
        yield store_a, store_b


def runtime_on(
    store: RedisQuotaStore, cfg: RuntimeConfig, servers: Servers
) -> AbstractAsyncContextManager[sluice.Runtime]:
    """A process's runtime on ``store``, calling its own ``servers``."""
    return sluice.open_runtime(cfg, transport=servers.transport(), environ={}, quota_store=store)


async def placed_on_x(rt: sluice.Runtime) -> int:
    return {d.model: d.calls for d in (await rt.statistics()).groups["g"]}["x:m"]


async def a_429_on_x(store: RedisQuotaStore, cfg: RuntimeConfig) -> None:
    """Process A: its call on deployment x gets a 429 asking for a pause, shared in Redis."""
    async with runtime_on(store, cfg, Servers({"x"})) as a:
        try:
            await a.chat(ChatRequest(model="x:m", messages="hi", stream=False))
        except RateLimited:
            pass
        else:
            raise AssertionError("x answered 429")
        # Its limiter tells Redis of the pause (a round trip after the call ended).
        await until(lambda: store.cooling("x", trio.current_time()) > 0)


async def until(condition: Callable[[], bool]) -> None:
    """Wait (5 s at most) for ``condition``, which another task makes true."""
    with trio.fail_after(5):
        while not condition():  # noqa: ASYNC110 (the state is a store's, told by no event)
            await trio.sleep(0.01)


async def route(rt: sluice.Runtime, n: int) -> list[Any]:
    results = []
    requests = (ChatRequest(model="g", messages=f"q{i}", stream=False) for i in range(n))
    async with rt.map(requests, max_in_flight=8) as outcomes:
        async for outcome in outcomes:
            assert outcome.result is not None, outcome.error
            results.append(outcome.result)
    return results


async def test_a_deployment_cooling_down_in_another_process_gets_no_calls_from_this_one(
    redis_url,
):
    cfg = config({"x": 4.0})  # x is the deployment `weighted` prefers
    servers = Servers()
    with trio.fail_after(30):
        async with (
            two_stores(redis_url) as (store_a, store_b),
            runtime_on(store_b, cfg, servers) as b,
        ):
            before = await route(b, 20)  # B's routing reads the shared cooldowns from now on
            assert any(r.models_tried == ("x:m",) for r in before)
            await a_429_on_x(store_a, cfg)
            # B learns of A's pause from its store's view, without admitting anything on x.
            placed_before = {d.model: d.calls for d in (await b.statistics()).groups["g"]}
            await until(lambda: store_b.cooling("x", trio.current_time()) > 0)
            # The view was read in the background: B placed no call meanwhile.
            assert {d.model: d.calls for d in (await b.statistics()).groups["g"]} == placed_before
            left = store_b.cooling("x", trio.current_time())
            assert RETRY_AFTER - 5 < left <= RETRY_AFTER
            placed = {d.model: d.calls for d in (await b.statistics()).groups["g"]}
            arrived = servers.arrivals["x"]
            started = trio.current_time()
            results = await route(b, 60)
            after = {d.model: d.calls for d in (await b.statistics()).groups["g"]}
            # No call of B was placed on x, none reached it, none waited out the pause.
            assert after["x:m"] == placed["x:m"]
            assert servers.arrivals["x"] == arrived
            assert all(r.models_tried[-1] in ("y:m", "z:m") for r in results)
            assert trio.current_time() - started < RETRY_AFTER / 2


async def test_a_call_placed_before_the_view_knows_moves_on_without_waiting(redis_url):
    """B's view is stale (it read the cooldowns before A's 429 and not since): the first call
    placed on x learns of the pause from its admission and moves on at once (it does not wait
    out the pause); B's routing then keeps the others off x."""
    cfg = config({"x": 1e9})  # every call would go to x
    servers = Servers()
    with trio.fail_after(30):
        async with (
            two_stores(redis_url) as (store_a, store_b),
            runtime_on(store_b, cfg, servers) as b,
        ):
            await route(b, 1)  # reads the (empty) view once
            store_b.view_interval = 3600.0  # and never again during this test
            await trio.sleep(0.2)
            await a_429_on_x(store_a, cfg)
            assert store_b.cooling("x", trio.current_time()) == 0  # B does not know yet
            arrived = servers.arrivals["x"]
            started = trio.current_time()
            for i in range(10):
                result = await b.chat(ChatRequest(model="g", messages=f"q{i}", stream=False))
                assert result.models_tried[-1] != "x:m"
                if i == 0:
                    assert result.models_tried[0] == "x:m"  # placed there, refused at once
            assert trio.current_time() - started < RETRY_AFTER / 2
            assert servers.arrivals["x"] == arrived
            stats = {d.model: d for d in (await b.statistics()).groups["g"]}
            assert stats["x:m"].calls == 1 + 1  # the first route() call, and the one refused
            assert stats["x:m"].cooling_left > RETRY_AFTER - 5


async def test_a_deployment_another_process_found_slow_gets_no_calls_from_this_one(redis_url):
    """A's call waits the hedge time on x, which never answers, and moves on: x is marked
    slow for every process. B then places nothing on x until the mark ends."""
    cfg = config({"x": 1e9}, hedge=0.3, slow_for=60.0)
    servers_a, servers_b = Servers(failing={"x", "hang"}), Servers()
    with trio.fail_after(30):
        async with (
            two_stores(redis_url) as (store_a, store_b),
            runtime_on(store_a, cfg, servers_a) as a,
            runtime_on(store_b, cfg, servers_b) as b,
        ):
            await route(b, 1)  # B's routing reads the shared view from now on
            result = await a.chat(ChatRequest(model="g", messages="hi", stream=False))
            assert result.models_tried[0] == "x:m" and result.models_tried[-1] != "x:m"
            await until(lambda: store_b.avoided("slow:x:m", trio.current_time()) > 50)
            placed, arrived = await placed_on_x(b), servers_b.arrivals["x"]
            results = await route(b, 30)
            assert await placed_on_x(b) == placed
            assert servers_b.arrivals["x"] == arrived
            assert all(r.models_tried[-1] in ("y:m", "z:m") for r in results)


async def test_a_breaker_another_process_opened_keeps_this_ones_calls_away_while_open(
    redis_url,
):
    breaker = BreakerConfig(min_failures=2, failure_rate=0.5, window=60.0, open_for=1.0)
    cfg = config({"x": 1e9}, breaker=breaker)
    servers_a, servers_b = Servers(failing={"x"}), Servers()
    with trio.fail_after(30):
        async with (
            two_stores(redis_url) as (store_a, store_b),
            runtime_on(store_a, cfg, servers_a) as a,
            runtime_on(store_b, cfg, servers_b) as b,
        ):
            await route(b, 1)
            for i in range(2):  # two 500s from x: A's breaker for x opens
                await a.chat(ChatRequest(model="g", messages=f"a{i}", stream=False))
            assert {d.model: d.breaker for d in (await a.statistics()).groups["g"]}["x:m"] == (
                "open"
            )
            await until(lambda: store_b.avoided("breaker:x:m", trio.current_time()) > 0)
            placed = await placed_on_x(b)
            results = await route(b, 20)
            assert await placed_on_x(b) == placed  # B's own breaker is closed: it never failed
            assert all(r.models_tried[-1] in ("y:m", "z:m") for r in results)
            # Once A's breaker half-opens (A probes x), B may place calls there again.
            await until(lambda: store_b.avoided("breaker:x:m", trio.current_time()) == 0)
            later = await route(b, 10)
            assert all(r.models_tried == ("x:m",) for r in later)
