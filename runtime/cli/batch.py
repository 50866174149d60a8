"""``sluice batch IN.jsonl -o OUT.jsonl``: an OpenAI Batch file through the runtime."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from pathlib import Path  # noqa: TC003 (cyclopts reads the annotations at runtime)
from typing import TYPE_CHECKING, Annotated

import attrs
from cyclopts import Parameter

from .._runtime import open_runtime
from ..errors import ConfigError
from ..jobs.batch import DEFAULT_MAX_IN_FLIGHT, BatchSummary, run_batch
from ..jobs.batch_lines import parse_shard
from ._common import EXIT_FAILED, EXIT_OK, build_config, check_model, fail

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["batch", "format_summary"]


def format_summary(summary: BatchSummary, output: Path) -> str:
    """The lines printed when a batch ends."""
    return "\n".join(
        [
            f"batch done: {summary.lines} lines -> {output}",
            f"  ok {summary.ok}, failed {summary.failed}"
            + (f", skipped {summary.skipped} (already answered)" if summary.skipped else ""),
            f"  tokens: {summary.input_tokens} input, {summary.output_tokens} output",
            f"  elapsed {summary.elapsed:.2f} s, {summary.calls_per_second:.1f} calls/s",
        ]
    )


def _progress_display(stack: ExitStack) -> Callable[[BatchSummary], None] | None:
    """A live status line on stderr when it is a terminal; None otherwise."""
    if not sys.stderr.isatty():
        return None
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    progress = stack.enter_context(
        Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
    )
    task = progress.add_task("starting", total=None)

    def show(s: BatchSummary) -> None:
        progress.update(task, description=f"{s.written} done: {s.ok} ok, {s.failed} failed")

    return show


async def batch(
    input_file: Annotated[Path, Parameter(name="INPUT")],
    /,
    *,
    output: Annotated[Path, Parameter(name=["--output", "-o"])],
    model: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    config: Path | None = None,
    job: str | None = None,
    resume: bool = False,
    ordered: bool = False,
    shard: str | None = None,
    allow_failures: bool = False,
) -> int:
    """Run an OpenAI Batch API JSONL file and write OpenAI Batch output lines.

    Every input line gets exactly one output line, in completion order unless --ordered
    (match them by custom_id); bad lines and failed calls get an error line naming the input
    line. An existing output file is replaced unless --resume. A custom_id that appears twice
    in the input stops the command before any call. The summary goes to stdout. Exit status:
    0 when every line succeeded (or some failed and --allow-failures was given), 1 when a line
    failed or the output could not be written, 2 for bad arguments or input.

    Args:
        input_file: the JSONL input (custom_id, method, url, body per line).
        output: where the output lines go.
        model: provider:model used for every line instead of body.model. Without it each
            body.model must be written provider:model (e.g. sim:sim-small).
        base_url: OpenAI-compatible base URL for --model's provider.
        api_key: API key for --model's provider.
        max_in_flight: calls running at once.
        config: a JSON config file (default: the file named by SLUICE_CONFIG, if any).
        job: the job the ledger records these calls under (default: a new id per run); a
            run resumed under the same job keeps its job budget.
        resume: keep the existing output (a torn last line is cut off), skip the lines it
            already answers and append the rest; with no output yet, simply start. The same
            command line serves the first run and every resume.
        ordered: write the output in input order (at most --max-in-flight lines held).
        allow_failures: exit 0 even when some lines failed (their error lines are written).
        shard: i/n: process only the lines whose custom_id hashes into shard i of n, so n
            processes or hosts can split one file (each with its own output).
    """
    if not input_file.is_file():
        problem = "is not a file" if input_file.exists() else "does not exist"
        return fail(f"input file {input_file} {problem}")
    if max_in_flight < 1:
        return fail("--max-in-flight must be at least 1")
    if (base_url is not None or api_key is not None) and model is None:
        return fail("--base-url and --api-key apply to --model's provider: give --model too")
    try:
        shard_of = None if shard is None else parse_shard(shard)
        if model is not None:
            check_model(model)
        run_config = build_config(
            config_file=config,
            provider=None if model is None else model.partition(":")[0],
            base_url=base_url,
            api_key=api_key,
        )
    except ConfigError as exc:
        return fail(str(exc))
    if job is not None:
        run_config = attrs.evolve(run_config, ledger=attrs.evolve(run_config.ledger, job=job))
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return fail(f"cannot create the folder for {output}: {exc.strerror}")

    io_error: OSError | None = None
    usage_error: ConfigError | None = None
    summary = BatchSummary()
    with ExitStack() as stack:
        progress = _progress_display(stack)
        async with open_runtime(run_config) as rt:
            try:
                summary = await run_batch(
                    rt,
                    input_file,
                    output,
                    model=model,
                    max_in_flight=max_in_flight,
                    progress=progress,
                    resume=resume,
                    ordered=ordered,
                    shard=shard_of,
                )
            except OSError as exc:
                io_error = exc
            except ConfigError as exc:
                usage_error = exc
    if usage_error is not None:
        return fail(str(usage_error))
    if io_error is not None:
        name = io_error.filename or output
        print(f"sluice: error: {name}: {io_error.strerror or io_error}", file=sys.stderr)
        return EXIT_FAILED
    print(format_summary(summary, output), flush=True)
    if summary.failed and not allow_failures:
        return EXIT_FAILED
    return EXIT_OK
