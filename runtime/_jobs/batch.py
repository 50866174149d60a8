"""Run an OpenAI Batch JSONL file through a runtime: one output line per input line.

::

    input file ──chunks──▶ reader task ──valid requests──▶ rt.map ──outcomes──▶ output file
                                └──────────── bad lines ─────────────────────▶ output file

Before the run, one pass over the input checks that no custom_id appears twice and counts the
lines to do (:mod:`sluice._jobs.batch_scan`). The input is then read as a stream (never loaded
whole) and the calls run concurrently through ``Runtime.map``, so memory stays bounded by
``max_in_flight``. Each output line is written whole and flushed as soon as it is known, in
completion order (key results by ``custom_id``), or in input order with ``ordered``.
``resume`` appends to an interrupted run's output, ``shard`` keeps the lines whose custom_id
hashes into one shard, and a :class:`BatchInterrupt` stops a run early without ever cutting a
line. Limits and the budget go onto the runtime's own RateLimiter and ledger
(:mod:`sluice._jobs.batch_limits`). Line parsing and rendering (:mod:`sluice._jobs.batch_lines`)
and reporting (:mod:`sluice._jobs.batch_report`) are pure; this module only moves bytes and
tasks.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import stat
import tempfile
import time
from typing import TYPE_CHECKING, BinaryIO

import attrs
import orjson
import trio

from .._errors import ConfigError, SluiceError
from .._events import Admitted, FallingBack, FirstToken, Queued, Retrying
from .._messages import split_model
from .batch_guard import (
    InputRecord,
    OutputLock,
    PrefixHasher,
    input_record_path,
    lock_path,
    probe_output,
    regular_or_missing,
)
from .batch_limits import BatchLimits, apply_limits
from .batch_lines import (
    Answered,
    BadLine,
    InputLine,
    LineSplitter,
    RetryErrors,
    Shard,
    custom_id_of,
    error_code,
    parse_input_line,
    parse_shard,
    render_bad_line,
    render_error_line,
    render_result_line,
    scan_output,
)
from .batch_report import (
    BatchProgress,
    BatchSummary,
    Interrupted,
    LatencyHistogram,
    quota_limits,
    summary_json,
    summary_path,
)
from .batch_scan import InputCheck, find_duplicate

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from .._config import RuntimeConfig
    from .._messages import ChatRequest, ChatResult
    from .._runtime import Runtime
    from .provider_batch.engine import LaneOptions, Via

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "BatchInterrupt",
    "BatchProgress",
    "BatchSummary",
    "run_batch",
]

DEFAULT_MAX_IN_FLIGHT = 256
DEFAULT_MAX_WAIT = 600.0  # a line's call waits out failures this long unless max_wait says
_READ_SIZE = 1 << 16
_PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0))


@attrs.define(eq=False)
class BatchInterrupt:
    """Stops a running batch early; the CLI calls it on Ctrl-C. Create it, pass it to
    :func:`run_batch`, call its methods from any task of the same trio run.

    Either way every line written is whole, and a resume does the lines not written.
    """

    _drain: trio.Event = attrs.field(factory=trio.Event, init=False)
    _cancel: trio.Event = attrs.field(factory=trio.Event, init=False)

    def drain(self) -> None:
        """Stop spending: read no more lines, withdraw every call the RateLimiter has not
        admitted (and every call waiting to retry), let the admitted calls finish and write
        their lines. Withdrawn lines are not written: a resume does them."""
        self._drain.set()

    def cancel(self) -> None:
        """Drain, and cancel the admitted calls too (their lines are not written)."""
        self._drain.set()
        self._cancel.set()

    @property
    def draining(self) -> bool:
        return self._drain.is_set()

    async def wait_drain(self) -> None:
        """Return once :meth:`drain` (or :meth:`cancel`) was called."""
        await self._drain.wait()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()


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
    flights: set[_Flight] = attrs.Factory(set)
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
        """End the run with ``exc`` (the first one stands): :func:`run_batch` raises it as
        itself rather than inside a group."""
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


async def _read_lines(
    run: _Run,
    rt: Runtime,
    infile: BinaryIO,
    model: str | None,
    groups: Collection[str],
    calls: trio.Nursery,
    slots: trio.Semaphore,
) -> None:
    """Start a call in ``calls`` for each valid line (one of ``slots`` each) and write each
    bad line at once.

    An I/O error stops the run (:meth:`_Run.fail_io`). Being cancelled (a drain) stops the
    reading between lines: a line started is started whole, and a bad line being written is
    written.
    """
    try:
        splitter = LineSplitter()
        while True:
            chunk = await trio.to_thread.run_sync(infile.read, _READ_SIZE)
            for lineno, raw in splitter.feed(chunk) if chunk else splitter.close():
                item = parse_input_line(raw, lineno, model=model, stream=run.stream, groups=groups)
                if item is None or not run.wanted(lineno, item.custom_id):
                    continue
                if run.window is not None:
                    await run.window.acquire()
                if isinstance(item, BadLine):
                    run.count(lines=1)
                    seq = run.next_read
                    run.next_read += 1
                    data = render_bad_line(item, line_id=_line_id())
                    with trio.CancelScope(shield=True):
                        await run.emit(seq, data, item.code, failed=1)
                    continue
                await slots.acquire()
                run.count(lines=1)
                seq = run.next_read
                run.next_read += 1
                # Batch work yields to interactive calls sharing the quota, waits out
                # outages instead of failing fast, and its usage is booked under the job.
                request = attrs.evolve(
                    item.request,
                    priority="batch",
                    tag=item.request.tag or run.tag,
                    failure_mode="wait",
                    max_wait=DEFAULT_MAX_WAIT if run.max_wait is None else run.max_wait,
                )
                calls.start_soon(_call_line, rt, run, seq, item, request, slots)
            if not chunk:
                return
    except OSError as exc:
        run.fail_io(exc)


@attrs.define(eq=False)
class _Flight:
    """One line's call, from its start until its line is written."""

    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    """Cancelled to withdraw the call (or, on :meth:`BatchInterrupt.cancel`, with the run's)."""
    admitted: bool = False
    """The RateLimiter admitted the call's current attempt: its stream reported ``Admitted``
    (or the attempt's first chunk), and no retry since."""


async def _call_line(
    rt: Runtime,
    run: _Run,
    seq: int,
    line: InputLine,
    request: ChatRequest,
    slots: trio.Semaphore,
) -> None:
    """Run one line's call and write its line; a withdrawn call writes nothing."""
    flight = _Flight()
    run.flights.add(flight)
    started = trio.current_time()
    result: ChatResult | None = None
    error: SluiceError | None = None
    try:
        with flight.scope:
            if run.withdrawing:
                flight.scope.cancel()
            result, error = await _call(rt, request, flight, run)
        if result is None and error is None:  # withdrawn: the line stays for a resume
            run.count(lines=-1)
            await run.skip(seq)
            return
        run.latency.add(trio.current_time() - started)
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
            assert error is not None
            data = render_error_line(line.custom_id, line.lineno, error, line_id=_line_id())
            await run.emit(seq, data, error_code(error), failed=1, calls=1)
    except OSError as exc:
        run.fail_io(exc)
    finally:
        run.flights.discard(flight)
        slots.release()


_WAITING = (Queued, Retrying, FallingBack)
_ADMITTED = (Admitted, FirstToken)


async def _call(
    rt: Runtime, request: ChatRequest, flight: _Flight, run: _Run
) -> tuple[ChatResult | None, SluiceError | None]:
    """The call's result or error, following its admission on the way: the stream's
    ``Admitted`` (or ``FirstToken``) marks the flight admitted, ``Queued``, ``Retrying`` or
    ``FallingBack`` waiting again, and a waiting flight of a draining run is withdrawn.
    Leaving the stream abandons the call: a wait for the RateLimiter is withdrawn there."""
    try:
        async with rt.stream(request) as call:
            while (events := await call.next_events()) is not None:
                for event in events:
                    if isinstance(event, _ADMITTED):
                        flight.admitted = True
                    elif isinstance(event, _WAITING):
                        flight.admitted = False
                        if run.withdrawing:
                            flight.scope.cancel()
    except SluiceError as exc:
        return None, exc
    return call.result, call.error


def _same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """One file by path, link or inode (writing the output would empty the input)."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist yet
        return os.path.abspath(a) == os.path.abspath(b)


def _open_input(path: str | os.PathLike[str]) -> BinaryIO:
    return open(path, "rb")


def _open_output(path: str) -> BinaryIO:
    """The output opened to write from its start, once a probe write showed the disk takes
    it (:func:`probe_output`): a full disk leaves an existing file as it was and a new one
    not created."""
    existed = os.path.exists(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    out = os.fdopen(fd, "wb")
    try:
        probe_output(out, path)
        if stat.S_ISREG(os.fstat(fd).st_mode):
            out.seek(0)
            out.truncate()
    except BaseException:
        out.close()
        if not existed:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise
    return out


def _scan_for_resume(
    path: str | os.PathLike[str], retry_errors: RetryErrors
) -> tuple[BinaryIO | None, Answered]:
    """The existing output opened to append to (None when there is none) and what it holds.

    Nothing is changed yet: the torn tail is cut by :func:`_cut_torn_tail` (or the error lines
    to redo dropped by :func:`_drop_redone`) once the input has passed its check.
    """
    try:
        out = open(path, "r+b")  # noqa: SIM115 (closed by run_batch)
    except FileNotFoundError:
        return None, Answered(frozenset(), frozenset(), 0)
    try:
        return out, scan_output(out, retry_errors)
    except BaseException:
        out.close()
        raise


def _cut_torn_tail(out: BinaryIO, keep: int) -> None:
    out.seek(keep)
    out.truncate()


def _drop_redone(out: BinaryIO, path: str | os.PathLike[str], answered: Answered) -> BinaryIO:
    """The output without the error lines a resume does again (``answered.redo``), written to
    a temporary file that replaces it, synced first: the file on disk is always the old one or
    the new one whole. Killed before the rename, the old output stands and the next resume
    starts over; after it, the dropped lines are simply not answered yet, and the next resume
    does them. Returns the new file, opened to append to."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, temp = tempfile.mkstemp(prefix=".resume-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as copy:
            out.seek(0)
            left = answered.keep
            for raw in out:
                if left <= 0:
                    break
                left -= len(raw)
                if raw.startswith(b"{") and custom_id_of(raw) in answered.redo:
                    data = orjson.loads(raw)
                    if isinstance(data.get("error"), dict):
                        continue
                copy.write(raw)
            copy.flush()
            os.fsync(copy.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    out.close()
    fresh = open(path, "r+b")  # noqa: SIM115 (closed by run_batch)
    fresh.seek(0, os.SEEK_END)
    return fresh


def _check_input(
    path: str | os.PathLike[str], check: InputCheck, hasher: PrefixHasher
) -> str | None:
    """Feed the whole input to ``check`` and ``hasher``; a message for the first duplicated
    custom_id, else None. A second pass runs only when two custom_ids hashed alike."""
    with open(path, "rb") as infile:
        splitter = LineSplitter()
        while True:
            chunk = infile.read(_READ_SIZE)
            hasher.update(chunk)
            for lineno, raw in splitter.feed(chunk) if chunk else splitter.close():
                check.add(lineno, raw)
            if not chunk:
                break
        if not check.suspects or check.not_text is not None:
            return None
        infile.seek(0)
        splitter = LineSplitter()
        first: dict[str, int] = {}
        while True:
            chunk = infile.read(_READ_SIZE)
            lines = splitter.feed(chunk) if chunk else splitter.close()
            found = find_duplicate(lines, check.suspects, first)
            if found is not None or not chunk:
                return found


def _write_summary(path: str, data: bytes) -> None:
    """Replace ``path`` at once: a reader never sees half a summary."""
    partial = f"{path}.partial"
    with open(partial, "wb") as f:
        f.write(data)
    os.replace(partial, path)


async def _job_cost(rt: Runtime) -> int:
    """Micro-dollars the ledger holds for the runtime's job (earlier runs' rows included)."""
    found = await rt.ledger.snapshot(by=(), job=rt.ledger.job)  # summed by the store
    return found[0].totals.cost_micros if found else 0


async def _snapshot(rt: Runtime, run: _Run, draining: bool) -> BatchProgress:
    stats = await rt.statistics()
    limits: list[str] = []
    queued = 0
    cooldown = 0.0
    for name, key in sorted(stats.quotas.items()):
        queued += sum(key.queued.values())
        cooldown = max(cooldown, key.cooldown_left)
        limits += quota_limits(name, key)
    return BatchProgress(
        summary=run.summary(await _job_cost(rt)),
        # A line handed to rt.map may still wait for one of its max_in_flight slots, and the
        # runtime may carry other callers' calls: only calls of this run that started count.
        in_flight=min(len(run.flights), stats.calls_in_flight),
        queued=queued,
        cooldown=cooldown,
        limits=tuple(limits),
        draining=draining,
    )


async def _report_progress(
    rt: Runtime,
    run: _Run,
    progress: Callable[[BatchProgress], None],
    interval: float,
    interrupt: BatchInterrupt,
) -> None:
    while True:
        await trio.sleep(interval)
        progress(await _snapshot(rt, run, interrupt.draining))


async def run_batch(
    input: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    model: str | None = None,
    resume: bool = False,
    overwrite: bool = False,
    ordered: bool = False,
    shard: Shard | str | None = None,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    rpm: int | None = None,
    tpm: int | None = None,
    max_pending: int | None = None,
    budget: float | None = None,
    job: str | None = None,
    config: RuntimeConfig | None = None,
    runtime: Runtime | None = None,
    progress: Callable[[BatchProgress], None] | None = None,
    progress_interval: float = 1.0,
    interrupt: BatchInterrupt | None = None,
    write_summary: bool = True,
    stream: bool = True,
    preflight: Callable[[set[str]], None] | None = None,
    retry_errors: RetryErrors = "retriable",
    max_wait: float | None = None,
    via: Via = "realtime",
    deadline: float | None = None,
    lane_options: LaneOptions | None = None,
) -> BatchSummary:
    """Run every request of an OpenAI Batch JSONL file; write one output line per input line.

    Guarantees: every non-blank input line gets exactly one output line, written whole and
    flushed when its call finishes (completion order unless ``ordered``). A line that is not
    JSON, lacks ``custom_id`` or has an invalid body gets an error line naming its line number;
    a call that fails (a budget refusal included) gets an error line too. Neither stops the
    run. Unless interrupted, the run ends with every line answered; interrupted, every line
    written is whole and a resume does the rest.

    One writer, one input: the output is locked (``OUT.jsonl.lock``, an ``flock`` the kernel
    drops when the process dies) before it is read or written, so a second run on it is
    refused; and ``OUT.input.json`` records the input it answers (size and SHA-256, with
    ``model`` and ``shard``), so a resume with another input is refused. Nothing is touched
    before every check has passed: the input is read once (no custom_id twice, UTF-8 text,
    a byte order mark allowed), ``preflight`` runs, the runtime starts (quota store, metrics
    port), and a probe write shows the output's disk takes data; only then is the output
    created, cut or replaced. An output that already holds lines is refused unless
    ``resume`` or ``overwrite``; an output that is the input (same path, link or inode) is
    refused.

    Args:
        input: the JSONL input, read as a stream.
        output: where output lines go. With ``write_summary`` the JSON summary goes next to
            it: ``OUT.jsonl`` gives ``OUT.summary.json``.
        model: a ``provider:model`` or a model group of the config that replaces every
            line's ``body.model``. Without it each body's model must be written
            ``provider:model`` or name a group.
        resume: keep the existing output (a torn last line is cut off), skip every input
            line it already answers and append the rest. With no output file yet the run
            simply starts. Across any number of interrupted runs and resumes the output holds
            one line per input line. The input must be the one the output was made from
            (lines appended to it are fine), with the same ``model`` and ``shard``.
        overwrite: replace an output that already holds lines (without it, and without
            ``resume``, such an output is refused: its paid-for results stay).
        ordered: write lines in input order. A finished line is held until every earlier
            one is written; at most ``max_in_flight`` lines are read but not yet written, so
            the buffer holds fewer than ``max_in_flight`` lines and never blocks a call.
        shard: process only the lines whose custom_id hashes into this shard (a
            :class:`~sluice._jobs.batch_lines.Shard` or ``"i/n"``); the others get no output
            line here.
        max_in_flight: calls running at once (waiting for the quota included).
        rpm: requests per minute for each provider the batch calls, spread evenly over the
            minute (see :func:`~sluice._jobs.batch_limits.pacing_window`).
        tpm: input plus output tokens per minute for each provider the batch calls.
        max_pending: calls per provider waiting for their first chunk at once.
        budget: US dollars this job may spend (earlier runs of the same ``job`` count); a
            call that could pass it fails unsent with ``BudgetExceeded``, so once it is spent
            the remaining lines become error lines.
        job: the job the ledger books the calls under (default: a new id per runtime); a
            resume under the same job keeps its budget.
        config: the runtime config (default: as :func:`sluice.open_runtime` finds it); the
            limits above are laid over it.
        runtime: run on this open runtime instead of opening one. Its config is fixed, so
            ``rpm``, ``tpm``, ``max_pending``, ``budget``, ``job`` and ``config`` must then
            be left unset (put them in that runtime's config).
        progress: called every ``progress_interval`` seconds with a snapshot, and once at
            the end.
        interrupt: lets another task stop the run early (see :class:`BatchInterrupt`): a
            drain withdraws the calls the RateLimiter has not admitted (as known from each
            call's stream: ``Admitted``, or its first chunk) and lets the admitted ones
            finish.
        write_summary: write the JSON summary file.
        stream: calls stream (the default: a slot frees at the first token, and a stream
            that breaks mid-way is retried); False sends each as one plain request. Output
            lines have the same shape either way, whatever a body's own ``stream`` says.
        preflight: called with the providers the lines name once the input has been checked,
            before the output is opened or any call made; it raises ``ConfigError`` to stop
            the run (the CLI checks keys and base URLs there).
        retry_errors: with ``resume``, which error lines of the existing output are done
            again: ``retriable`` (timeouts, 429, 5xx, broken streams, refused connections, an
            open breaker, waits past ``max_wait``), ``all`` or ``none``. The output is
            rewritten without them atomically (a new file renamed over it) before the run
            appends, so a crash at any moment loses no line; ``summary.redone`` counts them.
        max_wait: seconds a line's call may wait out an open breaker, a spent retry budget,
            a cooldown or retriable failures before it fails with the error that kept it
            waiting (every batch call waits rather than failing fast, with no attempt limit;
            None: ``DEFAULT_MAX_WAIT``, 10 minutes).
        via: ``realtime`` (each line a call through the runtime), ``provider`` (lines through
            the providers' Batch APIs at their batch price, with the same input and output;
            lines of a provider without one run realtime) or ``auto`` (``provider`` until
            ``deadline`` nears, then realtime). See :mod:`sluice._jobs.provider_batch.engine`.
        deadline: with ``auto``, seconds from the start by which the lines should be done.
        lane_options: the provider lane's pacing (poll interval, enqueued-token limits).

    Returns:
        The final counts, also when interrupted (``summary.interrupted`` says how).

    Raises:
        ConfigError: ``model`` is neither ``provider:model`` nor a group, a limit (a budget
            that is not a finite amount) or ``shard`` is invalid, limits were given with
            ``runtime``, another process writes the output, the output holds lines and
            neither ``resume`` nor ``overwrite`` was given, the input is not UTF-8 text or a
            custom_id appears twice in it (the message names both lines), the runtime cannot
            start, the output's disk refuses the probe write, or (``resume``) the existing
            output is not a batch output or was made from another input, ``model`` or
            ``shard``. Each is raised before the output is created or changed.
        OSError: the input cannot be opened or read, or the output cannot be written once
            the run is under way.
    """
    lane = None
    if via != "realtime" or deadline is not None:
        from .provider_batch.engine import ProviderLane

        lane = ProviderLane.checked(via, deadline, ordered, lane_options)
    if _same_file(input, output):
        raise ConfigError(f"the output {output} is the input file {input}: give another output")
    if resume and overwrite:
        raise ConfigError("resume keeps the output and overwrite replaces it: give one")
    if max_in_flight < 1:
        raise ConfigError("max_in_flight must be at least 1")
    if budget is not None and not math.isfinite(budget):
        raise ConfigError(f"invalid batch limit: budget must be a finite dollar amount: {budget}")
    try:
        limits = BatchLimits(rpm=rpm, tpm=tpm, max_pending=max_pending, budget=budget)
    except ValueError as exc:
        raise ConfigError(f"invalid batch limit: {exc}") from None
    if runtime is not None and (limits.any_set or job is not None or config is not None):
        raise ConfigError(
            "rpm, tpm, max_pending, budget, job and config configure the runtime run_batch"
            " opens; with runtime=, set them in that runtime's config"
        )
    if runtime is not None:
        base = runtime.config
    else:
        from .._config import config_from_env

        base = config if config is not None else config_from_env()
    groups = {
        name: frozenset(d.model.partition(":")[0] for d in group.deployments)
        for name, group in base.groups.items()
    }
    if model is not None and model not in groups:
        try:
            split_model(model)
        except ValueError as exc:
            raise ConfigError(f"{exc}, or name a model group of the config") from None
    if isinstance(shard, str):
        shard = parse_shard(shard)
    interrupt = interrupt if interrupt is not None else BatchInterrupt()
    started = trio.current_time()
    name = os.fspath(output)

    async with contextlib.AsyncExitStack() as stack:
        guarded = regular_or_missing(name)
        if guarded:
            lock = await trio.to_thread.run_sync(_lock_output, name)
            stack.callback(lock.release)
        elif resume:
            raise ConfigError(f"output {name} is not a file: it cannot be resumed")
        if not resume and not overwrite:
            size = _size(name) if guarded else 0
            if size:
                raise ConfigError(
                    f"output {name} already holds results ({size} bytes); resume continues"
                    " it, overwrite replaces it"
                )
        out: BinaryIO | None = None
        answered = None
        record: InputRecord | None = None
        if resume:
            out, answered = await trio.to_thread.run_sync(_scan_for_resume, name, retry_errors)
            if out is not None:
                stack.push_async_callback(_close, out)
                if _size(name):
                    record = await trio.to_thread.run_sync(
                        InputRecord.read, input_record_path(name)
                    )
        check = InputCheck(model=model, shard=shard, answered=answered, groups=groups)
        hasher = PrefixHasher(record.size if record is not None else None)
        problem = await trio.to_thread.run_sync(_check_input, input, check, hasher)
        if check.not_text is not None:
            raise ConfigError(
                f"input file {input} is not UTF-8 text ({check.not_text}): save it as UTF-8"
            )
        if problem is not None:
            raise ConfigError(problem)
        fingerprint = InputRecord(
            input=os.fspath(input),
            size=hasher.size,
            sha256=hasher.hexdigest(),
            model=model,
            shard=None if shard is None else f"{shard.index}/{shard.count}",
        )
        if record is not None:
            mismatch = record.mismatch(fingerprint, hasher.prefix_digest, name)
            if mismatch is not None:
                raise ConfigError(mismatch)
        if preflight is not None:
            preflight(check.providers)
        if runtime is None:
            if job is not None:
                base = attrs.evolve(base, ledger=attrs.evolve(base.ledger, job=job))
            rt = await _enter_runtime(stack, apply_limits(base, limits, check.providers))
        else:
            rt = runtime
        # Every check has passed: only now is the output created, cut or replaced.
        if out is not None and answered is not None:
            await trio.to_thread.run_sync(probe_output, out, name)
            await trio.to_thread.run_sync(_cut_torn_tail, out, answered.keep)
            if answered.redo:
                fresh = await trio.to_thread.run_sync(_drop_redone, out, name, answered)
                stack.push_async_callback(_close, fresh)
                out = fresh
        else:
            out = await trio.to_thread.run_sync(_open_output, name)
            stack.push_async_callback(_close, out)
        if guarded:
            await trio.to_thread.run_sync(fingerprint.write, input_record_path(name))
        run = _Run(
            out=out,
            started=started,
            todo=check.todo,
            answered=answered,
            shard=shard,
            window=trio.Semaphore(max_in_flight) if ordered else None,
            stream=stream,
            max_wait=max_wait,
            kept_failed=answered.kept_failed if answered is not None else 0,
            input_lines=check.lines,
        )
        if answered is not None and answered.redo:
            run.count(redone=len(answered.redo))
        if lane is None:
            await _run_on(
                rt, run, input, model, groups, max_in_flight, progress, progress_interval, interrupt
            )
        else:
            await lane.run(
                rt,
                run,
                input=input,
                output=name,
                model=model,
                groups=groups,
                resume=resume,
                overwrite=overwrite,
                budget=budget,
                max_in_flight=max_in_flight,
                max_wait=DEFAULT_MAX_WAIT if max_wait is None else max_wait,
                progress=progress,
                progress_interval=progress_interval,
                interrupt=interrupt,
            )
        summary = run.final
        assert summary is not None  # _run_on returned normally
        if write_summary:
            data = orjson.dumps(
                summary_json(summary, input=os.fspath(input), output=name),
                option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE,
            )
            await trio.to_thread.run_sync(_write_summary, summary_path(name), data)
    return summary


def _lock_output(name: str) -> OutputLock:
    """The output's lock, taken. It lies beside the file itself, so two runs that name the
    output through different links conflict too."""
    lock = OutputLock(lock_path(os.path.realpath(name)), f"output {name}")
    lock.acquire()
    return lock


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


async def _close(f: BinaryIO) -> None:
    with trio.CancelScope(shield=True):
        await trio.to_thread.run_sync(f.close)


async def _enter_runtime(stack: contextlib.AsyncExitStack, config: RuntimeConfig) -> Runtime:
    """Open a runtime for the run on ``stack``. What keeps it from starting (a quota store
    that cannot be reached, a metrics port in use) is a :class:`ConfigError`, found before
    the output is touched."""
    from .._runtime import open_runtime

    try:
        return await stack.enter_async_context(open_runtime(config))
    except OSError as exc:
        raise ConfigError(_start_problem(config, exc)) from None
    except BaseExceptionGroup as group:
        found, _ = group.split((OSError, ConfigError))
        if found is None:
            raise
        first = found.exceptions[0]
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        if isinstance(first, ConfigError):
            raise first from None
        assert isinstance(first, OSError)
        raise ConfigError(_start_problem(config, first)) from None


def _start_problem(config: RuntimeConfig, exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    metrics = config.metrics
    if metrics.port is not None:
        return f"cannot serve metrics on {metrics.host}:{metrics.port}: {reason}"
    return f"cannot start the runtime: {reason}"


async def _run_on(
    rt: Runtime,
    run: _Run,
    input: str | os.PathLike[str],
    model: str | None,
    groups: Collection[str],
    max_in_flight: int,
    progress: Callable[[BatchProgress], None] | None,
    progress_interval: float,
    interrupt: BatchInterrupt,
) -> None:
    """The run proper, on an open runtime; leaves the final summary in ``run.final``."""
    run.job = rt.ledger.job
    run.tag = rt.ledger.job or None
    run.cost_baseline = await _job_cost(rt)
    infile = await trio.to_thread.run_sync(_open_input, input)
    try:
        with run.scope:
            async with trio.open_nursery() as nursery:
                reader = trio.CancelScope()
                calls_scope = trio.CancelScope()

                async def watch() -> None:
                    await interrupt._drain.wait()
                    reader.cancel()
                    run.withdraw()
                    await interrupt._cancel.wait()
                    calls_scope.cancel()

                if progress is not None:
                    nursery.start_soon(
                        _report_progress, rt, run, progress, progress_interval, interrupt
                    )
                nursery.start_soon(watch)
                with calls_scope:
                    async with trio.open_nursery() as calls:
                        with reader:
                            slots = trio.Semaphore(max_in_flight)
                            await _read_lines(run, rt, infile, model, groups, calls, slots)
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(infile.close)
    if run.io_error is not None:
        raise run.io_error
    if interrupt.draining and run.todo > run.counts.get("ok", 0) + run.counts.get("failed", 0):
        run.interrupted = "cancelled" if interrupt.cancelled else "drained"
    run.final = run.summary(await _job_cost(rt))
    if progress is not None:
        progress(await _snapshot(rt, run, interrupt.draining))
