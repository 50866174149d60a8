"""The state of one batch run: its writer (each line appended whole and flushed, held back for
input order when the run is ordered), its counts, and the calls in flight that a drain
withdraws. Shared by the reader task and every line's call task, all in one trio thread."""

from __future__ import annotations

from typing import BinaryIO

import attrs
import trio

from .batch_lines import Answered, Shard
from .batch_report import BatchSummary, Interrupted, LatencyHistogram

__all__ = ["BatchRun", "Flight"]

_PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0))


def _append(out: BinaryIO, data: bytes) -> None:
    out.write(data)
    out.flush()


@attrs.define(eq=False)
class Flight:
    """One line's call, from its start until its line is written."""

    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    """Cancelled to withdraw the call (or, on :meth:`BatchInterrupt.cancel`, with the run's)."""
    admitted: bool = False
    """The RateLimiter admitted the call's current attempt: its stream reported ``Admitted``
    (or the attempt's first chunk), and no retry since."""


@attrs.define
class BatchRun:
    """State shared by the reader task and the outcome loop (one trio thread, one lock)."""

    out: BinaryIO
    started: float
    todo: int
    answered: Answered | None = None
    shard: Shard | None = None
    window: trio.Semaphore | None = None
    """Ordered runs only: one token per line read but not yet written (see :meth:`emit`)."""
    lock: trio.Lock = attrs.Factory(trio.Lock)
    flush_lock: trio.Lock = attrs.Factory(trio.Lock)
    counts: dict[str, int] = attrs.Factory(dict)
    errors: dict[str, int] = attrs.Factory(dict)
    latency: LatencyHistogram = attrs.Factory(LatencyHistogram)
    flights: set[Flight] = attrs.Factory(set)
    """The calls started and not yet written."""
    withdrawing: bool = False
    """Draining: a call not admitted is withdrawn (see :meth:`withdraw`)."""
    held: dict[int, tuple[bytes, dict[str, int], str | None] | None] = attrs.Factory(dict)
    """Ordered runs only: finished lines waiting for an earlier one, by sequence number
    (None for a line withdrawn: nothing to write, but later lines may go)."""
    next_read: int = 0
    next_write: int = 0
    io_error: OSError | None = None
    """The first read or write error; it ends the run (:meth:`fail_io`)."""
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    """The run's tasks: cancelled when an I/O error ends it."""
    tag: str | None = None
    """Recorded on every call without a tag of its own (the job id), for the ledger."""
    job: str = ""
    cost_baseline: int = 0
    """What the ledger held for the job when the run started, in micro-dollars."""
    interrupted: Interrupted | None = None
    stream: bool = True
    """Calls stream (slot freed at the first token, mid-stream breaks retried) unless False."""
    max_wait: float | None = None
    """How long each call may wait out an open breaker or a spent retry budget."""
    final: BatchSummary | None = None
    """The summary once the run has ended."""
    kept_failed: int = 0
    """Error lines of earlier runs the output keeps (resume)."""
    input_lines: int = 0
    """Non-blank lines in the input."""

    def summary(self, job_cost: int | None = None) -> BatchSummary:
        latency: dict[str, float] = {}
        if self.latency.count:
            for name, p in _PERCENTILES:
                latency[name] = self.latency.percentile(p) or 0.0
            latency["max"] = self.latency.high
        job_cost = self.cost_baseline if job_cost is None else job_cost
        return BatchSummary(
            elapsed=trio.current_time() - self.started,
            todo=self.todo,
            errors=dict(sorted(self.errors.items(), key=lambda item: -item[1])),
            latency=latency,
            cost_micros=job_cost - self.cost_baseline,
            job_cost_micros=job_cost,
            interrupted=self.interrupted,
            job=self.job,
            kept_failed=self.kept_failed,
            input_lines=self.input_lines,
            lane_note=None,
            **self.counts,
        )

    def count(self, **counts: int) -> None:
        for key, n in counts.items():
            self.counts[key] = self.counts.get(key, 0) + n

    async def write(self, data: bytes, counts: dict[str, int], error: str | None) -> None:
        """Append one whole line and flush it, then count it."""
        async with self.lock:
            # A cancelled caller still waits for the thread, so a line is never cut in half.
            await trio.to_thread.run_sync(_append, self.out, data)
        self.count(**counts)
        if error is not None:
            self.errors[error] = self.errors.get(error, 0) + 1

    async def emit(self, seq: int, data: bytes, error: str | None = None, **counts: int) -> None:
        """Write line number ``seq`` of this run: at once, or in order for ordered runs.

        Ordered: the line is held until every earlier one is written. Holding never blocks
        the caller beyond the write itself, so rt.map's slots are never kept busy by the
        buffer; the reader's ``window`` (max_in_flight tokens, one per line read but not
        written) is what bounds it.
        """
        if self.window is None:
            await self.write(data, counts, error)
            return
        self.held[seq] = (data, counts, error)
        await self._flush_held()

    async def skip(self, seq: int) -> None:
        """Line number ``seq`` of this run will not be written (withdrawn or cancelled)."""
        if self.window is not None:
            self.held[seq] = None
            await self._flush_held()

    async def _flush_held(self) -> None:
        assert self.window is not None
        async with self.flush_lock:
            while self.next_write in self.held:
                line = self.held.pop(self.next_write)
                if line is not None:
                    await self.write(*line)
                self.next_write += 1
                self.window.release()

    def fail_io(self, exc: OSError) -> None:
        """End the run with ``exc`` (the first one stands):
        :func:`~sluice._jobs.batch.run_batch` raises it as itself rather than inside a group."""
        if self.io_error is None:
            self.io_error = exc
        self.scope.cancel()

    def withdraw(self) -> None:
        """From now on, withdraw every call that is not admitted: those waiting now at once,
        the others when they come back to wait (to retry)."""
        self.withdrawing = True
        for flight in self.flights:
            if not flight.admitted:
                flight.scope.cancel()

    def wanted(self, lineno: int, custom_id: str | None) -> bool:
        """False for a line outside this shard or already answered (counted as skipped)."""
        if self.shard is not None and not self.shard.holds(custom_id):
            return False
        answered = self.answered
        if answered is not None and (
            custom_id in answered.custom_ids
            if custom_id is not None
            else lineno in answered.linenos
        ):
            self.count(skipped=1)
            return False
        return True
