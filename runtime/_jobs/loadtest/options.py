"""The choices of one ``sluice loadtest`` run, as given and checked: :class:`LoadTestOptions`.

The command line fills one :class:`LoadTestOptions` (each attribute is a flag: ``rate`` is
``--rate``, ``timeout`` is ``--timeout``; the attribute docstrings are the flags' help), and
making it checks every value that needs no file: a bad one raises
:class:`~sluice._errors.ConfigError` naming the flag and what it takes. :func:`build_test` then
reads the files the options name (a trace, a dataset) and builds the job's
:class:`~.run.LoadTest`. Pure but for those reads; the run itself is elsewhere (:mod:`.run`,
:mod:`.sweep`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ..._errors import ConfigError
from .spec import LoadTest
from .sweep import SweepPlan

if TYPE_CHECKING:
    from .arrivals import LoadShape

__all__ = ["LoadTestOptions", "Prepared", "build_test"]

_SHAPES = ("rate", "concurrency", "sweep", "ramp", "trace")
_FINITE = (
    "rate",
    "burstiness",
    "duration",
    "timeout",
    "max_error_rate",
    "prefix_ratio",
    "server_metrics_interval",
)
_ARRIVALS = (None, "constant", "poisson", "gamma")
_ENDPOINTS = ("chat", "completions", "embeddings", "responses")


def flag(name: str) -> str:
    """The command-line flag of option ``name`` (``max_lag`` is ``--max-lag``)."""
    return "--" + name.replace("_", "-")


@attrs.frozen(kw_only=True)
class LoadTestOptions:
    """Every choice of a load test as the command line gives it, checked when made.

    Raises:
        ConfigError: a value is out of range, or flags that do not go together are given
            (the message names the flags).
    """

    model: str
    """provider:model to call, e.g. sim:sim-small or openai:gpt-4o-mini."""
    out: Path
    """where the JSON results go."""
    overwrite: bool = False
    """replace an existing --out (or --report, or a file beside --out) that is not the result
    of an earlier loadtest; a loadtest's own results are replaced without it."""
    report: Path | None = None
    """also write a self-contained HTML report here."""
    base_url: str | None = None
    """the provider's base URL, e.g. http://127.0.0.1:8000/v1."""
    api_key: str | None = attrs.field(default=None, repr=False)
    """the API key for this provider."""
    rate: float | None = None
    """requests per second, sent open loop (Poisson arrivals by default)."""
    arrival: str | None = None
    """how --rate's arrivals are spaced: constant (exactly 1/rate apart), poisson (exponential
    gaps, the default) or gamma (shape --burstiness)."""
    burstiness: float = 1.0
    """gamma shape of the inter-arrival times with --rate or --sweep: 1 is Poisson, below 1
    burstier, above 1 more even."""
    concurrency: str | None = None
    """closed loop: this many users, each sending when its last request ends; a list
    (1,2,4,8) runs each level in turn for the same bound."""
    sweep: str | None = None
    """rates to sweep to find the saturation point: auto, auto:START, or a list like 1,2,4,8;
    each point runs for --duration seconds."""
    ramp: str | None = None
    """a stepped ramp, RATE:SECONDS steps, e.g. 2:30,4:30,8:30."""
    trace: Path | None = None
    """replay arrival times from a file: one number of seconds per line, JSON objects with
    timestamp (seconds) or timestamp_ms, or Mooncake's JSONL (timestamp in ms, input_length,
    output_length, hash_ids: each request then has the traced lengths, and prompts sharing
    hash ids share those 512-word blocks)."""
    max_in_flight: int | None = None
    """open loop only: requests running at once at most; a request due while it is reached
    waits, and the wait counts as client lag."""
    duration: float | None = None
    """seconds during which requests are sent."""
    requests: int | None = None
    """number of requests to send."""
    dataset: Path | None = None
    """a JSONL file of prompts: {"prompt": "..."} or {"messages": [...]} per line, optionally
    with "output_tokens"; used in order, cycling."""
    input_tokens: str = "128"
    """synthetic prompt length: N, uniform:LO:HI or normal:MEAN:STD."""
    output_tokens: str = "128"
    """output length asked for (max_tokens): N, uniform:LO:HI or normal:MEAN:STD."""
    turns: int = 1
    """multi-turn sessions of this many turns: each turn sends the conversation so far and a
    new --input-tokens message; --requests then counts sessions, and the results add per-turn
    and per-session metrics."""
    prefix_ratio: float = 0.0
    """share (0-1) of each synthetic prompt taken from a shared prefix, for prompt-cache
    studies."""
    prefix_pool: int = 1
    """how many distinct shared prefixes there are."""
    slo: tuple[str, ...] | None = None
    """an objective such as ttft_p99=500ms or itl_p95=50ms (repeatable); goodput counts the
    requests that meet all of them."""
    respect_limits: bool = False
    """keep the configured rate limits, breaker and retries (measures goodput under quota); by
    default limits are off and nothing is retried."""
    max_lag: str = "10ms"
    """send-lag p99 beyond which the run is invalid, e.g. 10ms."""
    max_error_rate: float = 0.05
    """fraction of failed requests beyond which the run is invalid (exit 1)."""
    warmup: str = "1"
    """before measuring, this many requests one after another (0 for none), or for a duration
    such as 5s; they are recorded apart and in no aggregate."""
    server_metrics: str | None = None
    """a Prometheus endpoint (vLLM's, TGI's, sluice's /metrics) to scrape during the run; its
    series go into the results beside the client's."""
    server_metrics_interval: float = 1.0
    """seconds between scrapes."""
    endpoint: str = "chat"
    """chat, embeddings or responses (chat through OpenAI's Responses API), all through the
    runtime (its quotas and, with --respect-limits, its retries), or completions (OpenAI text
    completions, streamed, sent straight to the base URL)."""
    embedding_batch: int = 1
    """inputs per embeddings request (the results add embeddings/s)."""
    timeout: float = 600.0
    """seconds each request may take, queueing included."""
    seed: int = 0
    """seed of the arrival times and the synthetic prompts."""
    config: Path | None = None
    """the config file (default: SLUICE_CONFIG, else the platform's config.toml)."""
    store: str | None = None
    """a redis://host:port/db URL: share quotas, cooldowns and budgets with every process
    using it (default: $SLUICE_STORE, else this process's memory)."""
    metrics_port: int | None = None
    """serve Prometheus metrics at http://127.0.0.1:PORT/metrics while the test runs
    (docs/metrics.md lists them)."""
    # ---- --workers (workers.py) ---------------------------------------------------------------
    workers: str = "auto"
    """processes that send an open-loop schedule (--rate, --ramp, --trace), each with its own
    runtime, the arrivals dealt out in turn and the results merged: a number, or auto (one
    process up to 100 requests/s; above, the fewest that keep each under 0.9 of a core by the
    client CPU per request measured in the warm-up, at most one per core). A sweep, a closed
    loop or --metrics-port runs in one process."""

    # ---- what each request carries beyond the workload (issue 35) ------------------------
    extra_body: str | None = None
    """a JSON object merged into every request's body as-is, e.g. '{"top_k": 20}' (every
    endpoint)."""
    header: tuple[str, ...] | None = None
    """NAME:VALUE added to every request's HTTP headers (repeatable; every endpoint). The
    results keep the names only."""
    fixed_output: bool = False
    """make every reply as long as --output-tokens asks: sends ignore_eos true and min_tokens
    equal to the length asked (vLLM, SGLang and the simulator honour both), and marks the run
    invalid when replies come back shorter (chat, completions, responses; not embeddings,
    which have no output length)."""

    def __attrs_post_init__(self) -> None:
        try:
            _check_shape_flags(self)
            _check_bounds(self)
            _check_workload(self)
            _check_targets(self)
            self.request_extras()
            # The values parsed from text (each raises naming its flag); a trace's shape
            # waits for the file (build_test).
            self.levels()
            self.warmup_split()
            self.sweep_plan()
            if self.trace is None:
                self.load_shape(None)
            _slos_and_lag(self)
            self.worker_count()
        except ValueError as exc:  # an attrs validator of a value made from a flag
            raise ConfigError(str(exc)) from None

    # ---- values parsed from the flags' text ------------------------------------------------

    @property
    def provider(self) -> str:
        return self.model.partition(":")[0]

    def levels(self) -> tuple[int, ...] | None:
        """``--concurrency N`` or a list ``1,2,4,8`` to sweep (None without the flag)."""
        text = self.concurrency
        if text is None:
            return None
        try:
            levels = tuple(int(part) for part in text.split(",") if part.strip())
        except ValueError:
            levels = ()
        if not levels or any(n < 1 for n in levels):
            raise ConfigError(
                f"--concurrency {text!r}: expected a number of users (at least 1) or a list "
                "like 1,2,4"
            )
        return levels

    def warmup_split(self) -> tuple[int, float]:
        """``--warmup`` as (requests, seconds): a count (``N``, 0 for none) or a duration."""
        from .slo import parse_seconds

        text = self.warmup.strip()
        if text.isdigit():
            return int(text), 0.0
        try:
            seconds = parse_seconds(text, flag="--warmup")
        except ConfigError:
            raise ConfigError(
                f"--warmup {text!r}: expected a request count (0 for none) or a duration like 5s"
            ) from None
        return 0, seconds

    def sweep_plan(self) -> SweepPlan | None:
        """The rates ``--sweep`` asks for (None without the flag)."""
        from .sweep import parse_sweep

        if self.sweep is None:
            return None
        try:
            return parse_sweep(self.sweep)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def load_shape(self, trace: tuple[str, tuple[float, ...]] | None) -> LoadShape:
        """The load shape the flags give (``trace``: the name and arrival offsets of the
        ``--trace`` file, as :func:`build_test` reads them)."""
        from .arrivals import ClosedLoop, OpenLoop, Step

        levels = self.levels()
        if levels is not None:
            return ClosedLoop(levels[0])
        if self.ramp is not None:
            return OpenLoop.ramp(
                [Step(r, s) for r, s in _ramp_steps(self.ramp)], max_in_flight=self.max_in_flight
            )
        if self.trace is not None:
            assert trace is not None, "read the --trace file first"
            name, offsets = trace
            return OpenLoop.replay(offsets, source=name, max_in_flight=self.max_in_flight)
        rate = self.rate if self.rate is not None else 1.0  # a sweep starts anywhere
        try:
            return OpenLoop.at_rate(
                rate,
                burstiness=self.burstiness,
                max_in_flight=self.max_in_flight,
                arrival=self.arrival,
            )
        except ValueError as exc:
            raise ConfigError(f"--rate/--burstiness: {exc}") from None

    def worker_count(self) -> int | None:
        """``--workers`` as a number, None for ``auto`` (one for a sweep or closed loop).

        Raises:
            ConfigError: not a number of at least 1 or ``auto``, or more than one for a
                shape that has no schedule to share.
        """
        text = self.workers.strip()
        if text == "auto":
            one = self.sweep is not None or self.concurrency is not None
            return 1 if one or self.metrics_port is not None else None
        count = int(text) if text.isdigit() else 0
        if count < 1:
            raise ConfigError(f"--workers {self.workers!r}: expected a number (at least 1) or auto")
        if count > 1 and (self.sweep is not None or self.concurrency is not None):
            raise ConfigError(
                "--workers shares an open-loop schedule (--rate, --ramp, --trace): not with "
                "--sweep or --concurrency"
            )
        if count > 1 and self.metrics_port is not None:
            raise ConfigError(
                "--metrics-port serves one runtime's metrics: with --workers each worker has "
                "its own; give --workers 1 to serve them"
            )
        return count

    def request_extras(self) -> tuple[dict[str, Any], tuple[tuple[str, str], ...]]:
        """``--extra-body`` as a dict and ``--header`` as (name, value) pairs."""
        return _request_extras(self)

    def outputs(self) -> list[Path]:
        """Every file the run writes: --out, the files beside it, --report."""
        from .results import side_files

        report = [self.report] if self.report is not None else []
        return [self.out, *side_files(self.out).values(), *report]


def _check_shape_flags(o: LoadTestOptions) -> None:
    """Exactly one load shape; the numbers finite; the arrival flags where they apply."""
    given = [flag(name) for name in _SHAPES if getattr(o, name) is not None]
    if len(given) != 1:
        raise ConfigError(
            "give exactly one load shape: --rate, --concurrency, --sweep, --ramp or --trace"
            + (f" (got {', '.join(given)})" if given else "")
        )
    for name in _FINITE:
        value = getattr(o, name)
        if value is not None and not math.isfinite(value):
            raise ConfigError(f"{flag(name)} must be a finite number, not {value!r}")
    open_rate = o.rate is not None or o.sweep is not None
    if o.burstiness != 1.0 and not open_rate:
        raise ConfigError("--burstiness applies to --rate and --sweep")
    if o.arrival is not None and not open_rate:
        raise ConfigError("--arrival applies to --rate and --sweep")
    if o.arrival not in _ARRIVALS:
        raise ConfigError(f"--arrival {o.arrival!r}: expected constant, poisson or gamma")
    if o.burstiness != 1.0 and o.arrival in ("constant", "poisson"):
        raise ConfigError(
            f"--burstiness is the gamma shape: it needs --arrival gamma, not {o.arrival}"
        )
    if o.max_in_flight is not None and (o.concurrency is not None or o.max_in_flight < 1):
        raise ConfigError("--max-in-flight must be at least 1 and applies to open-loop shapes")


def _check_bounds(o: LoadTestOptions) -> None:
    """What bounds the run, and when a run counts as valid."""
    if not 0 <= o.max_error_rate <= 1:
        raise ConfigError("--max-error-rate must be a fraction from 0 to 1, e.g. 0.05")
    if o.sweep is not None and (o.duration is None or o.requests is not None):
        raise ConfigError(
            "--sweep runs each rate for --duration seconds: give --duration, not --requests"
        )
    if o.duration is not None and not o.duration > 0:
        raise ConfigError("--duration must be above 0")
    if o.requests is not None and o.requests < 1:
        raise ConfigError("--requests must be at least 1")
    if o.timeout <= 0:
        raise ConfigError("--timeout must be above 0")
    bounded = o.duration is not None or o.requests is not None
    if not bounded and o.ramp is None and o.trace is None:
        raise ConfigError("bound the run: give --duration SECONDS or --requests N")


def _check_workload(o: LoadTestOptions) -> None:
    """The prompts: lengths, sessions, shared prefixes."""
    from .workload import parse_lengths

    parse_lengths(o.input_tokens, flag="--input-tokens")
    parse_lengths(o.output_tokens, flag="--output-tokens")
    if o.turns < 1 or not 0 <= o.prefix_ratio <= 1 or o.prefix_pool < 1:
        raise ConfigError(
            "--turns and --prefix-pool must be at least 1, --prefix-ratio from 0 to 1"
        )
    if o.turns > 1 and o.dataset is not None:
        raise ConfigError("--turns builds conversations from synthetic prompts: not with --dataset")


def _check_targets(o: LoadTestOptions) -> None:
    """What is called and scraped: the model, the endpoint, the server's metrics."""
    from ..._messages import split_model

    if (o.base_url is not None or o.api_key is not None) and o.model.partition(":")[1] == "":
        raise ConfigError("--base-url and --api-key need --model written provider:model")
    try:
        split_model(o.model)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if o.endpoint not in _ENDPOINTS:
        raise ConfigError(
            f"--endpoint {o.endpoint!r}: expected chat, completions, embeddings or responses"
        )
    if o.embedding_batch < 1:
        raise ConfigError("--embedding-batch must be at least 1")
    if o.server_metrics is not None:
        if not o.server_metrics.startswith(("http://", "https://")):
            raise ConfigError(f"--server-metrics {o.server_metrics!r}: expected an http(s) URL")
        if not o.server_metrics_interval > 0:
            raise ConfigError("--server-metrics-interval must be above 0")


def _request_extras(o: LoadTestOptions) -> tuple[dict[str, Any], tuple[tuple[str, str], ...]]:
    """``--extra-body``, ``--header`` and ``--fixed-output``, checked."""
    import orjson

    if o.fixed_output and o.endpoint == "embeddings":
        raise ConfigError(
            "--fixed-output does not apply to --endpoint embeddings: an embedding has no "
            "output length (--extra-body and --header do apply)"
        )
    body: dict[str, Any] = {}
    if o.extra_body is not None:
        try:
            body = orjson.loads(o.extra_body)
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"--extra-body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise ConfigError(
                f"--extra-body must be a JSON object like '{{\"top_k\": 20}}', not {o.extra_body!r}"
            )
    headers = []
    for text in o.header or ():
        name, colon, value = text.partition(":")
        name = name.strip()
        if not colon or not name or any(c.isspace() for c in name):
            raise ConfigError(f"--header {text!r}: expected NAME:VALUE, e.g. x-team:search")
        headers.append((name, value.strip()))
    return body, tuple(headers)


def _slos_and_lag(o: LoadTestOptions) -> tuple[tuple[Any, ...], float]:
    from .slo import parse_seconds, parse_slo

    slos = tuple(parse_slo(text) for text in o.slo or ())
    return slos, parse_seconds(o.max_lag, flag="--max-lag")


def _ramp_steps(ramp: str) -> list[tuple[float, float]]:
    """``--ramp``'s RATE:SECONDS steps."""
    steps = []
    for part in ramp.split(","):
        r, _, seconds = part.partition(":")
        try:
            step = (float(r), float(seconds))
        except ValueError:
            step = (math.nan, math.nan)
        if not (all(math.isfinite(v) for v in step) and step[0] > 0 and step[1] > 0):
            raise ConfigError(
                f"--ramp {ramp!r}: expected RATE:SECONDS steps, e.g. 2:30,4:30,8:30 "
                "(every number above 0 and finite)"
            )
        steps.append(step)
    return steps


def _shaping(o: LoadTestOptions) -> dict[str, Any]:
    """The :class:`LoadTest` fields of ``--extra-body``, ``--header`` and ``--fixed-output``."""
    body, headers = o.request_extras()
    return {"extra_body": body, "headers": headers, "fixed_output": o.fixed_output}


@attrs.frozen
class Prepared:
    """What :func:`build_test` makes of the options: the test and how to run it."""

    test: LoadTest
    plan: SweepPlan | None
    """The rates to sweep (``--sweep``), or None."""
    levels: tuple[int, ...] | None
    """The concurrency levels (``--concurrency``), or None."""


def build_test(options: LoadTestOptions) -> Prepared:
    """The :class:`~.run.LoadTest` the options ask for, with the trace and dataset read.

    Raises:
        ConfigError: the trace or dataset cannot be read, or a value is out of range.
    """
    from .arrivals import load_trace_entries
    from .workload import Workload, load_dataset, parse_lengths

    o = options
    entries = load_trace_entries(o.trace) if o.trace is not None else ()
    arrivals = None if o.trace is None else (o.trace.name, tuple(e.offset for e in entries))
    shaped = any(e.input_length or e.output_length or e.hash_ids for e in entries)
    duration, requests = o.duration, o.requests
    if duration is None and requests is None:
        if o.ramp is not None:
            duration = sum(seconds for _, seconds in _ramp_steps(o.ramp))
        elif arrivals is not None:
            requests = len(arrivals[1])
    workload = Workload(
        input_tokens=parse_lengths(o.input_tokens, flag="--input-tokens"),
        output_tokens=parse_lengths(o.output_tokens, flag="--output-tokens"),
        dataset=load_dataset(o.dataset) if o.dataset is not None else (),
        dataset_name=o.dataset.name if o.dataset is not None else None,
        prefix_ratio=o.prefix_ratio,
        prefix_pool=o.prefix_pool,
        trace=entries if shaped else (),
        turns=o.turns,
        seed=o.seed,
    )
    slos, max_lag = _slos_and_lag(o)
    warm_count, warm_seconds = o.warmup_split()
    try:
        test = LoadTest(
            model=o.model,
            shape=o.load_shape(arrivals),
            duration=duration,
            requests=requests,
            workload=workload,
            seed=o.seed,
            slos=slos,
            max_lag=max_lag,
            max_error_rate=o.max_error_rate,
            timeout=o.timeout,
            warmup=warm_count,
            warmup_seconds=warm_seconds,
            endpoint=o.endpoint,
            embedding_batch=o.embedding_batch,
            **_shaping(o),
        )
    except ValueError as exc:  # an attrs validator: a value out of range
        raise ConfigError(str(exc)) from None
    return Prepared(test, o.sweep_plan(), o.levels())
