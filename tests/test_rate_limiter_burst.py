"""The RateLimiter looks at a key once per burst of messages, not after each one: a burst's
waiters and freed slots are weighed together, so priority holds inside a burst too."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import trio
import trio.testing

from sluice._config import RateLimitConfig
from sluice._limits.cost import Cost
from sluice._limits.store import MemoryQuotaStore
from sluice._mail import Acquire, Admission, Expired, RateLimiterMsg, Refusal, Settle
from sluice._reply import Reply
from sluice.actors._rate_limiter import RateLimiterHandle, run_rate_limiter
from sluice.actors._tell import MAILBOX_BUFFER

from .helpers import virtual_deadline

if TYPE_CHECKING:
    from sluice._limits.queue import Priority

ONE = Cost(1, 0, 0)
LIMITS = RateLimitConfig(max_pending=1)


def _ask(priority: Priority) -> tuple[Acquire, Reply[Admission | Refusal | Expired]]:
    reply = Reply[Admission | Refusal | Expired]()
    return Acquire("k", LIMITS, ONE, priority, trio.current_time(), reply), reply


@virtual_deadline(60)
async def test_a_slot_freed_in_a_burst_goes_to_the_bursts_most_urgent_waiter(
    autojump_clock, nursery
):
    send, inbox = trio.open_memory_channel[RateLimiterMsg](MAILBOX_BUFFER)
    await nursery.start(run_rate_limiter, inbox, random.Random(0), MemoryQuotaStore())
    limiter = RateLimiterHandle(send)
    held = await limiter.acquire("k", LIMITS, ONE)  # the one pending slot
    background, background_reply = _ask("background")
    interactive, interactive_reply = _ask("interactive")
    # One burst, sent without a checkpoint: the limiter takes all three in one run.
    send.send_nowait(background)
    send.send_nowait(Settle(held.ticket, "ok"))
    send.send_nowait(interactive)
    await trio.testing.wait_all_tasks_blocked()
    assert isinstance(interactive_reply.receive_nowait(), Admission)
    try:
        background_reply.receive_nowait()
    except trio.WouldBlock:
        pass  # still queued: the slot went to the interactive call
    else:
        raise AssertionError("the background waiter was admitted ahead of the interactive one")
    stats = await limiter.statistics()
    assert stats["k"].pending == 1 and stats["k"].queued["background"] == 1
