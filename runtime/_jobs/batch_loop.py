"""The run proper of a batch, on an open runtime and an open output: a reader task that starts
a call per valid line (and writes bad lines at once), a task per call that writes its line, a
watcher that turns a :class:`BatchInterrupt` into a drain or a cancel, and the progress
reports. :func:`run_lines` leaves the final summary in :attr:`BatchRun.final`.

Chat and ``/v1/responses`` lines are chat calls (``rt.stream``, whose events say when the call
is admitted); ``/v1/embeddings`` lines are embedding calls (``rt.embed``), which report no
admission: a drain withdraws them wherever they are, and a resume does them again."""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, BinaryIO

import attrs
import trio

from .._embeddings import EmbedRequest
from .._errors import SluiceError
from .._events import Admitted, FallingBack, FirstToken, Queued, Retrying
from .batch_files import READ_SIZE, open_input
from .batch_lines import (
    BadLine,
    InputLine,
    LineSplitter,
    error_code,
    parse_input_line,
    render_bad_line,
    render_error_line,
)
from .batch_report import BatchProgress, quota_limits
from .batch_run import BatchRun, Flight

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Collection

    from .._embeddings import EmbedResult
    from .._messages import ChatRequest, ChatResult
    from .._runtime import Runtime
    from .batch_options import BatchOptions

__all__ = ["DEFAULT_MAX_WAIT", "BatchInterrupt", "run_lines"]

DEFAULT_MAX_WAIT = 600.0  # a line's call waits out failures this long unless max_wait says


@attrs.define(eq=False)
class BatchInterrupt:
    """Stops a running batch early; the CLI calls it on Ctrl-C. Create it, pass it to
    :func:`~sluice._jobs.batch.run_batch`, call its methods from any task of the same trio run.

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


async def _read_lines(
    run: BatchRun,
    rt: Runtime,
    infile: BinaryIO,
    model: str | None,
    groups: Collection[str],
    calls: trio.Nursery,
    slots: trio.Semaphore,
) -> None:
    """Start a call in ``calls`` for each valid line (one of ``slots`` each) and write each
    bad line at once.

    An I/O error stops the run (:meth:`BatchRun.fail_io`). Being cancelled (a drain) stops the
    reading between lines: a line started is started whole, and a bad line being written is
    written.
    """
    try:
        splitter = LineSplitter()
        while True:
            chunk = await trio.to_thread.run_sync(infile.read, READ_SIZE)
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


async def _call_line(
    rt: Runtime,
    run: BatchRun,
    seq: int,
    line: InputLine,
    request: ChatRequest | EmbedRequest,
    slots: trio.Semaphore,
) -> None:
    """Run one line's call and write its line; a withdrawn call writes nothing."""
    flight = Flight()
    run.flights.add(flight)
    started = trio.current_time()
    result: ChatResult | EmbedResult | None = None
    error: SluiceError | None = None
    try:
        with flight.scope:
            if run.withdrawing:
                flight.scope.cancel()
            if isinstance(request, EmbedRequest):
                result, error = await _embed(rt, request)
            else:
                result, error = await _call(rt, request, flight, run)
        if result is None and error is None:  # withdrawn: the line stays for a resume
            run.count(lines=-1)
            await run.skip(seq)
            return
        run.latency.add(trio.current_time() - started)
        if result is not None:
            data = line.render(result, line_id=_line_id(), created=int(time.time()))
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
    rt: Runtime, request: ChatRequest, flight: Flight, run: BatchRun
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


async def _embed(
    rt: Runtime, request: EmbedRequest
) -> tuple[EmbedResult | None, SluiceError | None]:
    """The embedding call's result or error (it reports no admission: see the module)."""
    try:
        return await rt.embed(request), None
    except SluiceError as exc:
        return None, exc


async def _job_cost(rt: Runtime) -> int:
    """Micro-dollars the ledger holds for the runtime's job (earlier runs' rows included)."""
    found = await rt.ledger.snapshot(by=(), job=rt.ledger.job)  # summed by the store
    return found[0].totals.cost_micros if found else 0


async def _snapshot(rt: Runtime, run: BatchRun, draining: bool) -> BatchProgress:
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
    run: BatchRun,
    progress: Callable[[BatchProgress], None],
    interval: float,
    interrupt: BatchInterrupt,
) -> None:
    while True:
        await trio.sleep(interval)
        progress(await _snapshot(rt, run, interrupt.draining))


async def run_lines(
    rt: Runtime,
    run: BatchRun,
    input: str | os.PathLike[str],
    options: BatchOptions,
    groups: Collection[str],
    interrupt: BatchInterrupt,
) -> None:
    """The run proper, on an open runtime; leaves the final summary in ``run.final``."""
    progress = options.progress
    run.job = rt.ledger.job
    run.tag = rt.ledger.job or None
    run.cost_baseline = await _job_cost(rt)
    infile = await trio.to_thread.run_sync(open_input, input)
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
                        _report_progress, rt, run, progress, options.progress_interval, interrupt
                    )
                nursery.start_soon(watch)
                with calls_scope:
                    async with trio.open_nursery() as calls:
                        with reader:
                            slots = trio.Semaphore(options.max_in_flight)
                            await _read_lines(run, rt, infile, options.model, groups, calls, slots)
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
