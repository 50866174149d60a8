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
and reporting (:mod:`sluice._jobs.batch_report`) are pure.

This module holds :func:`run_batch` and its steps, in the order it takes them: the options'
checks (:mod:`sluice._jobs.batch_options`), the output's guard, the resume scan, the input's
check, the runtime, the writer, then the run itself (:mod:`sluice._jobs.batch_loop`, over the
run's state in :mod:`sluice._jobs.batch_run`; progress reports included). The files are read
and written by :mod:`sluice._jobs.batch_files`, in worker threads.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, BinaryIO

import attrs
import orjson
import trio

from .._errors import ConfigError
from .._messages import split_model
from .batch_files import (
    check_input,
    close,
    cut_torn_tail,
    drop_redone,
    lock_output,
    open_output,
    same_file,
    scan_for_resume,
    size,
    write_summary,
)
from .batch_guard import (
    InputRecord,
    PrefixHasher,
    input_record_path,
    probe_output,
    regular_or_missing,
)
from .batch_limits import apply_limits
from .batch_loop import DEFAULT_MAX_WAIT, BatchInterrupt, run_lines
from .batch_options import DEFAULT_MAX_IN_FLIGHT, BatchOptions
from .batch_report import BatchProgress, BatchSummary, summary_json, summary_path
from .batch_run import BatchRun
from .batch_scan import InputCheck

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._config import RuntimeConfig
    from .._runtime import Runtime
    from .batch_lines import Answered, RetryErrors, Shard
    from .provider_batch.engine import LaneOptions, ProviderLane, Via

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "BatchInterrupt",
    "BatchProgress",
    "BatchSummary",
    "run_batch",
]


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
        output: where output lines go. Every keyword argument is documented on
            :class:`~sluice._jobs.batch_options.BatchOptions`, as its attribute of that name.

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
    options = BatchOptions(
        model=model, resume=resume, overwrite=overwrite, ordered=ordered, shard=shard,
        max_in_flight=max_in_flight, rpm=rpm, tpm=tpm, max_pending=max_pending, budget=budget,
        job=job, config=config, runtime=runtime, progress=progress,
        progress_interval=progress_interval, interrupt=interrupt, write_summary=write_summary,
        stream=stream, preflight=preflight, retry_errors=retry_errors, max_wait=max_wait,
        via=via, deadline=deadline, lane_options=lane_options,
    )  # fmt: skip
    return await _run(input, os.fspath(output), options)


async def _run(input: str | os.PathLike[str], name: str, options: BatchOptions) -> BatchSummary:
    """:func:`run_batch` once its options are checked: its steps, in their order."""
    if same_file(input, name):
        raise ConfigError(f"the output {name} is the input file {input}: give another output")
    base = _base_config(options)
    groups = _groups(base, options.model)
    interrupt = options.interrupt if options.interrupt is not None else BatchInterrupt()
    started = trio.current_time()
    async with contextlib.AsyncExitStack() as stack:
        guarded = await _guard(stack, name, options)
        out, answered, record = await _resume(stack, name, options)
        check, fingerprint = await _check(input, name, options, groups, answered, record)
        if options.preflight is not None:
            options.preflight(check.providers)
        rt = options.runtime
        if rt is None:
            rt = await _enter_runtime(stack, _runtime_config(base, options, check.providers))
        # Every check has passed: only now is the output created, cut or replaced.
        out = await _writer(stack, name, out, answered)
        if guarded:
            await trio.to_thread.run_sync(fingerprint.write, input_record_path(name))
        run = _new_run(out, started, check, answered, options)
        lane = options.lane()
        if lane is None:
            await run_lines(rt, run, input, options, groups, interrupt)
        else:
            await _run_lane(lane, rt, run, input, name, options, groups, interrupt)
        summary = run.final
        assert summary is not None  # the lane returned normally
        if options.write_summary:
            await _write_summary(summary, input, name)
    return summary


async def _run_lane(
    lane: ProviderLane,
    rt: Runtime,
    run: BatchRun,
    input: str | os.PathLike[str],
    name: str,
    options: BatchOptions,
    groups: dict[str, frozenset[str]],
    interrupt: BatchInterrupt,
) -> None:
    """The run on the provider lane (:mod:`sluice._jobs.provider_batch`)."""
    await lane.run(
        rt,
        run,
        input=input,
        output=name,
        model=options.model,
        groups=groups,
        resume=options.resume,
        overwrite=options.overwrite,
        budget=options.budget,
        max_in_flight=options.max_in_flight,
        max_wait=DEFAULT_MAX_WAIT if options.max_wait is None else options.max_wait,
        progress=options.progress,
        progress_interval=options.progress_interval,
        interrupt=interrupt,
    )


def _base_config(options: BatchOptions) -> RuntimeConfig:
    """The config the batch's limits are laid over: the runtime's, the one given, or the one
    :func:`sluice.open_runtime` would find."""
    if options.runtime is not None:
        return options.runtime.config
    from .._config import config_from_env

    return options.config if options.config is not None else config_from_env()


def _groups(base: RuntimeConfig, model: str | None) -> dict[str, frozenset[str]]:
    """The providers of each model group of ``base``, by group name.

    Raises:
        ConfigError: ``model`` is neither a group's name nor ``provider:model``.
    """
    groups = {
        name: frozenset(d.model.partition(":")[0] for d in group.deployments)
        for name, group in base.groups.items()
    }
    if model is not None and model not in groups:
        try:
            split_model(model)
        except ValueError as exc:
            raise ConfigError(f"{exc}, or name a model group of the config") from None
    return groups


async def _guard(stack: contextlib.AsyncExitStack, name: str, options: BatchOptions) -> bool:
    """Take the output's lock (released when ``stack`` closes), and refuse an output that
    already holds lines unless ``resume`` or ``overwrite`` says what to do with them.

    Returns whether the output is a regular file (or none yet): only such an output is
    locked, resumed and given an input record.
    """
    guarded = regular_or_missing(name)
    if guarded:
        lock = await trio.to_thread.run_sync(lock_output, name)
        stack.callback(lock.release)
    elif options.resume:
        raise ConfigError(f"output {name} is not a file: it cannot be resumed")
    if not options.resume and not options.overwrite:
        held = size(name) if guarded else 0
        if held:
            raise ConfigError(
                f"output {name} already holds results ({held} bytes); resume continues"
                " it, overwrite replaces it"
            )
    return guarded


async def _resume(
    stack: contextlib.AsyncExitStack, name: str, options: BatchOptions
) -> tuple[BinaryIO | None, Answered | None, InputRecord | None]:
    """With ``resume``: the existing output opened to append to (None when there is none yet;
    closed with ``stack``), what it already answers, and the record of the input it was made
    from (None while it holds nothing). Nothing is changed yet (see :func:`_writer`)."""
    if not options.resume:
        return None, None, None
    out, answered = await trio.to_thread.run_sync(scan_for_resume, name, options.retry_errors)
    record = None
    if out is not None:
        stack.push_async_callback(close, out)
        if size(name):
            record = await trio.to_thread.run_sync(InputRecord.read, input_record_path(name))
    return out, answered, record


async def _check(
    input: str | os.PathLike[str],
    name: str,
    options: BatchOptions,
    groups: dict[str, frozenset[str]],
    answered: Answered | None,
    record: InputRecord | None,
) -> tuple[InputCheck, InputRecord]:
    """Read the whole input once: what it holds (lines to do, providers named) and its
    fingerprint, to be recorded beside the output.

    Raises:
        ConfigError: the input is not UTF-8 text, a custom_id appears twice, or (``record``)
            the output was made from another input, ``model`` or ``shard``.
    """
    check = InputCheck(model=options.model, shard=options.shard, answered=answered, groups=groups)
    hasher = PrefixHasher(record.size if record is not None else None)
    problem = await trio.to_thread.run_sync(check_input, input, check, hasher)
    if check.not_text is not None:
        raise ConfigError(
            f"input file {input} is not UTF-8 text ({check.not_text}): save it as UTF-8"
        )
    if problem is not None:
        raise ConfigError(problem)
    shard = options.shard
    fingerprint = InputRecord(
        input=os.fspath(input),
        size=hasher.size,
        sha256=hasher.hexdigest(),
        model=options.model,
        shard=None if shard is None else f"{shard.index}/{shard.count}",
    )
    if record is not None:
        mismatch = record.mismatch(fingerprint, hasher.prefix_digest, name)
        if mismatch is not None:
            raise ConfigError(mismatch)
    return check, fingerprint


def _runtime_config(
    base: RuntimeConfig, options: BatchOptions, providers: set[str]
) -> RuntimeConfig:
    """``base`` with the job and the batch's limits (on the ``providers`` it calls)."""
    if options.job is not None:
        base = attrs.evolve(base, ledger=attrs.evolve(base.ledger, job=options.job))
    return apply_limits(base, options.limits(), providers)


async def _writer(
    stack: contextlib.AsyncExitStack,
    name: str,
    out: BinaryIO | None,
    answered: Answered | None,
) -> BinaryIO:
    """The output, ready to take lines (closed with ``stack``): a resumed one probed, its torn
    tail cut and the error lines to redo dropped; any other created or emptied, once a probe
    write showed its disk takes data."""
    if out is None or answered is None:
        fresh = await trio.to_thread.run_sync(open_output, name)
        stack.push_async_callback(close, fresh)
        return fresh
    await trio.to_thread.run_sync(probe_output, out, name)
    await trio.to_thread.run_sync(cut_torn_tail, out, answered.keep)
    if answered.redo:
        out = await trio.to_thread.run_sync(drop_redone, out, name, answered)
        stack.push_async_callback(close, out)
    return out


def _new_run(
    out: BinaryIO,
    started: float,
    check: InputCheck,
    answered: Answered | None,
    options: BatchOptions,
) -> BatchRun:
    run = BatchRun(
        out=out,
        started=started,
        todo=check.todo,
        answered=answered,
        shard=options.shard,
        window=trio.Semaphore(options.max_in_flight) if options.ordered else None,
        stream=options.stream,
        max_wait=options.max_wait,
        kept_failed=answered.kept_failed if answered is not None else 0,
        input_lines=check.lines,
    )
    if answered is not None and answered.redo:
        run.count(redone=len(answered.redo))
    return run


async def _write_summary(summary: BatchSummary, input: str | os.PathLike[str], name: str) -> None:
    data = orjson.dumps(
        summary_json(summary, input=os.fspath(input), output=name),
        option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE,
    )
    await trio.to_thread.run_sync(write_summary, summary_path(name), data)


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
