"""``sluice sim``: serve the OpenAI-compatible simulator until Ctrl-C."""

from __future__ import annotations

import signal
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import attrs
from cyclopts import Parameter

from ._common import EXIT_INTERRUPTED, EXIT_OK, fail

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    import trio

    from ..simulator import SimulatorApp, SimulatorConfig
    from ..simulator._shared_quota import SharedServerQuota

__all__ = ["SimFlags", "sim"]


def _read_script(path: Path) -> tuple[str, ...]:
    """The directives of a fault script: one per line, blank lines and ``#`` comments skipped.

    Raises:
        ValueError: the file cannot be read.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the fault script {path}: {exc}") from None
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return tuple(line for line in lines if line)


def _fault_rates(items: list[str]) -> dict[str, float]:
    """``DIRECTIVE=PROBABILITY`` pairs (``stall:30=0.01``).

    Raises:
        ValueError: an item of another form.
    """
    rates: dict[str, float] = {}
    for item in items:
        directive, sep, value = item.rpartition("=")
        try:
            if not sep or not directive:
                raise ValueError
            rates[directive] = float(value)
        except ValueError:
            raise ValueError(
                f"--fault-rate {item!r}: expected DIRECTIVE=PROBABILITY, e.g. stall:30=0.01"
            ) from None
    return rates


@attrs.frozen(kw_only=True)
class SimFlags:
    """The flags of ``sluice sim`` (each attribute is one; its docstring is the help)."""

    host: str = "127.0.0.1"
    """address to listen on."""
    port: int = 8000
    """port to listen on, 1-65535 (0 picks a free one)."""
    ttft: float = 0.0
    """seconds before the first chunk of each reply."""
    tps: float = 0.0
    """tokens per second after the first chunk (0 sends everything at once)."""
    ttft_jitter: float = 0.0
    """standard deviation of the time to first token (gamma draws around --ttft; 0 keeps it
    exact)."""
    itl_jitter: float = 0.0
    """standard deviation of the time per token (gamma draws around 1/--tps; needs --tps)."""
    embed_tps: float = 0.0
    """input tokens per second of an embeddings request, on top of --ttft (0: no time per
    token)."""
    tokens_per_chunk: int = 1
    """tokens carried by each streamed chunk."""
    capacity: int | None = None
    """replies generated at once; more requests wait their turn, so latency grows past
    capacity / generation time requests per second (default: no limit)."""
    output_tokens: int = 24
    """length of a reply when the request's max_tokens does not cut it."""
    seed: int = 0
    """seed for the generated text."""
    latency_seed: int = 0
    """seed of the latency draws (keyed on each request's content)."""
    fault_seed: int = 0
    """seed of the random faults."""
    rate_429: float = 0.0
    """fraction of requests refused with 429 and Retry-After."""
    rate_500: float = 0.0
    """fraction of requests that fail with 500."""
    rate_529: float = 0.0
    """fraction of requests that fail with 529 (overloaded)."""
    rate_disconnect: float = 0.0
    """fraction of replies cut off mid-stream."""
    rate_broken_json: float = 0.0
    """fraction of JSON replies (tool arguments, structured output) broken."""
    fault_rate: tuple[str, ...] | None = None
    """more random faults, DIRECTIVE=PROBABILITY (repeatable), e.g. stall:30=0.01."""
    fault_script: Path | None = None
    """a file of fault directives, one per line (ok, 429:retry_after=2, 529, disconnect:3,
    stall_after:2:30, ...), applied to the first generation requests in arrival order; later
    ones fall back to the random rates."""
    retry_after: float = 1.0
    """seconds announced in Retry-After on a 429 that does not say."""
    disconnect_after: int = 3
    """SSE events sent before a disconnect fault cuts the stream."""
    rpm: int | None = None
    """requests per minute the server admits (429 beyond); default no limit."""
    tpm: int | None = None
    """tokens per minute (prompt plus reply) the server admits; default no limit."""
    ignore_tool_choice: bool = False
    """act as a server without tool support."""
    batch_time: float = 0.0
    """seconds a batch (OpenAI /v1/batches, Anthropic /v1/messages/batches) takes from its
    create to its end."""
    batch_error_rate: float = 0.0
    """fraction of batch lines that fail (error lines)."""
    batch_expiry_rate: float = 0.0
    """fraction of batch lines that expire unprocessed."""
    batch_max_requests: int | None = None
    """requests one batch may hold (default: the API's own, 50,000 or 100,000)."""
    batch_max_bytes: int | None = None
    """bytes of a batch input file or create body (default: 200 MB or 256 MB)."""
    batch_enqueued_tokens: int | None = None
    """prompt tokens per model that may wait in unfinished batches (default: no limit)."""
    batch_upload_delay: float = 0.0
    """seconds a file upload waits, once the file is stored, before it answers."""
    batch_create_delay: float = 0.0
    """seconds a batch create waits, once the batch exists, before it answers."""
    batch_download_rate: float | None = None
    """bytes per second at which batch files and results are sent (default: at once)."""
    drain: float = 5.0
    """seconds the first Ctrl-C lets the requests under way finish."""
    store: str | None = None
    """a redis://host:port/db URL: keep --rpm/--tpm there, so every simulator process using it
    counts as one provider account (rate-limit headers are then not sent: one process cannot
    see the others' use)."""
    metrics_port: int | None = None
    """also serve Prometheus metrics (replies by status) at http://HOST:PORT/metrics."""

    def problem(self) -> str | None:
        """What is wrong with the ports or the drain time, or None."""
        if not 0 <= self.port <= 65535:
            return f"--port {self.port}: a port is 1-65535 (or 0 to pick a free one)"
        if self.drain < 0:
            return "--drain must be 0 or more seconds"
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            return (
                f"--metrics-port {self.metrics_port}: a port is 1-65535 (or 0 to pick a free one)"
            )
        return None

    def simulator_config(self) -> SimulatorConfig:
        """The simulator's config.

        Raises:
            ValueError, TypeError: a setting out of range, or a fault script not read.
        """
        from ..simulator import SimulatorConfig

        return SimulatorConfig(
            ttft=self.ttft,
            tokens_per_second=self.tps,
            ttft_jitter=self.ttft_jitter,
            itl_jitter=self.itl_jitter,
            embedding_tokens_per_second=self.embed_tps,
            tokens_per_chunk=self.tokens_per_chunk,
            capacity=self.capacity,
            output_tokens=self.output_tokens,
            seed=self.seed,
            latency_seed=self.latency_seed,
            fault_seed=self.fault_seed,
            rate_429=self.rate_429,
            rate_500=self.rate_500,
            rate_529=self.rate_529,
            rate_disconnect=self.rate_disconnect,
            rate_broken_json=self.rate_broken_json,
            fault_rates=_fault_rates(list(self.fault_rate or ())),
            script=_read_script(self.fault_script) if self.fault_script is not None else (),
            retry_after=self.retry_after,
            disconnect_after=self.disconnect_after,
            rpm=self.rpm,
            tpm=self.tpm,
            ignore_tool_choice=self.ignore_tool_choice,
            batch_time=self.batch_time,
            batch_error_rate=self.batch_error_rate,
            batch_expiry_rate=self.batch_expiry_rate,
            batch_max_requests=self.batch_max_requests,
            batch_max_bytes=self.batch_max_bytes,
            batch_enqueued_tokens=self.batch_enqueued_tokens,
            batch_upload_delay=self.batch_upload_delay,
            batch_create_delay=self.batch_create_delay,
            batch_download_rate=self.batch_download_rate,
        )


async def sim(flags: Annotated[SimFlags, Parameter(name="*")] = SimFlags()) -> int:
    """Run the simulator: an OpenAI-compatible server with a latency model and faults.

    Point a client at http://HOST:PORT/v1 (for sluice itself: --base-url with any
    provider:model, e.g. sluice chat sim:sim-small hi --base-url http://127.0.0.1:8000/v1).
    It serves chat completions, Anthropic messages, text completions, embeddings, the model
    list, GET /health, and the batch APIs (OpenAI files and batches, Anthropic message
    batches; their counters at GET /sim/stats). Tokens are counted by one rule, prompts and
    replies alike: each run of non-whitespace characters is one token. Ctrl-C stops accepting
    connections and lets the requests under way finish for up to --drain seconds; a second
    Ctrl-C exits at once.
    """
    # Imported here so that `import sluice._cli` does not load the server.
    from .._errors import ConfigError

    problem = flags.problem()
    if problem is not None:
        return fail(problem)
    try:
        config = flags.simulator_config()
    except (ValueError, TypeError) as exc:
        return fail(f"bad simulator setting: {exc}")
    if flags.store is not None and flags.rpm is None and flags.tpm is None:
        return fail("--store keeps the server's quota: give --rpm or --tpm too")
    bind_error: BaseException | None = None
    store_error: BaseException | None = None
    ctrl_c = _CtrlC(flags.drain)
    try:
        await _serve(flags, config, ctrl_c)
    except* ConfigError as group:  # Redis did not answer at the start
        store_error = group
        while isinstance(store_error, BaseExceptionGroup):
            store_error = store_error.exceptions[0]
    except* OSError as group:  # raised inside the server's nursery, so it comes grouped
        bind_error = group
        while isinstance(bind_error, BaseExceptionGroup):
            bind_error = bind_error.exceptions[0]
    if store_error is not None:
        return fail(str(store_error))
    if bind_error is not None:
        reason = bind_error.strerror if isinstance(bind_error, OSError) else None
        return fail(f"cannot listen on {flags.host}:{flags.port}: {reason or bind_error}")
    return EXIT_INTERRUPTED if ctrl_c.interrupted else EXIT_OK


class _CtrlC:
    """The first Ctrl-C drains (no new connections, the requests under way get ``drain``
    seconds); the second exits at once."""

    def __init__(self, drain: float) -> None:
        import trio

        self.drain = drain
        self.stop = trio.Event()
        self.interrupted = False

    async def watch(self, signals: AsyncIterator[int], scope: trio.CancelScope) -> None:
        async for _ in signals:
            self.interrupted = True
            if not self.stop.is_set():
                print(
                    f"sluice sim: stopping: no new connections; the requests under way get up to"
                    f" {self.drain:g} s to finish (Ctrl-C again exits now)",
                    file=sys.stderr,
                    flush=True,
                )
                self.stop.set()
            else:
                print("sluice sim: exiting now", file=sys.stderr, flush=True)
                scope.cancel()
                return


async def _serve(flags: SimFlags, config: SimulatorConfig, ctrl_c: _CtrlC) -> None:
    """Serve until Ctrl-C: the plain simulator, or one with a shared quota (``--store``) or
    metrics (``--metrics-port``)."""
    import trio

    from ..simulator import run_simulator

    host, port, stop, drain = flags.host, flags.port, ctrl_c.stop, flags.drain
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ctrl_c.watch, signals, nursery.cancel_scope)
            if flags.store is None and flags.metrics_port is None:
                await run_simulator(config, host, port, stop=stop, drain=drain)
            else:
                async with AsyncExitStack() as stack:
                    quota = None
                    if flags.store is not None:
                        from .._limits.redis_store import open_redis_store
                        from ..simulator._shared_quota import SharedServerQuota

                        shared = await stack.enter_async_context(
                            open_redis_store(flags.store, prefix="sluice-sim")
                        )
                        quota = SharedServerQuota(shared, rpm=flags.rpm, tpm=flags.tpm)
                    app = await _app(nursery, config, host, flags.metrics_port, quota)
                    await run_simulator(app, host, port, stop=stop, drain=drain)
            nursery.cancel_scope.cancel()


async def _app(
    nursery: trio.Nursery,
    config: SimulatorConfig,
    host: str,
    metrics_port: int | None,
    quota: SharedServerQuota | None,
) -> SimulatorApp:
    """The simulator to serve; with ``metrics_port``, one that counts its replies, and its
    ``/metrics`` endpoint started in ``nursery``."""
    from ..simulator import SimulatorApp

    if metrics_port is None:
        return SimulatorApp(config, shared_quota=quota)
    from .._observe.server import serve_metrics
    from .._observe.sim_metrics import CountingSimulator

    app = CountingSimulator(config, shared_quota=quota)
    await nursery.start(serve_metrics, app.render, host, metrics_port)
    return app
