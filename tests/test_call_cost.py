"""What a streamed call costs sluice, in counts that do not depend on the machine's speed.

The server (``tests/canned_sse_server.py``) runs as its own process over loopback and writes each
reply in one piece, so what is counted here is the client alone: the trips through trio's
scheduler that the actors' tasks make per call, and the memory an open stream holds (under
``tracemalloc``). Each bound fails on the code before the change that earned it (see the
assertions' messages).
"""

from __future__ import annotations

import cProfile
import gc
import pstats
import tracemalloc
from typing import TYPE_CHECKING, Any

import pytest
import trio

import sluice
from sluice import ChatRequest, RuntimeConfig, TextDelta
from sluice._config import ProviderConfig, Secret

from .call_counts import ActorCounts, canned_server

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Iterator

TEXT = "word0 word1 word2 word3 word4"
CALLS = 20
STREAMS = 200
MAX_BYTES_PER_STREAM = 20_300
"""What an open stream may hold, its connection and the consumer's side included: the request
body stays no longer than its sending, and an attempt's and an admission's answer come in a
one-shot reply instead of a memory channel pair (before those changes: over 29,000); the
response's headers are a tuple of values on a name table shared by the server's responses, and
the attempt's task holds fewer frames and objects while it waits (before: over 21,000)."""


@pytest.fixture
def canned() -> Iterator[tuple[subprocess.Popen[str], str]]:
    with canned_server() as served:
        yield served


def _config(url: str, connections: int = 16) -> RuntimeConfig:
    def provider(base_url: str) -> ProviderConfig:
        return ProviderConfig(
            base_url=base_url, api_key=Secret("sk-test"), max_connections=connections
        )

    return RuntimeConfig(
        providers={"canned": provider(f"{url}/v1"), "held": provider(f"{url}/hold/v1")}
    )


async def test_a_streamed_call_takes_five_scheduler_steps_in_the_actors(canned) -> None:
    """The Supervisor's task runs three times (start, admitted, answered), the attempt's task
    twice (send, then the whole reply in one read): the request's write and the read that
    finds the body complete cost no trip through the scheduler (they did: seven in all)."""
    _, url = canned
    request = ChatRequest(model="canned:m", messages="hi")
    async with sluice.open_runtime(_config(url)) as rt:
        await rt.chat(request)  # opens the connection, which every measured call reuses
        counter = ActorCounts()
        trio.lowlevel.add_instrument(counter)
        try:
            for _ in range(CALLS):
                async with rt.stream(request) as call:
                    async for _event in call:
                        pass
                assert call.result is not None and call.result.text == TEXT
        finally:
            trio.lowlevel.remove_instrument(counter)
    assert counter.steps == {"_supervise": 3 * CALLS, "_serve_attempt": 2 * CALLS}


class _AllSteps(trio.abc.Instrument):
    """Every task's steps while installed, by the task's function."""

    def __init__(self) -> None:
        self.by_function: dict[str, int] = {}

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        code = getattr(task.coro, "cr_code", None)
        name = code.co_name if code is not None else type(task.coro).__name__
        self.by_function[name] = self.by_function.get(name, 0) + 1


LONE_STEPS = 8.4
"""Scheduler steps of every task per call of a map that runs one call at a time (nothing
else in flight, so no step serves two calls): the consumer and the map's feeder once each,
the Supervisor's call task three times, the attempt's task twice and the RateLimiter once
(the ask), 8 in all, and the map's own start and end (5 steps over the whole map): a bound a
little above the 8.25 the code makes. Before the TokenLedger took records from a tray instead
of waking for each, a call's and an attempt's tasks were started in their actors' nurseries
by the sender instead of by the actors' mailbox loops (whose steps did nothing else), and the
RateLimiter took an attempt's end that nobody waited for from a tray when it next woke
instead of waking for it: over 12.5 (9.25 before the last)."""


async def test_a_call_made_alone_takes_few_scheduler_steps(canned) -> None:
    _, url = canned
    async with sluice.open_runtime(_config(url)) as rt:
        await rt.chat("canned:m", "hi")  # opens the connection, which every measured call reuses
        requests = [ChatRequest(model="canned:m", messages="hi") for _ in range(CALLS)]
        steps = _AllSteps()
        trio.lowlevel.add_instrument(steps)
        try:
            async with rt.map(requests, max_in_flight=1) as outcomes:
                results = [o.result async for o in outcomes]
        finally:
            trio.lowlevel.remove_instrument(steps)
    assert all(r is not None and r.text == TEXT for r in results)
    by_function = steps.by_function
    per_call = sum(by_function.values()) / CALLS
    assert per_call < LONE_STEPS, by_function
    # The actors' mailbox loops (the RateLimiter's and the TokenLedger's run under the
    # restarter, as the providers') take no step for a lone call but the RateLimiter's one.
    loops = by_function.get("run_restarting", 0) + by_function.get("_provider_task", 0)
    assert loops <= CALLS, by_function
    assert "run_supervisor" not in by_function, by_function


PYTHON_CALLS = {20: 1_100, 200: 3_300}
"""Python function calls (C functions included, as cProfile counts them) per mapped call of 20
and 200 content chunks, everything the runtime and its actors do for it: bounds a little above
what the code makes, so that work added per call or per chunk fails here. Before a quiet call's
decoder made no delta per piece of text, the SSE decoder read a one-line event in one step and
handed payloads without an event tuple, a question's answer was looked for instead of tried
(a WouldBlock raised and caught), and a response read to its end was closed without a shielded
cancel scope: over 1,660 and 6,700. Before the wait for admission needed no cancel scope of the
Supervisor's (the RateLimiter gives an ask up at its deadline) and the Supervisor and the
RateLimiter read trio's clock directly: over 1,390 and 4,630. Before whole chunks and usual SSE
events were read by one split per network read (not a Python step per chunk and per event) and
a quiet call built no first-token event: over 1,320 and 4,560. Since then a
head's fields are split and looked up by ``map`` over its lines, a quiet call moves its scope's
deadline once for a reply read in one piece, and no ``typing.cast`` is called per call: about
1,150 and 3,310 (runs on a loaded box spread by up to some 50 calls: the bounds leave that room).
Bounds lowered to about 1,045 and 3,210 (2026-12-02): that code passes them too, as the changes
since then (a text chunk read in the decoder's loop, fewer objects per call) cut instructions
and objects rather than calls."""

_SCOPE_ENTER = trio.CancelScope.__enter__.__code__


PYTHON_CALLS_ALONE = 1_290
""":data:`PYTHON_CALLS` at 20 chunks for a map that runs one call at a time: each call pays
the wake-ups that calls in flight together share. A bound a little above what the code makes
(about 1,250). Before the TokenLedger and the RateLimiter took what needs no haste from
trays and the Supervisor's and the provider's mailbox loops no longer started each call's and
attempt's task: over 1,480 (about 1,310 before the RateLimiter's tray)."""


async def _python_calls(url: str, chunks: int, in_flight: int) -> Any:
    """cProfile's stats over CALLS mapped calls of ``chunks`` content chunks, ``in_flight``
    at a time, in a warm runtime."""
    config = RuntimeConfig(
        providers={
            "sized": ProviderConfig(
                base_url=f"{url}/c{chunks}/v1", api_key=Secret("sk-test"), max_connections=8
            )
        }
    )

    async def calls(n: int) -> None:
        requests = [ChatRequest(model="sized:m", messages="hi") for _ in range(n)]
        async with rt.map(requests, max_in_flight=in_flight) as outcomes:
            async for outcome in outcomes:
                assert outcome.result is not None, outcome.error
                assert outcome.result.usage.output_tokens == chunks

    async with sluice.open_runtime(config) as rt:
        await calls(16)  # connections open, caches and layouts warm
        profiler = cProfile.Profile()
        profiler.enable()
        try:
            await calls(CALLS)
        finally:
            profiler.disable()
    return pstats.Stats(profiler)  # total_calls is not in the stubs


@pytest.mark.parametrize("chunks", sorted(PYTHON_CALLS))
async def test_a_mapped_call_makes_a_bounded_number_of_python_calls(canned, chunks) -> None:
    _, url = canned
    stats = await _python_calls(url, chunks, 8)
    per_call = stats.total_calls / CALLS
    assert per_call < PYTHON_CALLS[chunks], per_call
    # One cancel scope a call, the attempt's (the provider moves its deadline as the stream
    # goes): the Supervisor's wait for admission has none of its own (it had: two in all).
    where = (_SCOPE_ENTER.co_filename, _SCOPE_ENTER.co_firstlineno, _SCOPE_ENTER.co_name)
    entered_by = {
        caller[0].rpartition("/")[2]: n for caller, (n, *_) in stats.stats[where][4].items()
    }
    assert entered_by.get("_provider.py") == CALLS, entered_by
    assert "_supervisor.py" not in entered_by, entered_by


async def test_a_call_made_alone_makes_a_bounded_number_of_python_calls(canned) -> None:
    _, url = canned
    stats = await _python_calls(url, 20, 1)
    per_call = stats.total_calls / CALLS
    assert per_call < PYTHON_CALLS_ALONE, per_call


async def test_a_mapped_call_spawns_only_the_actors_tasks(canned) -> None:
    """A call of ``Runtime.map`` costs two tasks: the Supervisor's for the call and the
    provider's for its attempt. Its end goes straight to the map (no task of the map's own per
    call, which it had: three in all), and no event channel is made for it."""
    _, url = canned
    async with sluice.open_runtime(_config(url)) as rt:
        await rt.chat("canned:m", "hi")  # opens the connection, which every measured call reuses
        requests = [ChatRequest(model="canned:m", messages="hi") for _ in range(CALLS)]
        counter = ActorCounts()
        trio.lowlevel.add_instrument(counter)
        try:
            async with rt.map(requests, max_in_flight=1) as outcomes:
                results = [o.result async for o in outcomes]
        finally:
            trio.lowlevel.remove_instrument(counter)
    assert all(r is not None and r.text == TEXT for r in results)
    per_call = [name for name in counter.spawned if "feed_map" not in name]
    assert len(per_call) == 2 * CALLS, counter.spawned[:8]


MAX_TRACKED_PER_STREAM = 107
"""Objects the garbage collector tracks that an open stream holds (its tasks, their frames and
waits, the call's and the attempt's state): each lives as long as its call, so with many
calls in flight they set how often the young generation fills, and so how often every
generation is collected. A bound a little above the 103.5 the code holds. Before the
Supervisor's pending events and models tried were tuples, its model loop walked a range, its
breaker ticket was settled without a ``with`` block and its attempt handed over and awaited
in one method, the ProviderActor sent its request from ``run``, and the SSE decoder made its
data-line list only when needed: about 112.6."""


async def test_an_open_stream_holds_few_objects_the_collector_tracks(canned) -> None:
    """STREAMS calls held open after their first chunk: the tracked objects they add, each."""
    proc, url = canned
    async with sluice.open_runtime(_config(url, STREAMS)) as rt:
        await rt.chat("canned:m", "hi")  # the runtime warm: the measured streams are all new
        started = 0
        all_started = trio.Event()

        async def one() -> None:
            nonlocal started
            async with rt.stream(ChatRequest(model="held:m", messages="hi")) as call:
                async for event in call:
                    if isinstance(event, TextDelta) and event.text == "word0":
                        started += 1
                        if started == STREAMS:
                            all_started.set()
            assert call.result is not None and call.result.text == TEXT

        async with trio.open_nursery() as nursery:
            gc.collect()
            before = len(gc.get_objects())
            for _ in range(STREAMS):
                nursery.start_soon(one)
            with trio.fail_after(30):
                await all_started.wait()
            gc.collect()
            per_stream = (len(gc.get_objects()) - before) / STREAMS
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
    assert per_stream < MAX_TRACKED_PER_STREAM, per_stream


async def test_an_open_stream_holds_a_bounded_amount_of_memory(canned) -> None:
    """STREAMS calls held open after their first chunk, measured under tracemalloc; then the
    server lets them finish, and each completes."""
    proc, url = canned
    async with sluice.open_runtime(_config(url, STREAMS)) as rt:
        await rt.chat("canned:m", "hi")  # the runtime warm: the measured streams are all new
        started = 0
        all_started = trio.Event()
        finished = 0

        async def one() -> None:
            nonlocal started, finished
            async with rt.stream(ChatRequest(model="held:m", messages="hi")) as call:
                first = True
                async for event in call:
                    if first and isinstance(event, TextDelta):
                        first = False
                        started += 1
                        if started == STREAMS:
                            all_started.set()
            assert call.result is not None and call.result.text == TEXT
            finished += 1

        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot()
            async with trio.open_nursery() as nursery:
                for _ in range(STREAMS):
                    nursery.start_soon(one)
                with trio.fail_after(30):
                    await all_started.wait()
                gc.collect()
                held = tracemalloc.take_snapshot()
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
        finally:
            tracemalloc.stop()
    assert finished == STREAMS
    per_stream = sum(stat.size_diff for stat in held.compare_to(before, "filename")) / STREAMS
    assert per_stream < MAX_BYTES_PER_STREAM, per_stream
