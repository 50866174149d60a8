"""``sluice loadtest``: measure an endpoint under a planned load; ``sluice loadtest compare``.

The command is an adapter: cyclopts fills one
:class:`~sluice._jobs.loadtest.options.LoadTestOptions` from the flags (which checks them), the
job builds its :class:`~sluice._jobs.loadtest.LoadTest` from it, and this module checks the
outputs, opens the runtime and shows progress; the work is in :mod:`sluice._jobs.loadtest`.
Progress goes to stderr: a rich live view on a terminal, a plain line every few seconds
otherwise. The summary goes to stdout.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path  # noqa: TC003 (cyclopts reads the annotations at runtime)
from typing import TYPE_CHECKING, Annotated, Any

import attrs
from cyclopts import App, Parameter

from .._errors import ConfigError
from .._jobs.loadtest import Interrupt, Progress
from .._jobs.loadtest.endpoints import DirectTarget
from .._jobs.loadtest.options import LoadTestOptions, Prepared, build_test
from ._common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, build_config, fail
from .loadtest_summary import format_summary, ms

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from .._jobs.loadtest import LoadTest, RunResult
    from .._jobs.loadtest.sweep import SweepPlan, SweepPoint

__all__ = ["format_summary", "loadtest_app"]

loadtest_app = App(
    name="loadtest",
    help="Measure what an LLM endpoint sustains: TTFT, per-token ITL, throughput, goodput.",
)

_PLAIN_EVERY = 5.0
"""Seconds between progress lines when stderr is not a terminal."""


def _progress_line(p: Progress) -> str:
    return (
        f"{p.elapsed:6.1f} s  sent {p.sent}  done {p.finished} ({p.failed} failed)  "
        f"in flight {p.in_flight}  TTFT p50 {ms(p.ttft_p50)}  lag p99 {ms(p.lag_p99)}"
    )


def _progress_display(stack: ExitStack) -> Callable[[Progress], None]:
    """A rich live view on a terminal; plain lines on stderr otherwise."""
    if not sys.stderr.isatty():
        last = [-_PLAIN_EVERY]

        def plain(p: Progress) -> None:
            if p.elapsed - last[0] >= _PLAIN_EVERY:
                last[0] = p.elapsed
                print(f"sluice loadtest: {_progress_line(p)}", file=sys.stderr, flush=True)

        return plain
    from rich.console import Console
    from rich.live import Live
    from rich.table import Table

    # Redrawn from the run's own ticks, not rich's refresh thread: the cost lands at a known
    # moment each second, in the loop the lag is measured on.
    live = stack.enter_context(
        Live(console=Console(stderr=True), transient=True, auto_refresh=False)
    )

    def show(p: Progress) -> None:
        table = Table(title="sluice loadtest", show_header=False, box=None)
        for name, value in (
            ("elapsed", f"{p.elapsed:.1f} s"),
            ("sent / done", f"{p.sent} / {p.finished}"),
            ("failed", str(p.failed)),
            ("in flight", str(p.in_flight)),
            ("TTFT p50 (recent)", ms(p.ttft_p50)),
            ("send lag p99 (recent)", ms(p.lag_p99)),
        ):
            table.add_row(name, value)
        live.update(table, refresh=True)

    return show


def preflight_outputs(paths: list[Path], *, overwrite: bool = False) -> str | None:
    """Why one of ``paths`` cannot be written, or None: checked before the run so a bad path
    costs nothing (the shared :func:`~._preflight.check_writable`, plus: no file may be given
    for two outputs, each must be a regular file, and an existing file that is not a
    loadtest's own output is replaced only with ``overwrite``; see
    :func:`~.._jobs.loadtest.results.own_output`). Nothing is created or truncated here."""
    from .._jobs.loadtest.results import own_output
    from ._preflight import check_writable, same_file

    for number, path in enumerate(paths):
        if any(same_file(path, other) for other in paths[:number]):
            return f"{path} is given for two outputs; each needs its own file"
        try:
            check_writable(path, "output")
        except ConfigError as exc:
            return str(exc)
        if not path.exists():
            continue
        if not path.is_file():
            return f"output {path} is not a regular file; give a file name"
        if not overwrite and not own_output(path):
            return (
                f"output {path} already exists and is not a loadtest result "
                f"({path.stat().st_size} bytes); give another --out, or --overwrite to "
                "replace it"
            )
    return None


_PROBE = 64 * 1024
"""Bytes written (and synced) to a probe file in each output folder: a full disk shows."""


def probe_folders(paths: list[Path]) -> str | None:
    """Why the folder of one of ``paths`` cannot take a new file, or None. Each folder is
    created when missing (the run would create it anyway) and tried for real: a probe file
    is written, synced and removed, so a folder that exists only on paper (``/proc``), is
    read-only or full is found before the run, not after it. Existing files are not opened.
    """
    import tempfile

    seen: set[Path] = set()
    for path in paths:
        folder = path.absolute().parent
        if folder in seen:
            continue
        seen.add(folder)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return f"output {path} cannot be written: cannot create {folder}: {_reason(exc)}"
        try:
            handle, name = tempfile.mkstemp(dir=folder, prefix=".sluice-loadtest-probe-")
        except OSError as exc:
            return f"output {path} cannot be written: {folder}: {_reason(exc)}"
        try:
            os.write(handle, bytes(_PROBE))
            os.fsync(handle)
        except OSError as exc:
            return f"output {path} cannot be written: {folder}: {_reason(exc)}"
        finally:
            os.close(handle)
            os.unlink(name)
    return None


def _records_folder(out: Path) -> Path:
    """Where the run keeps its records while it runs: beside the output (checked writable,
    on the disk the results go to, never a RAM-backed ``/tmp``)."""
    return out.absolute().parent


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


EXIT_TERMINATED = 143
"""The exit status of a run that SIGTERM stopped (128 + 15, as a shell reports it)."""


async def _on_signal(signals: AsyncIterator[int], interrupt: Interrupt) -> None:
    """The first Ctrl-C or SIGTERM stops sending (the partial results are written); the
    second cancels the requests in flight."""
    async for number in signals:
        name = "Ctrl-C" if number == signal.SIGINT else signal.Signals(number).name
        if interrupt.state is None:
            print(
                f"sluice: stopping: no new requests ({name}); the ones in flight finish and the"
                f" partial results are written ({name} again cancels them)",
                file=sys.stderr,
                flush=True,
            )
            interrupt.drain(name)
        else:
            print(
                f"sluice: cancelling the requests in flight ({name}); writing the partial results",
                file=sys.stderr,
                flush=True,
            )
            interrupt.cancel(name)


@loadtest_app.default
async def loadtest(options: Annotated[LoadTestOptions, Parameter(name="*")]) -> int:
    """Load-test a model: send requests on a schedule, measure each, write the results.

    Give one load shape (--rate, --concurrency, --sweep, --ramp or --trace) and a bound
    (--duration or --requests; a ramp or trace bounds itself). Every request's time to first
    token, per-token inter-token latency, time per output token and end-to-end latency are
    measured on the client; the results file holds every record and the aggregates (seconds).
    A run whose client fell behind its own schedule (send lag p99 above --max-lag) is marked
    invalid, and so is one whose error rate passes --max-error-rate. Besides the JSON results
    (and --report), every request goes to OUT's stem + .requests.jsonl and .requests.csv, and
    the aggregates to .aggregates.csv. Ctrl-C stops sending and writes the partial results,
    marked interrupted (again: cancels the requests in flight); SIGTERM does the same. Every
    output path is checked before the run, and an existing file that is not a loadtest's
    own output is replaced only with --overwrite. Records are kept on disk as requests
    finish, so memory does not grow with the run. Exit status: 0 for a valid run that met
    every --slo, 1 for an invalid run or a missed SLO, 2 for bad flags, input or an output
    path that cannot be written (checked before the run), 130 when interrupted by Ctrl-C,
    143 by SIGTERM.
    """
    # The flags were checked when cyclopts made ``options`` (a ConfigError there is printed
    # by the app as a usage error); what is left needs files, the config or the network.
    outputs = options.outputs()
    unwritable = preflight_outputs(outputs, overwrite=options.overwrite)
    if unwritable is not None:
        return fail(unwritable)
    try:
        prepared = build_test(options)
        run_config = _run_config(options)
        direct = _direct_target(options, run_config)
    except ConfigError as exc:
        return fail(str(exc))
    unwritable = probe_folders(outputs)  # last: it may create the output's folder
    if unwritable is not None:
        return fail(unwritable)
    return await _run(options, prepared, run_config, direct)


def _run_config(options: LoadTestOptions) -> Any:
    """The runtime config the flags and the config file give; providers other than the
    in-process simulator are checked once, here, before the run.

    Raises:
        ConfigError: the config or a provider's settings are wrong.
    """
    provider = options.provider
    run_config = build_config(
        config_file=options.config,
        provider=provider,
        base_url=options.base_url,
        api_key=options.api_key,
        store=options.store,
        metrics_port=options.metrics_port,
    )
    if provider != "sim" or options.base_url is not None:
        from ._preflight import check_providers

        check_providers(run_config, [provider])  # fail once, early
    return run_config


def _direct_target(options: LoadTestOptions, run_config: Any) -> DirectTarget | None:
    """Where ``--endpoint completions`` sends, straight to the server (None for the
    endpoints that go through the runtime: chat, embeddings).

    Raises:
        ConfigError: no base URL is known for the provider.
    """
    if options.endpoint != "completions":
        return None
    provider, _, model_name = options.model.partition(":")
    entry = run_config.providers.get(provider)
    url = options.base_url or (entry.base_url if entry is not None else None)
    if not url:
        raise ConfigError(
            f"--endpoint {options.endpoint} sends straight to the server: give --base-url "
            "(or the provider's base_url in the config)"
        )
    key = options.api_key
    if key is None and entry is not None and entry.api_key is not None:
        key = entry.api_key.reveal()
    if key is None and entry is not None and entry.api_key_env:
        key = os.environ.get(entry.api_key_env)
    return DirectTarget(url.rstrip("/"), model_name, key)


def _point_line(p: SweepPoint) -> None:
    state = f"saturated: {p.verdict.reason}" if p.verdict.saturated else "sustained"
    print(
        f"sluice loadtest: sweep {p.rate:.3g}/s -> {p.verdict.achieved:.3g}/s completed, {state}",
        file=sys.stderr,
        flush=True,
    )


async def _run(
    options: LoadTestOptions, prepared: Prepared, run_config: Any, direct: DirectTarget | None
) -> int:
    """Run the test (a sweep, each concurrency level, or one run) under Ctrl-C and SIGTERM
    handling, then write the results and print the summary; the exit status."""
    import trio

    from .._jobs.loadtest import loadtest_config
    from .._runtime import open_runtime

    run_config = loadtest_config(
        run_config, options.provider, respect_limits=options.respect_limits
    )
    if options.endpoint == "responses":  # chat calls through OpenAI's Responses API
        from .._jobs.loadtest.endpoints import responses_config

        run_config = responses_config(run_config, options.model)
    simulator = None
    if options.provider == "sim" and options.base_url is None:
        from ..simulator import SimulatorConfig

        # The in-process simulator: long enough replies that max_tokens decides their length.
        simulator = SimulatorConfig(output_tokens=1_000_000)
    started = time.monotonic()
    interrupt = Interrupt()
    scraper = await _Scraper.open(options)
    if isinstance(scraper, str):
        return fail(scraper)
    try:
        with (
            ExitStack() as stack,
            trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals,
        ):
            progress = _progress_display(stack)
            async with (
                open_runtime(run_config, simulator=simulator) as rt,
                trio.open_nursery() as nursery,
            ):
                nursery.start_soon(_on_signal, signals, interrupt)
                await scraper.start(nursery)
                runner = _Runner(rt, options, prepared, direct, progress, interrupt, run_config)
                document = await runner.measure()
                nursery.cancel_scope.cancel()
    except ConfigError as exc:
        return fail(str(exc))
    except OSError as exc:  # the records could not be kept (a full disk): nothing to write
        print(f"sluice: error: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        await scraper.close()
    document["config"]["wall_s"] = round(time.monotonic() - started, 3)
    scraper.summarize(document)
    return _finish(options, document, interrupt)


@attrs.define
class _Runner:
    """Runs what the options ask for on one runtime and returns the results document."""

    rt: Any
    options: LoadTestOptions
    prepared: Prepared
    direct: DirectTarget | None
    progress: Callable[[Progress], None]
    interrupt: Interrupt
    config: Any = None
    """The runtime config ``rt`` was opened with, for ``--workers`` processes."""
    workers: int = 1
    """Processes that sent the run (``--workers``)."""

    @property
    def settings(self) -> dict[str, Any]:
        return {
            "base_url": self.options.base_url,
            "respect_limits": self.options.respect_limits,
            "workers": self.workers,
        }

    async def measure(self) -> dict[str, Any]:
        from .._jobs.loadtest.results import results_document

        if self.prepared.plan is not None:
            return await self._sweep(self.prepared.plan)
        levels = self.prepared.levels
        if levels is not None and len(levels) > 1:
            return await self._levels(levels)
        run = await self._one(self.prepared.test)
        return results_document(run, settings=self.settings)

    async def _one(self, test: LoadTest) -> RunResult:
        from .._jobs.loadtest import run_load

        # ---- --workers (loadtest_workers.py): the schedule sent by several processes ----
        from .loadtest_workers import run_spread

        folder = _records_folder(self.options.out)
        spread = await run_spread(
            self.options, test, self.config, self.direct, self.progress, self.interrupt, folder
        )
        if spread is not None:
            self.workers = len(spread.workers)
            return spread.run
        # ---- end --workers ----
        return await run_load(
            self.rt,
            test,
            progress=self.progress,
            interrupt=self.interrupt,
            direct=self.direct,
            folder=_records_folder(self.options.out),
        )

    async def _sweep(self, plan: SweepPlan) -> dict[str, Any]:
        from .._jobs.loadtest import run_sweep
        from .._jobs.loadtest.results import results_document

        result = await run_sweep(
            self.rt,
            self.prepared.test,
            plan,
            burstiness=self.options.burstiness,
            on_point=_point_line,
            progress=self.progress,
            interrupt=self.interrupt,
            direct=self.direct,
            folder=_records_folder(self.options.out),
        )
        return results_document(result.best.run, settings=self.settings, sweep=result)

    async def _levels(self, levels: tuple[int, ...]) -> dict[str, Any]:
        """Each concurrency level in turn, for the same bound; the last one's results with
        every level's summary."""
        from .._jobs.loadtest import ClosedLoop
        from .._jobs.loadtest.results import point_summary, results_document

        runs = []
        for level in levels:
            if self.interrupt.state is not None:
                break
            runs.append(await self._one(attrs.evolve(self.prepared.test, shape=ClosedLoop(level))))
            print(f"sluice loadtest: concurrency {level} done", file=sys.stderr, flush=True)
        document = results_document(runs[-1], settings=self.settings)
        document["concurrency_sweep"] = [point_summary(r) for r in runs]
        return document


class _Scraper:
    """``--server-metrics``: the server's Prometheus series, scraped during the run."""

    def __init__(self, client: Any = None, log: Any = None) -> None:
        self.client = client
        self.log = log

    @classmethod
    async def open(cls, options: LoadTestOptions) -> _Scraper | str:
        """A scraper (doing nothing without ``--server-metrics``), or why the endpoint cannot
        be scraped: it is tried once, before the run."""
        url = options.server_metrics
        if url is None:
            return cls()
        import httpx

        from .._jobs.loadtest.prometheus import ScrapeLog, scrape
        from .._version import USER_AGENT

        interval = options.server_metrics_interval
        client = httpx.AsyncClient(timeout=max(interval, 5.0), headers={"user-agent": USER_AGENT})
        try:
            await scrape(client, url)
        except (httpx.HTTPError, ValueError) as exc:
            await client.aclose()
            return f"cannot scrape --server-metrics {url}: {exc}"
        return cls(client, ScrapeLog(url, interval))

    async def start(self, nursery: Any) -> None:
        if self.log is not None:
            from .._jobs.loadtest.prometheus import scrape_every

            await nursery.start(scrape_every, self.client, self.log)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()

    def summarize(self, document: dict[str, Any]) -> None:
        if self.log is not None:
            from .._jobs.loadtest.prometheus import summarize_scrapes

            document["server_metrics"] = summarize_scrapes(self.log)


def _finish(options: LoadTestOptions, document: dict[str, Any], interrupt: Interrupt) -> int:
    """Write the results (and the report), print the summary; the run's exit status."""
    from .._jobs.loadtest.results import write_outputs, write_report

    out, report = options.out, options.report
    if interrupt.state is not None:
        document["interrupted"] = interrupt.state
        document["valid"] = False
        document["invalid_reason"] = document["aggregates"]["invalid_reason"] or "interrupted"
    try:
        write_outputs(out, document)
        if report is not None:
            write_report(report, document)
    except OSError as exc:
        print(f"sluice: error: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    print(format_summary(document), flush=True)
    print(f"results: {out}" + (f", report: {report}" if report is not None else ""), flush=True)
    if interrupt.state is not None:
        return EXIT_TERMINATED if interrupt.cause == "SIGTERM" else EXIT_INTERRUPTED
    if not document["valid"] or not document["aggregates"]["goodput"]["met"]:
        return EXIT_FAILED
    return EXIT_OK


@loadtest_app.command(name="compare")
async def compare(a: Path, b: Path, /, *more: Path) -> int:
    """Print the differences between results files. With two: each headline number of A and
    B, the change, and whether B is better or worse (for a latency, only when the two runs'
    95 % confidence intervals do not overlap: else "within CI"). With more: every run side by
    side, each with its change against the first, the best of each row marked with *. A
    warning names every setting in which a run's configuration differs from the first's.

    Args:
        a: the baseline results file.
        b: the results file to compare with it.
        more: further results files.
    """
    from .._jobs.loadtest.compare import compare as diff
    from .._jobs.loadtest.compare import (
        config_differences,
        format_comparison,
        format_config_differences,
        format_many,
        load_results,
    )

    paths = [a, b, *more]
    try:
        documents = [load_results(path) for path in paths]
    except ConfigError as exc:
        return fail(str(exc))
    if len(documents) == 2:
        first, second = documents
        print(format_comparison(diff(first, second), f"A {a.name}", f"B {b.name}"), flush=True)
        labels = ["A", "B"]
    else:
        labels = [str(i + 1) for i in range(len(paths))]
        names = [f"{label} {path.name}" for label, path in zip(labels, paths, strict=True)]
        print(format_many(documents, names), flush=True)
    for name, document in zip(labels[1:], documents[1:], strict=True):
        differing = config_differences(documents[0], document)
        if differing:
            print(format_config_differences(differing, labels[0], name))
    for name, document in zip(labels, documents, strict=True):
        if not document.get("valid", True):
            print(f"note: {name} is an invalid run: {document.get('invalid_reason')}")
    return EXIT_OK
