"""Quiet calls (``Runtime.chat``, ``Runtime.map``) end through a one-shot end, not an event
channel: the Supervisor puts the call's one final batch straight into it. These tests hold the
guarantees the channel gave: exactly one outcome per call, also after retries; a consumer that
leaves (a cancelled ``chat``, a ``map`` left early) cancels the request and leaves no
reservation, pending slot or open stream behind; a slow ``map`` consumer loses nothing. All on
virtual time over in-memory transports (the simulator's, or sluice's own over lockstep streams).
"""

from __future__ import annotations

import cProfile
import gc
import pstats
from collections import Counter
from typing import Any

import trio
import trio.testing

import sluice
from sluice import ChatRequest, RateLimitConfig, RetryConfig, RuntimeConfig
from sluice._config import ProviderConfig
from sluice._observe import Hooks
from sluice._reply import FinalReply
from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport
from sluice.transport import FastTransport

from .helpers import Recorder, virtual_deadline
from .hostile import Behaviour, Hostile, hostile_config

LIMITS = RateLimitConfig(max_pending=8, requests_per_minute=1000)


def _config() -> RuntimeConfig:
    return RuntimeConfig(
        providers={"sim": ProviderConfig(rate_limit=LIMITS)}, retry=RetryConfig(jitter=0.0)
    )


async def _nothing_held(rt: sluice.Runtime) -> None:
    """No call in flight, and the quota key holds no pending slot, open stream or queued
    call (its window keeps what was spent: that is usage, not a reservation)."""
    stats = await rt.statistics()
    assert stats.calls_in_flight == 0
    assert set(stats.attempts_in_flight.values()) <= {0}
    for key in stats.quotas.values():
        assert key.pending == 0 and key.open_streams == 0
        assert sum(key.queued.values()) == 0


def test_a_final_reply_takes_one_answer_then_counts_as_closed() -> None:
    reply = FinalReply[int]()
    reply.send_nowait(1)
    try:
        reply.send_nowait(2)
    except trio.ClosedResourceError:
        pass
    else:
        raise AssertionError("a second answer must be refused")
    assert reply.receive_nowait() == 1  # the answer survives the implied close
    try:
        reply.receive_nowait()
    except trio.EndOfChannel:
        pass
    else:
        raise AssertionError("after its answer the reply is closed")


@virtual_deadline(60)
async def test_a_retried_quiet_call_ends_once_with_the_winning_attempt(autojump_clock):
    sim = SimulatorConfig(ttft=0.1, tokens_per_second=10, output_tokens=6, script=("disconnect:3",))
    ended: list[sluice.CallRecord] = []
    async with sluice.open_runtime(
        _config(), transport=mock_transport(sim), hooks=Hooks(on_call_end=ended.append)
    ) as rt:
        result = await rt.chat("sim:sim-small", "hi")
        await _nothing_held(rt)
    assert result.attempts == 2 and result.usage.output_tokens == 6
    assert [r.outcome for r in ended] == ["ok"]


@virtual_deadline(60)
async def test_a_cancelled_quiet_call_cancels_its_request_and_holds_nothing(autojump_clock):
    sim = SimulatorConfig(ttft=0.5, tokens_per_second=10, output_tokens=30)
    recorder = Recorder(mock_transport(sim))
    ended: list[sluice.CallRecord] = []
    async with sluice.open_runtime(
        _config(), transport=recorder, hooks=Hooks(on_call_end=ended.append)
    ) as rt:
        with trio.move_on_after(1.0):  # mid-stream: first token at 0.5, last at 3.4
            await rt.chat("sim:sim-small", "leaver")
        await trio.sleep(0.1)  # the Supervisor's task for the call sees it left
        await _nothing_held(rt)
        after = await rt.chat("sim:sim-small", "after")
        totals = await rt.ledger_totals()
    assert after.finish_reason == "stop"
    assert recorder.closed_early == [True, False]
    assert [r.outcome for r in ended] == ["abandoned", "ok"]
    assert totals["sim:sim-small"].calls == 1  # the abandoned call is not counted


@virtual_deadline(60)
async def test_a_map_left_early_cancels_its_calls_and_holds_nothing(autojump_clock):
    app = SimulatorApp(SimulatorConfig(ttft=0.5, tokens_per_second=10, output_tokens=30))
    recorder = Recorder(mock_transport(app))
    ended: list[sluice.CallRecord] = []
    async with sluice.open_runtime(
        _config(), transport=recorder, hooks=Hooks(on_call_end=ended.append)
    ) as rt:
        requests = [ChatRequest(model="sim:sim-small", messages=f"q{i}") for i in range(4)]
        requests.insert(0, ChatRequest(model="sim:sim-small", messages="short", max_tokens=1))
        async with rt.map(requests, max_in_flight=5) as outcomes:
            first = await outcomes.__anext__()  # the short one; the other four stream on
        await trio.sleep(0.1)
        await _nothing_held(rt)
    assert first.index == 0 and first.result is not None
    assert sorted(recorder.closed_early) == [False] + [True] * 4
    assert Counter(r.outcome for r in ended) == {"ok": 1, "abandoned": 4}


@virtual_deadline(120)
async def test_a_slow_map_consumer_gets_every_outcome_exactly_once(autojump_clock):
    """The outcome buffer fills while the consumer sleeps: finished calls wait in the
    Supervisor to hand theirs over (holding their slots), and none is lost or doubled."""
    sim = SimulatorConfig(ttft=0.1, tokens_per_second=0, output_tokens=3, rate_500=0.3)
    ended: list[sluice.CallRecord] = []
    async with sluice.open_runtime(
        _config(), transport=mock_transport(sim), hooks=Hooks(on_call_end=ended.append)
    ) as rt:
        requests = (ChatRequest(model="sim:sim-small", messages=f"q{i}") for i in range(30))
        seen = []
        async with rt.map(requests, max_in_flight=3) as outcomes:
            async for outcome in outcomes:
                seen.append(outcome)
                await trio.sleep(1.0)
        await _nothing_held(rt)
    assert sorted(o.index for o in seen) == list(range(30))
    assert all(o.result is not None for o in seen)
    assert len(ended) == 30 and {r.outcome for r in ended} == {"ok"}
    assert len({r.call_id for r in ended}) == 30


@virtual_deadline(60)
async def test_a_mapped_call_leaves_no_cycle_for_the_garbage_collector(autojump_clock):
    """A mapped call and its end refer to each other until the outcome is handed over; then
    the end lets go, so the call is freed by reference counting, not left for a collection
    (which would walk every live call of a busy runtime)."""
    async with sluice.open_runtime(_config(), transport=mock_transport()) as rt:
        requests = [ChatRequest(model="sim:sim-small", messages=f"q{i}") for i in range(20)]
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            async with rt.map(requests, max_in_flight=4) as outcomes:
                assert len([o async for o in outcomes if o.result is not None]) == 20
            gc.collect()
            cyclic = {type(o).__name__ for o in gc.garbage}
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    assert not cyclic & {"Call", "CallControl", "_MapEnd", "MapOutcome"}, cyclic


@virtual_deadline(60)
async def test_mapped_calls_that_end_before_their_submitter_resumes_still_end_once(
    autojump_clock,
):
    # With the breaker open every call fails in the Supervisor's first step, with no
    # checkpoint on the way. Submitting more calls than the Supervisor's mailbox holds parks
    # the map's submitter; the Supervisor may then end a call before the submitter runs again,
    # so the call's end must know its call before the hand-over, not after.
    breaker = sluice.BreakerConfig(min_failures=1, failure_rate=0.1, open_for=600.0)
    config = RuntimeConfig(
        providers={"sim": ProviderConfig(breaker=breaker)},
        retry=RetryConfig(max_attempts=1, jitter=0.0),
    )
    sim = SimulatorConfig(fault_rates=(("500", 1.0),))
    async with sluice.open_runtime(config, transport=mock_transport(sim)) as rt:

        def request(text: str) -> ChatRequest:
            return ChatRequest(model="sim:sim-small", messages=text, failure_mode="fail_fast")

        try:
            await rt.chat(request("hi"))  # fails, and opens the breaker
        except sluice.SluiceError:
            pass
        requests = [request(f"m{i}") for i in range(1000)]
        errors: Counter[str] = Counter()
        async with rt.map(requests, max_in_flight=1000) as outcomes:
            async for outcome in outcomes:
                assert outcome.result is None and outcome.error is not None
                errors[type(outcome.error).__name__] += 1
        await _nothing_held(rt)
    assert errors == {"CircuitOpen": 1000}


@virtual_deadline(60)
async def test_a_quiet_call_broken_mid_stream_is_estimated_as_a_streamed_one(autojump_clock):
    """A quiet call's decoder makes no delta per piece of text; what the deltas would have
    counted (the output streamed before the cut) is read from the decoder instead, so the
    ledger's estimate of the broken attempt is the one a streamed call of the same reply gets,
    and the retried call's own usage is exact."""
    seen = []
    for quiet in (True, False):
        sim = SimulatorApp(SimulatorConfig(script=("disconnect:4",), output_tokens=12))
        async with sluice.open_runtime(_config(), transport=mock_transport(sim)) as rt:
            if quiet:
                result = await rt.chat("sim:m", "hello there")
            else:
                async with rt.stream(ChatRequest(model="sim:m", messages="hello there")) as call:
                    async for _event in call:
                        pass
                assert call.result is not None
                result = call.result
            (total,) = await rt.ledger.snapshot(by=())
        t = total.totals
        seen.append((result.attempts, t.estimated, t.output_tokens - result.usage.output_tokens))
    assert seen[0] == seen[1]
    assert seen[0][:2] == (2, 1) and seen[0][2] > 0


_BODY = (
    b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
)
_SETTER = trio.CancelScope.deadline.fset.__code__  # type: ignore[attr-defined]


def _whole_reply(pieces: int) -> Behaviour:
    """A server writing the reply in ``pieces`` sends, 10 s apart (framed by its length)."""

    async def behaviour(stream: trio.abc.Stream) -> None:
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n"
        cut = len(_BODY) // 2
        parts = [_BODY] if pieces == 1 else [_BODY[:cut], _BODY[cut:]]
        parts[0] = head % len(_BODY) + parts[0]
        for i, part in enumerate(parts):
            if i:
                await trio.sleep(10)
            await stream.send_all(part)
        await trio.sleep_forever()

    return behaviour


@virtual_deadline(60)
async def test_a_quiet_call_leaves_its_deadline_alone_after_the_read_that_ends_the_body(
    autojump_clock, nursery
):
    """The attempt's scope moves its deadline (to the idle deadline) only for a read that is
    followed by another wait: after the read that completed the body, the connection went
    back and nothing waits under the scope, so a reply read in one piece sets the deadline
    once (before the request), and one in two pieces twice. The idle deadline still holds
    between pieces (``test_hostile_servers``: a stream gone silent ends at the idle limit)."""
    sets = []
    for pieces in (1, 2):
        server = Hostile(nursery, _whole_reply(pieces))
        transport = FastTransport(open_stream=server.open_stream, trust_env=False)
        cfg = hostile_config(max_attempts=1, read_idle_timeout=45.0)
        async with sluice.open_runtime(cfg, transport=transport) as rt:
            profiler = cProfile.Profile()
            profiler.enable()
            try:
                result = await rt.chat(ChatRequest(model="h:m", messages="hi"))
            finally:
                profiler.disable()
        await transport.aclose()
        assert (result.text, result.finish_reason) == ("hi", "stop")
        stats: Any = pstats.Stats(profiler)  # stats is not in the stubs
        where = (_SETTER.co_filename, _SETTER.co_firstlineno, _SETTER.co_name)
        sets.append(stats.stats[where][1])
    assert sets == [1, 2]
