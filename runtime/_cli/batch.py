"""``sluice batch IN.jsonl -o OUT.jsonl``: an OpenAI Batch file through the runtime.

Progress goes to stderr: a live display on a terminal, else one plain line every
``--log-interval`` seconds. The summary goes to stdout and to ``OUT.summary.json``. The first
Ctrl-C (or a SIGTERM, as schedulers send) stops spending: no more lines are read, the calls
the RateLimiter has not admitted are withdrawn, and the admitted ones finish; a second Ctrl-C
cancels those too. Exit 130 after Ctrl-C, 143 after SIGTERM.
"""

from __future__ import annotations

import math
import os
import signal
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import attrs
import trio
from cyclopts import Parameter

from .._errors import ConfigError
from .._jobs.batch import DEFAULT_MAX_IN_FLIGHT, BatchInterrupt, BatchSummary, run_batch
from .._jobs.batch_lines import parse_shard
from .._jobs.batch_report import format_duration, format_progress, format_summary, summary_path
from .._jobs.provider_batch.cancel import cancel_batches
from .._jobs.provider_batch.engine import LaneOptions
from ._common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, build_config, check_model, fail
from ._preflight import check_batch_paths, check_providers

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from .._jobs.batch import BatchProgress
    from .._jobs.batch_lines import Shard

__all__ = ["BatchFlags", "batch", "parse_duration"]

_LIVE_INTERVAL = 0.5
EXIT_TERMINATED = 143
"""128 + SIGTERM: the exit status schedulers expect from a process they terminated."""
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str, flag: str = "--max-wait") -> float:
    """Seconds from ``30``, ``30s``, ``500ms``, ``2m`` or ``1h``.

    Raises:
        ConfigError: not a positive duration.
    """
    raw = text.strip().lower()
    number, scale = raw, 1.0
    for unit in ("ms", "s", "m", "h"):
        if raw.endswith(unit):
            number, scale = raw[: -len(unit)], _UNITS[unit]
            break
    try:
        seconds = float(number) * scale
    except ValueError:
        seconds = -1.0
    if not seconds > 0 or seconds == float("inf"):
        raise ConfigError(f"{flag} {text!r} is not a duration: write e.g. 30s, 500ms, 2m")
    return seconds


def _live_display(stack: ExitStack) -> Callable[[BatchProgress], None]:
    """A progress bar over two lines of figures, on stderr (a terminal)."""
    from rich.console import Console, Group
    from rich.live import Live
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.text import Text

    bar = Progress(
        BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.description}")
    )
    task = bar.add_task("starting", total=None)
    figures = Text()
    quota = Text(style="dim")
    stack.enter_context(
        Live(Group(bar, figures, quota), console=Console(stderr=True), transient=True)
    )

    def show(p: BatchProgress) -> None:
        s = p.summary
        eta = p.eta
        status = f"ok {s.ok}, failed {s.failed}"
        if p.draining:
            status += ", stopping: the admitted calls finish"
        elif eta is not None:
            status += f", ETA {format_duration(eta)}"
        bar.update(task, completed=s.written, total=s.todo, description=status)
        figures.plain = (
            f"in flight {p.in_flight} (queued {p.queued}), {s.tokens_per_second:.0f} tok/s,"
            f" ${s.cost_usd}"
        )
        cooldown = f"cooldown {p.cooldown:.1f}s" if p.cooldown > 0 else ""
        quota.plain = "; ".join(part for part in (", ".join(p.limits), cooldown) if part)

    return show


def _log_lines(p: BatchProgress) -> None:
    print(f"sluice batch: {format_progress(p)}", file=sys.stderr, flush=True)


_STOPPING = (
    "no new lines; calls still waiting for the rate limit are withdrawn, the admitted ones finish"
)


async def _on_ctrl_c(
    signals: AsyncIterator[int],
    interrupt: BatchInterrupt,
    terminated: list[bool],
    interrupted: list[bool],
) -> None:
    async for signum in signals:
        if signum == signal.SIGTERM:
            terminated[0] = True
            if not interrupt.draining:
                print(
                    f"sluice: terminated: {_STOPPING}; --resume does the rest",
                    file=sys.stderr,
                    flush=True,
                )
                interrupt.drain()
            continue
        interrupted[0] = True
        if not interrupt.draining:
            print(
                f"sluice: stopping: {_STOPPING} (Ctrl-C again cancels them too)",
                file=sys.stderr,
                flush=True,
            )
            interrupt.drain()
        else:
            print(
                "sluice: cancelling the calls in flight; --resume does the rest",
                file=sys.stderr,
                flush=True,
            )
            interrupt.cancel()


@attrs.frozen(kw_only=True)
class BatchFlags:
    """The flags of ``sluice batch`` (each attribute is one; its docstring is the help)."""

    output: Annotated[Path | None, Parameter(name=["--output", "-o"])] = None
    """where the output lines go (required, except with --cancel)."""
    model: str | None = None
    """provider:model (or a model group of the config) used for every line instead of
    body.model. Without it each body.model must be written provider:model (e.g.
    sim:sim-small) or name a group."""
    base_url: str | None = None
    """OpenAI-compatible base URL for --model's provider."""
    api_key: str | None = attrs.field(default=None, repr=False)
    """API key for --model's provider."""
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    """calls running at once (waiting for the quota included)."""
    rpm: int | None = None
    """requests per minute for each provider called, spread evenly over the minute."""
    tpm: int | None = None
    """input plus output tokens per minute for each provider called."""
    max_pending: int | None = None
    """calls per provider waiting for their first token at once."""
    budget: float | None = None
    """US dollars the job may spend (with --job, over every run of it); once it is spent, the
    remaining lines get BudgetExceeded error lines."""
    config: Path | None = None
    """a config file (default: the file named by SLUICE_CONFIG, if any)."""
    job: str | None = None
    """the job the ledger records these calls under (default: a new id per run); a run
    resumed under the same job keeps its job budget."""
    resume: bool = False
    """keep the existing output (a torn last line is cut off), skip the lines it already
    answers and append the rest; with no output yet, simply start. The same command line
    serves the first run and every resume. Error lines are done again as --retry-errors
    says."""
    overwrite: bool = False
    """replace an output file that already holds lines (without it, and without --resume,
    such a file is refused so no paid-for result is lost)."""
    ordered: bool = False
    """write the output in input order (at most --max-in-flight lines held)."""
    shard: str | None = None
    """i/n: process only the lines whose custom_id hashes into shard i of n, so n processes
    or hosts can split one file (each with its own output)."""
    allow_failures: bool = False
    """exit 0 even when some lines failed (their error lines are written)."""
    log_interval: float = 10.0
    """seconds between progress lines when stderr is not a terminal."""
    no_stream: Annotated[bool, Parameter(negative="")] = False
    """make each call one plain request instead of a stream (calls stream by default: a
    call's slot frees at its first token, and a stream that breaks is retried). The output
    lines look the same either way."""
    store: str | None = None
    """a redis://host:port/db URL: share quotas, cooldowns and budgets with every process
    using it (default: $SLUICE_STORE, else this process's memory)."""
    metrics_port: int | None = None
    """serve Prometheus metrics at http://127.0.0.1:PORT/metrics while the job runs
    (docs/metrics.md lists them)."""
    retry_errors: Literal["retriable", "all", "none"] = "retriable"
    """with --resume, which error lines to do again: retriable (timeouts, 429, 5xx, broken
    streams, refused connections, an open breaker, waits past --max-wait; terminal ones such
    as 400, 401/403 or a bad input line are kept), all, or none."""
    max_wait: str | None = None
    """how long a line's call may wait out a failing backend (30s, 2m, ...) before its error
    line is written; default: 10m."""
    via: Literal["realtime", "provider", "auto"] = "realtime"
    """realtime: every line a call; provider: lines through the providers' Batch APIs (half
    the price, results within 24 h; a provider without one runs its lines realtime); auto:
    provider until --deadline nears, then realtime for the lines left."""
    deadline: str | None = None
    """with --via auto: when every line should be done (2h, 30m, ...); the last fifth of it
    is left to the realtime lane."""
    poll_interval: float = 30.0
    """with --via provider or auto: seconds between looks at the batches running."""
    batch_size: int | None = None
    """with --via provider or auto: lines per provider batch at most (default: as many as
    the provider's API takes)."""
    cancel: Path | None = None
    """OUT: cancel the provider batches the output's journal lists as running (--resume then
    merges what they finished and sends the rest again)."""

    def problem(self) -> str | None:
        """What is wrong with the numbers given or the flags' combination, or None."""
        if self.max_in_flight < 1:
            return "--max-in-flight must be at least 1"
        if self.log_interval <= 0:
            return "--log-interval must be positive"
        budget = self.budget
        if budget is not None and not (math.isfinite(budget) and budget >= 0):
            return f"--budget must be a dollar amount of 0 or more, got {budget}"
        if (self.base_url is not None or self.api_key is not None) and self.model is None:
            return "--base-url and --api-key apply to --model's provider: give --model too"
        if self.poll_interval <= 0:
            return "--poll-interval must be positive"
        if self.batch_size is not None and self.batch_size < 1:
            return "--batch-size must be at least 1"
        if self.deadline is not None and self.via != "auto":
            return "--deadline applies to --via auto"
        return None


_NO_FLAGS = BatchFlags()


async def batch(
    input_file: Annotated[
        Path | None,
        Parameter(name="INPUT", help="the JSONL input (custom_id, method, url, body per line)."),
    ] = None,
    /,
    flags: Annotated[BatchFlags, Parameter(name="*")] = _NO_FLAGS,
) -> int:
    """Run an OpenAI Batch API JSONL file and write OpenAI Batch output lines.

    Every input line gets exactly one output line, in completion order unless --ordered
    (match them by custom_id); bad lines and failed calls get an error line naming the input
    line. An output file that already holds lines is refused unless --resume (continue it) or
    --overwrite (replace it); an output that is the input is always refused. A custom_id that
    appears twice in the input, an unknown provider or a missing key stop the command before
    any call. Progress goes to stderr; the summary to stdout and to OUT.summary.json. Calls
    wait out an open breaker or a spent retry budget instead of failing (up to --max-wait).
    One run writes an output at a time (a second is refused, naming the first's process), and
    --resume refuses an output made from another input, --model or --shard (appending lines
    to the input is fine). Every check (config, keys, quota store, metrics port, budget,
    input encoding, a probe write to the output's disk) runs before the output is created or
    changed. Ctrl-C or SIGTERM stops spending: no more lines are read, calls still waiting
    for the rate limit are withdrawn, admitted calls finish; a second Ctrl-C cancels those too
    (--resume does the rest). Exit status: 0 when every line of the output succeeded (or some
    failed and --allow-failures was given), 1 when the output holds error lines (a resume's
    kept ones included) or could not be written, 2 for bad arguments, config or input (the
    output untouched), 130 when interrupted by Ctrl-C, 143 after a SIGTERM. An input without
    request lines gives an empty output, a note on stderr, and status 0. --via provider
    sends the lines through the providers' Batch APIs instead (same input, same output);
    sluice batch --cancel OUT cancels the batches such a run left running.
    """
    problem = flags.problem()
    if problem is not None:
        return fail(problem)
    if flags.cancel is not None:
        return await _cancel(flags, flags.cancel)
    if input_file is None or flags.output is None:
        return fail("give the input file and -o OUT (or --cancel OUT)")
    try:
        check_batch_paths(
            input_file,
            flags.output,
            Path(summary_path(str(flags.output))),
            resume=flags.resume,
            overwrite=flags.overwrite,
        )
        wait_limit = None if flags.max_wait is None else parse_duration(flags.max_wait)
        if flags.deadline is not None:
            parse_duration(flags.deadline, flag="--deadline")
        shard_of = None if flags.shard is None else parse_shard(flags.shard)
        run_config = _run_config(flags)
    except ConfigError as exc:
        return fail(str(exc))
    outcome = await _run(input_file, flags, run_config, shard_of, wait_limit)
    return _finish(input_file, flags, outcome)


def _run_config(flags: BatchFlags) -> Any:
    """The runtime config of the flags and the config file (``--model`` checked).

    Raises:
        ConfigError: the config or the model string is wrong.
    """
    model = flags.model
    run_config = build_config(
        config_file=flags.config,
        provider=None if model is None or ":" not in model else model.partition(":")[0],
        base_url=flags.base_url,
        api_key=flags.api_key,
        store=flags.store,
        metrics_port=flags.metrics_port,
    )
    if model is not None and model not in run_config.groups:
        check_model(model)
    return run_config


@attrs.define
class _Outcome:
    """How the job ended, for :func:`_finish`."""

    summary: BatchSummary = attrs.field(factory=BatchSummary)
    io_error: OSError | None = None
    usage_error: ConfigError | None = None
    made: str | None = None
    """The output's folder when this run made it (removed again after a usage error)."""
    terminated: list[bool] = attrs.field(factory=lambda: [False])
    interrupted: list[bool] = attrs.field(factory=lambda: [False])


async def _run(
    input_file: Path,
    flags: BatchFlags,
    run_config: Any,
    shard_of: Shard | None,
    wait_limit: float | None,
) -> _Outcome:
    """Run the job under Ctrl-C and SIGTERM handling, with progress on stderr."""
    outcome = _Outcome()
    interrupt = BatchInterrupt()

    def preflight(providers: set[str]) -> None:
        """After the input check, before the runtime starts or the output is touched."""
        check_providers(run_config, providers, every=flags.model is not None)

    with ExitStack() as stack:
        live = sys.stderr.isatty()
        progress = _live_display(stack) if live else _log_lines
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    _on_ctrl_c, signals, interrupt, outcome.terminated, outcome.interrupted
                )
                try:
                    assert flags.output is not None
                    outcome.made = _make_folder(flags.output)
                    outcome.summary = await run_batch(
                        input_file,
                        flags.output,
                        model=flags.model,
                        resume=flags.resume,
                        overwrite=flags.overwrite,
                        ordered=flags.ordered,
                        shard=shard_of,
                        max_in_flight=flags.max_in_flight,
                        rpm=flags.rpm,
                        tpm=flags.tpm,
                        max_pending=flags.max_pending,
                        budget=flags.budget,
                        job=flags.job,
                        stream=not flags.no_stream,
                        config=run_config,
                        progress=progress,
                        progress_interval=_LIVE_INTERVAL if live else flags.log_interval,
                        interrupt=interrupt,
                        preflight=preflight,
                        retry_errors=flags.retry_errors,
                        max_wait=wait_limit,
                        via=flags.via,
                        deadline=(
                            None
                            if flags.deadline is None
                            else parse_duration(flags.deadline, flag="--deadline")
                        ),
                        lane_options=LaneOptions(
                            poll_interval=flags.poll_interval, max_requests=flags.batch_size
                        ),
                    )
                except OSError as exc:
                    outcome.io_error = exc
                except ConfigError as exc:
                    outcome.usage_error = exc
                nursery.cancel_scope.cancel()
    return outcome


def _finish(input_file: Path, flags: BatchFlags, outcome: _Outcome) -> int:
    """Print the summary (or the error); the job's exit status."""
    output, summary = flags.output, outcome.summary
    assert output is not None
    if outcome.usage_error is not None:
        _unmake_folder(outcome.made)
        return fail(str(outcome.usage_error))
    if outcome.io_error is not None:
        io_error = outcome.io_error
        name = io_error.filename or output
        print(f"sluice: error: {name}: {io_error.strerror or io_error}", file=sys.stderr)
        return EXIT_FAILED
    if summary.input_lines == 0:
        print(
            f"sluice: note: {input_file} holds no request lines: nothing to do"
            f" (the output {output} is empty)",
            file=sys.stderr,
        )
    print(format_summary(summary, str(output)), flush=True)
    print(f"  summary: {summary_path(str(output))}", flush=True)
    if outcome.terminated[0]:
        return EXIT_TERMINATED
    if outcome.interrupted[0] or summary.interrupted:
        return EXIT_INTERRUPTED
    if summary.failed_in_output and not flags.allow_failures:
        return EXIT_FAILED
    return EXIT_OK


async def _cancel(flags: BatchFlags, output: Path) -> int:
    """``--cancel OUT``: ask the providers to stop the batches OUT's journal lists."""
    try:
        asked = await cancel_batches(output, _run_config(flags))
    except ConfigError as exc:
        return fail(str(exc))
    if asked:
        print(
            f"cancelling {len(asked)} batches ({', '.join(asked)}); sluice batch ... --resume"
            f" merges what they finished into {output} and sends the rest again",
            flush=True,
        )
    else:
        print(f"no batches of {output} are running", flush=True)
    return EXIT_OK


def _make_folder(output: Path) -> str | None:
    """Create the output's folder (and those above it that are missing); return the
    topmost folder created, None when it existed.

    Raises:
        ConfigError: it cannot be created.
    """
    folder = output.absolute().parent
    top: Path | None = None
    while not folder.exists():
        top, folder = folder, folder.parent
    if top is None:
        return None
    try:
        output.absolute().parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the folder for {output}: {exc.strerror}") from None
    return str(top)


def _unmake_folder(top: str | None) -> None:
    """Remove the folders :func:`_make_folder` created, if the run left them empty."""
    if top is None:
        return
    for folder, _, _ in sorted(os.walk(top), key=lambda item: -len(item[0])):
        try:
            os.rmdir(folder)
        except OSError:
            return
