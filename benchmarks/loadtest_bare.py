"""What send lag does a bare asyncio + aiohttp open loop hold on this machine? The yardstick for
``benchmarks.loadtest_rate``.

    ../shared/perf/serve.sh start        # the nginx mock on 127.0.0.1:18080 (MOCK_PORT)
    python -m benchmarks.loadtest_bare --base-url http://127.0.0.1:18080 --rate 1000
    python -m benchmarks.loadtest_bare --base-url http://127.0.0.1:18080 --processes 1,2 --find-max
    python -m benchmarks.loadtest_bare --sim --rate 30 --seconds 1     # smoke test, no number

The send lag of ``sluice loadtest`` at a rate says as much about the machine as about sluice:
the generator shares the cores with the server and with its own processes. This runs the
simplest open-loop generator one would write without sluice, in the way the bare loops of
``shared/perf`` are written: one asyncio event loop and one ``aiohttp.ClientSession`` per
process, Poisson arrivals at ``--rate`` for ``--seconds``, each request a streamed chat call
read line by line to its end with ``orjson.loads`` per ``data:`` line. Arrival ``i`` of the
one schedule (drawn from one seed) is sent by process ``i mod n``, as ``--workers`` splits it.

A request's send lag is the time its task starts (where it calls ``session.post``, the point
sluice's records call ``sent``: the hand-over to the client) minus its due time, on
``time.perf_counter``; each process's loop sleeps until the next due time with
``loop.call_at`` and starts the request's task there. Before the schedule every process
makes ``--warmup`` calls one after another (connections open, code warm), like the load
tester's warm-up. Reported as in ``loadtest_rate``: lag p50, p99 and max over every request
of every process, failures, client CPU per request (the processes' own CPU over the schedule,
start-up excluded) and how busy the machine was.

Beside it, ``timer_floor``: one process that does nothing but sleep until each due time of
the same schedule (``time.sleep``, a nanosecond kernel timer) and notes how late it woke: what
the kernel (and, in a virtual machine, the host) adds to waking an idle process. A generator
that sleeps between its sends pays at least that; one whose loop is kept busy, or that wakes
early and waits on the core, need not.

It imports neither trio nor sluice. One JSON line on stdout; a line per run on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import multiprocessing
import os
import random
import sys
import time
from typing import Any

import orjson

_PROMPT = "hi"
_API_KEY = "sk-mock"
"""The prompt and key every benchmark sends (``_harness.PROMPT``, ``_harness.API_KEY``), here
so that a sending process need not import the harness."""

START_DELAY = 2.0
"""Seconds from launching the processes to the schedule's start: enough for each to import
aiohttp, open its session and warm up."""


def _schedule(rate: float, seconds: float, seed: int) -> list[float]:
    """Offsets (seconds from the start) of a Poisson schedule at ``rate`` for ``seconds``."""
    draw = random.Random(f"{seed}:arrivals")
    offsets: list[float] = []
    at = 0.0
    while True:
        at += draw.expovariate(rate)
        if at >= seconds:
            return offsets
        offsets.append(at)


async def _side(
    url: str, offsets: list[float], t0: float, warmup: int, prompt: str, api_key: str
) -> dict[str, Any]:
    import aiohttp

    body = orjson.dumps(
        {
            "model": "mock",
            "messages": [{"role": "user", "content": prompt}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    headers = {
        "content-type": "application/json",
        "accept": "text/event-stream",
        "authorization": f"Bearer {api_key}",
    }
    target = url.rstrip("/") + "/chat/completions"
    lags: list[float] = []
    failed = 0
    connector = aiohttp.TCPConnector(limit=0)
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    async def one(due: float | None) -> None:
        nonlocal failed
        if due is not None:
            lags.append(time.perf_counter() - due)
        try:
            async with session.post(target, data=body, headers=headers) as resp:
                done = False
                async for line in resp.content:
                    if line.startswith(b"data: "):
                        payload = line[6:].strip()
                        if payload == b"[DONE]":
                            done = True
                        else:
                            orjson.loads(payload)
                if resp.status != 200 or not done:
                    failed += 1
        except (aiohttp.ClientError, OSError, ValueError):
            failed += 1

    def start(due: float) -> None:
        task = loop.create_task(one(due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(warmup):
            await one(None)
        failed = 0
        gc.collect()
        gc.freeze()
        # the loop's clock and perf_counter both run on CLOCK_MONOTONIC: one offset joins them
        shift = loop.time() - time.perf_counter()
        cpu = time.process_time()
        for offset in offsets:
            loop.call_at(t0 + offset + shift, start, t0 + offset)
        await asyncio.sleep(max(t0 + (offsets[-1] if offsets else 0) - time.perf_counter(), 0))
        while tasks:
            await asyncio.gather(*list(tasks))
        cpu = time.process_time() - cpu
    return {"lags": lags, "failed": failed, "cpu_s": cpu}


def timer_floor(rate: float, seconds: float) -> dict[str, Any]:
    """How late a process that only sleeps wakes for each due time of the schedule."""
    offsets = _schedule(rate, seconds, 0)
    late: list[float] = []
    t0 = time.perf_counter() + 0.05
    for offset in offsets:
        due = t0 + offset
        pause = due - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        late.append(time.perf_counter() - due)
    late.sort()
    n = len(late)
    found = {
        "rate": round(rate, 1),
        "count": n,
        "late_p50_ms": round(late[n // 2] * 1000, 3) if n else None,
        "late_p99_ms": round(late[min(int(0.99 * n), n - 1)] * 1000, 3) if n else None,
        "late_max_ms": round(late[-1] * 1000, 3) if n else None,
    }
    print(
        f"timer_floor:   {rate:7.1f}/s  sleeps {n:6d}  late p50 {found['late_p50_ms']} p99 "
        f"{found['late_p99_ms']} max {found['late_max_ms']} ms",
        file=sys.stderr,
    )
    return found


def _process(url: str, offsets: list[float], t0: float, warmup: int, out: Any) -> None:
    """A sending process: this module is all it imports (not the harness, which loads trio,
    httpx and sluice)."""
    out.send(asyncio.run(_side(url, offsets, t0, warmup, _PROMPT, _API_KEY)))
    out.close()


def one_run(url: str, rate: float, seconds: float, processes: int, warmup: int) -> dict[str, Any]:
    """The schedule at ``rate`` for ``seconds`` sent by ``processes`` processes: its numbers."""
    offsets = _schedule(rate, seconds, 0)
    context = multiprocessing.get_context("spawn")
    t0 = time.perf_counter() + START_DELAY  # CLOCK_MONOTONIC: the same in every process
    pipes, children = [], []
    for index in range(processes):
        mine = offsets[index::processes]
        receive, send = context.Pipe(duplex=False)
        child = context.Process(target=_process, args=(url, mine, t0, warmup, send))
        child.start()
        pipes.append(receive)
        children.append(child)
    from ._harness import machine_busy_s

    busy, wall = machine_busy_s(), time.perf_counter()
    results = [pipe.recv() for pipe in pipes]
    for child in children:
        child.join()
    busy_after, wall = machine_busy_s(), time.perf_counter() - wall
    lags = sorted(lag for r in results for lag in r["lags"])
    sent = len(lags)
    cpu = sum(r["cpu_s"] for r in results)

    def at(p: float) -> float:
        return lags[min(int(p / 100 * sent), sent - 1)] * 1000 if sent else 0.0

    found = {
        "rate": round(rate, 1),
        "processes": processes,
        "sent": sent,
        "failed": sum(r["failed"] for r in results),
        "lag_p50_ms": round(at(50), 3),
        "lag_p99_ms": round(at(99), 3),
        "lag_max_ms": round(lags[-1] * 1000, 3) if lags else 0.0,
        "client_cpu_ms_per_request": round(cpu / sent * 1000, 3) if sent else None,
        "busy_share": (
            round((busy_after - busy) / wall / (os.cpu_count() or 1), 3)
            if busy is not None and busy_after is not None
            else None
        ),
    }
    print(
        f"loadtest_bare: {rate:7.1f}/s processes {processes}  sent {sent:6d}  lag p50 "
        f"{found['lag_p50_ms']:.3f} p99 {found['lag_p99_ms']:.3f} max {found['lag_max_ms']:.2f}"
        f" ms  failed {found['failed']}  cpu {found['client_cpu_ms_per_request']} ms/req  "
        f"machine busy {found['busy_share']}",
        file=sys.stderr,
    )
    return found


def find_max(a: argparse.Namespace, url: str, processes: int) -> dict[str, Any]:
    """The largest rate whose lag p99 stays within ``--max-lag-ms`` (as ``loadtest_rate``)."""
    good: float | None = None
    bad: float | None = None
    rate, steps = a.start, 0
    while steps < a.max_steps:
        steps += 1
        run = one_run(url, rate, a.seconds, processes, a.warmup)
        ok = run["lag_p99_ms"] <= a.max_lag_ms and run["failed"] == 0
        if ok:
            good = rate
        else:
            bad = rate
            break
        rate *= a.factor
    for _ in range(a.refine if good is not None and bad is not None else 0):
        assert good is not None and bad is not None
        rate = (good + bad) / 2
        run = one_run(url, rate, a.seconds, processes, a.warmup)
        if run["lag_p99_ms"] <= a.max_lag_ms and run["failed"] == 0:
            good = rate
        else:
            bad = rate
    return {"processes": processes, "max_rate": good, "first_bad_rate": bad}


def run(a: argparse.Namespace, url: str, server: str) -> dict[str, Any]:
    counts = [int(c) for c in a.processes.split(",") if c.strip()]
    return {
        "benchmark": "loadtest_bare",
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "server": server,
        "base_url": url,
        "chunks": a.chunks,
        "seconds_per_run": a.seconds,
        "max_lag_ms": a.max_lag_ms,
        "timer_floor": timer_floor(a.rate, a.seconds),
        "points": [one_run(url, a.rate, a.seconds, n, a.warmup) for n in counts],
        "max_rates": [find_max(a, url, n) for n in counts] if a.find_max else [],
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.loadtest_bare",
        description="Send lag of a bare asyncio + aiohttp open loop: the machine's yardstick.",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--base-url", help="the nginx mock's root, or a server's /v1 root")
    where.add_argument("--sim", action="store_true", help="a sluice sim process as the server")
    p.add_argument("--rate", type=float, default=1000.0, help="requests/s (1000)")
    p.add_argument("--processes", default="1,2", help="comma-separated process counts (1,2)")
    p.add_argument("--seconds", type=float, default=10.0, help="schedule length (10)")
    p.add_argument("--chunks", type=int, default=20, help="content chunks per reply (20)")
    p.add_argument("--warmup", type=int, default=5, help="calls per process before (5)")
    p.add_argument("--max-lag-ms", type=float, default=1.0, help="lag p99 limit (1 ms)")
    p.add_argument("--find-max", action="store_true", help="also find the largest rate held")
    p.add_argument("--start", type=float, default=250.0, help="--find-max: first rate (250)")
    p.add_argument("--factor", type=float, default=1.4, help="--find-max: multiplier (1.4)")
    p.add_argument("--refine", type=int, default=2, help="--find-max: bisection steps (2)")
    p.add_argument("--max-steps", type=int, default=8, help="--find-max: steps at most (8)")
    a = p.parse_args(argv)
    if a.rate <= 0 or a.seconds <= 0 or a.start <= 0 or a.factor <= 1:
        p.error("--rate, --seconds and --start must be above 0, --factor above 1")
    from ._harness import mock_url, sim_server

    if a.sim:
        with sim_server(a.chunks) as url:
            report = run(a, url, "sluice sim process")
    else:
        try:
            url, _ = mock_url(a.base_url, a.chunks, 0, 0)
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
        report = run(a, url, "external")
    sys.stdout.buffer.write(orjson.dumps(report) + b"\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
