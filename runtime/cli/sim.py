"""``sluice sim``: serve the OpenAI-compatible simulator until Ctrl-C."""

from __future__ import annotations

from ._common import EXIT_OK, fail

__all__ = ["sim"]


async def sim(
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    ttft: float = 0.0,
    tps: float = 0.0,
    ttft_jitter: float = 0.0,
    itl_jitter: float = 0.0,
    capacity: int | None = None,
    output_tokens: int = 24,
    seed: int = 0,
    rate_429: float = 0.0,
    rate_500: float = 0.0,
    rate_disconnect: float = 0.0,
) -> int:
    """Run the simulator: an OpenAI-compatible server with a latency model and faults.

    Point a client at http://HOST:PORT/v1 (for sluice itself: --base-url with any
    provider:model, e.g. sluice chat sim:sim-small hi --base-url http://127.0.0.1:8000/v1).

    Args:
        host: address to listen on.
        port: port to listen on (0 picks a free one).
        ttft: seconds before the first chunk of each reply.
        tps: tokens per second after the first chunk (0 sends everything at once).
        ttft_jitter: standard deviation of the time to first token (gamma draws around
            --ttft; 0 keeps it exact).
        itl_jitter: standard deviation of the time per token (gamma draws around 1/--tps;
            needs --tps).
        capacity: replies generated at once; more requests wait their turn, so latency
            grows past capacity / generation time requests per second (default: no limit).
        output_tokens: length of a reply when the request's max_tokens does not cut it.
        seed: seed for the generated text.
        rate_429: fraction of requests refused with 429 and Retry-After.
        rate_500: fraction of requests that fail with 500.
        rate_disconnect: fraction of replies cut off mid-stream.
    """
    # Imported here so that `import sluice.cli` does not load the server.
    from ..simulator import SimulatorConfig, run_simulator

    try:
        config = SimulatorConfig(
            ttft=ttft,
            tokens_per_second=tps,
            ttft_jitter=ttft_jitter,
            itl_jitter=itl_jitter,
            capacity=capacity,
            output_tokens=output_tokens,
            seed=seed,
            rate_429=rate_429,
            rate_500=rate_500,
            rate_disconnect=rate_disconnect,
        )
    except (ValueError, TypeError) as exc:
        return fail(f"bad simulator setting: {exc}")
    bind_error: BaseException | None = None
    try:
        await run_simulator(config, host, port)
    except* OSError as group:  # raised inside the server's nursery, so it comes grouped
        bind_error = group
        while isinstance(bind_error, BaseExceptionGroup):
            bind_error = bind_error.exceptions[0]
    if bind_error is not None:
        reason = bind_error.strerror if isinstance(bind_error, OSError) else None
        return fail(f"cannot listen on {host}:{port}: {reason or bind_error}")
    return EXIT_OK
