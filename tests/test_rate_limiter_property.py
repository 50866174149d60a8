"""Property: over random arrivals, costs and cancellations, the RateLimiter admits every call
at exactly the earliest time a FIFO queue over an exact window allows: never over the limit,
and never waiting while capacity is free."""

from __future__ import annotations

import random

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice._config import RateLimitConfig, WindowLimit
from sluice._limits.cost import Cost
from sluice._limits.store import MemoryQuotaStore
from sluice._mail import RateLimiterMsg, Settle
from sluice.actors._rate_limiter import RateLimiterHandle, run_rate_limiter

PERIOD = 10.0
LIMIT = 20

calls_strategy = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=4),  # gap since the previous arrival, seconds
        st.integers(min_value=1, max_value=LIMIT),  # tokens
        st.one_of(st.none(), st.integers(min_value=0, max_value=25)),  # give up after k+0.5 s
    ),
    min_size=1,
    max_size=30,
)


def patience(index: int, give_up: int) -> float:
    """Seconds call ``index`` waits before giving up: never at the same instant as another."""
    return give_up + 0.5 + index / 1024


def model(calls: list[tuple[int, int, int | None]]) -> list[float | None]:
    """The admission time of each call (None: it gave up first) under FIFO + exact window."""
    admitted: list[tuple[float, int]] = []
    result: list[float | None] = []
    arrival = 0.0
    head_free = 0.0
    for index, (gap, tokens, give_up) in enumerate(calls):
        arrival += gap
        t = max(arrival, head_free)
        while sum(a for at, a in admitted if at > t - PERIOD) + tokens > LIMIT:
            t = min(at + PERIOD for at, _ in admitted if at + PERIOD > t)
        deadline = None if give_up is None else arrival + patience(index, give_up)
        if deadline is not None and deadline < t:
            result.append(None)
            head_free = max(head_free, deadline)
        else:
            result.append(t)
            admitted.append((t, tokens))
            head_free = t
    return result


@settings(max_examples=150, deadline=None)
@given(calls_strategy)
def test_admissions_match_the_exact_fifo_window_model(calls):
    window = WindowLimit(dimension="input_tokens", limit=LIMIT, per=PERIOD)
    limits = RateLimitConfig(windows=(window,))
    seen: list[float | None] = [None] * len(calls)

    async def main() -> None:
        send, inbox = trio.open_memory_channel[RateLimiterMsg](0)
        with trio.fail_after(10_000):  # virtual seconds: a deadlock fails instead of spinning
            await run(send, inbox)

    async def run(send, inbox) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(run_rate_limiter, inbox, random.Random(0), MemoryQuotaStore())
            limiter = RateLimiterHandle(send)

            async def one(index: int, tokens: int, give_up: int | None) -> None:
                with trio.move_on_after(patience(index, give_up) if give_up is not None else 1e9):
                    admission = await limiter.acquire("k", limits, Cost(1, tokens, 0))
                    seen[index] = trio.current_time()
                    await limiter.settle(Settle(admission.ticket, "ok"))

            async with trio.open_nursery() as arrivals:
                for index, (gap, tokens, give_up) in enumerate(calls):
                    await trio.sleep(gap)
                    arrivals.start_soon(one, index, tokens, give_up)
            send.close()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert seen == model(calls)
