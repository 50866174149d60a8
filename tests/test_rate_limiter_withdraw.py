"""A waiter that gives up at the worst moment, when the RateLimiter's mailbox is full and the
message ahead of its Withdraw admits it: nothing may leak (under the autojump clock)."""

from __future__ import annotations

import contextlib
import random

import trio
import trio.testing

from sluice._config import RateLimitConfig
from sluice._ledger.budget import Budget, BudgetBook, BudgetClaim
from sluice._ledger.prices import PriceTable
from sluice._limits.cost import Cost
from sluice._limits.store import MemoryQuotaStore
from sluice._mail import RateLimiterMsg, Release, Settle
from sluice.actors._rate_limiter import RateLimiterHandle, run_rate_limiter

from .helpers import virtual_deadline

ONE = Cost(1, 0, 0)


async def _withdraw_while_the_mailbox_is_full(seed: int) -> None:
    """One round: a waiter gives up at the moment the limiter's mailbox is full, and the
    message in the mailbox is the one that admits it."""
    mailbox, inbox = trio.open_memory_channel[RateLimiterMsg](1)
    budgets = BudgetBook([Budget(max_tokens=1_000_000)], PriceTable())
    claim = BudgetClaim("p", "m")
    limits = RateLimitConfig(max_pending=1, max_open_streams=1, requests_per_minute=1000)
    async with trio.open_nursery() as nursery:
        await nursery.start(
            run_rate_limiter, inbox, random.Random(seed), MemoryQuotaStore(), None, budgets
        )
        limiter = RateLimiterHandle(mailbox)
        holder = await limiter.acquire("k", limits, ONE, budget=claim)
        gave_up = trio.CancelScope()

        async def waiter() -> None:
            with gave_up:
                await limiter.acquire("k", limits, ONE, budget=claim)
                raise AssertionError("admitted after giving up")

        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()  # queued behind the holder
        # With no checkpoint between: the settlement that admits the waiter fills the
        # mailbox, and the waiter gives up; its Withdraw must wait for room.
        mailbox.send_nowait(Settle(holder.ticket, "ok"))
        with contextlib.suppress(trio.WouldBlock):
            while True:
                mailbox.send_nowait(Release(10**9))  # no such ticket: changes nothing
        gave_up.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert gave_up.cancelled_caught
        # Every statistic is zero when idle: the waiter's slots, window reservation and
        # budget hold were all given back.
        stats = (await limiter.statistics())["k"]
        assert (stats.pending, stats.open_streams) == (0, 0)
        assert not any(stats.queued.values())
        assert stats.windows["requests/60s"] == (1, 1000)  # the holder's request alone
        [status] = budgets.status()
        assert (status.reserved_micros, status.reserved_tokens) == (0, 0)
        with trio.fail_after(0.001):  # a new caller is admitted at once
            admission = await limiter.acquire("k", limits, ONE, budget=claim)
        await limiter.settle(Settle(admission.ticket, "ok"))
        mailbox.close()


@virtual_deadline(60)
async def test_a_waiter_giving_up_while_the_mailbox_is_full_leaks_nothing(autojump_clock):
    # Whether the limiter admits the waiter before or after it notices its cancellation
    # depends on trio's scheduling order, which varies: repeat to meet both orders.
    for seed in range(100):
        await _withdraw_while_the_mailbox_is_full(seed)
