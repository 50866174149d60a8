"""Why a load test's requests went out late: time spent per cause, for the benchmarks.

A request's send lag is ``sent - scheduled``. It is made of two parts the scheduler can stamp
(:class:`Diagnosis.arrival`): how late the waker returned (the timer's own lateness plus the
tasks that ran before the scheduler in its batch of trio's run loop) and the hand-over from
the wake to the stamp of ``sent``. Behind both are the causes collected here:

- the garbage collector's pauses (``gc.callbacks``: each collection's generation and length),
- the run loop's batches (a :class:`trio.abc.Instrument`: how long the loop was busy between
  two looks at its I/O, since a due request waits for the batch in progress to end),
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


class _Loop(trio.abc.Instrument):
    """Times each pass of trio's run loop that ran tasks: from the end of its I/O wait to
    the start of the next one."""

    def __init__(self, busy: array[float]) -> None:
        self.busy = busy
        self.start = 0.0
        self.on = False

    def after_io_wait(self, timeout: float) -> None:
        self.start = time.perf_counter()

    def before_io_wait(self, timeout: float) -> None:
        if self.on and self.start:
            self.busy.append(time.perf_counter() - self.start)


class Diagnosis:
    """The figures of one process's run (see the module docstring)."""

    def __init__(self) -> None:
        self.gc_pauses = array("d")
        self.gc_generations = array("b")
        self.batches = array("d")
        self.wake_late = array("d")
        self.handover = array("d")
        self._gc_start = 0.0
        self._loop = _Loop(self.batches)
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

    def arrival(self, scheduled: float, woke: float) -> None:
        """The scheduler woke at ``woke`` for a request due at ``scheduled``."""
        if self.on:
            self.wake_late.append(woke - scheduled)

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
            "wake_late": summary(self.wake_late),
            "handover": summary(self.handover),
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
