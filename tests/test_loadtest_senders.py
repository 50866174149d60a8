"""The open loop's senders (:meth:`sluice._jobs.loadtest.run._Run.open_loop`): each arrival's
task starts :data:`~sluice._jobs.loadtest.starts.LEAD` before it is due and sends when it wakes,
under trio's autojump clock over in-memory HTTP: every arrival of the schedule goes out, at
its time, and a drain stops exactly the ones not yet due. Also the lateness diagnosis that
``SLUICE_LOADTEST_DIAGNOSE`` turns on (:mod:`sluice._jobs.loadtest.diagnose`)."""

from __future__ import annotations

import os
import time

import orjson
import pytest
import trio

import sluice
from sluice._config import RuntimeConfig
from sluice._jobs.loadtest import Lengths, LoadTest, OpenLoop, Workload, loadtest_config
from sluice._jobs.loadtest.diagnose import ENV, Diagnosis
from sluice._jobs.loadtest.run import Interrupt, run_load
from sluice._jobs.loadtest.starts import BATCH, EARLY, LEAD, sender_start
from sluice.simulator import SimulatorApp, SimulatorConfig

from .helpers import memory_transport, virtual_deadline

MODEL = "sim:sim-small"
WORK = Workload(input_tokens=Lengths("fixed", 4), output_tokens=Lengths("fixed", 3))


async def _run(nursery, test, **kwargs):
    app = SimulatorApp(SimulatorConfig(ttft=0.05, output_tokens=1000))
    transport = memory_transport(app, nursery)
    config = loadtest_config(RuntimeConfig(), "sim", respect_limits=False)
    try:
        async with sluice.open_runtime(config, transport=transport) as rt:
            return await run_load(rt, test, **kwargs)
    finally:
        await transport.aclose()


@virtual_deadline(600)
async def test_every_arrival_of_a_timed_schedule_goes_out_at_its_time(autojump_clock, nursery):
    # 100/s constant for 1 s: arrivals at 0, 0.01, ..., 0.99; the last ones are still
    # waiting in their senders when the schedule ends, and must go out all the same.
    shape = OpenLoop.at_rate(100, arrival="constant")
    test = LoadTest(model=MODEL, shape=shape, duration=1.0, workload=WORK, warmup=0)
    run = await _run(nursery, test)
    assert [r.index for r in run.records] == list(range(100))
    assert [r.scheduled for r in run.records] == pytest.approx([i / 100 for i in range(100)])
    assert all(r.ok for r in run.records)
    assert max(r.lag for r in run.records) < 1e-9


@virtual_deadline(600)
async def test_a_drain_stops_the_arrivals_not_yet_due_even_those_already_waiting(
    autojump_clock, nursery
):
    # Arrivals every 10 ms; a drain at 0.5075 s. The senders of 0.51 (and of the others
    # within LEAD) have started and wait: they must not send, and the 51 due before the
    # drain have one record each.
    assert LEAD > 0.0025  # so some senders are waiting when the drain comes
    interrupt = Interrupt()
    shape = OpenLoop.at_rate(100, arrival="constant")
    test = LoadTest(model=MODEL, shape=shape, duration=10.0, workload=WORK, warmup=0)
    start = trio.current_time()

    async def drain_later() -> None:
        await trio.sleep_until(start + 0.5075)
        interrupt.drain("SIGTERM")

    nursery.start_soon(drain_later)
    run = await _run(nursery, test, interrupt=interrupt)
    assert run.interrupted == "drained"
    assert [r.index for r in run.records] == list(range(51))
    assert all(r.ok for r in run.records)  # the ones sent finished


@virtual_deadline(600)
async def test_a_drain_after_the_last_sender_started_still_stops_it(autojump_clock, nursery):
    # Ten arrivals 10 ms apart: the last (due at 0.09) has its sender waiting from 0.085,
    # when the scheduler has nothing left to start; a drain at 0.0875 must still stop it.
    interrupt = Interrupt()
    shape = OpenLoop.at_rate(100, arrival="constant")
    test = LoadTest(model=MODEL, shape=shape, requests=10, workload=WORK, warmup=0)
    start = trio.current_time()

    async def drain_later() -> None:
        await trio.sleep_until(start + 0.09 - LEAD / 2)
        interrupt.drain("SIGTERM")

    nursery.start_soon(drain_later)
    run = await _run(nursery, test, interrupt=interrupt)
    assert run.interrupted == "drained"
    assert [r.index for r in run.records] == list(range(9))


def test_a_sender_starts_when_the_arrival_before_it_is_due_within_bounds():
    assert sender_start(1.0, 0.998) == pytest.approx(1.0 - LEAD)  # close: LEAD ahead
    assert sender_start(1.0, 0.99) == 0.99  # further: with the one before it
    assert sender_start(1.0, 0.5) == pytest.approx(1.0 - EARLY)  # far: EARLY ahead at most
    assert sender_start(0.0, float("-inf")) == -EARLY  # the first


class _SchedulerSteps(trio.abc.Instrument):
    """Steps of the scheduler (the task running the load test)."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += task is self.task


@virtual_deadline(600)
async def test_the_scheduler_wakes_once_per_batch_of_arrivals(autojump_clock, nursery):
    # 1,000 arrivals a second: one wake of the scheduler per BATCH seconds of them (its
    # task steps, a few more for starting and ending the run); before, one per arrival.
    wakes = 1 / (BATCH * 1_000)
    shape = OpenLoop.at_rate(1_000, arrival="constant")
    test = LoadTest(model=MODEL, shape=shape, requests=200, workload=WORK, warmup=0)
    app = SimulatorApp(SimulatorConfig(ttft=0.05, output_tokens=1000))
    transport = memory_transport(app, nursery)
    config = loadtest_config(RuntimeConfig(), "sim", respect_limits=False)
    counter = _SchedulerSteps(trio.lowlevel.current_task())
    async with sluice.open_runtime(config, transport=transport) as rt:
        trio.lowlevel.add_instrument(counter)
        try:
            run = await run_load(rt, test)
        finally:
            trio.lowlevel.remove_instrument(counter)
    await transport.aclose()
    assert [r.index for r in run.records] == list(range(200))
    assert max(r.lag for r in run.records) < 1e-9
    assert counter.steps / 200 < wakes + 0.1, counter.steps / 200


@virtual_deadline(600)
async def test_a_capped_sender_with_a_free_place_sends_at_its_time(autojump_clock, nursery):
    # max_in_flight 2, each request 50 ms, one every 100 ms: a place is always free, so
    # the cap costs no lag; at one every 10 ms the third waits for a place.
    free = OpenLoop.at_rate(10, arrival="constant", max_in_flight=2)
    test = LoadTest(model=MODEL, shape=free, requests=10, workload=WORK, warmup=0)
    run = await _run(nursery, test)
    assert max(r.lag for r in run.records) < 1e-9
    busy = OpenLoop.at_rate(100, arrival="constant", max_in_flight=2)
    test = LoadTest(model=MODEL, shape=busy, requests=10, workload=WORK, warmup=0)
    run = await _run(nursery, test)
    assert run.records[2].lag > 0.02


@virtual_deadline(600)
async def test_the_diagnosis_counts_every_arrival_and_is_written_per_process(
    autojump_clock, nursery, tmp_path, monkeypatch
):
    monkeypatch.setenv(ENV, str(tmp_path))
    shape = OpenLoop.at_rate(50, arrival="constant")
    test = LoadTest(model=MODEL, shape=shape, requests=20, workload=WORK, warmup=2)
    await _run(nursery, test)
    written = orjson.loads((tmp_path / f"{os.getpid()}.json").read_bytes())
    assert written["pid"] == os.getpid()
    # The schedule's 20 arrivals, not the warm-up's 2: each woke at its time exactly.
    assert written["wake_late"]["count"] == 20
    assert written["wake_late"]["max_ms"] == pytest.approx(0, abs=1e-6)
    assert written["handover"]["count"] == 20
    assert written["handed_between_steps"] == 20  # by the hook, each at its time
    assert written["loop_batches"]["count"] > 20
    assert "MainThread" in written["threads"]


@virtual_deadline(600)
async def test_without_the_variable_nothing_is_diagnosed(
    autojump_clock, nursery, tmp_path, monkeypatch
):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    shape = OpenLoop.at_rate(50, arrival="constant")
    test = LoadTest(model=MODEL, shape=shape, requests=3, workload=WORK, warmup=0)
    await _run(nursery, test)
    assert list(tmp_path.iterdir()) == []


async def test_the_diagnosis_splits_a_wakes_lateness_into_its_causes() -> None:
    # Pure arithmetic on the instrument's stamps (perf_counter) against trio's clock.
    diagnosis = Diagnosis()
    diagnosis.begin()
    offset = diagnosis._offset
    loop = diagnosis._loop
    # The loop went into its wait at 10.000 and came out at 10.004; the request fell due
    # at 10.001 (idle then: the timer took 3 ms to wake it) and its sender ran at 10.006.
    loop.went, loop.came = 10.000, 10.004
    diagnosis.arrival(10.001 - offset, 10.006 - offset)
    # Due at 9.990, while a pass of the loop ran (it ended at 10.000): 10 ms of busy loop.
    diagnosis.arrival(9.990 - offset, 10.005 - offset)
    assert list(diagnosis.wake_late) == pytest.approx([0.005, 0.015])
    assert list(diagnosis.loop_busy_at_due) == pytest.approx([0.0, 0.010])
    assert list(diagnosis.timer_wake) == pytest.approx([0.003, 0.004])
    assert list(diagnosis.batch_before) == pytest.approx([0.002, 0.001])


async def test_the_diagnosis_names_the_tasks_whose_single_steps_were_long() -> None:
    # Real clock: one task's step sleeps 2 ms (wall time, no CPU); another's steps are
    # short. The first is named, long on the wall clock and not by CPU (on a busy machine
    # any step may be long on the wall clock, so the quick one is not required absent).
    diagnosis = Diagnosis()
    diagnosis.install()
    diagnosis.begin()

    def block() -> None:
        time.sleep(0.002)  # blocks the loop on purpose: one long step, spent off the CPU

    async def slow_step() -> None:
        await trio.lowlevel.checkpoint()
        block()

    async def quick_steps() -> None:
        for _ in range(5):
            await trio.lowlevel.checkpoint()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow_step, name="slow")
            nursery.start_soon(quick_steps, name="quick")
    finally:
        diagnosis.remove()
    long_steps = diagnosis.figures()["long_steps"]
    assert long_steps["slow"]["count"] >= 1 and long_steps["slow"]["by_cpu"] == 0
    assert long_steps["slow"]["max_ms"] >= 2
