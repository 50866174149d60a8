"""An ask that gives up without a cancel scope of its asker's: at its ``give_up_at`` the
RateLimiter takes it out of the queue, and a call's control stops its wait when the consumer
leaves. Either way nothing is taken, and the waiters behind it move up (autojump clock)."""

from __future__ import annotations

import random

import pytest
import trio
import trio.testing

from sluice._config import RateLimitConfig
from sluice._limits.cost import Cost
from sluice._limits.queue import Expiries
from sluice._limits.store import MemoryQuotaStore
from sluice._mail import Admission, CallControl, RateLimiterMsg, Settle
from sluice.actors._rate_limiter import RateLimiterHandle, run_rate_limiter

from .helpers import virtual_deadline

ONE = Cost(1, 0, 0)
ONE_AT_A_TIME = RateLimitConfig(max_pending=1, max_open_streams=1)


async def _idle(limiter: RateLimiterHandle) -> None:
    stats = (await limiter.statistics())["k"]
    assert (stats.pending, stats.open_streams) == (0, 0)
    assert not any(stats.queued.values())


@virtual_deadline(60)
async def test_a_queued_ask_gives_up_exactly_at_its_time_and_the_next_moves_up(autojump_clock):
    mailbox, inbox = trio.open_memory_channel[RateLimiterMsg](16)
    async with trio.open_nursery() as nursery:
        await nursery.start(run_rate_limiter, inbox, random.Random(0), MemoryQuotaStore())
        limiter = RateLimiterHandle(mailbox)
        holder = await limiter.acquire("k", ONE_AT_A_TIME, ONE)
        start = trio.current_time()
        ends: dict[str, tuple[float, object]] = {}

        async def ask(name: str, give_up_at: float) -> None:
            got = await limiter.acquire_until("k", ONE_AT_A_TIME, ONE, give_up_at=give_up_at)
            ends[name] = (trio.current_time() - start, got)

        nursery.start_soon(ask, "early", start + 5.0)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(ask, "late", start + 50.0)
        await trio.testing.wait_all_tasks_blocked()
        await trio.sleep(10.0)
        assert ends == {"early": (5.0, None)}  # out of the queue at 5 s, nothing taken
        await limiter.settle(Settle(holder.ticket, "ok"))
        await trio.testing.wait_all_tasks_blocked()
        at, admitted = ends["late"]
        assert at == 10.0 and isinstance(admitted, Admission)
        await limiter.settle(Settle(admitted.ticket, "ok"))
        # One already past its time is answered at once, never queued.
        assert await limiter.acquire_until("k", ONE_AT_A_TIME, ONE, give_up_at=start) is None
        await _idle(limiter)
        mailbox.close()


@virtual_deadline(60)
async def test_a_call_abandoned_while_queued_stops_waiting_and_takes_nothing(autojump_clock):
    mailbox, inbox = trio.open_memory_channel[RateLimiterMsg](16)
    async with trio.open_nursery() as nursery:
        await nursery.start(run_rate_limiter, inbox, random.Random(0), MemoryQuotaStore())
        limiter = RateLimiterHandle(mailbox)
        holder = await limiter.acquire("k", ONE_AT_A_TIME, ONE)
        control = CallControl()
        ended: list[object] = []

        async def ask() -> None:
            ended.append(await limiter.acquire_until("k", ONE_AT_A_TIME, ONE, control=control))

        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        assert control.waiting is not None  # the wait is what the call waits under
        control.abandon()
        await trio.testing.wait_all_tasks_blocked()
        assert ended == [None] and control.waiting is None
        await limiter.settle(Settle(holder.ticket, "ok"))
        with trio.fail_after(0.001):  # the slot is free: the withdrawn ask took nothing
            admission = await limiter.acquire("k", ONE_AT_A_TIME, ONE)
        await limiter.settle(Settle(admission.ticket, "ok"))
        # A call abandoned before it asks never waits.
        assert await limiter.acquire_until("k", ONE_AT_A_TIME, ONE, control=control) is None
        await _idle(limiter)
        mailbox.close()


@pytest.mark.parametrize("seed", range(20))
def test_expiries_keep_only_what_is_still_queued_and_stay_bounded(seed: int) -> None:
    rng = random.Random(seed)
    queued: set[int] = set()
    expiries: Expiries[str, int] = Expiries(lambda key, waiter: waiter in queued)
    due_at: dict[int, float] = {}
    for waiter in range(2000):
        at = rng.uniform(0, 100)
        due_at[waiter] = at
        queued.add(waiter)
        expiries.arrived(at, "k", waiter)
        if rng.random() < 0.9:
            queued.discard(rng.choice(sorted(queued)))  # admitted or withdrawn meanwhile
        expiries.burst_ended()
        assert len(expiries) <= max(64, 2 * len(queued) + 1) * 2
    taken = expiries.due(50.0)
    assert [due_at[w] for _, w in taken] == sorted(due_at[w] for _, w in taken)
    assert all(due_at[w] <= 50.0 for _, w in taken)
    # Every waiter still queued and due by then was handed out; none still queued is lost.
    assert {w for w in queued if due_at[w] <= 50.0} <= {w for _, w in taken}
    assert expiries.next_at() > 50.0 or expiries.next_at() == float("inf")
    rest = {w for _, w in expiries.due(float("inf"))}
    assert {w for w in queued if due_at[w] > 50.0} <= rest


@virtual_deadline(60)
async def test_an_ask_waiting_for_room_in_the_mailbox_gives_up_on_time_too(autojump_clock):
    """Before the ask reaches the limiter nobody there can give it up: a full mailbox is
    waited for under a scope of its own, ending at ``give_up_at`` or when the call is
    abandoned, and the ask never arrives."""
    mailbox, inbox = trio.open_memory_channel[RateLimiterMsg](1)
    mailbox.send_nowait(Settle(10**9, "ok"))  # full, and nobody reads it yet
    limiter = RateLimiterHandle(mailbox)
    start = trio.current_time()
    assert await limiter.acquire_until("k", ONE_AT_A_TIME, ONE, give_up_at=start + 3) is None
    assert trio.current_time() - start == 3.0
    control = CallControl()
    ended: list[object] = []
    async with trio.open_nursery() as nursery:

        async def ask() -> None:
            ended.append(await limiter.acquire_until("k", ONE_AT_A_TIME, ONE, control=control))

        nursery.start_soon(ask)
        await trio.sleep(2)
        assert isinstance(control.waiting, trio.CancelScope)  # the wait for room
        control.abandon()
    assert ended == [None] and control.waiting is None
    assert trio.current_time() - start == 5.0
    inbox.receive_nowait()  # only the message that filled it: neither ask arrived
    with pytest.raises(trio.WouldBlock):
        inbox.receive_nowait()
