"""What one streamed call costs sluice, in counts that a busy machine does not blur.

    python -m benchmarks.call_cost --base-url http://127.0.0.1:18080 --chunks 20
    python -m benchmarks.call_cost --base-url http://127.0.0.1:18080 --chunks 200 --calls 1000
    python -m benchmarks.call_cost --base-url http://127.0.0.1:18080 --profile
    python -m benchmarks.call_cost --base-url http://127.0.0.1:18080 --profile --observe tracing

Runs ``--calls`` streamed calls through ``rt.map`` (``--concurrency`` at once) against a server
(the nginx mock of ``shared/perf``, see ``overhead.py``) after a warm-up, and reports per call:
trio task steps (trips through the scheduler) by task function, tasks spawned, garbage
collections by generation and the seconds they took, client CPU (``time.process_time``; the
one figure the machine's load changes), and with ``--profile`` Python function calls (a
second run under cProfile). ``--observe`` turns observability on in the measured runtime
(``metrics``; ``tracing-api``, tracing through the OpenTelemetry API's no-op provider;
``tracing``, through the SDK's provider recording every span; ``both``, metrics and the SDK),
so each mode's counts can be set beside the plain call's. ``--observer-times`` times each
observer method per call in the runtime and again replayed hot (``observer_us_per_call``):
how much of observability's cost in the runtime is coming to its code cold. Wall-clock CPU
on a shared box moves by tens of percent from run to run; the counts move by a few tenths.
For instruction counts, run this under ``valgrind --tool=callgrind`` with ``--calls 0`` and
``--calls N`` and take the difference / N.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import sys
import time
from typing import Any

import attrs
import orjson
import trio

import sluice

from ._harness import API_KEY, PROMPT, mock_url


class _Steps(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps = 0
        self.spawned = 0
        self.by_function: dict[str, int] = {}

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1
        code = getattr(task.coro, "cr_code", None)
        name = code.co_qualname if code is not None else type(task.coro).__name__
        self.by_function[name] = self.by_function.get(name, 0) + 1

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += 1


class _Collections:
    """Collections by generation, and the seconds they took, while installed."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            generation = info["generation"]
            self.count[generation] += 1
            self.seconds[generation] += time.perf_counter() - self._started


OBSERVE = ("off", "metrics", "tracing-api", "tracing", "both")


def observed_config(config: sluice.RuntimeConfig, observe: str) -> tuple[sluice.RuntimeConfig, Any]:
    """``config`` with what ``observe`` (one of :data:`OBSERVE`) names on, and the tracer
    provider to open the runtime with (None: OpenTelemetry's global one, or tracing off)."""
    if observe == "off":
        return config, None
    config = attrs.evolve(
        config,
        metrics=sluice.MetricsConfig(enabled=observe in ("metrics", "both")),
        tracing=sluice.TracingConfig(enabled=observe != "metrics"),
    )
    if observe == "metrics":
        return config, None
    if observe == "tracing-api":
        from opentelemetry.trace import NoOpTracerProvider

        return config, NoOpTracerProvider()
    from opentelemetry.sdk.trace import TracerProvider

    return config, TracerProvider()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.call_cost", description=__doc__)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--base-url", help="the server's /v1 root, or the nginx mock's root")
    where.add_argument(
        "--sim",
        action="store_true",
        help="serve sluice's simulator in this process (its own tasks and CPU count too)",
    )
    p.add_argument("--chunks", type=int, default=None, help="content chunks per reply (20)")
    p.add_argument("--calls", type=int, default=2000, help="measured calls (2000)")
    p.add_argument("--concurrency", type=int, default=64, help="calls in flight (64)")
    p.add_argument("--profile", action="store_true", help="also count Python function calls")
    p.add_argument("--profile-out", help="with --profile: write the cProfile stats here")
    p.add_argument(
        "--observer-times",
        action="store_true",
        help="also time each observer method per call, in the runtime and replayed hot "
        "(a third run; see benchmarks/_observer_times.py)",
    )
    p.add_argument(
        "--observe",
        choices=OBSERVE,
        default="off",
        help="observability in the measured runtime: off (default), metrics, tracing-api "
        "(the API's no-op provider), tracing (the SDK's, every span recorded), both",
    )
    a = p.parse_args(argv)
    if a.base_url is not None:
        a.url, a.chunks = mock_url(a.base_url, a.chunks, 0, 0)
    return a


async def run(a: argparse.Namespace) -> dict[str, Any]:
    if not a.sim:
        return await _measure(a)
    from sluice.simulator import SimulatorConfig, serve_simulator

    async with trio.open_nursery() as server:
        sim = SimulatorConfig(output_tokens=a.chunks or 20, ttft=0.0, tokens_per_second=0.0)
        port = await server.start(serve_simulator, sim)
        a.url = f"http://127.0.0.1:{port}/v1"
        result = await _measure(a)
        server.cancel_scope.cancel()
    return result


async def _measure(a: argparse.Namespace) -> dict[str, Any]:
    config = sluice.RuntimeConfig(
        providers={
            "bench": sluice.ProviderConfig(
                base_url=a.url, api_key=sluice.Secret(API_KEY), max_connections=a.concurrency
            )
        }
    )
    config, tracer_provider = observed_config(config, a.observe)
    async with sluice.open_runtime(config, tracer_provider=tracer_provider) as rt:

        async def calls(n: int) -> None:
            requests = (sluice.ChatRequest(model="bench:mock", messages=PROMPT) for _ in range(n))
            async with rt.map(requests, max_in_flight=a.concurrency) as outcomes:
                async for outcome in outcomes:
                    if outcome.error is not None:
                        raise outcome.error

        await calls(2 * a.concurrency)
        n = max(a.calls, 1)
        steps, collections = _Steps(), _Collections()
        if a.calls:
            gc.collect()
            trio.lowlevel.add_instrument(steps)
            gc.callbacks.append(collections)
            started = time.process_time()
            await calls(a.calls)
            cpu = time.process_time() - started
            gc.callbacks.remove(collections)
            trio.lowlevel.remove_instrument(steps)
        else:
            cpu = 0.0
        result: dict[str, Any] = {
            "url": a.url,
            "observe": a.observe,
            "calls": a.calls,
            "concurrency": a.concurrency,
            "task_steps_per_call": round(steps.steps / n, 2),
            "task_steps_per_call_by_function": {
                name: round(count / n, 2)
                for name, count in sorted(steps.by_function.items(), key=lambda kv: -kv[1])
                if count / n >= 0.01
            },
            "tasks_spawned_per_call": round(steps.spawned / n, 2),
            "gc_collections_per_call": [round(c / n, 4) for c in collections.count],
            "gc_ms_per_call": round(sum(collections.seconds) / n * 1000, 4),
            "cpu_ms_per_call": round(cpu / n * 1000, 4),
        }
        if a.profile and a.calls:
            profiler = cProfile.Profile()
            profiler.enable()
            await calls(a.calls)
            profiler.disable()
            if a.profile_out:
                profiler.dump_stats(a.profile_out)
            stats: Any = pstats.Stats(profiler)  # total_calls is not in the stubs
            result["python_calls_per_call"] = round(stats.total_calls / n, 1)
        if a.observer_times and a.calls:
            result["observer_us_per_call"] = await _observer_times(rt, config, a.observe, calls, n)
        return result


async def _observer_times(
    rt: sluice.Runtime, config: sluice.RuntimeConfig, observe: str, calls: Any, n: int
) -> dict[str, dict[str, float]]:
    """Median microseconds of each observer method per call: ``in_situ`` during ``n`` more
    calls, and ``replayed`` through a fresh observer with the same parts on (a new tracer
    provider of the same kind)."""
    from sluice._ledger.setup import price_table
    from sluice._observe.metrics import Metrics
    from sluice._observe.observer import Observer
    from sluice._observe.tracing import Tracer

    from ._observer_times import replayed, timed

    with timed(n) as (in_situ, trail):
        await calls(n)
    key = next(iter((await rt.statistics()).quotas), "bench")
    observed, provider = observed_config(config, observe)
    observer = Observer(
        price_table(config.ledger),
        metrics=Metrics() if observed.metrics.active else None,
        tracer=Tracer(provider) if observed.tracing.enabled else None,
    )
    hot = replayed(trail, observer, key)
    return {"in_situ": in_situ.medians_us(), "replayed": hot.medians_us()}


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    sys.stdout.buffer.write(orjson.dumps(trio.run(run, a)) + b"\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
