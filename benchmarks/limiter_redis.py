"""The RateLimiter over a shared Redis store, in 1, 4 and 16 processes (``limiter.py --store``).

Each process runs the RateLimiter actor with a :class:`~sluice._limits.redis_store.RedisQuotaStore`
(one EVALSHA per admission; settlements queued and sent with the next admission or by the
store's flusher) and cycles acquire + release + settle under one shared requests window too
large ever to block. Reported per process count: admissions per second (all processes
together, over the slowest's wall time), client CPU microseconds per admission (sum of the
processes' ``time.process_time``), Redis server CPU per admission (``INFO cpu`` before and
after), and script runs per admission (1 would mean settlements never needed a trip of their
own).

    python -m benchmarks.limiter --store redis://127.0.0.1:6379/0 --processes 1,4,16 --cycles 20000
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from typing import Any, cast

import orjson
import trio

import sluice
from sluice._limits.cost import Cost
from sluice._limits.redis_store import open_redis_store
from sluice._mail import RateLimiterMsg, Settle
from sluice.actors._rate_limiter import RateLimiterHandle, run_rate_limiter
from sluice.actors._tell import MAILBOX_BUFFER


async def one_process(url: str, prefix: str, cycles: int, concurrency: int) -> dict[str, Any]:
    """Run ``cycles`` admissions through the actor over Redis; one JSON-able result."""
    import random

    limits = sluice.RateLimitConfig(requests_per_minute=10**12)
    cost = Cost(1, 20, 100)
    usage = sluice.Usage(input_tokens=20, output_tokens=80)
    left = cycles
    async with open_redis_store(url, prefix=prefix) as store:
        send, inbox = trio.open_memory_channel[RateLimiterMsg](MAILBOX_BUFFER)
        handle = RateLimiterHandle(send)

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                admission = await handle.acquire("shared", limits, cost)
                await handle.release(admission.ticket)
                await handle.settle(Settle(admission.ticket, "ok", usage=usage))

        async with trio.open_nursery() as nursery:
            await nursery.start(run_rate_limiter, inbox, random.Random(0), store)
            cpu, wall = time.process_time(), time.perf_counter()
            async with trio.open_nursery() as workers:
                for _ in range(concurrency):
                    workers.start_soon(worker)
            wall = time.perf_counter() - wall
            cpu = time.process_time() - cpu
            await store.flush(trio.current_time())
            send.close()
        trips = store.round_trips
    return {"admissions": cycles, "wall_s": wall, "cpu_s": cpu, "script_runs": trips}


def _server_cpu(url: str) -> float:
    async def read() -> float:
        import coredis

        async with coredis.Redis.from_url(url, decode_responses=True) as client:
            info = await client.info("cpu")
            sys_s = cast("str | float", info["used_cpu_sys"])
            user_s = cast("str | float", info["used_cpu_user"])
            return float(sys_s) + float(user_s)

    return trio.run(read)


def run_processes(
    url: str, counts: list[int], cycles: int, concurrency: int
) -> list[dict[str, Any]]:
    """For each process count: ``cycles`` admissions split between that many processes."""
    runs = []
    for count in counts:
        prefix = f"bench-{uuid.uuid4().hex}"
        each = max(1, cycles // count)
        server_before = _server_cpu(url)
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.limiter_redis",
                    url,
                    prefix,
                    str(each),
                    str(concurrency),
                ],
                stdout=subprocess.PIPE,
            )
            for _ in range(count)
        ]
        results = []
        for proc in procs:
            out, _ = proc.communicate(timeout=600)
            if proc.returncode != 0:
                raise RuntimeError(f"a benchmark process failed ({proc.returncode})")
            results.append(orjson.loads(out.splitlines()[-1]))
        server_cpu = _server_cpu(url) - server_before
        admissions = sum(r["admissions"] for r in results)
        wall = max(r["wall_s"] for r in results)
        run = {
            "processes": count,
            "admissions": admissions,
            "admissions_per_s": round(admissions / wall, 1),
            "client_cpu_us_per_admission": round(
                sum(r["cpu_s"] for r in results) / admissions * 1e6, 1
            ),
            "redis_cpu_us_per_admission": round(server_cpu / admissions * 1e6, 1),
            "script_runs_per_admission": round(
                sum(r["script_runs"] for r in results) / admissions, 3
            ),
            "wall_s": round(wall, 3),
        }
        print(
            f"# redis, {count} processes: {run['admissions_per_s']:.0f} admissions/s, "
            f"{run['client_cpu_us_per_admission']:.0f} client CPU-us and "
            f"{run['redis_cpu_us_per_admission']:.0f} Redis CPU-us each",
            file=sys.stderr,
            flush=True,
        )
        runs.append(run)
    return runs


if __name__ == "__main__":
    result = trio.run(one_process, sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    print(orjson.dumps(result).decode(), flush=True)
