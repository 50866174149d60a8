"""What one open-loop ``sluice loadtest`` request costs the client, in counts a busy machine
does not blur.

    python -m benchmarks.loadtest_cost --base-url http://127.0.0.1:18080
    python -m benchmarks.loadtest_cost --base-url http://127.0.0.1:18080 --rate 500 --profile
    valgrind --tool=callgrind --zero-before=os_getppid --dump-before=os_getpgrp \\
        python -m benchmarks.loadtest_cost --base-url URL --rate 4 --requests 60 --window

Runs a warm-up (a closed loop of 4, which leaves 4 connections in the pool), then an open
loop of ``--requests`` at ``--rate`` per second (constant arrivals, ``--input-tokens`` words
of prompt) against a server: the nginx mock of ``shared/perf`` (see ``overhead.py``), or
``tests/canned_sse_server.py`` (``/c<N>/v1`` for N chunks). At low rates the requests seldom
overlap, so each one's scheduler wake, timer, hand-over, submission, exchange and record are
paid alone. Reports per request: passes of trio's loop (its I/O waits), task steps by task,
tasks spawned, the send lag's p50 and p99, and with ``--profile`` Python function calls (a
second run under cProfile). The timer's spin before a due time (``SLUICE_LOADTEST_TAIL``) is
off unless the environment sets it: its loop passes depend on the machine's speed.

``--window`` calls ``os.getppid()`` right before the measured run and ``os.getpgrp()`` right
after it and nothing else: under callgrind with the options above, the dump it writes
(``callgrind.out.<pid>.1``) holds the instructions of the measured run alone; divide its
total by ``--requests``. Keep the rate low enough under valgrind (it runs the client tens of
times slower) that the requests still seldom overlap.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
from typing import Any

import orjson
import trio

import sluice
from sluice import RuntimeConfig
from sluice._config import ProviderConfig, Secret
from sluice._jobs.loadtest import (
    ClosedLoop,
    Lengths,
    LoadTest,
    OpenLoop,
    Workload,
    loadtest_config,
    run_load,
)
from sluice._jobs.loadtest.stats import percentile
from sluice._jobs.loadtest.wake import TAIL_ENV

from ._harness import API_KEY, mock_url


class _Steps(trio.abc.Instrument):
    """Task steps by task name (the per-call tasks of the runtime summed as one), tasks
    spawned and the loop's I/O waits, while installed."""

    def __init__(self) -> None:
        self.steps: dict[str, int] = {}
        self.spawned = 0
        self.io_waits = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        code = getattr(task.coro, "cr_code", None)
        name = code.co_qualname if code is not None else type(task.coro).__name__
        self.steps[name] = self.steps.get(name, 0) + 1

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += 1

    def after_io_wait(self, timeout: float) -> None:
        self.io_waits += 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True, help="the mock's root, or a /v1 URL")
    p.add_argument("--chunks", type=int, default=None, help="content chunks per reply (20)")
    p.add_argument("--rate", type=float, default=100.0, help="open-loop requests per second")
    p.add_argument("--requests", type=int, default=200, help="requests measured")
    p.add_argument("--input-tokens", type=int, default=8, help="words of each prompt")
    p.add_argument("--profile", action="store_true", help="also count calls under cProfile")
    p.add_argument("--window", action="store_true", help="bracket the run for callgrind")
    return p.parse_args(argv)


async def _measure(rt: sluice.Runtime, test: LoadTest, window: bool) -> dict[str, Any]:
    steps = _Steps()
    trio.lowlevel.add_instrument(steps)
    if window:
        os.getppid()  # callgrind --zero-before=os_getppid
    try:
        run = await run_load(rt, test, aggregates=False)
    finally:
        if window:
            os.getpgrp()  # callgrind --dump-before=os_getpgrp
        trio.lowlevel.remove_instrument(steps)
    records = list(run.records)
    n = len(records)
    lags = sorted(r.lag for r in records)
    return {
        "requests": n,
        "failed": sum(not r.ok for r in records),
        "lag_p50_ms": percentile(lags, 50) * 1000 if lags else None,
        "lag_p99_ms": percentile(lags, 99) * 1000 if lags else None,
        "io_waits_per_request": steps.io_waits / n if n else None,
        "spawned_per_request": steps.spawned / n if n else None,
        "steps_per_request": {k: v / n for k, v in sorted(steps.steps.items())} if n else {},
    }


async def run(a: argparse.Namespace) -> dict[str, Any]:
    url, _ = mock_url(a.base_url, a.chunks, 0, 0)
    config = RuntimeConfig(
        providers={"mock": ProviderConfig(base_url=url, api_key=Secret(API_KEY))}
    )
    config = loadtest_config(config, "mock", respect_limits=False)
    workload = Workload(
        input_tokens=Lengths("fixed", a.input_tokens), output_tokens=Lengths("fixed", 20)
    )
    test = LoadTest(
        model="mock:m",
        shape=OpenLoop.at_rate(a.rate, arrival="constant"),
        requests=a.requests,
        workload=workload,
        warmup=0,
    )
    warm = LoadTest(model="mock:m", shape=ClosedLoop(4), requests=20, workload=workload, warmup=4)
    report: dict[str, Any] = {
        "benchmark": "loadtest_cost",
        "rate": a.rate,
        "input_tokens": a.input_tokens,
    }
    async with sluice.open_runtime(config) as rt:
        await run_load(rt, warm, aggregates=False)  # connections open, caches warm
        report |= await _measure(rt, test, a.window)
        if a.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            try:
                await run_load(rt, test, aggregates=False)
            finally:
                profiler.disable()
            stats: Any = pstats.Stats(profiler)  # total_calls is not in the stubs
            report["python_calls_per_request"] = stats.total_calls / a.requests
    return report


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    os.environ.setdefault(TAIL_ENV, "0")
    sys.stdout.buffer.write(orjson.dumps(trio.run(run, a)) + b"\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
