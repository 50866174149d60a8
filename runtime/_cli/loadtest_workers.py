"""``sluice loadtest --workers``: one open-loop schedule sent by several processes.

The parent (the ``sluice loadtest`` process) starts each worker as
``python -m sluice._jobs.loadtest.worker`` (the worker's side of what follows) in a session of
its own, so a Ctrl-C on the terminal reaches only the parent, which tells every worker. They
talk in JSON lines: the parent writes to a worker's stdin, a worker to its stdout (its stderr
is the parent's).

1. parent: ``{"spec": ...}``, the options (pickled, base64) and where to write the records.
2. worker: builds the test and the runtime, warms up, then ``{"ready": {"cpu_per_request"}}``.
3. parent, once every worker is ready: ``{"start": T0, "index": i, "count": n}``, T0 a
   ``time.perf_counter()`` instant (the system's monotonic clock, the same in every process
   of the machine) a little ahead, so all begin the one schedule together
   (:mod:`sluice._jobs.loadtest.workers` says how it is shared).
4. worker: ``{"progress": {...}}`` every second; the parent shows their sum.
5. parent on Ctrl-C or SIGTERM: ``{"stop": "drained"|"cancelled", "cause": ...}`` (the
   parent's :class:`~sluice._jobs.loadtest.Interrupt` state). A worker whose
   stdin closes (the parent died) cancels its requests and ends.
6. worker: its records to the files named in the spec, then ``{"done": {...}}``; or
   ``{"error": message, "kind": "config"|"os"}`` and a non-zero exit.

The parent merges the records (in the order they were due) into one
:class:`~sluice._jobs.loadtest.records.RecordFile` and computes the aggregates exactly as a
run in one process does (:func:`~sluice._jobs.loadtest.run.conclude`). Each worker's own send
lag goes to the aggregates' ``workers`` list.
"""

from __future__ import annotations

import base64
import os
import pickle
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Any

import attrs
import orjson
import trio

from .._errors import ConfigError
from .._jobs.loadtest import RunResult
from .._jobs.loadtest.worker import Lines, Spec

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from .._config import RuntimeConfig
    from .._jobs.loadtest import Interrupt, LoadTest, LoadTestOptions, Progress
    from .._jobs.loadtest.endpoints import DirectTarget
    from .._jobs.loadtest.metrics import RequestRecord

__all__ = ["Spread", "run_spread"]

START_MARGIN = 0.05
"""Seconds between the parent's start message and the shared t0: every worker has read it
and is waiting by then."""

_POLL = 0.02
"""Seconds between the parent's looks at its interrupt (a Ctrl-C passed on to the workers)."""


@attrs.define
class Spread:
    """A run the workers made: the merged result and what each worker did."""

    run: RunResult
    workers: list[dict[str, Any]]


class _Worker:
    """One worker process as the parent sees it."""

    def __init__(self, index: int, process: trio.Process, spec: Spec) -> None:
        self.index = index
        self.process = process
        self.spec = spec
        assert process.stdout is not None and process.stdin is not None
        self.lines = Lines(process.stdout)
        self.stdin = process.stdin
        self.ready = trio.Event()
        self.cost: float | None = None
        self.progress: Progress | None = None
        self.done: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.told: str | None = None
        """The stop (drain, cancel) this worker was told of."""

    async def send(self, message: dict[str, Any]) -> None:
        try:
            await self.stdin.send_all(orjson.dumps(message) + b"\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # it has ended: its own message or exit status says why

    async def listen(self, on_progress: Callable[[], None]) -> None:
        """Read the worker's messages until it ends."""
        from .._jobs.loadtest import Progress

        while (message := await self.lines.next()) is not None:
            if "ready" in message:
                self.cost = message["ready"]["cpu_per_request"]
                self.ready.set()
            elif "progress" in message:
                self.progress = Progress(**message["progress"])
                on_progress()
            elif "done" in message:
                self.done = message["done"]
            elif "error" in message:
                self.error = message
        await self.process.wait()
        if self.done is None and self.error is None:
            status = self.process.returncode
            self.error = {"error": f"worker {self.index} ended (exit status {status})"}
        self.ready.set()  # a worker that failed before it was ready wakes its waiter


def _default_count(options: LoadTestOptions, test: LoadTest) -> tuple[int | None, float | None]:
    """How many workers the options ask for (None: measure first) and the schedule's peak
    rate. ``auto`` below the one-process rate, and ``--respect-limits`` without a shared
    store (the quotas would be each worker's own), keep one process."""
    from .._jobs.loadtest.workers import ONE_PROCESS_RATE, peak_rate

    count = options.worker_count()
    rate = peak_rate(test)
    if count is None:
        if rate is None or rate <= ONE_PROCESS_RATE:
            return 1, rate
        if options.respect_limits and not _shared_store(options):
            return 1, rate
    return count, rate


def _shared_store(options: LoadTestOptions) -> bool:
    from ._common import build_config

    store = build_config(config_file=options.config, store=options.store).store
    return bool(store or os.environ.get("SLUICE_STORE"))


async def run_spread(
    options: LoadTestOptions,
    test: LoadTest,
    config: RuntimeConfig,
    direct: DirectTarget | None,
    progress: Callable[[Progress], None],
    interrupt: Interrupt,
    folder: Path,
) -> Spread | None:
    """Run ``test`` in worker processes when ``--workers`` asks for more than one (or
    ``auto`` finds one process too few); None when it runs in this process instead.
    ``config`` is the load test's runtime config, ``direct`` where a completions or
    embeddings test sends.

    Raises:
        ConfigError: a worker could not build the test or call the model.
        OSError: a worker could not keep its records.
    """
    from .._jobs.loadtest.workers import choose_workers

    count, rate = _default_count(options, test)
    if count == 1:
        return None
    if count is not None and count > 1 and options.respect_limits and not _shared_store(options):
        raise ConfigError(
            "--respect-limits with --workers needs a shared --store redis://...: each worker "
            "would otherwise keep the quotas to itself and together send more than they allow"
        )
    files: list[str] = []
    workers: list[_Worker] = []

    def show() -> None:
        seen = [w.progress for w in workers if w.progress is not None]
        if seen:
            progress(_combined(seen))

    try:
        async with trio.open_nursery() as nursery:

            async def spawn(calibrate: bool) -> _Worker:
                records, warmup = _temp(folder, files), _temp(folder, files)
                spec = Spec(options, config, direct, str(folder), records, warmup, calibrate)
                worker = _Worker(len(workers), await _start_process(), spec)
                workers.append(worker)
                nursery.start_soon(worker.listen, show)
                payload = base64.b64encode(pickle.dumps(spec)).decode()
                await worker.send({"spec": payload})
                return worker

            first = await spawn(count is None)
            nursery.start_soon(_pass_on, interrupt, workers)
            if count is None:
                await first.ready.wait()
                _raise_for(first)
                count = choose_workers(rate, first.cost, os.cpu_count() or 1)
            for _ in range(count - len(workers)):
                await spawn(False)
            for worker in workers:
                await worker.ready.wait()
                _raise_for(worker)
            t0 = time.perf_counter() + START_MARGIN
            for worker in workers:
                await worker.send({"start": t0, "index": worker.index, "count": count})
            with trio.CancelScope(shield=True):  # a Ctrl-C is passed on, never cancels us
                for worker in workers:
                    await worker.process.wait()
            nursery.cancel_scope.cancel()
        for worker in workers:
            _raise_for(worker)
        return _merge(test, workers, interrupt, folder)
    finally:
        for worker in workers:
            if worker.process.returncode is None:
                worker.process.kill()
        for name in files:
            with _suppress_os():
                os.unlink(name)


def _suppress_os() -> Any:
    import contextlib

    return contextlib.suppress(OSError)


def _temp(folder: Path, files: list[str]) -> str:
    handle, name = tempfile.mkstemp(dir=folder, prefix=".sluice-loadtest-worker-")
    os.close(handle)
    files.append(name)
    return name


async def _start_process() -> trio.Process:
    import subprocess

    return await trio.lowlevel.open_process(
        [sys.executable, "-m", "sluice._jobs.loadtest.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,  # the terminal's Ctrl-C reaches the parent alone
    )


def _raise_for(worker: _Worker) -> None:
    error = worker.error
    if error is None:
        return
    message = str(error["error"])
    if error.get("kind") == "os":
        raise OSError(error.get("errno") or 0, message, error.get("filename"))
    raise ConfigError(message)


async def _pass_on(interrupt: Interrupt, workers: list[_Worker]) -> None:
    """Tell every worker (started so far or later) when the parent is asked to stop
    (drain, then cancel)."""
    while True:
        state = interrupt.state
        for worker in workers:
            if state is not None and worker.told != state:
                worker.told = state
                await worker.send({"stop": state, "cause": interrupt.cause})
        await trio.sleep(_POLL)


def _combined(seen: list[Progress]) -> Progress:
    from .._jobs.loadtest import Progress

    ttfts = sorted(p.ttft_p50 for p in seen if p.ttft_p50 is not None)
    lags = [p.lag_p99 for p in seen if p.lag_p99 is not None]
    return Progress(
        elapsed=max(p.elapsed for p in seen),
        sent=sum(p.sent for p in seen),
        finished=sum(p.finished for p in seen),
        failed=sum(p.failed for p in seen),
        in_flight=sum(p.in_flight for p in seen),
        ttft_p50=ttfts[len(ttfts) // 2] if ttfts else None,
        lag_p99=max(lags) if lags else None,
    )


def _merge(test: LoadTest, workers: list[_Worker], interrupt: Interrupt, folder: Path) -> Spread:
    """One run's result from the workers' record files: every request once, in the order it
    was due, aggregated as one process would."""
    from array import array

    from .._jobs.loadtest.records import RecordFile, record_from_json
    from .._jobs.loadtest.run import conclude
    from .._jobs.loadtest.workers import worker_summary

    records = RecordFile(folder)
    warm: list[RequestRecord] = []
    summaries = []
    for worker in workers:
        lags = array("d")
        with open(worker.spec.records, "rb") as lines:
            for line in lines:
                lags.append(records.add_line(line.rstrip(b"\n"))["lag_s"])
        with open(worker.spec.warmup, "rb") as lines:
            warm.extend(record_from_json(orjson.loads(line)) for line in lines)
        summaries.append(worker_summary(worker.index, lags, worker.cost))
    done = [w.done for w in workers if w.done is not None]
    started_at = min((d["started_at"] for d in done), default=time.time())
    run = conclude(test, records, warm, started_at, interrupt)
    run.aggregates["workers"] = summaries
    return Spread(run, summaries)
