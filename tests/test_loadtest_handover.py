"""The hand-over hook (:mod:`sluice._jobs.loadtest.handover`): a due open-loop request is
submitted between two task steps of whatever pass of trio's loop is running, not when its
sender's turn comes, and the run keeps its guarantees (one record per request sent, a drain
or a cancellation stops the senders). Virtual time (autojump, in-memory HTTP to the
simulator); a task that jumps the clock in its step stands for a step that takes CPU time."""

from __future__ import annotations

import pytest
import trio

import sluice
from sluice._config import RuntimeConfig
from sluice._jobs.loadtest import Lengths, LoadTest, OpenLoop, Workload, loadtest_config
from sluice._jobs.loadtest.follow import Follower
from sluice._jobs.loadtest.handover import ENV, Handover
from sluice._jobs.loadtest.metrics import Tracker
from sluice._jobs.loadtest.run import Interrupt, run_load
from sluice._messages import ChatRequest
from sluice.simulator import SimulatorApp, SimulatorConfig
from sluice.transport._phases import HttpPhases

from .helpers import memory_transport, virtual_deadline

MODEL = "sim:sim-small"
WORK = Workload(input_tokens=Lengths("fixed", 4), output_tokens=Lengths("fixed", 3))
TEN_MS = OpenLoop.at_rate(100, arrival="constant")  # due at 0, 0.01, 0.02, ...


def _config():
    return loadtest_config(RuntimeConfig(), "sim", respect_limits=False)


async def _run(nursery, test, **kwargs):
    app = SimulatorApp(SimulatorConfig(ttft=0.05, output_tokens=1000))
    transport = memory_transport(app, nursery)
    try:
        async with sluice.open_runtime(_config(), transport=transport) as rt:
            return await run_load(rt, test, **kwargs)
    finally:
        await transport.aclose()


def _two_long_steps(nursery, clock, at: float, then=None) -> None:
    """At trio time ``at``, two tasks run in one pass of the loop, each taking 1 ms (the
    clock jumped in its step); ``then`` is called in the second's step."""
    go = trio.Event()
    steps: list[int] = []

    async def step() -> None:
        await go.wait()
        clock.jump(0.001)
        steps.append(1)
        if len(steps) == 2 and then is not None:
            then()

    async def starter() -> None:
        await trio.sleep_until(at)
        go.set()  # both woken at once: they run in the same pass

    nursery.start_soon(step)
    nursery.start_soon(step)
    nursery.start_soon(starter)


@pytest.mark.parametrize("mode", ["hook", "task"])
@virtual_deadline(600)
async def test_a_request_falling_due_mid_pass_is_handed_over_at_the_next_step(
    autojump_clock, nursery, monkeypatch, mode
):
    # Request 1 is due at 0.010; a pass of two 1 ms steps starts at 0.0095. The hook hands
    # it over after the first step (0.0105: 0.5 ms late); its sender's own turn comes only
    # after the whole pass (0.0115), which is what the sender alone does.
    if mode == "task":
        monkeypatch.setenv(ENV, "task")
    else:
        monkeypatch.delenv(ENV, raising=False)
    start = trio.current_time()
    _two_long_steps(nursery, autojump_clock, start + 0.0095)
    test = LoadTest(model=MODEL, shape=TEN_MS, requests=3, workload=WORK, warmup=0)
    run = await _run(nursery, test)
    lags = [r.lag for r in run.records]
    late = 0.0005 if mode == "hook" else 0.0015
    assert lags == pytest.approx([0.0, late, 0.0], abs=1e-9)
    assert all(r.ok for r in run.records)


@virtual_deadline(600)
async def test_a_request_handed_over_before_a_cancellation_still_has_its_one_record(
    autojump_clock, nursery, monkeypatch
):
    # The hook hands request 1 over between the two steps at 0.0095-0.0115; the second
    # step cancels the run while request 1's sender still sleeps. The request was sent, so
    # it is recorded (cancelled), as is request 0 in flight; request 2 was never sent.
    monkeypatch.delenv(ENV, raising=False)
    interrupt = Interrupt()
    start = trio.current_time()
    _two_long_steps(nursery, autojump_clock, start + 0.0095, lambda: interrupt.cancel("SIGINT"))
    test = LoadTest(model=MODEL, shape=TEN_MS, requests=3, workload=WORK, warmup=0)
    run = await _run(nursery, test, interrupt=interrupt)
    assert run.interrupted == "cancelled"
    assert [r.index for r in run.records] == [0, 1]
    assert [r.error_type for r in run.records] == ["Cancelled", "Cancelled"]
    assert run.records[1].lag == pytest.approx(0.0005, abs=1e-9)


@virtual_deadline(600)
async def test_the_hook_submits_only_what_cannot_wait_and_the_call_runs_to_its_end(
    autojump_clock, nursery
):
    # Before the provider's actor has started, a submission would wait for it: the hook
    # leaves such a request to its sender. Once it has started, the hook submits in one
    # step, and the call it made streams to its end like any other.
    app = SimulatorApp(SimulatorConfig(ttft=0.05, output_tokens=1000))
    transport = memory_transport(app, nursery)
    request = ChatRequest(model=MODEL, messages="hi", max_tokens=3)
    async with sluice.open_runtime(_config(), transport=transport) as rt:
        assert not rt.submits_at_once(request)
        await rt.start_provider(MODEL)
        assert rt.submits_at_once(request)
        sending = trio.CancelScope()
        handover = Handover(rt, sending)
        trio.lowlevel.add_instrument(handover)
        try:
            due = trio.current_time() + 0.02
            follower = Follower(Tracker(0, 0.0, 0.0), 0.0)
            handed = handover.add(due, request, HttpPhases(), None, follower)
            await trio.sleep_until(due)
            assert handover.take(handed) is handed
            assert handed.at == due
            assert handover.between_steps == 1
            call = handed.submitted()
            try:
                result = await follower.wait()
            finally:
                rt.end_followed(call, follower)
        finally:
            trio.lowlevel.remove_instrument(handover)
        assert result.usage.output_tokens == 3
        # Its events went to the follower as they arrived, each read stamped.
        record = follower.tracker.finish(1.0, input_tokens=None, output_tokens=None, ok=True)
        assert record.client_output_tokens == 3 and record.chunks >= 1
        assert follower.usage_seen
    await transport.aclose()


@virtual_deadline(600)
async def test_a_drained_run_hands_over_nothing_more(autojump_clock, nursery):
    # The sending scope cancelled (a drain): a request falling due after it stays with its
    # sender, which finds it not handed over and drops it.
    app = SimulatorApp(SimulatorConfig(ttft=0.05, output_tokens=1000))
    transport = memory_transport(app, nursery)
    request = ChatRequest(model=MODEL, messages="hi", max_tokens=3)
    async with sluice.open_runtime(_config(), transport=transport) as rt:
        await rt.start_provider(MODEL)
        sending = trio.CancelScope()
        handover = Handover(rt, sending)
        trio.lowlevel.add_instrument(handover)
        try:
            follower = Follower(Tracker(0, 0.0, 0.0), 0.0)
            due = trio.current_time() + 0.01
            handed = handover.add(due, request, HttpPhases(), None, follower)
            sending.cancel()
            await trio.sleep(0.02)
            assert handover.take(handed) is None
            assert handover.between_steps == 0
        finally:
            trio.lowlevel.remove_instrument(handover)
    await transport.aclose()
