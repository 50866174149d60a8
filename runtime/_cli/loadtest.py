"""``sluice loadtest``: measure an endpoint under a planned load; ``sluice loadtest compare``.

The command only checks flags, builds a :class:`~sluice._jobs.loadtest.LoadTest` and shows
progress; the work is in :mod:`sluice._jobs.loadtest`. Progress goes to stderr: a rich live
view on a terminal, a plain line every few seconds otherwise. The summary goes to stdout.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from contextlib import ExitStack
from pathlib import Path  # noqa: TC003 (cyclopts reads the annotations at runtime)
from typing import TYPE_CHECKING, Annotated, Any

from attrs import evolve as attrs_evolve
from cyclopts import App, Parameter

from .._errors import ConfigError
from ._common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, build_config, check_model, fail

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from .._jobs.loadtest import Interrupt, LoadTest, Progress
    from .._jobs.loadtest.arrivals import LoadShape
    from .._jobs.loadtest.sweep import SweepPlan, SweepPoint

__all__ = ["format_summary", "loadtest_app"]

loadtest_app = App(
    name="loadtest",
    help="Measure what an LLM endpoint sustains: TTFT, per-token ITL, throughput, goodput.",
)

_PLAIN_EVERY = 5.0
"""Seconds between progress lines when stderr is not a terminal."""


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f} ms"


def format_summary(document: dict[str, Any]) -> str:
    """The lines printed when a run ends."""
    agg = document["aggregates"]
    reqs, tp = agg["requests"], agg["throughput"]
    lines = [
        f"loadtest {document['config']['model']}: {document['config']['load']}",
        f"  requests: {reqs['total']} sent, {reqs['ok']} ok, {reqs['failed']} failed"
        + (
            f" ({', '.join(f'{k} {v}' for k, v in reqs['errors'].items())})"
            if reqs["failed"]
            else ""
        ),
    ]
    for key, label in (("ttft", "TTFT"), ("itl", "ITL"), ("tpot", "TPOT"), ("e2e", "E2E")):
        s = agg[key]
        lines.append(
            f"  {label:<5} p50 {_ms(s['p50'])}  p90 {_ms(s['p90'])}  p99 {_ms(s['p99'])}  "
            f"mean {_ms(s['mean'])}"
        )
    lines.append(
        f"  throughput: {tp['requests_per_s']:.2f} requests/s, "
        f"{tp['output_tokens_per_s']:.1f} output tokens/s over {tp['elapsed_s']:.1f} s"
    )
    good = agg["goodput"]
    for check in good["slos"]:
        lines.append(
            f"  SLO {check['slo']} <= {check['bound'] * 1000:g} ms: measured "
            f"{_ms(check['measured'])}, {'met' if check['met'] else 'MISSED'}"
        )
    if good["slos"]:
        lines.append(
            f"  goodput: {good['requests_per_s']:.2f} requests/s "
            f"({good['fraction'] * 100:.1f} % of requests met every SLO)"
        )
    lines.append(f"  client send lag p99: {_ms(agg['client_lag']['p99'])}")
    reuse = agg.get("http_reuse")
    if reuse and reuse["measured"]:
        connect, headers, receive = agg["http_connect"], agg["http_headers"], agg["http_receive"]
        lines.append(
            f"  HTTP: connect p50 {_ms(connect['p50'])} p99 {_ms(connect['p99'])} "
            f"({reuse['new']} new), headers p50 {_ms(headers['p50'])} p99 {_ms(headers['p99'])},"
            f" receive p50 {_ms(receive['p50'])} p99 {_ms(receive['p99'])}, "
            f"{reuse['fraction'] * 100:.1f} % reused"
        )
    counts, lengths = agg.get("token_counts"), agg.get("output_length")
    if counts and counts["requests_differing"]:
        lines.append(
            f"  output tokens: server reported {counts['server_reported']}, client counted "
            f"{counts['client_counted']} ({counts['requests_differing']} requests differ)"
        )
    if lengths and (lengths["requests_short"] or lengths["requests_long"]):
        lines.append(
            f"  output length: {lengths['requests_short']} requests shorter and "
            f"{lengths['requests_long']} longer than the max_tokens asked"
        )
    sessions = agg.get("sessions")
    if sessions:
        lines.append(
            f"  sessions: {sessions['complete']} of {sessions['count']} complete "
            f"({sessions['turns']} turns), TTFT p50 by turn: "
            + ", ".join(_ms(t["ttft_p50"]) for t in sessions["per_turn"])
        )
    sweep = document.get("sweep")
    if sweep:
        rate = sweep["saturation_rate"]
        points = sweep["points"]
        if rate is None:
            shown = "not found (even the lowest rate saturated)"
        elif not any(p["saturated"] for p in points):
            top = max(p["rate"] for p in points)
            shown = (
                f"no saturation found: every rate up to {top:.3g}/s was sustained "
                "(sweep higher rates to find it)"
            )
        else:
            shown = f"{rate:.3g}/s"
        lines.append(f"  saturation rate: {shown}")
    swept = document.get("concurrency_sweep")
    if swept:
        for point in swept:
            lines.append(
                f"  concurrency {point['concurrency']}: {point['requests_per_s']:.3g} requests/s,"
                f" TTFT p50 {_ms(point['ttft_p50'])}, E2E p99 {_ms(point['e2e_p99'])}"
            )
    if document.get("interrupted"):
        lines.append(f"  INTERRUPTED ({document['interrupted']}): partial results")
    if not document["valid"]:
        lines.append(f"  INVALID RUN: {document['invalid_reason']}")
    return "\n".join(lines)


def _progress_line(p: Progress) -> str:
    return (
        f"{p.elapsed:6.1f} s  sent {p.sent}  done {p.finished} ({p.failed} failed)  "
        f"in flight {p.in_flight}  TTFT p50 {_ms(p.ttft_p50)}  lag p99 {_ms(p.lag_p99)}"
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
            ("TTFT p50 (recent)", _ms(p.ttft_p50)),
            ("send lag p99 (recent)", _ms(p.lag_p99)),
        ):
            table.add_row(name, value)
        live.update(table, refresh=True)

    return show


def _shape(
    *,
    rate: float | None,
    burstiness: float,
    arrival: str | None,
    concurrency: int | None,
    ramp: str | None,
    trace: tuple[str, tuple[float, ...]] | None,
    max_in_flight: int | None,
) -> LoadShape:
    """The load shape from the flags (exactly one shape flag is given: checked before).

    Raises:
        ConfigError: a bad value.
    """
    from .._jobs.loadtest import ClosedLoop, OpenLoop, Step

    if concurrency is not None:
        if concurrency < 1:
            raise ConfigError("--concurrency must be at least 1")
        return ClosedLoop(concurrency)
    if ramp is not None:
        steps = []
        for part in ramp.split(","):
            r, _, seconds = part.partition(":")
            try:
                step = Step(float(r), float(seconds))
                if not (math.isfinite(step.rate) and math.isfinite(step.seconds)):
                    raise ValueError
                steps.append(step)
            except ValueError:
                raise ConfigError(
                    f"--ramp {ramp!r}: expected RATE:SECONDS steps, e.g. 2:30,4:30,8:30 "
                    "(every number above 0 and finite)"
                ) from None
        return OpenLoop.ramp(steps, max_in_flight=max_in_flight)
    if trace is not None:
        name, offsets = trace
        return OpenLoop.replay(offsets, source=name, max_in_flight=max_in_flight)
    assert rate is not None
    try:
        return OpenLoop.at_rate(
            rate, burstiness=burstiness, max_in_flight=max_in_flight, arrival=arrival
        )
    except ValueError as exc:
        raise ConfigError(f"--rate/--burstiness: {exc}") from None


def _concurrency_list(text: str | None) -> tuple[int, ...] | None:
    """``--concurrency N`` or a list ``1,2,4,8`` to sweep.

    Raises:
        ConfigError: not whole numbers of at least 1.
    """
    if text is None:
        return None
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        levels = ()
    if not levels or any(n < 1 for n in levels):
        raise ConfigError(
            f"--concurrency {text!r}: expected a number of users (at least 1) or a list like 1,2,4"
        )
    return levels


def _warmup(text: str) -> tuple[int, float]:
    """``--warmup``: a request count (``N``, 0 for none) or a duration (``10s``, ``500ms``).

    Raises:
        ConfigError: neither.
    """
    from .._jobs.loadtest.slo import parse_seconds

    text = text.strip()
    if text.isdigit():
        return int(text), 0.0
    try:
        seconds = parse_seconds(text, flag="--warmup")
    except ConfigError:
        raise ConfigError(
            f"--warmup {text!r}: expected a request count (0 for none) or a duration like 5s"
        ) from None
    return 0, seconds


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


def _not_finite(values: dict[str, float | None]) -> str | None:
    """Why one of the numeric flags given is not a finite number, or None."""
    for flag, value in values.items():
        if value is not None and not math.isfinite(value):
            return f"{flag} must be a finite number, not {value!r}"
    return None


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
async def loadtest(
    *,
    model: str,
    out: Path,
    overwrite: bool = False,
    report: Path | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    rate: float | None = None,
    arrival: str | None = None,
    burstiness: float = 1.0,
    concurrency: str | None = None,
    sweep: str | None = None,
    ramp: str | None = None,
    trace: Path | None = None,
    max_in_flight: int | None = None,
    duration: float | None = None,
    requests: int | None = None,
    dataset: Path | None = None,
    input_tokens: str = "128",
    output_tokens: str = "128",
    turns: int = 1,
    prefix_ratio: float = 0.0,
    prefix_pool: int = 1,
    slo: list[str] | None = None,
    respect_limits: bool = False,
    max_lag: str = "10ms",
    max_error_rate: float = 0.05,
    warmup: str = "1",
    server_metrics: str | None = None,
    server_metrics_interval: float = 1.0,
    endpoint: str = "chat",
    embedding_batch: int = 1,
    request_timeout: Annotated[float, Parameter(name="--timeout")] = 600.0,
    seed: int = 0,
    config: Path | None = None,
    store: str | None = None,
    metrics_port: int | None = None,
) -> int:
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

    Args:
        model: provider:model to call, e.g. sim:sim-small or openai:gpt-4o-mini.
        out: where the JSON results go.
        overwrite: replace an existing --out (or --report, or a file beside --out) that is
            not the result of an earlier loadtest; a loadtest's own results are replaced
            without it.
        report: also write a self-contained HTML report here.
        base_url: the provider's base URL, e.g. http://127.0.0.1:8000/v1.
        api_key: the API key for this provider.
        rate: requests per second, sent open loop (Poisson arrivals by default).
        arrival: how --rate's arrivals are spaced: constant (exactly 1/rate apart), poisson
            (exponential gaps, the default) or gamma (shape --burstiness).
        burstiness: gamma shape of the inter-arrival times with --rate or --sweep: 1 is
            Poisson, below 1 burstier, above 1 more even.
        concurrency: closed loop: this many users, each sending when its last request ends;
            a list (1,2,4,8) runs each level in turn for the same bound.
        sweep: rates to sweep to find the saturation point: auto, auto:START, or a list like
            1,2,4,8; each point runs for --duration seconds.
        ramp: a stepped ramp, RATE:SECONDS steps, e.g. 2:30,4:30,8:30.
        trace: replay arrival times from a file: one number of seconds per line, JSON
            objects with timestamp (seconds) or timestamp_ms, or Mooncake's JSONL
            (timestamp in ms, input_length, output_length, hash_ids: each request then has
            the traced lengths, and prompts sharing hash ids share those 512-word blocks).
        max_in_flight: open loop only: requests running at once at most; a request due while
            it is reached waits, and the wait counts as client lag.
        duration: seconds during which requests are sent.
        requests: number of requests to send.
        dataset: a JSONL file of prompts: {"prompt": "..."} or {"messages": [...]} per line,
            optionally with "output_tokens"; used in order, cycling.
        input_tokens: synthetic prompt length: N, uniform:LO:HI or normal:MEAN:STD.
        output_tokens: output length asked for (max_tokens): N, uniform:LO:HI or
            normal:MEAN:STD.
        turns: multi-turn sessions of this many turns: each turn sends the conversation so
            far and a new --input-tokens message; --requests then counts sessions, and the
            results add per-turn and per-session metrics.
        prefix_ratio: share (0-1) of each synthetic prompt taken from a shared prefix, for
            prompt-cache studies.
        prefix_pool: how many distinct shared prefixes there are.
        slo: an objective such as ttft_p99=500ms or itl_p95=50ms (repeatable); goodput counts
            the requests that meet all of them.
        respect_limits: keep the configured rate limits, breaker and retries (measures
            goodput under quota); by default limits are off and nothing is retried.
        max_lag: send-lag p99 beyond which the run is invalid, e.g. 10ms.
        max_error_rate: fraction of failed requests beyond which the run is invalid (exit 1).
        warmup: before measuring, this many requests one after another (0 for none), or for
            a duration such as 5s; they are recorded apart and in no aggregate.
        server_metrics: a Prometheus endpoint (vLLM's, TGI's, sluice's /metrics) to scrape
            during the run; its series go into the results beside the client's.
        server_metrics_interval: seconds between scrapes.
        endpoint: chat (through the runtime, any provider protocol), completions (OpenAI text
            completions, streamed) or embeddings, the last two sent straight to the base URL.
        embedding_batch: inputs per embeddings request (the results add embeddings/s).
        request_timeout: seconds each request may take, queueing included.
        seed: seed of the arrival times and the synthetic prompts.
        store: a redis://host:port/db URL: share quotas, cooldowns and budgets with every
            process using it (default: $SLUICE_STORE, else this process's memory).
        config: the config file (default: SLUICE_CONFIG, else the platform's config.toml).
        metrics_port: serve Prometheus metrics at http://127.0.0.1:PORT/metrics while the
            test runs (docs/metrics.md lists them).
    """
    from .._jobs.loadtest import (
        LoadTest,
        Workload,
        load_dataset,
        parse_lengths,
        parse_slo,
    )
    from .._jobs.loadtest.arrivals import load_trace_entries
    from .._jobs.loadtest.slo import parse_seconds
    from .._jobs.loadtest.sweep import parse_sweep

    shapes = {
        "--rate": rate,
        "--concurrency": concurrency,
        "--sweep": sweep,
        "--ramp": ramp,
        "--trace": trace,
    }
    given = [name for name, value in shapes.items() if value is not None]
    if len(given) != 1:
        return fail(
            "give exactly one load shape: --rate, --concurrency, --sweep, --ramp or --trace"
            + (f" (got {', '.join(given)})" if given else "")
        )
    infinite = _not_finite(
        {
            "--rate": rate,
            "--burstiness": burstiness,
            "--duration": duration,
            "--timeout": request_timeout,
            "--max-error-rate": max_error_rate,
            "--prefix-ratio": prefix_ratio,
            "--server-metrics-interval": server_metrics_interval,
        }
    )
    if infinite is not None:
        return fail(infinite)
    if burstiness != 1.0 and rate is None and sweep is None:
        return fail("--burstiness applies to --rate and --sweep")
    if arrival is not None and rate is None and sweep is None:
        return fail("--arrival applies to --rate and --sweep")
    if arrival not in (None, "constant", "poisson", "gamma"):
        return fail(f"--arrival {arrival!r}: expected constant, poisson or gamma")
    if burstiness != 1.0 and arrival in ("constant", "poisson"):
        return fail(f"--burstiness is the gamma shape: it needs --arrival gamma, not {arrival}")
    if not 0 <= max_error_rate <= 1:
        return fail("--max-error-rate must be a fraction from 0 to 1, e.g. 0.05")
    if max_in_flight is not None and (concurrency is not None or max_in_flight < 1):
        return fail("--max-in-flight must be at least 1 and applies to open-loop shapes")
    if sweep is not None and (duration is None or requests is not None):
        return fail(
            "--sweep runs each rate for --duration seconds: give --duration, not --requests"
        )
    if duration is not None and not duration > 0:
        return fail("--duration must be above 0")
    if requests is not None and requests < 1:
        return fail("--requests must be at least 1")
    if request_timeout <= 0:
        return fail("--timeout must be above 0")
    if (base_url is not None or api_key is not None) and model.partition(":")[1] == "":
        return fail("--base-url and --api-key need --model written provider:model")
    outputs = [out, *_side_files(out)] + ([report] if report is not None else [])
    unwritable = preflight_outputs(outputs, overwrite=overwrite)
    if unwritable is not None:
        return fail(unwritable)
    try:
        check_model(model)
        levels = _concurrency_list(concurrency)
        warm_count, warm_seconds = _warmup(warmup)
        plan = None
        if sweep is not None:
            try:
                plan = parse_sweep(sweep)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        entries = load_trace_entries(trace) if trace is not None else ()
        arrivals = None if trace is None else (trace.name, tuple(e.offset for e in entries))
        shaped = any(e.input_length or e.output_length or e.hash_ids for e in entries)
        if turns < 1 or not 0 <= prefix_ratio <= 1 or prefix_pool < 1:
            raise ConfigError(
                "--turns and --prefix-pool must be at least 1, --prefix-ratio from 0 to 1"
            )
        if turns > 1 and dataset is not None:
            raise ConfigError(
                "--turns builds conversations from synthetic prompts: not with --dataset"
            )
        shape = _shape(
            rate=rate if rate is not None else (1.0 if sweep is not None else None),
            burstiness=burstiness,
            arrival=arrival,
            concurrency=levels[0] if levels else None,
            ramp=ramp,
            trace=arrivals,
            max_in_flight=max_in_flight,
        )
        if duration is None and requests is None:
            if ramp is not None:
                duration = sum(float(p.partition(":")[2]) for p in ramp.split(","))
            elif arrivals is not None:
                requests = len(arrivals[1])
            else:
                raise ConfigError("bound the run: give --duration SECONDS or --requests N")
        workload = Workload(
            input_tokens=parse_lengths(input_tokens, flag="--input-tokens"),
            output_tokens=parse_lengths(output_tokens, flag="--output-tokens"),
            dataset=load_dataset(dataset) if dataset is not None else (),
            dataset_name=dataset.name if dataset is not None else None,
            prefix_ratio=prefix_ratio,
            prefix_pool=prefix_pool,
            trace=entries if shaped else (),
            turns=turns,
            seed=seed,
        )
        test = LoadTest(
            model=model,
            shape=shape,
            duration=duration,
            requests=requests,
            workload=workload,
            seed=seed,
            slos=tuple(parse_slo(text) for text in slo or ()),
            max_lag=parse_seconds(max_lag, flag="--max-lag"),
            max_error_rate=max_error_rate,
            timeout=request_timeout,
            warmup=warm_count,
            warmup_seconds=warm_seconds,
        )
        run_config = build_config(
            config_file=config,
            provider=model.partition(":")[0],
            base_url=base_url,
            api_key=api_key,
            store=store,
            metrics_port=metrics_port,
        )
        if model.partition(":")[0] != "sim" or base_url is not None:
            from ._preflight import check_providers

            check_providers(run_config, [model.partition(":")[0]])  # fail once, early
    except ConfigError as exc:
        return fail(str(exc))
    except ValueError as exc:  # an attrs validator: a value out of range
        return fail(str(exc))
    if endpoint not in ("chat", "completions", "embeddings"):
        return fail(f"--endpoint {endpoint!r}: expected chat, completions or embeddings")
    if embedding_batch < 1:
        return fail("--embedding-batch must be at least 1")
    direct = None
    if endpoint != "chat":
        from .._jobs.loadtest.endpoints import DirectTarget

        provider, _, model_name = model.partition(":")
        entry = run_config.providers.get(provider)
        url = base_url or (entry.base_url if entry is not None else None)
        if not url:
            return fail(
                f"--endpoint {endpoint} sends straight to the server: give --base-url "
                "(or the provider's base_url in the config)"
            )
        key = api_key
        if key is None and entry is not None and entry.api_key is not None:
            key = entry.api_key.reveal()
        if key is None and entry is not None and entry.api_key_env:
            key = os.environ.get(entry.api_key_env)
        direct = DirectTarget(url.rstrip("/"), model_name, key)
        test = attrs_evolve(test, endpoint=endpoint, embedding_batch=embedding_batch)
    if server_metrics is not None:
        if not server_metrics.startswith(("http://", "https://")):
            return fail(f"--server-metrics {server_metrics!r}: expected an http(s) URL")
        if not server_metrics_interval > 0:
            return fail("--server-metrics-interval must be above 0")
    unwritable = probe_folders(outputs)  # last: it may create the output's folder
    if unwritable is not None:
        return fail(unwritable)
    settings = {"base_url": base_url, "respect_limits": respect_limits}
    return await _run(
        test,
        run_config,
        plan,
        burstiness,
        settings,
        out,
        report,
        respect_limits,
        levels,
        (server_metrics, server_metrics_interval) if server_metrics else None,
        direct,
    )


def _side_files(out: Path) -> list[Path]:
    """The files written beside the JSON results: per-request JSONL and CSV, aggregates CSV."""
    from .._jobs.loadtest.results import side_files

    return list(side_files(out).values())


async def _run(
    test: LoadTest,
    run_config: Any,
    plan: SweepPlan | None,
    burstiness: float,
    settings: dict[str, Any],
    out: Path,
    report: Path | None,
    respect_limits: bool,
    levels: tuple[int, ...] | None = None,
    scraping: tuple[str, float] | None = None,
    direct: Any = None,
) -> int:
    import attrs
    import trio

    from .._jobs.loadtest import ClosedLoop, Interrupt, loadtest_config, run_load, run_sweep
    from .._jobs.loadtest.results import (
        point_summary,
        results_document,
        write_outputs,
        write_report,
    )
    from .._runtime import open_runtime

    provider = test.model.partition(":")[0]
    run_config = loadtest_config(run_config, provider, respect_limits=respect_limits)
    simulator = None
    if provider == "sim" and settings["base_url"] is None:
        from ..simulator import SimulatorConfig

        # The in-process simulator: long enough replies that max_tokens decides their length.
        simulator = SimulatorConfig(output_tokens=1_000_000)

    def point_line(p: SweepPoint) -> None:
        state = f"saturated: {p.verdict.reason}" if p.verdict.saturated else "sustained"
        print(
            f"sluice loadtest: sweep {p.rate:.3g}/s -> {p.verdict.achieved:.3g}/s completed, "
            f"{state}",
            file=sys.stderr,
            flush=True,
        )

    started = time.monotonic()
    folder = _records_folder(out)
    interrupt = Interrupt()
    document: dict[str, Any] | None = None
    scrapes = None
    if scraping is not None:
        import httpx

        from .._jobs.loadtest.prometheus import ScrapeLog, scrape, scrape_every
        from .._version import USER_AGENT

        client = httpx.AsyncClient(
            timeout=max(scraping[1], 5.0), headers={"user-agent": USER_AGENT}
        )
        try:
            await scrape(client, scraping[0])  # fail once, before the run
        except (httpx.HTTPError, ValueError) as exc:
            await client.aclose()
            return fail(f"cannot scrape --server-metrics {scraping[0]}: {exc}")
        scrapes = ScrapeLog(scraping[0], scraping[1])
    try:
        with (
            ExitStack() as stack,
            trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals,
        ):
            progress = _progress_display(stack)
            runtime = open_runtime(run_config, simulator=simulator)
            async with runtime as rt, trio.open_nursery() as nursery:
                nursery.start_soon(_on_signal, signals, interrupt)
                if scrapes is not None:
                    await nursery.start(scrape_every, client, scrapes)
                if plan is not None:
                    result = await run_sweep(
                        rt,
                        test,
                        plan,
                        burstiness=burstiness,
                        on_point=point_line,
                        progress=progress,
                        interrupt=interrupt,
                        direct=direct,
                        folder=folder,
                    )
                    document = results_document(result.best.run, settings=settings, sweep=result)
                elif levels is not None and len(levels) > 1:
                    runs = []
                    for level in levels:
                        if interrupt.state is not None:
                            break
                        run = await run_load(
                            rt,
                            attrs.evolve(test, shape=ClosedLoop(level)),
                            progress=progress,
                            interrupt=interrupt,
                            direct=direct,
                            folder=folder,
                        )
                        runs.append(run)
                        print(
                            f"sluice loadtest: concurrency {level} done",
                            file=sys.stderr,
                            flush=True,
                        )
                    document = results_document(runs[-1], settings=settings)
                    document["concurrency_sweep"] = [point_summary(r) for r in runs]
                else:
                    run = await run_load(
                        rt,
                        test,
                        progress=progress,
                        interrupt=interrupt,
                        direct=direct,
                        folder=folder,
                    )
                    document = results_document(run, settings=settings)
                nursery.cancel_scope.cancel()
    except ConfigError as exc:
        return fail(str(exc))
    except OSError as exc:  # the records could not be kept (a full disk): nothing to write
        print(f"sluice: error: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        if scrapes is not None:
            await client.aclose()
    assert document is not None
    document["config"]["wall_seconds"] = round(time.monotonic() - started, 3)
    if scrapes is not None:
        from .._jobs.loadtest.prometheus import summarize_scrapes

        document["server_metrics"] = summarize_scrapes(scrapes)
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
    B, the change, and whether B is better or worse. With more: every run side by side, each
    with its change against the first, the best of each row marked with *.

    Args:
        a: the baseline results file.
        b: the results file to compare with it.
        more: further results files.
    """
    from .._jobs.loadtest.compare import compare as diff
    from .._jobs.loadtest.compare import format_comparison, format_many, load_results

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
    for name, document in zip(labels, documents, strict=True):
        if not document.get("valid", True):
            print(f"note: {name} is an invalid run: {document.get('invalid_reason')}")
    return EXIT_OK
