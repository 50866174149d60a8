"""The provider lane's driving task: reading, sealing, submitting, polling, merging.

:class:`Engine` is one run of the lane (see :mod:`.engine` for the lane as a whole and its
guarantees). One task drives it, so the journal is written in the order the steps happen;
the lines that go to the realtime lane run on worker tasks.
"""

from __future__ import annotations

import functools
import math
import time
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from ..._embeddings import EmbedRequest
from ..._errors import BudgetExceeded, CallError, ConfigError, SluiceError
from ..._ledger.prices import worst_case_micros
from ..._limits.cost import estimate_cost
from ..batch_lines import (
    BadLine,
    InputLine,
    LineSplitter,
    error_code,
    parse_input_line,
    render_bad_line,
    render_error_line,
)
from ..batch_report import BatchProgress
from .backend import BatchBackend, Entry, RemoteBatch, embed_backend, outcomes
from .journal import Journal, Submission
from .merge import Tally, line_id, unfinished_error
from .plan import Gate, Packer, Planned, Sealed, affordable

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Collection

    from ..._embeddings import EmbedResult
    from ..._messages import ChatResult
    from ..._runtime import Runtime
    from ..batch_lines import Answered, Endpoint
    from ..batch_loop import BatchInterrupt
    from ..batch_report import BatchSummary, Interrupted
    from .engine import ProviderLane

__all__ = ["BatchRun", "Engine"]


class BatchRun(Protocol):
    """What the lane uses of the realtime lane's run state (:mod:`sluice._jobs.batch`): its
    counts, its writer (one lock, whole lines) and its summary."""

    started: float
    todo: int
    stream: bool
    answered: Answered | None
    counts: dict[str, int]
    errors: dict[str, int]
    tag: str | None
    job: str
    cost_baseline: int
    interrupted: Interrupted | None
    final: BatchSummary | None

    async def write(self, data: bytes, counts: dict[str, int], error: str | None) -> None: ...

    def count(self, **counts: int) -> None: ...

    def summary(self, job_cost: int | None = None) -> BatchSummary: ...

    def wanted(self, lineno: int, custom_id: str | None) -> bool: ...


_READ_SIZE = 1 << 16
_WRITE_LINES = 512
"""Output lines written (and flushed) together while a batch is merged."""
_MAX_BACKOFF = 60.0


@attrs.define(eq=False)
class _Flight:
    """A submission at the provider, until its results are merged."""

    sub: Submission
    backend: BatchBackend
    remote: RemoteBatch | None = None


class Engine:
    """One run of the lane: the state its driving task owns."""

    def __init__(
        self,
        *,
        lane: ProviderLane,
        rt: Runtime,
        job: BatchRun,
        journal: Journal,
        input: str | os.PathLike[str],
        model: str | None,
        groups: Collection[str],
        budget_micros: int | None,
        max_in_flight: int,
        max_wait: float,
    ) -> None:
        self.lane = lane
        self.rt = rt
        self.job = job
        self.journal = journal
        self.input = input
        self.model = model
        self.groups = groups
        self.budget_micros = budget_micros
        self.max_in_flight = max_in_flight
        self.max_wait = max_wait
        self.backends: dict[str, BatchBackend | None] = {}
        self.packers: dict[tuple[str, str, str], Packer] = {}
        self.gate = Gate()
        self.flights: dict[int, _Flight] = {}
        self.claimed: set[int] = set()
        """Input lines of submissions a resume found not done: their batch answers them."""
        self.handed_back: dict[int, int] = {}
        """Lines to read again (by number), with their submissions so far."""
        self.tries: dict[int, int] = {}
        self.switched = False
        """``auto`` past the deadline's mark: every line left goes to the realtime lane."""
        self.switch_at: float | None = None
        self.realtime_send: trio.MemorySendChannel[InputLine] | None = None
        self.realtime_in_flight = 0
        self.no_batch_api: set[str] = set()
        self.last_poll = -math.inf

    # -- the run -------------------------------------------------------------------------

    async def go(
        self,
        interrupt: BatchInterrupt,
        progress: Callable[[BatchProgress], None] | None,
        interval: float,
    ) -> None:
        run, rt = self.job, self.rt
        run.job = rt.ledger.job
        run.tag = rt.ledger.job or None
        run.cost_baseline = await self._job_cost()
        deadline = self.lane.deadline
        if deadline is not None:
            self.switch_at = run.started + deadline * (1 - self.lane.options.realtime_share)
        drained = False
        async with trio.open_nursery() as nursery:
            send, receive = trio.open_memory_channel[InputLine](0)
            self.realtime_send = send
            realtime = trio.CancelScope()
            workers_done = trio.Event()
            if progress is not None:
                nursery.start_soon(self._report, progress, interval)

            async def workers() -> None:
                try:
                    with realtime:
                        async with trio.open_nursery() as pool, receive:
                            for _ in range(self.max_in_flight):
                                pool.start_soon(self._realtime_worker, receive.clone())
                finally:
                    workers_done.set()

            nursery.start_soon(workers)
            drive = trio.CancelScope()

            async def watch() -> None:
                nonlocal drained
                await interrupt.wait_drain()
                drained = True
                drive.cancel()  # submitted batches keep running: a resume merges them
                realtime.cancel()  # their lines are not written: a resume does them

            nursery.start_soon(watch)
            try:
                with drive:
                    await self._drive()
            finally:
                send.close()
            await workers_done.wait()  # the realtime lane's lines are written
            nursery.cancel_scope.cancel()
        if drained and run.todo > run.counts.get("ok", 0) + run.counts.get("failed", 0):
            run.interrupted = "drained"
        summary = run.summary(await self._job_cost())
        if self.no_batch_api:
            names = ", ".join(sorted(self.no_batch_api))
            summary = attrs.evolve(summary, lane_note=f"no batch API ({names}): realtime lane")
        run.final = summary
        if progress is not None:
            progress(self._snapshot(summary, drained))

    async def _drive(self) -> None:
        await self._adopt()
        only: set[int] | None = None
        while True:
            await self._pass(only)
            for key in list(self.packers):
                sealed = self.packers[key].seal()
                if sealed is not None:
                    await self._place(sealed)
            while self.flights and not self.handed_back:
                await self._tick()
            if self.handed_back:
                only = set(self.handed_back)
                continue
            return

    async def _adopt(self) -> None:
        """Take over the submissions an earlier run left not done."""
        for sub in self.journal.active():
            backend = self._backend(sub.provider)
            if backend is None:
                raise ConfigError(
                    f"the journal lists a batch at {sub.provider}, which this config gives no"
                    " batch API: resume with the config the batch was submitted with"
                )
            lines = await trio.to_thread.run_sync(self.journal.lines, sub)
            self.claimed.update(lineno for _, lineno, _ in lines)
            flight = _Flight(sub, backend)
            if sub.batch_id is None:
                # Killed during the create, or before: did the create reach the provider?
                found = await self._patient(backend.find, sub.fingerprint, since=sub.at - 1)
                if found is None:
                    await trio.to_thread.run_sync(self.journal.finished, sub)
                    self.claimed.difference_update(lineno for _, lineno, _ in lines)
                    continue
                await trio.to_thread.run_sync(self.journal.created, sub, found.id)
                flight.remote = found
            self.gate.enter(sub.provider, sub.model, sub.tokens, sub.micros)
            self.flights[sub.seq] = flight

    # -- reading and routing ---------------------------------------------------------------

    async def _pass(self, only: set[int] | None) -> None:
        """Read the input once, routing each line to do: every wanted line on the first
        pass, the lines handed back (``only``) on a later one."""
        run = self.job
        first = only is None
        if only is not None:
            self.handed_back = {n: t for n, t in self.handed_back.items() if n not in only}
        with open(self.input, "rb") as infile:  # noqa: ASYNC230 (read in a thread below)
            splitter = LineSplitter()
            while True:
                chunk = await trio.to_thread.run_sync(infile.read, _READ_SIZE)
                for lineno, raw in splitter.feed(chunk) if chunk else splitter.close():
                    if only is not None and lineno not in only:
                        continue
                    if first and lineno in self.claimed:
                        continue
                    # Batch entries never stream; a line sent realtime streams as the realtime
                    # lane's do (see _realtime_worker).
                    item = parse_input_line(
                        raw, lineno, model=self.model, stream=False, groups=self.groups
                    )
                    if item is None:
                        continue
                    if first:
                        if not run.wanted(lineno, item.custom_id):
                            continue
                        run.count(lines=1)
                    if isinstance(item, BadLine):
                        data = render_bad_line(item, line_id=line_id())
                        await run.write(data, {"failed": 1}, item.code)
                        continue
                    await self._route(item)
                if not chunk:
                    return

    def _backend(self, provider: str) -> BatchBackend | None:
        try:
            return self.backends[provider]
        except KeyError:
            backend: BatchBackend | None = self.lane.options.backends(self.rt, provider)
            self.backends[provider] = backend
            if backend is None:
                self.no_batch_api.add(provider)
            return backend

    async def _route(self, item: InputLine) -> None:
        """Send one line on its way: into a batch of its provider, model and endpoint, or to
        the realtime lane (a provider without a batch API, or whose batches take no
        embeddings, a model group, past the switch). A ``/v1/responses`` line is a chat
        request: it goes in a chat batch of its own, its reply written as a response."""
        await self._check_switch()
        provider, sep, model = item.request.model.partition(":")
        backend = self._backend(provider) if sep else None
        request = item.request
        if backend is not None and isinstance(request, EmbedRequest):
            embedder = embed_backend(backend)
            entry = embedder.embed_entry(item.custom_id, request) if embedder else None
        elif backend is not None and not isinstance(request, EmbedRequest):
            entry = backend.entry(item.custom_id, request)
        else:
            entry = None
        if backend is None or entry is None or self.switched:
            self.job.count(realtime_lines=1)
            assert self.realtime_send is not None
            await self.realtime_send.send(item)
            return
        micros = self._worst_case(provider, model, item)
        if micros is None:
            error = BudgetExceeded(
                f"the budget is in dollars and {provider}:{model} has no known price, so its"
                " cost cannot be bounded; give it a price in ledger.prices"
            )
            await self._write_error(item.custom_id, item.lineno, error)
            return
        planned = Planned(
            entry.wire_id,
            item.lineno,
            item.custom_id,
            entry.data,
            entry.tokens,
            micros,
            self.tries.get(item.lineno, 0),
            item.extra,
        )
        packer = self.packers.get((provider, model, item.endpoint))
        if packer is None:
            limits = backend.limits
            most = self.lane.options.max_requests
            if most is not None and most < limits.max_requests:
                limits = attrs.evolve(limits, max_requests=most)
            cap = self.lane.options.enqueued_tokens.get(f"{provider}:{model}")
            cap = cap if cap is not None else limits.enqueued_tokens
            self.gate.limits[f"{provider}:{model}"] = cap
            packer = Packer(provider, model, limits, cap, endpoint=item.endpoint)
            self.packers[provider, model, item.endpoint] = packer
        sealed = packer.add(planned)
        if sealed is not None:
            await self._place(sealed)

    def _worst_case(self, provider: str, model: str, item: InputLine) -> int | None:
        """The line's worst-case cost at the batch price; 0 without a budget, None when a
        budget is set and the model has no price."""
        if self.budget_micros is None:
            return 0
        book = self.rt.ledger.budget_book
        prices = book.prices if book is not None else None
        price = prices.lookup(provider, model) if prices is not None else None
        if price is None:
            return None
        request = item.request
        if isinstance(request, EmbedRequest):
            from ..._embed_calls import embed_cost

            return worst_case_micros(price.for_batch(), embed_cost(request))
        spec = self.rt.resolve_provider(provider)
        cost = estimate_cost(request, spec.rate_limit.expected_output_tokens)
        return worst_case_micros(price.for_batch(), cost)

    # -- submitting ------------------------------------------------------------------------

    async def _place(self, sealed: Sealed) -> None:
        """Submit ``sealed`` as soon as the gate and the budget let it (polling meanwhile):
        in parts when only some of its lines fit the budget, as error lines those that
        never will."""
        while True:
            await self._check_switch()
            if self.switched:
                for line in sealed.lines:
                    self.handed_back[line.lineno] = line.tries
                return
            if not self.gate.fits_queue(sealed):
                await self._tick(wait=True)
                continue
            if self.budget_micros is not None:
                left = self.budget_micros - await self._job_cost() - self.gate.micros
                fit = affordable(sealed.lines, left)
                if fit < len(sealed.lines):
                    if self.gate.running:
                        if fit == 0:
                            await self._tick(wait=True)  # batches running may cost less
                            continue
                    elif fit == 0:
                        await self._refuse(sealed, left)
                        return
                    rest = sealed.split(fit)
                    await self._submit(sealed)
                    sealed = rest
                    continue
            await self._submit(sealed)
            return

    async def _refuse(self, sealed: Sealed, left: int) -> None:
        from ..._ledger.prices import format_usd

        for line in sealed.lines:
            error = BudgetExceeded(
                f"the job budget has ${format_usd(max(0, left))} left, and this line may cost up"
                f" to ${format_usd(line.micros)} at the batch price"
            )
            await self._write_error(line.custom_id, line.lineno, error)

    async def _submit(self, sealed: Sealed) -> None:
        journal = self.journal
        backend = self.backends[sealed.provider]
        assert backend is not None
        at = time.time()
        fingerprint = f"sluice-{journal.run_id}-{journal.next_seq}"
        intent = functools.partial(
            journal.intend,
            provider=sealed.provider,
            model=sealed.model,
            fingerprint=fingerprint,
            at=at,
            lines=[(p.wire_id, p.lineno, p.custom_id) for p in sealed.lines],
            tokens=sealed.tokens,
            micros=sealed.micros,
            endpoint=sealed.endpoint,
            extra={p.wire_id: p.extra for p in sealed.lines if p.extra is not None},
        )
        sub = await trio.to_thread.run_sync(intent)
        self.gate.enter(sub.provider, sub.model, sub.tokens, sub.micros)
        flight = self.flights[sub.seq] = _Flight(sub, backend)
        entries = [Entry(p.wire_id, p.data, p.tokens) for p in sealed.lines]
        tries = [(p.lineno, p.custom_id, p.tries) for p in sealed.lines]
        del sealed
        file_id = await self._patient(backend.upload, entries)
        if file_id is not None:
            await trio.to_thread.run_sync(journal.uploaded, sub, file_id)
        embedder = embed_backend(backend) if sub.endpoint == "embeddings" else None
        try:
            if embedder is not None:
                remote = await embedder.create_embeddings(entries, file_id, fingerprint)
            else:
                remote = await backend.create(entries, file_id, fingerprint)
        except (SluiceError, OSError) as exc:
            # Whether the batch exists is unknown: look for it before anything else.
            found = await self._patient(backend.find, fingerprint, since=at - 1)
            if found is None:
                problem = str(exc)
                await trio.to_thread.run_sync(journal.finished, sub)
                self._land(flight)
                # Refused as too large (a 400 or 413 naming a limit we were not told of), or
                # for one line in it: sent again in halves, as a batch failed whole is.
                halved = _refused(exc) and len(tries) > 1
                if halved:
                    self._shrink(sub, len(tries) // 2)
                for lineno, custom_id, n in tries:
                    n -= 1 if halved else 0
                    await self._hand_back_line(lineno, custom_id, n, "failed", problem, sub)
                return
            remote = found
        del entries
        await trio.to_thread.run_sync(journal.created, sub, remote.id)
        flight.remote = remote
        self.job.count(batches=1)

    # -- polling and merging ---------------------------------------------------------------

    async def _tick(self, *, wait: bool = True) -> None:
        """Look at the batches running (at most once a poll interval) and merge those that
        ended; then, if nothing ended, sleep until the next look."""
        now = trio.current_time()
        interval = self.lane.options.poll_interval
        if now - self.last_poll < interval:
            if wait:
                await trio.sleep(self.last_poll + interval - now)
            return
        self.last_poll = now
        await self._check_switch()
        ended = False
        for flight in list(self.flights.values()):
            remote = await self._patient(flight.backend.get, self._batch_id(flight))
            flight.remote = remote
            if remote.state == "ended":
                await self._merge(flight, remote)
                ended = True
        if not ended and wait:
            await trio.sleep(interval)
            self.last_poll = -math.inf

    @staticmethod
    def _batch_id(flight: _Flight) -> str:
        batch_id = flight.sub.batch_id
        assert batch_id is not None
        return batch_id

    async def _merge(self, flight: _Flight, remote: RemoteBatch) -> None:
        """Write the output line of every line of an ended batch the output does not hold
        yet; hand back the lines it has no outcome for; then mark the submission done."""
        run, sub = self.job, flight.sub
        lines = await trio.to_thread.run_sync(self.journal.lines, sub)
        pending = {wire: (lineno, custom_id) for wire, lineno, custom_id in lines}
        del lines
        endpoint: Endpoint = sub.endpoint  # type: ignore[assignment]
        extra: dict[str, Any] = {}
        if endpoint != "chat":
            extra = await trio.to_thread.run_sync(self.journal.extra, sub)
        answered = run.answered.custom_ids if run.answered is not None else frozenset()
        tally = Tally(sub.provider, sub.model, endpoint, run.tag, int(time.time()))
        unfinished: list[tuple[int, str, str]] = []
        async for outcome in outcomes(flight.backend, remote, endpoint):
            hit = pending.pop(outcome.wire_id, None)
            if hit is None:
                continue
            lineno, custom_id = hit
            if custom_id in answered:
                continue  # written before a crash: this is the merge done again
            if not tally.add(outcome, custom_id, lineno, extra.get(outcome.wire_id)):
                unfinished.append((lineno, custom_id, outcome.kind))
            if len(tally.chunk) >= _WRITE_LINES:
                await self._flush(tally)
        await self._flush(tally)
        missing = "failed" if remote.problem else "cancelled"
        for lineno, custom_id in pending.values():
            if custom_id not in answered:
                unfinished.append((lineno, custom_id, missing))
        # A batch the provider failed whole was often too large for it (requests, bytes,
        # enqueued tokens), or held one line it refuses: its lines go again in batches half
        # its size, which finds either (a line alone that fails again counts its tries).
        halved = remote.problem is not None and sub.count > 1
        if halved:
            self._shrink(sub, sub.count // 2)
        for lineno, custom_id, why in unfinished:
            tries = self.tries.get(lineno, 0) - (1 if halved else 0)
            await self._hand_back_line(lineno, custom_id, tries, why, remote.problem, sub)
        await trio.to_thread.run_sync(self.journal.finished, sub)
        self._land(flight)

    async def _flush(self, tally: Tally) -> None:
        """Write the lines ``tally`` holds, count them, and book their records."""
        run = self.job
        if tally.chunk:
            await run.write(b"".join(tally.chunk), {}, None)
            tally.chunk.clear()
            for key, n in tally.counts.items():
                run.count(**{key: n})
            for code, n in tally.errors.items():
                run.errors[code] = run.errors.get(code, 0) + n
            tally.counts.clear()
            tally.errors.clear()
        for msg in tally.records:
            await self.rt.ledger.record(msg)
        tally.records.clear()

    async def _hand_back_line(
        self,
        lineno: int,
        custom_id: str,
        tries: int,
        kind: str,
        problem: str | None,
        sub: Submission,
    ) -> None:
        """A line that got no outcome: read again by the next pass (to a batch, or the
        realtime lane past the switch), or after ``max_tries`` submissions an error line."""
        tries += 1
        if self.switched or tries < self.lane.options.max_tries:
            self.tries[lineno] = tries
            self.handed_back[lineno] = tries
            self.job.count(resubmitted=1)
            return
        self.tries.pop(lineno, None)
        error = unfinished_error(kind, sub.provider, sub.model, tries, problem)
        await self._write_error(custom_id, lineno, error)

    def _shrink(self, sub: Submission, requests: int) -> None:
        """Batches like ``sub``'s (its provider, model and endpoint) hold at most ``requests``
        lines from now on."""
        packer = self.packers.get((sub.provider, sub.model, sub.endpoint))
        if packer is not None and requests < packer.limits.max_requests:
            packer.limits = attrs.evolve(packer.limits, max_requests=requests)

    def _land(self, flight: _Flight) -> None:
        sub = flight.sub
        self.flights.pop(sub.seq, None)
        self.gate.leave(sub.provider, sub.model, sub.tokens, sub.micros)

    async def _write_error(self, custom_id: str, lineno: int, error: SluiceError) -> None:
        data = render_error_line(custom_id, lineno, error, line_id=line_id())
        await self.job.write(data, {"failed": 1}, error_code(error))

    # -- the deadline ----------------------------------------------------------------------

    async def _check_switch(self) -> None:
        """Past the deadline's mark (``auto``): every line left goes to the realtime lane.
        The batches running are cancelled (what they finished is merged as they end, the
        rest handed back) and the lines waiting in packers handed back."""
        if self.switched or self.switch_at is None or trio.current_time() < self.switch_at:
            return
        self.switched = True
        for packer in self.packers.values():
            sealed = packer.seal()
            for line in sealed.lines if sealed is not None else ():
                self.handed_back[line.lineno] = line.tries
        for flight in list(self.flights.values()):
            if flight.sub.batch_id is not None:
                try:
                    await flight.backend.cancel(flight.sub.batch_id)
                except (SluiceError, OSError):
                    pass  # it ends at the provider anyway; its results are merged then

    # -- the realtime lane -----------------------------------------------------------------

    async def _realtime_worker(self, receive: trio.MemoryReceiveChannel[InputLine]) -> None:
        run = self.job
        async with receive:
            async for item in receive:
                settings: dict[str, Any] = {
                    "priority": "batch",
                    "tag": item.request.tag or run.tag,
                    "failure_mode": "wait",
                    "max_wait": self.max_wait,
                }
                request = item.request
                self.realtime_in_flight += 1
                result: ChatResult | EmbedResult
                try:
                    if isinstance(request, EmbedRequest):
                        result = await self.rt.embed(attrs.evolve(request, **settings))
                    else:
                        settings["stream"] = run.stream
                        result = await self.rt.chat(attrs.evolve(request, **settings))
                except SluiceError as exc:
                    await self._write_error(item.custom_id, item.lineno, exc)
                    run.count(calls=1)
                    continue
                finally:
                    self.realtime_in_flight -= 1
                usage = result.usage
                data = item.render(result, line_id=line_id(), created=int(time.time()))
                await run.write(
                    data,
                    {
                        "ok": 1,
                        "calls": 1,
                        "input_tokens": usage.input_tokens,
                        "output_tokens": usage.output_tokens,
                    },
                    None,
                )

    # -- helpers ---------------------------------------------------------------------------

    async def _patient(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn``'s answer, waiting out failures that may pass (a refused connection, 429,
        5xx) for up to ``max_wait`` seconds with a growing pause; other errors are raised."""
        give_up = trio.current_time() + self.max_wait
        pause = 1.0
        while True:
            try:
                return await fn(*args, **kwargs)
            except CallError as exc:
                if not exc.retryable or trio.current_time() + pause > give_up:
                    raise
            await trio.sleep(pause)
            pause = min(_MAX_BACKOFF, pause * 2)

    async def _job_cost(self) -> int:
        found = await self.rt.ledger.snapshot(by=(), job=self.rt.ledger.job)
        return found[0].totals.cost_micros if found else 0

    def _snapshot(self, summary: Any, draining: bool) -> BatchProgress:
        total = done = 0
        eta: float | None = None
        now = time.time()
        for flight in self.flights.values():
            remote = flight.remote
            if remote is None:
                continue
            total += remote.total
            done += remote.done
            ran = now - remote.created_at
            if remote.done and ran > 0:
                left = (remote.total - remote.done) / (remote.done / ran)
                eta = left if eta is None else max(eta, left)
        return BatchProgress(
            summary=summary,
            in_flight=self.realtime_in_flight,
            draining=draining,
            batches_running=len(self.flights),
            batch_lines=total,
            batch_lines_done=done,
            batch_eta=eta,
        )

    async def _report(self, progress: Callable[[BatchProgress], None], interval: float) -> None:
        while True:
            await trio.sleep(interval)
            progress(self._snapshot(self.job.summary(await self._job_cost()), False))


def _refused(exc: BaseException) -> bool:
    """The provider answered the create with a refusal of the request as sent."""
    return isinstance(exc, CallError) and exc.status in (400, 413, 422)
