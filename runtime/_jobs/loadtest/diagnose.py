"""Why a load test's requests went out late: time spent per cause, for the benchmarks.

A request's send lag is ``sent - scheduled``. It is made of two parts the scheduler can stamp
(:class:`Diagnosis.arrival`): how late the waker returned (the timer's own lateness plus the
tasks that ran before the scheduler in its batch of trio's run loop) and the hand-over from
the wake to the stamp of ``sent``. Behind both are the causes collected here:

- the garbage collector's pauses (``gc.callbacks``: each collection's generation and length),
- the run loop's batches (a :class:`trio.abc.Instrument`: how long the loop was busy between
  two looks at its I/O, since a due request waits for the batch in progress to end; on the
  wall clock and in CPU time, whose difference is the core taken by other processes), the
  tasks whose single steps were long (a request due during one is handed over after it), and
  per request the waker's lateness split into the batch running when it fell due, the
  timer's own wake-up, and the tasks its batch ran before it,
- other Python threads (each one can hold the GIL for a switch interval).

Off unless ``SLUICE_LOADTEST_DIAGNOSE`` names a folder: the instrument costs a little on
every loop iteration. Each process of a run (the command, every ``--workers`` worker)
then writes ``<pid>.json`` there at its end with the figures of its schedule (after the
warm-up) in milliseconds; ``benchmarks/loadtest_rate.py`` reads them.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
import time
from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import trio

from .stats import percentile

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["ENV", "Diagnosis", "open_diagnosis", "summary"]

ENV = "SLUICE_LOADTEST_DIAGNOSE"

LONG_STEP = 0.0005
"""Seconds past which one task's step counts as long (a due request waits for it to end)."""


class _Loop(trio.abc.Instrument):
    """Times each pass of trio's run loop that ran tasks: from the end of its I/O wait to
    the start of the next one, on the wall clock and in the thread's CPU time (the
    difference is time the operating system gave the core to another process)."""

    def __init__(self, busy: array[float], cpu: array[float]) -> None:
        self.busy = busy
        self.cpu = cpu
        self.step_began = self.step_began_cpu = 0.0
        self.long_steps: dict[str, list[tuple[float, float]]] = {}
        """Per task name, the wall and CPU time of each of its steps longer than
        :data:`LONG_STEP` on the wall clock."""
        self.went = 0.0
        """When the loop last went into its I/O wait (``perf_counter``)."""
        self.came = 0.0
        """When it last came out of it: the pass running now began then."""
        self.came_cpu = 0.0
        self.on = False

    def after_io_wait(self, timeout: float) -> None:
        self.came = time.perf_counter()
        self.came_cpu = time.thread_time()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.step_began = time.perf_counter()
        self.step_began_cpu = time.thread_time()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        took = time.perf_counter() - self.step_began
        if took > LONG_STEP and self.on and self.step_began:
            cpu = time.thread_time() - self.step_began_cpu
            self.long_steps.setdefault(task.name, []).append((took, cpu))
        self.step_began = 0.0  # (the step that installed the instrument had no start)

    def before_io_wait(self, timeout: float) -> None:
        self.went = went = time.perf_counter()
        if self.on and self.came:
            self.busy.append(went - self.came)
            self.cpu.append(time.thread_time() - self.came_cpu)


class Diagnosis:
    """The figures of one process's run (see the module docstring)."""

    def __init__(self) -> None:
        self.gc_pauses = array("d")
        self.gc_generations = array("b")
        self.batches = array("d")
        self.batches_cpu = array("d")
        self.wake_late = array("d")
        self.loop_busy_at_due = array("d")
        self.timer_wake = array("d")
        self.batch_before = array("d")
        self.handover = array("d")
        self.between_steps = 0
        """Arrivals :mod:`.handover`'s hook submitted (the rest: their senders)."""
        self._gc_start = 0.0
        self._loop = _Loop(self.batches, self.batches_cpu)
        self._offset = 0.0
        self.on = False

    def _gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        elif self.on:
            self.gc_pauses.append(time.perf_counter() - self._gc_start)
            self.gc_generations.append(info["generation"])

    def begin(self) -> None:
        """The schedule starts: count from now (the warm-up's figures are left out)."""
        self.on = self._loop.on = True
        self._offset = time.perf_counter() - trio.current_time()

    def arrival(self, scheduled: float, woke: float, between_steps: bool = False) -> None:
        """A request due at ``scheduled`` (trio time) woke its sender at ``woke``. Its
        lateness is split three ways: the loop was running a pass when it fell due (it
        looks at its timers only between passes), the timer's wake-up (the kernel and the
        process getting a core back), and the tasks of the pass that ran before it.
        ``between_steps``: :mod:`.handover`'s hook submitted it at ``woke`` (its wake and its
        hand-over are one instant)."""
        if not self.on:
            return
        if between_steps:
            self.between_steps += 1
            self.handover.append(0.0)
        loop, due = self._loop, scheduled + self._offset
        self.wake_late.append(woke - scheduled)
        busy = max(loop.went - due, 0.0)
        self.loop_busy_at_due.append(busy)
        self.timer_wake.append(max(loop.came - max(due, loop.went), 0.0))
        self.batch_before.append(max(woke + self._offset - loop.came, 0.0))

    def sent(self, woke: float, sent: float) -> None:
        """A request whose scheduler woke at ``woke`` was stamped sent at ``sent``."""
        if self.on:
            self.handover.append(sent - woke)

    def install(self) -> None:
        gc.callbacks.append(self._gc)
        trio.lowlevel.add_instrument(self._loop)

    def remove(self) -> None:
        self.on = False
        if self._gc in gc.callbacks:
            gc.callbacks.remove(self._gc)
        trio.lowlevel.remove_instrument(self._loop)

    def figures(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "gc_pauses": summary(self.gc_pauses),
            "gc_full_collections": sum(1 for g in self.gc_generations if g == 2),
            "loop_batches": summary(self.batches),
            "loop_batches_cpu": summary(self.batches_cpu),
            "loop_preempted": summary(
                array("d", (w - c for w, c in zip(self.batches, self.batches_cpu, strict=True)))
            ),
            "wake_late": summary(self.wake_late),
            "loop_busy_at_due": summary(self.loop_busy_at_due),
            "timer_wake": summary(self.timer_wake),
            "batch_before": summary(self.batch_before),
            "handover": summary(self.handover),
            "handed_between_steps": self.between_steps,
            "long_steps": {
                name: {
                    "count": len(took),
                    "by_cpu": sum(1 for _, cpu in took if cpu > LONG_STEP),
                    "max_ms": round(max(wall for wall, _ in took) * 1000, 3),
                    "max_cpu_ms": round(max(cpu for _, cpu in took) * 1000, 3),
                }
                for name, took in sorted(
                    self._loop.long_steps.items(), key=lambda item: -len(item[1])
                )[:8]
            },
            "threads": [t.name for t in threading.enumerate()],
            "switch_interval_ms": sys.getswitchinterval() * 1000,
            "gc_threshold": gc.get_threshold(),
            "gc_frozen": gc.get_freeze_count(),
        }


def summary(seconds: array[float]) -> dict[str, Any]:
    """Count, total, p50, p99 and max of ``seconds``, in milliseconds."""
    ordered = sorted(seconds)
    if not ordered:
        return {"count": 0}
    ms = 1000.0
    return {
        "count": len(ordered),
        "total_ms": round(sum(ordered) * ms, 3),
        "p50_ms": round(percentile(ordered, 50) * ms, 4),
        "p99_ms": round(percentile(ordered, 99) * ms, 4),
        "max_ms": round(ordered[-1] * ms, 4),
    }


@contextlib.contextmanager
def open_diagnosis() -> Iterator[Diagnosis | None]:
    """A :class:`Diagnosis` installed for the block when ``SLUICE_LOADTEST_DIAGNOSE`` is set
    (its figures written to that folder on exit), else None."""
    folder = os.environ.get(ENV)
    if not folder:
        yield None
        return
    diagnosis = Diagnosis()
    diagnosis.install()
    try:
        yield diagnosis
    finally:
        diagnosis.remove()
        (Path(folder) / f"{os.getpid()}.json").write_bytes(orjson.dumps(diagnosis.figures()))
