"""Calls that wait (``wait`` failure mode, as every batch line's) wait out a quota store that
does not answer; calls that do not wait still fail at once. Virtual time, exact instants.

The store here is the in-memory one with an outage laid over it: between ``down_from`` and
``down_until`` every admission raises :class:`~sluice.StoreUnavailable`, as the Redis store
does while Redis is down in ``on_store_error="fail"`` mode.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

import sluice
from sluice import ChatRequest, RetryConfig, RuntimeConfig, StoreUnavailable
from sluice._backoff import STORE_RETRY_MAX, store_retry_delay
from sluice._config import LedgerConfig
from sluice._limits.cost import Cost
from sluice._limits.store import MemoryQuotaStore
from sluice._mail import RateLimiterMsg, Settle
from sluice.actors._rate_limiter import RateLimiterHandle, run_rate_limiter
from sluice.simulator import SimulatorConfig, mock_transport

from .helpers import virtual_deadline

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sluice._limits.store import BudgetAsk, BudgetRefused, Reservation, TooLarge, WindowSpec

ONE = Cost(1, 0, 0)
LIMITS = sluice.RateLimitConfig(requests_per_minute=600)


class OutageStore(MemoryQuotaStore):
    """Admissions raise StoreUnavailable from ``down_from`` until ``down_until``."""

    def __init__(self, down_from: float, down_until: float) -> None:
        super().__init__()
        self.down_from, self.down_until = down_from, down_until
        self.asked: list[float] = []

    async def reserve(
        self,
        key: str,
        specs: Sequence[WindowSpec],
        cost: Cost,
        now: float,
        *,
        caps: tuple[int | None, int | None] = (None, None),
        budget: BudgetAsk | None = None,
    ) -> Reservation | TooLarge | BudgetRefused | float:
        self.asked.append(now)
        if self.down_from <= now < self.down_until:
            raise StoreUnavailable("the quota store does not answer: injected outage")
        return await super().reserve(key, specs, cost, now, caps=caps, budget=budget)


def test_the_store_is_asked_again_after_half_its_outage_within_bounds():
    assert store_retry_delay(0.0) == 0.25
    assert store_retry_delay(1.0) == 0.5
    assert store_retry_delay(3.0) == 1.5
    assert store_retry_delay(60.0) == STORE_RETRY_MAX == 2.0


@virtual_deadline(60)
async def test_a_waiting_acquire_waits_out_the_outage_and_one_that_does_not_fails_at_once(
    autojump_clock, nursery
):
    store = OutageStore(0.0, 10.0)
    send, inbox = trio.open_memory_channel[RateLimiterMsg](0)
    await nursery.start(run_rate_limiter, inbox, random.Random(0), store)
    limiter = RateLimiterHandle(send)
    admitted: list[float] = []

    async def waiting() -> None:
        admission = await limiter.acquire("k", LIMITS, ONE, "batch", wait_for_store=math.inf)
        admitted.append(trio.current_time())
        await limiter.settle(Settle(admission.ticket, "ok"))

    nursery.start_soon(waiting)
    await trio.sleep(3.0)
    # A call that does not wait, queued behind one that does: refused when it asks.
    with pytest.raises(StoreUnavailable, match="injected outage"):
        await limiter.acquire("k", LIMITS, ONE, "interactive")
    assert trio.current_time() == 3.0
    await trio.sleep(20.0)
    # Probes: at 0, then half the outage so far later (0.25 s at least, 2 s at most); the
    # refused call's own probe at 3.0 counts as one. The first after 10.0 admits.
    expected, t = [0.0], 0.0
    while t < 10.0:
        t += store_retry_delay(t)
        if expected[-1] < 3.0 < t:
            t = 3.0 + store_retry_delay(3.0)
            expected.append(3.0)
        expected.append(t)
    assert store.asked == expected
    assert admitted == [expected[-1]] == [10.5]
    assert expected[-1] - 10.0 <= STORE_RETRY_MAX


def config() -> RuntimeConfig:
    return RuntimeConfig(retry=RetryConfig(jitter=0.0), ledger=LedgerConfig(persist=False))


@virtual_deadline(120)
async def test_calls_in_wait_mode_complete_across_an_outage_and_fail_fast_ones_fail(
    autojump_clock,
):
    store = OutageStore(0.0, 10.0)
    sim = SimulatorConfig(ttft=0.0)
    async with sluice.open_runtime(
        config(), transport=mock_transport(sim), quota_store=store
    ) as rt:
        waiting = [
            ChatRequest(model="sim:sim-small", messages=f"q{i}", failure_mode="wait")
            for i in range(20)
        ]
        async with rt.map(waiting, max_in_flight=20) as outcomes:
            results = [o async for o in outcomes]
        assert [o.error for o in results] == [None] * 20
        assert trio.current_time() >= 10.0
        store.down_from, store.down_until = trio.current_time(), math.inf
        with pytest.raises(StoreUnavailable):
            await rt.chat(ChatRequest(model="sim:sim-small", messages="x"))
        stats = await rt.statistics()
    assert stats.quotas["sim"].pending == 0 and stats.quotas["sim"].open_streams == 0


@virtual_deadline(120)
async def test_a_waiting_call_gives_up_with_the_store_error_before_its_max_wait(autojump_clock):
    """It is refused at the last look at the store before its max_wait (the next would come
    after it), with the error that kept it waiting: a batch line ``--resume`` redoes."""
    store = OutageStore(0.0, math.inf)
    async with sluice.open_runtime(config(), transport=mock_transport(), quota_store=store) as rt:
        request = ChatRequest(model="sim:sim-small", messages="q", failure_mode="wait", max_wait=5)
        with pytest.raises(StoreUnavailable, match="injected outage"):
            await rt.chat(request)
        assert trio.current_time() == store.asked[-1] == 3.796875
        assert 3.796875 + store_retry_delay(3.796875) > 5.0
        await trio.testing.wait_all_tasks_blocked()
        stats = await rt.statistics()
    assert stats.quotas["sim"].queued == {"interactive": 0, "batch": 0, "background": 0}
