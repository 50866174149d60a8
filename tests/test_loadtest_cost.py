"""What a streamed load-test request costs the load tester, in counts that do not depend on the
machine's speed: the Python calls a request makes (everything the load tester, the runtime and
its actors do for it) and how often the request's own task runs. The server
(``tests/canned_sse_server.py``) runs as its own process over loopback and writes each reply in
one piece, so what is counted is the client alone. Each bound fails on the code before the
change that earned it (see the assertions' messages).
"""

from __future__ import annotations

import cProfile
import pstats
from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio

import sluice
from sluice import RuntimeConfig
from sluice._config import ProviderConfig, Secret
from sluice._jobs.loadtest import (
    ClosedLoop,
    Lengths,
    LoadTest,
    OpenLoop,
    Workload,
    loadtest_config,
    run_load,
)
from sluice._jobs.loadtest.wake import TAIL_ENV

from .call_counts import canned_server

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Iterator

REQUESTS = 40
CHUNKS = 20
PYTHON_CALLS = 1_650
"""Python calls per request of 20 content chunks (C functions included, as cProfile counts
them), a little above what the code makes. Before a request's events were read as they arrived
by its follower (no event channel, its task woken once at the end, a text delta counted without
a call) and ended without a context manager: over 1,730."""
USER_STEPS = 1.5
"""Steps of the request's task per request: before, it woke for each batch the call's
consumer got (admitted, the reply, often the end apart): over 2.3."""


@pytest.fixture
def canned() -> Iterator[tuple[subprocess.Popen[str], str]]:
    with canned_server() as served:
        yield served


class _UserSteps(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        code = getattr(task.coro, "cr_code", None)
        if code is not None and code.co_name == "user":
            self.steps += 1


async def test_a_streamed_load_test_request_makes_a_bounded_number_of_calls_and_steps(
    canned,
) -> None:
    _, url = canned
    config = RuntimeConfig(
        providers={"canned": ProviderConfig(base_url=f"{url}/c{CHUNKS}/v1", api_key=Secret("k"))}
    )
    config = loadtest_config(config, "canned", respect_limits=False)
    workload = Workload(input_tokens=Lengths("fixed", 8), output_tokens=Lengths("fixed", 20))
    test = LoadTest(
        model="canned:m", shape=ClosedLoop(4), requests=REQUESTS, workload=workload, warmup=4
    )
    async with sluice.open_runtime(config) as rt:
        await run_load(rt, test, aggregates=False)  # connections open, caches warm
        counter = _UserSteps()
        profiler = cProfile.Profile()
        trio.lowlevel.add_instrument(counter)
        profiler.enable()
        try:
            run = await run_load(rt, test, aggregates=False)
        finally:
            profiler.disable()
            trio.lowlevel.remove_instrument(counter)
    records = list(run.records)
    assert len(records) == REQUESTS and all(r.ok for r in records)
    assert all(r.output_tokens == CHUNKS and r.client_output_tokens == CHUNKS for r in records)
    assert all(r.ttft is not None and r.chunks >= 1 for r in records)
    stats: Any = pstats.Stats(profiler)  # total_calls is not in the stubs
    per_request = stats.total_calls / (REQUESTS + test.warmup)
    assert per_request < PYTHON_CALLS, per_request
    assert counter.steps / REQUESTS < USER_STEPS, counter.steps / REQUESTS


OPEN_REQUESTS = 50
OPEN_RATE = 100.0
"""Requests per second of the open-loop test: 10 ms apart, where one takes about a
millisecond (several under the profiler), so they seldom overlap."""
OPEN_PYTHON_CALLS = 2_050
"""Python calls per request of the open loop at :data:`OPEN_RATE` (C functions included, as
cProfile counts them), a little above what the code makes. Before the scheduler napped on
the sender's timerfd (not a cancel scope per arrival), woke with the arrival before, and a
sender waited without a cancel scope of its own, before prompts drew their words without
``random.choice``'s calls, and before the follower counted a batch's text deltas in C and
``Tracker.finish`` took its shortcuts: 2,140 to 2,180."""


async def test_an_open_loop_request_at_low_rate_makes_a_bounded_number_of_calls(
    canned, monkeypatch
) -> None:
    """The open loop at a rate where requests seldom overlap: each request's wake, hand-over,
    submission, HTTP exchange and record are paid alone, with nothing to share them. Counted
    is every call of the run: the scheduler's sleeps, the sender's timer and its wake, the
    hand-over hook's looks between steps, the call and the record. The timer's spin before a
    deadline (``wake.TAIL``, taken at low rates only) is turned off: its loop passes depend on
    the machine's speed, not on the code. The warm-up's closed loop of 4 leaves 4 connections
    in the pool, so a request that overlaps another does not open one (and count its
    calls)."""
    monkeypatch.setenv(TAIL_ENV, "0")
    _, url = canned
    config = RuntimeConfig(
        providers={"canned": ProviderConfig(base_url=f"{url}/c{CHUNKS}/v1", api_key=Secret("k"))}
    )
    config = loadtest_config(config, "canned", respect_limits=False)
    workload = Workload(input_tokens=Lengths("fixed", 8), output_tokens=Lengths("fixed", 20))
    shape = OpenLoop.at_rate(OPEN_RATE, arrival="constant")
    test = LoadTest(
        model="canned:m", shape=shape, requests=OPEN_REQUESTS, workload=workload, warmup=0
    )
    async with sluice.open_runtime(config) as rt:
        warm = attrs.evolve(test, shape=ClosedLoop(4), requests=20, warmup=4)
        await run_load(rt, warm, aggregates=False)  # connections open, caches warm
        profiler = cProfile.Profile()
        profiler.enable()
        try:
            run = await run_load(rt, test, aggregates=False)
        finally:
            profiler.disable()
    records = list(run.records)
    assert len(records) == OPEN_REQUESTS and all(r.ok for r in records)
    assert all(r.output_tokens == CHUNKS and r.client_output_tokens == CHUNKS for r in records)
    stats: Any = pstats.Stats(profiler)
    per_request = stats.total_calls / OPEN_REQUESTS
    assert per_request < OPEN_PYTHON_CALLS, per_request
