"""Run an OpenAI Batch JSONL file through a runtime: one output line per input line.

::

    input file ──chunks──▶ reader task ──valid requests──▶ rt.map ──outcomes──▶ output file
                                └──────────── bad lines ─────────────────────▶ output file

The input is read as a stream (never loaded whole) and the calls run concurrently through
``Runtime.map``, so memory stays bounded by ``max_in_flight``. Each output line is written
whole and flushed as soon as it is known, in completion order (key results by ``custom_id``),
or in input order with ``ordered``. ``resume`` appends to an interrupted run's output and
``shard`` keeps the lines whose custom_id hashes into one shard.
Line parsing and rendering live in :mod:`sluice.jobs.batch_lines` (pure); this module only
moves bytes and tasks.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO

import attrs
import trio

from ..errors import ConfigError
from ..messages import split_model
from .batch_lines import (
    Answered,
    BadLine,
    DuplicateFinder,
    InputLine,
    LineSplitter,
    Shard,
    parse_input_line,
    render_bad_line,
    render_error_line,
    render_result_line,
    scan_output,
)

if TYPE_CHECKING:
    import os

    from .._runtime import MapOutcomes, Runtime
    from ..messages import ChatRequest

__all__ = ["DEFAULT_MAX_IN_FLIGHT", "BatchSummary", "run_batch"]

DEFAULT_MAX_IN_FLIGHT = 256
_READ_SIZE = 1 << 16


@attrs.frozen(kw_only=True)
class BatchSummary:
    """Counts for a batch run: final, or so far when handed to a progress callback."""

    lines: int = 0
    """Non-blank input lines read; each gets exactly one output line."""
    ok: int = 0
    failed: int = 0
    """Bad input lines plus calls that failed."""
    calls: int = 0
    """Finished calls, ok or failed (bad input lines never become calls)."""
    input_tokens: int = 0
    """Summed over successful calls."""
    output_tokens: int = 0
    """Summed over successful calls."""
    skipped: int = 0
    """Lines already answered in the output file (``resume``); not run again."""
    elapsed: float = 0.0
    """Seconds on trio's clock since the run started."""

    @property
    def written(self) -> int:
        """Output lines written so far."""
        return self.ok + self.failed

    @property
    def calls_per_second(self) -> float:
        return self.calls / self.elapsed if self.elapsed > 0 else 0.0


def _line_id() -> str:
    return f"batch_req_{secrets.token_hex(12)}"


def _append(out: BinaryIO, data: bytes) -> None:
    out.write(data)
    out.flush()


@attrs.define
class _Run:
    """State shared by the reader task and the outcome loop (one trio thread, one lock)."""

    out: BinaryIO
    started: float
    progress: Callable[[BatchSummary], None] | None
    answered: Answered | None = None
    shard: Shard | None = None
    window: trio.Semaphore | None = None
    """Ordered runs only: one token per line read but not yet written (see :meth:`emit`)."""
    lock: trio.Lock = attrs.Factory(trio.Lock)
    flush_lock: trio.Lock = attrs.Factory(trio.Lock)
    counts: dict[str, int] = attrs.Factory(dict)
    pending: dict[int, tuple[int, InputLine]] = attrs.Factory(dict)
    """Lines handed to rt.map, keyed by their position in its input, until they finish; the
    value holds the line's sequence number (its place among the lines this run writes)."""
    held: dict[int, tuple[bytes, dict[str, int]]] = attrs.Factory(dict)
    """Ordered runs only: finished lines waiting for an earlier one, by sequence number."""
    next_read: int = 0
    next_write: int = 0
    io_error: OSError | None = None
    """The first read or write error; it ends the run."""
    tag: str | None = None
    """Recorded on every call without a tag of its own (the job id), for the ledger."""

    def summary(self) -> BatchSummary:
        return BatchSummary(elapsed=trio.current_time() - self.started, **self.counts)

    def count(self, **counts: int) -> None:
        for key, n in counts.items():
            self.counts[key] = self.counts.get(key, 0) + n

    async def write(self, data: bytes, **counts: int) -> None:
        """Append one whole line and flush it, then count it and report progress."""
        async with self.lock:
            # A cancelled caller still waits for the thread, so a line is never cut in half.
            await trio.to_thread.run_sync(_append, self.out, data)
        self.count(**counts)
        if self.progress is not None:
            self.progress(self.summary())

    async def emit(self, seq: int, data: bytes, **counts: int) -> None:
        """Write line number ``seq`` of this run: at once, or in order for ordered runs.

        Ordered: the line is held until every earlier one is written. Holding never blocks
        the caller beyond the write itself, so rt.map's slots are never kept busy by the
        buffer; the reader's ``window`` (max_in_flight tokens, one per line read but not
        written) is what bounds it.
        """
        if self.window is None:
            await self.write(data, **counts)
            return
        self.held[seq] = (data, counts)
        async with self.flush_lock:
            while self.next_write in self.held:
                data, counts = self.held.pop(self.next_write)
                await self.write(data, **counts)
                self.next_write += 1
                self.window.release()

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


async def _read_requests(
    run: _Run,
    infile: BinaryIO,
    model: str | None,
    requests: trio.MemorySendChannel[ChatRequest],
    cancel_scope: trio.CancelScope,
) -> None:
    """Send each valid line's request to ``requests`` and write each bad line at once.

    An I/O error stops the run: it is kept in ``run.io_error`` and ``cancel_scope`` is
    cancelled, so :func:`run_batch` raises it as itself rather than inside a group.
    """
    try:
        async with requests:
            splitter = LineSplitter()
            index = 0
            while True:
                chunk = await trio.to_thread.run_sync(infile.read, _READ_SIZE)
                for lineno, raw in splitter.feed(chunk) if chunk else splitter.close():
                    item = parse_input_line(raw, lineno, model=model)
                    if item is None or not run.wanted(lineno, item.custom_id):
                        continue
                    run.count(lines=1)
                    if run.window is not None:
                        await run.window.acquire()
                    seq = run.next_read
                    run.next_read += 1
                    if isinstance(item, BadLine):
                        data = render_bad_line(item, line_id=_line_id())
                        await run.emit(seq, data, failed=1)
                        continue
                    run.pending[index] = (seq, item)
                    index += 1
                    # Batch work yields to interactive calls sharing the quota, and its usage is
                    # booked under the job.
                    request = attrs.evolve(
                        item.request, priority="batch", tag=item.request.tag or run.tag
                    )
                    await requests.send(request)
                if not chunk:
                    return
    except OSError as exc:
        run.io_error = exc
        cancel_scope.cancel()


async def _write_outcomes(run: _Run, outcomes: MapOutcomes) -> None:
    async for outcome in outcomes:
        seq, line = run.pending.pop(outcome.index)
        result, error = outcome.result, outcome.error
        if result is not None:
            data = render_result_line(
                line.custom_id, result, line_id=_line_id(), created=int(time.time())
            )
            usage = result.usage
            await run.emit(
                seq,
                data,
                ok=1,
                calls=1,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
            )
        else:
            assert error is not None  # MapOutcome holds exactly one of result and error
            data = render_error_line(line.custom_id, line.lineno, error, line_id=_line_id())
            await run.emit(seq, data, failed=1, calls=1)


def _open_input(path: str | os.PathLike[str]) -> BinaryIO:
    return open(path, "rb")


def _open_output(path: str | os.PathLike[str]) -> BinaryIO:
    return open(path, "wb")


def _open_for_resume(path: str | os.PathLike[str]) -> tuple[BinaryIO, Answered]:
    """Open the output to append to, its torn last line (if any) cut off, and what it holds."""
    try:
        out = open(path, "r+b")  # noqa: SIM115 (closed by run_batch)
    except FileNotFoundError:
        return open(path, "wb"), Answered(frozenset(), frozenset(), 0)
    try:
        answered = scan_output(out)
        out.seek(answered.keep)
        out.truncate()
    except BaseException:
        out.close()
        raise
    return out, answered


def _find_duplicate(path: str | os.PathLike[str]) -> str | None:
    """Read the whole input once; a message for the first duplicated custom_id, else None."""
    finder = DuplicateFinder()
    splitter = LineSplitter()
    with open(path, "rb") as infile:
        while True:
            chunk = infile.read(_READ_SIZE)
            for lineno, raw in splitter.feed(chunk) if chunk else splitter.close():
                problem = finder.add(lineno, raw)
                if problem is not None:
                    return problem
            if not chunk:
                return None


async def run_batch(
    rt: Runtime,
    input_path: str | os.PathLike[str],
    output_path: str | os.PathLike[str],
    *,
    model: str | None = None,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    progress: Callable[[BatchSummary], None] | None = None,
    resume: bool = False,
    ordered: bool = False,
    shard: Shard | None = None,
) -> BatchSummary:
    """Run every request in an OpenAI Batch JSONL file and write one output line per input line.

    Guarantees: every non-blank input line gets exactly one output line, written whole and
    flushed when its call finishes (completion order unless ``ordered``). A line that is not
    JSON, lacks ``custom_id`` or has an invalid body gets an error line naming its line number;
    a call that fails gets an error line too. Neither stops the run. An existing output file is
    replaced, unless ``resume``. Before the run starts the input is read once to check that no
    custom_id appears twice.

    Args:
        rt: an open runtime (from :func:`sluice.open_runtime`).
        input_path: the JSONL input, read as a stream.
        output_path: where output lines go.
        model: a ``provider:model`` that replaces every line's ``body.model``. Without it each
            body's model must be written ``provider:model``.
        max_in_flight: calls running at once.
        progress: called with the counts so far after each output line.
        resume: keep the existing output (a torn last line is cut off), skip every input
            line it already answers and append the rest. With no output file yet the run
            simply starts. Across any number of interrupted runs and resumes the output holds
            one line per input line.
        ordered: write lines in input order. A finished line is held until every earlier
            one is written; at most ``max_in_flight`` lines are read but not yet written, so
            the buffer holds fewer than ``max_in_flight`` lines and never blocks a call.
        shard: process only the lines whose custom_id hashes into this shard (see
            :class:`~sluice.jobs.batch_lines.Shard`); the others get no output line here.

    Returns:
        The final counts.

    Raises:
        ConfigError: ``model`` is not written ``provider:model``, a custom_id appears twice
            in the input (the message names both lines), or (``resume``) the existing output
            is not a batch output.
        OSError: the input cannot be opened or read, or the output cannot be written.
    """
    if model is not None:
        try:
            split_model(model)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    started = trio.current_time()
    duplicate = await trio.to_thread.run_sync(_find_duplicate, input_path)
    if duplicate is not None:
        raise ConfigError(duplicate)
    infile = await trio.to_thread.run_sync(_open_input, input_path)
    try:
        answered = None
        if resume:
            out, answered = await trio.to_thread.run_sync(_open_for_resume, output_path)
        else:
            out = await trio.to_thread.run_sync(_open_output, output_path)
        try:
            run = _Run(
                out=out,
                started=started,
                progress=progress,
                answered=answered,
                shard=shard,
                window=trio.Semaphore(max_in_flight) if ordered else None,
                tag=rt.ledger.job or None,
            )
            await _run(rt, run, infile, model, max_in_flight)
        finally:
            await trio.to_thread.run_sync(out.close)
    finally:
        await trio.to_thread.run_sync(infile.close)
    return run.summary()


async def _run(
    rt: Runtime, run: _Run, infile: BinaryIO, model: str | None, max_in_flight: int
) -> None:
    requests_send, requests = trio.open_memory_channel["ChatRequest"](0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_read_requests, run, infile, model, requests_send, nursery.cancel_scope)
        try:
            async with requests, rt.map(requests, max_in_flight=max_in_flight) as outcomes:
                await _write_outcomes(run, outcomes)
        except OSError as exc:
            run.io_error = run.io_error or exc
            nursery.cancel_scope.cancel()
    if run.io_error is not None:
        raise run.io_error
