"""The load-test run loop: sends requests through a runtime on the planned schedule and
measures each one. The only module of the package with tasks and a clock.

Open loop: one scheduler task starts each request's own task a little before it is due (its
prompt drawn); that task waits for the due time on a precise timer and sends in the step it
wakes, never waiting for earlier requests (a client-side ``max_in_flight`` cap is the one
exception, and the wait it causes is counted as lag). Closed loop: ``concurrency`` user tasks,
each sending its next request when its last one ends. Either way every request records when
it was due and when it really went out, so a client that cannot keep up is caught, not
silently turned into a lighter load (coordinated omission).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import random
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..._errors import ConfigError, SluiceError
from ..._gc import freeze_setup
from ..._messages import ChatRequest, Deadlines, Message
from ...transport._phases import HttpPhases
from .aggregate import aggregate
from .arrivals import ClosedLoop, OpenLoop
from .diagnose import Diagnosis, open_diagnosis
from .endpoints import (
    DirectTarget,
    Outcome,
    call_completions,
    call_embed,
    completions_transport,
)
from .follow import Follower, finished, follow_call, http_fields
from .handover import open_handover
from .interrupt import Interrupt
from .metrics import RequestRecord, Tracker
from .records import RecordFile
from .saturation import load_figures
from .spec import LoadTest
from .starts import BATCH, sender_start
from .stats import percentile
from .wake import open_waker

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

    from ..._runtime import Runtime
    from ...transport import HotTransport
    from .handover import Handed, Handover
    from .wake import Waker
    from .workers import Share, Start
    from .workload import WorkItem

__all__ = ["Interrupt", "LoadTest", "Progress", "RunResult", "run_load"]


@attrs.frozen
class Progress:
    """A live snapshot for a progress display."""

    elapsed: float
    sent: int
    finished: int
    failed: int
    in_flight: int
    ttft_p50: float | None
    lag_p99: float | None


@attrs.frozen
class RunResult:
    """A finished run: every request's record (in the order they were due, read from the
    :class:`~.records.RecordFile` they were kept in) and the aggregates."""

    test: LoadTest
    records: Sequence[RequestRecord]
    aggregates: dict[str, Any]
    started_at: float
    """Wall-clock (epoch) time the run began, for the results file."""
    warmup: Sequence[RequestRecord] = ()
    """The warm-up requests' records (in no aggregate)."""
    interrupted: str | None = None
    """``"drained"`` or ``"cancelled"`` when an :class:`Interrupt` ended the run early."""


class _Run:
    """The mutable state of one run; :func:`run_load` is its only user."""

    def __init__(
        self,
        rt: Runtime,
        test: LoadTest,
        on_send: Callable[[], None] | None,
        interrupt: Interrupt | None = None,
        direct: tuple[DirectTarget, HotTransport] | None = None,
        folder: Path | None = None,
    ) -> None:
        self.rt = rt
        self.folder = folder
        self.direct = direct
        """The target and transport of a completions test."""
        self.test = test
        self.on_send = on_send
        self.t0 = 0.0
        self.records = RecordFile(folder)
        self.sent = 0
        self.in_flight = 0
        self.work_rng = random.Random(f"{test.seed}:workload")
        self.deadlines = Deadlines(total=test.timeout)
        self.headers = dict(test.headers)
        self.fatal: ConfigError | None = None
        self.broken: OSError | None = None
        """Why the records could not be kept (the disk is full): the run stops."""
        self.scope = trio.CancelScope()
        self.sending = trio.CancelScope()
        """Cancelled to stop sending while the requests in flight finish."""
        self.interrupt = interrupt
        if interrupt is not None:
            interrupt.watch(self.sending, self.scope)
        # ---- --workers (workers.py): this process's share of the schedule, and when it
        # starts (the shared t0, after the warm-up); None: the whole schedule, at once.
        self.share: Share | None = None
        self.start_at: Callable[[], Awaitable[Start]] | None = None
        self.diagnosis: Diagnosis | None = None
        """Where the causes of lateness are counted (``SLUICE_LOADTEST_DIAGNOSE``), if anywhere."""
        self.woke: dict[int, float] = {}
        """With a diagnosis: when each request's sender woke, until it is stamped sent."""
        self.handover: Handover | None = None
        """Submits the open loop's due chat requests between task steps (:mod:`.handover`)."""
        self.now = trio.lowlevel.current_clock().current_time
        """Reads trio's clock: ``trio.current_time`` without its two calls on the way."""

    def due(self, index: int, offset: float) -> bool:
        test = self.test
        if test.requests is not None and index >= test.requests:
            return False
        return test.duration is None or offset < test.duration

    async def open_loop(self, shape: OpenLoop) -> None:
        """Send the schedule: for each arrival, a sender task started ahead of it
        (:func:`~.starts.sender_start`, within :data:`~.starts.BATCH` of that), its prompt
        drawn, that waits for the due time on its own timer and sends. The task that wakes
        is the one that sends, in the same step: no further pass of trio's loop (and
        whatever else runs in it) comes between the wake and the request's hand-over, and
        starting a task is not part of it either."""
        cap = None if shape.max_in_flight is None else trio.Semaphore(shape.max_in_flight)
        rng = random.Random(f"{self.test.seed}:arrivals")
        rate = shape.rate and shape.rate / (1 if self.share is None else self.share.count)
        handing = open_handover(self.rt, self.sending, self.diagnosis)
        previous = -math.inf  # when this process's previous arrival was due
        with open_waker(rate) as waker, handing as self.handover:  # both outlive the nursery
            async with trio.open_nursery() as nursery:
                with self.sending:
                    for index, offset in enumerate(shape.schedule(rng)):
                        if not self.due(index, offset):
                            break
                        if self.share is not None and not self.share.mine(index):
                            self.skip(index)  # another worker's: draw its prompt all the same
                            continue
                        scheduled = self.t0 + offset
                        start = sender_start(scheduled, previous)
                        previous = scheduled
                        if start > trio.current_time() + BATCH:
                            await waker.nap_until(start)
                        else:  # soon or behind: start it now, yielding only to a cancellation
                            await trio.lowlevel.checkpoint_if_cancelled()
                        work: WorkItem | list[WorkItem] = (
                            self.session_items(index)
                            if self.test.workload.turns > 1
                            else self.test.workload.item(index, self.work_rng)
                        )
                        nursery.start_soon(self.send_at, waker, index, scheduled, work, cap)

    async def send_at(
        self,
        waker: Waker,
        index: int,
        scheduled: float,
        work: WorkItem | list[WorkItem],
        cap: trio.Semaphore | None,
    ) -> None:
        """Arrival ``index``'s sender: wait until it is due, then send it, unless the run was
        drained first. (A drain does not interrupt the wait, which is never longer than
        :data:`~.starts.EARLY` + :data:`~.starts.BATCH`: a drained run ends that much later at
        most, where a cancel scope per request to end it sooner cost every request.)"""
        request, handed, handover, follower = None, None, self.handover, None
        if not isinstance(work, list) and self.test.endpoint not in ("completions", "embeddings"):
            request = self.chat_request(work)  # made now, not in the step after the wake
            follower = Follower(Tracker(index, scheduled - self.t0, 0.0), self.t0, self.now)
            if handover is not None:  # submitted by the hook once due, when it can be
                handed = handover.add(scheduled, request, HttpPhases(), cap, follower)
        try:
            await waker.sleep_until(scheduled)
        except trio.Cancelled:  # with the run; one() records a request already handed over
            if handover is None or handover.take(handed) is None:
                raise
        handed = None if handover is None else handover.take(handed)
        if handed is None and self.sending.cancel_called:
            return  # drained before it was due (also after the schedule's last arrival)
        if self.diagnosis is not None and handed is None:  # (the hook tells of its own)
            self.woke[index] = woke = trio.current_time()
            self.diagnosis.arrival(scheduled, woke)
        if cap is not None and handed is None:  # (a handed request has its place)
            try:
                cap.acquire_nowait()  # no checkpoint (a pass of the loop) when a place is free
            except trio.WouldBlock:
                await cap.acquire()  # counted as lag
        if isinstance(work, list):
            await self.session(index, scheduled, work, cap)
        else:
            await self.one(
                index, scheduled, work, cap, request=request, handed=handed, follower=follower
            )

    async def closed_loop(self, shape: ClosedLoop) -> None:
        counter = itertools.count()

        async def user() -> None:
            while True:
                scheduled = trio.current_time()
                if self.sending.cancel_called:
                    return
                index = next(counter)
                if not self.due(index, scheduled - self.t0):
                    return
                if self.test.workload.turns > 1:
                    await self.session(index, scheduled, self.session_items(index), None)
                    continue
                item = self.test.workload.item(index, self.work_rng)
                await self.one(index, scheduled, item, None)

        async with trio.open_nursery() as nursery:
            for _ in range(shape.concurrency):
                nursery.start_soon(user)

    def skip(self, index: int) -> None:
        """Draw arrival ``index``'s prompt and drop it (another worker sends it): the
        workload's generator is used in arrival order, so each worker's own requests are
        the ones one process would have sent."""
        if self.test.workload.turns > 1:
            self.session_items(index)
        else:
            self.test.workload.item(index, self.work_rng)

    def session_items(self, session: int) -> list[WorkItem]:
        """The new user message of each turn of ``session``, drawn now (in session order, so
        the content does not depend on how the sessions interleave)."""
        turns = self.test.workload.turns
        return [
            self.test.workload.item(session * turns + turn, self.work_rng) for turn in range(turns)
        ]

    async def session(
        self,
        session: int,
        scheduled: float,
        turns: list[WorkItem],
        cap: trio.Semaphore | None,
    ) -> None:
        """One multi-turn conversation: each turn sends every earlier message and reply and
        its own new message, as soon as the previous turn's reply ended (its ``scheduled``
        time is then that end, so only the first turn can lag). A failed turn ends the
        session: the conversation has no reply to build on."""
        history: list[Message] = []
        try:
            for turn, item in enumerate(turns):
                if turn and self.sending.cancel_called:
                    return
                text = item.messages if isinstance(item.messages, str) else ""
                history.append(Message.user(text))
                asked = attrs.evolve(item, messages=tuple(history))
                reply = await self.one(
                    session * len(turns) + turn,
                    scheduled if turn == 0 else trio.current_time(),
                    asked,
                    None,
                    session=session,
                    turn=turn,
                )
                if reply is None:
                    return
                history.append(Message.assistant(reply))
        finally:
            if cap is not None:
                cap.release()

    async def one(
        self,
        index: int,
        scheduled: float,
        item: WorkItem,
        cap: trio.Semaphore | None,
        *,
        warmup: bool = False,
        session: int | None = None,
        turn: int | None = None,
        request: ChatRequest | None = None,
        handed: Handed | None = None,
        follower: Follower | None = None,
    ) -> str | None:
        """Send ``item`` and record it; return the reply's text, None when it failed.
        ``request``: ``item``'s :meth:`chat_request`, made beforehand (the open loop's
        sender makes it before it waits, so that its step after the wake is short); it is
        stamped sent right before the hand-over to the runtime either way. ``follower``
        (made here when not given) reads the call's events and holds its tracker."""
        if self.test.endpoint in ("completions", "embeddings"):  # responses: chat calls
            return await self.one_direct(index, scheduled, item, cap, warmup=warmup)
        t0 = self.t0
        if request is None:
            request = self.chat_request(item)
        described: dict[str, Any] = {
            "requested_output_tokens": item.max_tokens,
            "requested_input_tokens": item.input_tokens,
            "warmup": warmup,
            "session": session,
            "turn": turn,
        }
        phases = HttpPhases() if handed is None else handed.phases
        follower = follower or Follower(Tracker(index, scheduled - t0, 0.0), t0, self.now)
        tracker = self._start(follower.tracker, scheduled, None if handed is None else handed.at)
        try:
            end, result, error, usage_seen = await follow_call(
                self.rt, request, phases, follower, handed
            )
        except ConfigError as exc:  # a usage problem (unknown provider, no key): stop
            self.fatal = self.fatal or exc
            self.scope.cancel(reason="the load test cannot call its model")
            return None
        except SluiceError as exc:  # the call could not be submitted
            end, result, error = trio.current_time() - t0, None, exc
        except trio.Cancelled:  # an interrupt cancelled the run: still one record each
            self._cancelled(tracker, described | http_fields(phases))
            raise
        finally:
            self._done(cap)
        described |= http_fields(phases)
        self.keep(finished(tracker, end, result, error, usage_seen, described))
        return result.text if result is not None else None

    def chat_request(self, item: WorkItem) -> ChatRequest:
        """The chat request that sends ``item``."""
        test = self.test
        return ChatRequest(
            model=test.model,
            messages=item.messages,
            max_tokens=item.max_tokens,
            deadlines=self.deadlines,
            extra_body=test.request_body(item.max_tokens),
            extra_headers=self.headers,
        )

    def _start(self, tracker: Tracker, scheduled: float, sent: float | None = None) -> Tracker:
        """Count ``tracker``'s request (due at ``scheduled``) as sent now (or at ``sent``,
        when :mod:`.handover` submitted it)."""
        sent = self.now() if sent is None else sent
        tracker.sent, tracker.lag = sent - self.t0, sent - scheduled
        if self.diagnosis is not None and tracker.index in self.woke:
            self.diagnosis.sent(self.woke.pop(tracker.index), sent)
        if self.on_send is not None:
            self.on_send()
        self.sent += 1
        self.in_flight += 1
        return tracker

    def _cancelled(self, tracker: Tracker, described: dict[str, Any]) -> None:
        """Record a request an interrupt cancelled: every request sent has its record."""
        self.keep(
            tracker.finish(
                trio.current_time() - self.t0,
                input_tokens=None,
                output_tokens=None,
                ok=False,
                error_type="Cancelled",
                error="cancelled by an interrupt",
                **described,
            )
        )

    def _done(self, cap: trio.Semaphore | None) -> None:
        """A request is no longer in flight (on every exit path)."""
        self.in_flight -= 1
        if cap is not None:
            cap.release()

    async def one_direct(
        self,
        index: int,
        scheduled: float,
        item: WorkItem,
        cap: trio.Semaphore | None,
        *,
        warmup: bool,
    ) -> str | None:
        """:meth:`one` for a completions or embeddings test (:mod:`.endpoints`)."""
        t0 = self.t0
        tracker = self._start(Tracker(index, scheduled - t0, 0.0), scheduled)
        embeddings = self.test.endpoint == "embeddings"
        described: dict[str, Any] = {
            "requested_output_tokens": None if embeddings else item.max_tokens,
            "requested_input_tokens": item.input_tokens,
            "warmup": warmup,
            "inputs": self.test.embedding_batch if embeddings else None,
        }
        phases = HttpPhases()  # noted by the transport for completions; embeddings: none
        try:
            outcome = await self.endpoint_call(item, tracker, phases)
        except ConfigError as exc:  # a usage problem (unknown provider, no key): stop
            self.fatal = self.fatal or exc
            self.scope.cancel(reason="the load test cannot call its model")
            return None
        except trio.Cancelled:
            self._cancelled(tracker, described | http_fields(phases))
            raise
        finally:
            self._done(cap)
        described |= http_fields(phases)
        self.keep(
            tracker.finish(
                trio.current_time() - t0,
                input_tokens=outcome.input_tokens,
                output_tokens=outcome.output_tokens,
                ok=outcome.ok,
                status=outcome.status,
                error_type=outcome.error_type,
                error=outcome.error,
                attempts=outcome.attempts,
                request_id=outcome.request_id,
                **described,
            )
        )
        return outcome.text if outcome.ok else None

    async def endpoint_call(self, item: WorkItem, tracker: Tracker, phases: HttpPhases) -> Outcome:
        """Send ``item`` to the test's endpoint: embeddings through the runtime (quotas,
        retries, ``--respect-limits``), completions straight to the base URL (its HTTP phases
        noted in ``phases``).

        Raises:
            ConfigError: the model cannot be called at all.
        """
        test = self.test
        if test.endpoint == "embeddings":
            outcome = await call_embed(
                self.rt,
                test.model,
                item,
                test.embedding_batch,
                self.deadlines,
                extra_body=test.extra_body,
                extra_headers=self.headers,
            )
            tracker.queue_wait = outcome.queue_wait
            return outcome
        assert self.direct is not None
        target, transport = self.direct
        return await call_completions(
            transport,
            target,
            item,
            tracker,
            self.t0,
            extra_body=test.request_body(item.max_tokens),
            extra_headers=self.headers,
            total=test.timeout,
            phases=phases,
        )

    def keep(self, record: RequestRecord) -> None:
        """Add ``record`` to the run's file; a write that fails stops the run."""
        try:
            self.records.add(record)
        except OSError as exc:
            self.broken = self.broken or exc
            self.scope.cancel(reason="the request records cannot be written")

    def progress(self) -> Progress:
        records = self.records
        recent = records.recent
        ttfts = sorted(ttft for ttft, _ in recent if ttft is not None)
        lags = sorted(lag for _, lag in recent)
        return Progress(
            elapsed=trio.current_time() - self.t0,
            sent=self.sent,
            finished=len(records),
            failed=records.failed,
            in_flight=self.in_flight,
            ttft_p50=percentile(ttfts, 50) if ttfts else None,
            lag_p99=percentile(lags, 99) if lags else None,
        )


async def _start_provider(run: _Run) -> None:
    """Start the provider's actor (its codec loaded, its transport made, the in-process
    simulator serving) before the schedule's clock starts, even with no warm-up request: done
    by the first scheduled request, that work held up the scheduler and the requests due
    meanwhile all left at once when it ended. A model that cannot be routed is left to the
    first request to report."""
    if run.test.endpoint == "completions":  # sent straight to the server: no actor
        return
    with contextlib.suppress(SluiceError):
        await run.rt.start_provider(run.test.model)


async def _warm_up(run: _Run) -> RecordFile:
    """Make the runtime warm before the clock starts: the provider's actor started
    (:func:`_start_provider`), then the warm-up requests sent one after another (see
    :attr:`LoadTest.warmup`), which also open a connection. Returns their records. A usage
    problem (unknown provider, no key) stops the test."""
    test = run.test
    await _start_provider(run)
    if not test.warmup and not test.warmup_seconds:
        return RecordFile(run.folder)
    rng = random.Random(f"{test.seed}:warmup")
    run.t0 = start = trio.current_time()
    count = test.warmup if test.warmup else None
    index = 0
    scope = trio.CancelScope()
    if run.interrupt is not None:
        run.interrupt.watch(scope, scope)
    with scope:
        while count is None or index < count:
            elapsed = trio.current_time() - start
            timed_out = bool(test.warmup_seconds and index and elapsed >= test.warmup_seconds)
            if run.fatal is not None or timed_out:
                break
            item = test.workload.item(index, rng, prefix="w")
            await run.one(index, trio.current_time(), item, None, warmup=True)
            index += 1
    if run.fatal is not None:
        raise run.fatal
    if run.broken is not None:
        raise run.broken
    warm = run.records
    run.records = RecordFile(run.folder)
    run.sent = 0
    return warm


async def run_load(
    rt: Runtime,
    test: LoadTest,
    *,
    progress: Callable[[Progress], None] | None = None,
    progress_interval: float = 1.0,
    on_send: Callable[[], None] | None = None,
    interrupt: Interrupt | None = None,
    direct: DirectTarget | None = None,
    folder: Path | None = None,
    start_at: Callable[[], Awaitable[Start]] | None = None,
    aggregates: bool = True,
) -> RunResult:
    """Run ``test`` through ``rt`` and return every record with the aggregates.

    The records are kept on disk as they finish (:class:`~.records.RecordFile`), so memory
    stays flat however long the run; ``folder`` is where their temporary file goes (default:
    the system's temporary folder).

    Raises:
        ConfigError: the model cannot be called at all (unknown provider, no API key).
        OSError: the records cannot be written (the run stops at the first failed write).

    Args:
        progress: called every ``progress_interval`` seconds with a :class:`Progress`, and
            once at the end.
        on_send: called in each request's task just before it is sent (after its lag is
            fixed); tests use it to starve the client on purpose.
        interrupt: ends the run early when told to (the results then say so).
        direct: where a completions test sends (the one endpoint not called through the
            runtime).
        folder: where the records' temporary file is made.
        start_at: ``--workers``: awaited after the warm-up, says when the schedule starts
            (the workers' shared t0, as a trio time) and which of its arrivals this process
            sends. Default: the whole schedule, at once.
        aggregates: False leaves the result's ``aggregates`` empty and its validity unjudged
            (a ``--workers`` worker: the parent aggregates the merged records of them all,
            and a worker's own aggregates, confidence intervals included, were CPU spent
            for nothing).
    """
    if test.endpoint == "completions" and direct is None:
        raise ConfigError(f"a {test.endpoint} load test needs the provider's base URL")
    run = _Run(rt, test, on_send, interrupt, None, folder)
    run.start_at = start_at
    if direct is None:
        return await _run_load(run, progress, progress_interval, aggregates)
    transport, owned = completions_transport(rt, test.model)
    try:
        run.direct = (direct, transport)
        return await _run_load(run, progress, progress_interval, aggregates)
    finally:
        if owned:
            with trio.CancelScope(shield=True):
                await transport.aclose()


async def _run_load(
    run: _Run,
    progress: Callable[[Progress], None] | None,
    progress_interval: float,
    aggregates: bool = True,
) -> RunResult:
    test, interrupt = run.test, run.interrupt
    warm = await _warm_up(run)
    if run.start_at is not None:  # --workers: every worker starts at the shared t0
        start = await run.start_at()  # (a worker freezes its setup there, once measured)
        run.t0, run.share = start.t0, start.share
        started_at = time.time() + (run.t0 - trio.current_time())
    else:
        freeze_setup()  # in a process of sluice's own: the runtime and its warm-up, for good
        started_at = time.time()
        run.t0 = trio.current_time()
    with run.scope, open_diagnosis() as run.diagnosis:
        if run.diagnosis is not None:
            run.diagnosis.begin()
        await _drive(run, progress, progress_interval)
    if run.fatal is not None:
        raise run.fatal
    if run.broken is not None:
        raise run.broken
    if progress is not None:
        progress(run.progress())
    if not aggregates:
        stopped = None if interrupt is None else interrupt.state
        return RunResult(test, run.records, {}, started_at, warm, stopped)
    return conclude(test, run.records, warm, started_at, interrupt)


def conclude(
    test: LoadTest,
    records: RecordFile,
    warm: Sequence[RequestRecord],
    started_at: float,
    interrupt: Interrupt | None,
) -> RunResult:
    """The :class:`RunResult` of a run of ``test`` that made ``records``: its aggregates and
    validity. One place for both a run in this process and the merged records of its
    ``--workers`` processes, so they come out the same."""
    aggregates = aggregate(
        records,
        slos=test.slos,
        max_lag=test.max_lag,
        max_error_rate=test.max_error_rate,
        span=records.span,
        fixed_output=test.fixed_output,
    )
    load = load_figures(test, records)
    aggregates["load"] = load
    if load["saturated"]:
        _invalid(aggregates, load["saturation_reason"])
    stopped = None if interrupt is None else interrupt.state
    if interrupt is not None and stopped is not None:
        why = (
            f"interrupted ({interrupt.cause}, {stopped}): partial results of the requests sent"
            " so far"
        )
        _invalid(aggregates, why, first=True)
    return RunResult(test, records, aggregates, started_at, warm, stopped)


async def _drive(
    run: _Run, progress: Callable[[Progress], None] | None, progress_interval: float
) -> None:
    async with trio.open_nursery() as nursery:
        if progress is not None:

            async def tick() -> None:
                while True:
                    await trio.sleep(progress_interval)
                    progress(run.progress())

            nursery.start_soon(tick)
        shape = run.test.shape
        if isinstance(shape, OpenLoop):
            await run.open_loop(shape)
        else:
            await run.closed_loop(shape)
        nursery.cancel_scope.cancel()


def _invalid(aggregates: dict[str, Any], reason: str, *, first: bool = False) -> None:
    """Mark the run invalid for ``reason`` (before the others with ``first``)."""
    known = aggregates["invalid_reason"]
    reasons = (reason, known) if first else (known, reason)
    aggregates["valid"] = False
    aggregates["invalid_reason"] = "; ".join(r for r in reasons if r)
