"""Issue 35: events decoded from one network read share one arrival time, so a server that
writes several tokens per write gives per-token ITL samples equal to its token spacing (the
write's gap shared by its tokens), never one long gap and a few near-zero ones.

The server is the suite's own (:class:`~tests.sse_bursts.BurstServer`): four one-word events
per write, one write every 125 ms, so each token is 31.25 ms after the one before. Exact under
the autojump clock over memory streams; over loopback on the real clock, the samples of one
write are equal and at the median within a millisecond of the gap the server really left
(its own write times: a loaded box may wake it late), where the old per-event stamps gave
one long sample and three of a few microseconds.
"""

from __future__ import annotations

import trio

import sluice
from sluice._jobs.loadtest import run_load
from sluice.transport import FastTransport

from .helpers import virtual_deadline
from .sse_bursts import (
    BurstServer,
    assert_loopback_gaps_shared,
    assert_write_gaps_shared,
    burst_test,
)
from .sse_bursts import runtime_config as config

SPACING, PER_WRITE, WRITES = 0.125, 4, 4


@virtual_deadline(60)
async def test_tokens_of_one_read_split_its_gap_exactly(autojump_clock, nursery):
    server = BurstServer(writes=WRITES, per_write=PER_WRITE, spacing=SPACING, nursery=nursery)
    transport = FastTransport(open_stream=server.open_stream)
    async with sluice.open_runtime(config("http://burst.test/v1"), transport=transport) as rt:
        run = await run_load(rt, burst_test(3))
    assert_write_gaps_shared(run, server, 3)


async def test_over_loopback_each_token_gets_its_share_of_the_write_gap():
    server = BurstServer(writes=WRITES, per_write=PER_WRITE, spacing=SPACING)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.serve_tcp)
            async with sluice.open_runtime(config(f"http://127.0.0.1:{port}/v1")) as rt:
                run = await run_load(rt, burst_test(4))
            nursery.cancel_scope.cancel()
    assert_loopback_gaps_shared(run, server, 4)
