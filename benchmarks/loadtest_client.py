"""How fast can ``sluice loadtest`` itself send before it falls behind its own schedule?

    python -m benchmarks.loadtest_client --base-url http://127.0.0.1:18080
    python -m benchmarks.loadtest_client --base-url http://127.0.0.1:18080 --chunks 50 --itl-ms 2
    python -m benchmarks.loadtest_client --sim --start 20 --seconds 1 --max-steps 3

Runs the load-test harness (:func:`sluice._jobs.loadtest.run_load`, the whole runtime, Poisson
arrivals) against a fast server at increasing request rates, ``--seconds`` per step, and
measures the harness's own *client lag*: how late each request went out against its schedule.
The rate is multiplied by ``--factor`` until the lag's p99 exceeds ``--max-lag-ms`` (1 ms),
then bisected ``--refine`` times between the last good and the first bad rate. The answer,
``max_rate``, is the highest rate whose lag p99 stayed within the limit: above it, a load test
on this machine would be measuring its own client as much as the endpoint.

The server is the nginx mock of ``shared/perf`` (``--base-url``; a URL not ending in ``/v1``
is its root and ``/c<chunks>/t<ttft>/i<itl>/v1`` is appended), or with ``--sim`` sluice's
simulator in this process (then the server's CPU is the client's too: a smoke test, not a
number). One JSON line on stdout; a line per step on stderr.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from typing import Any

import orjson
import trio

import sluice
from sluice._jobs.loadtest import Lengths, LoadTest, OpenLoop, Workload, loadtest_config, run_load

from ._harness import API_KEY, machine_busy_s, mock_url, versions

PROVIDER = "bench"
MODEL = "mock"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.loadtest_client",
        description="The highest request rate the loadtest harness sends on schedule "
        "(client lag p99 within a limit).",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--base-url", help="the server's /v1 root, or the nginx mock's root")
    where.add_argument("--sim", action="store_true", help="serve sluice's simulator in-process")
    p.add_argument("--chunks", type=int, default=None, help="content chunks per reply (16)")
    p.add_argument("--ttft-ms", type=int, default=0, help="nginx mock: time to first token")
    p.add_argument("--itl-ms", type=int, default=0, help="nginx mock: gap between chunks")
    p.add_argument("--start", type=float, default=50.0, help="first rate, requests/s (50)")
    p.add_argument("--factor", type=float, default=1.5, help="rate multiplier per step (1.5)")
    p.add_argument("--refine", type=int, default=3, help="bisection steps after (3)")
    p.add_argument("--seconds", type=float, default=5.0, help="sending time per step (5)")
    p.add_argument("--max-steps", type=int, default=20, help="steps at most (20)")
    p.add_argument("--max-lag-ms", type=float, default=1.0, help="lag p99 limit in ms (1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--arrival",
        choices=("poisson", "constant", "gamma"),
        default="poisson",
        help="arrival process (poisson; constant sends exactly 1/rate apart)",
    )
    a = p.parse_args(argv)
    if a.start <= 0 or a.factor <= 1 or a.seconds <= 0 or a.max_steps < 1 or a.refine < 0:
        p.error("--start and --seconds must be above 0, --factor above 1, --max-steps >= 1")
    if a.chunks is not None and a.chunks < 1:
        p.error("--chunks must be at least 1")
    if a.base_url is not None:
        try:
            a.url, a.expect_chunks = mock_url(a.base_url, a.chunks, a.ttft_ms, a.itl_ms)
        except ValueError as exc:
            p.error(str(exc))
    return a


async def step(rt: sluice.Runtime, a: argparse.Namespace, rate: float) -> dict[str, Any]:
    """One rate for ``a.seconds``: the lag, what was sent and completed, and the CPU used."""
    chunks = a.chunks or 16
    test = LoadTest(
        model=f"{PROVIDER}:{MODEL}",
        shape=OpenLoop.at_rate(rate, arrival=a.arrival),
        duration=a.seconds,
        workload=Workload(input_tokens=Lengths("fixed", 8), output_tokens=Lengths("fixed", chunks)),
        seed=a.seed,
        max_lag=a.max_lag_ms / 1000,
        timeout=60.0,
    )
    cpu, busy, wall = time.process_time(), machine_busy_s(), time.perf_counter()
    run = await run_load(rt, test)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    busy_after = machine_busy_s()
    agg = run.aggregates
    lag = agg["client_lag_s"]
    found = {
        "rate": round(rate, 3),
        "sent": agg["requests"]["total"],
        "ok": agg["requests"]["ok"],
        "failed": agg["requests"]["failed"],
        "first_error": next((r.error for r in run.records if not r.ok), None),
        "lag_p50_ms": lag["p50"] * 1000,
        "lag_p99_ms": lag["p99"] * 1000,
        "lag_max_ms": lag["max"] * 1000,
        "completed_per_s": agg["throughput"]["requests_per_s"],
        "ttft_p50_ms": (agg["ttft_s"]["p50"] or 0) * 1000,
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 3),
        "client_cpu_share": round(cpu / wall, 3) if wall else None,
        "machine_busy_s": (
            round(busy_after - busy, 3) if busy is not None and busy_after is not None else None
        ),
    }
    found["good"] = found["lag_p99_ms"] <= a.max_lag_ms and found["failed"] == 0
    print(
        f"loadtest_client: {rate:8.1f}/s  sent {found['sent']:6d}  lag p50 "
        f"{found['lag_p50_ms']:.3f} ms  p99 {found['lag_p99_ms']:.3f} ms  "
        f"failed {found['failed']}  cpu {found['client_cpu_share']}  "
        f"{'ok' if found['good'] else 'over'}",
        file=sys.stderr,
        flush=True,
    )
    return found


async def run(a: argparse.Namespace) -> dict[str, Any]:
    from sluice.simulator import SimulatorConfig, serve_simulator

    chunks = a.chunks or 16
    async with trio.open_nursery() as services:
        if a.sim:
            sim = SimulatorConfig(output_tokens=chunks)
            port = await services.start(serve_simulator, sim)
            base_url, server = f"http://127.0.0.1:{port}/v1", "in-process sim"
        else:
            base_url, server = a.url, "external"
        provider = sluice.ProviderConfig(
            base_url=base_url, api_key=sluice.Secret(API_KEY), max_connections=4096
        )
        config = loadtest_config(
            sluice.RuntimeConfig(providers={PROVIDER: provider}), PROVIDER, respect_limits=False
        )
        steps: list[dict[str, Any]] = []
        async with sluice.open_runtime(config) as rt:
            await step(rt, argparse.Namespace(**{**vars(a), "seconds": 0.5}), a.start)  # warm-up
            good: float | None = None
            bad: float | None = None
            rate = a.start
            while len(steps) < a.max_steps:
                steps.append(await step(rt, a, rate))
                if not steps[-1]["good"]:
                    bad = rate
                    break
                good, rate = rate, rate * a.factor
            if good is not None and bad is not None:
                for _ in range(a.refine):
                    middle = (good + bad) / 2
                    steps.append(await step(rt, a, middle))
                    if steps[-1]["good"]:
                        good = middle
                    else:
                        bad = middle
        services.cancel_scope.cancel()
    return {
        "benchmark": "loadtest_client",
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "server": server,
        "base_url": base_url,
        "chunks": chunks,
        "max_lag_ms": a.max_lag_ms,
        "seconds_per_step": a.seconds,
        "max_rate": round(good, 1) if good is not None else None,
        "first_bad_rate": round(bad, 1) if bad is not None else None,
        "limit_reached": bad is not None,
        "steps": steps,
        "cpus": os.cpu_count(),
        "versions": versions(),
    }


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    report = trio.run(run, a)
    sys.stdout.write(orjson.dumps(report).decode() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
