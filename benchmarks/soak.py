"""Does one runtime stay flat for weeks? A steady mixed load for N minutes, sampled.

    python -m benchmarks.soak --minutes 30
    python -m benchmarks.soak --minutes 0.1 --sample-every 1 --rate 40   # a smoke run

One runtime, with Prometheus metrics (scraped over its endpoint each sample), tracing off,
hooks on and the ledger writing to a SQLite file, calls a simulator that runs as a separate
process (``sluice sim`` with small 429, 500 and mid-stream disconnect rates). The load is
steady: ``--rate`` calls per second, in turn streams read to the end, streams abandoned after
their first deltas, non-streamed calls and calls that fail (a provider whose every request
the simulator refuses with 400); every ``--burst-every`` seconds a burst of ``--burst`` calls
goes through ``Runtime.map``.

Every ``--sample-every`` seconds it samples this process's RSS, open file descriptors, trio
tasks, gc-tracked objects and ``Runtime.statistics()`` (calls and attempts in flight, pending,
open streams and queued per quota key). After the load it waits past the connection pool's
keep-alive expiry and samples again. It prints a table of the samples, then one JSON line:
the RSS slope (least squares over the samples of the last two thirds of the load, in MB per
hour), the baseline (after one call of each kind, before the load) against the final sample
for fds and tasks, and whether every statistic ended at zero.

The goal (issue 18): RSS grows by at most 1 MB per hour over the last 20 minutes of a
30-minute run; fds and tasks return to their baseline; nothing in statistics() grows.
"""

from __future__ import annotations

import argparse
import gc
import os
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import httpx
import orjson
import trio

import sluice
from sluice import ChatRequest, TextDelta

MODEL = "soak:sim-small"
FAILING = "soakfail:sim-small"
KEEPALIVE_EXPIRY = 5.0
"""The fast transport's default: idle connections older than this are closed."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__)
    p.add_argument("--minutes", type=float, default=30.0, help="length of the load (30)")
    p.add_argument("--rate", type=float, default=50.0, help="steady calls per second (50)")
    p.add_argument("--sample-every", type=float, default=30.0, help="seconds between samples")
    p.add_argument("--burst", type=int, default=200, help="calls per burst through map (200)")
    p.add_argument("--burst-every", type=float, default=60.0, help="seconds between bursts")
    p.add_argument(
        "--warmup",
        type=float,
        default=None,
        help="seconds of load left out of the RSS fit at least (10%% of the run, at most 120)",
    )
    p.add_argument(
        "--idle-wait",
        type=float,
        default=2 * KEEPALIVE_EXPIRY + 1,
        help="seconds to wait after the load before the last sample: past the pool's"
        " keep-alive expiry and its next sweep (11)",
    )
    p.add_argument(
        "--tracemalloc",
        type=int,
        default=0,
        metavar="N",
        help="trace Python allocations and print the N places whose memory grew most between"
        " the start of the fit and the end (slows the run; 0: off)",
    )
    a = p.parse_args(argv)
    if a.minutes <= 0 or a.rate <= 0 or a.sample_every <= 0:
        p.error("--minutes, --rate and --sample-every must be above 0")
    if a.warmup is None:
        a.warmup = min(120.0, a.minutes * 60 * 0.1)
    return a


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_simulator(port: int) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-c", "import sys; from sluice._cli import main; sys.exit(main())",
        "sim", "--port", str(port), "--ttft", "0.05", "--tps", "400", "--output-tokens", "24",
        "--rate-429", "0.005", "--rate-500", "0.01", "--rate-disconnect", "0.01",
    ]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    with trio.fail_after(30):
        while True:
            if process.poll() is not None:
                assert process.stderr is not None
                raise RuntimeError(f"the simulator exited: {process.stderr.read().decode()}")
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
            except OSError:
                await trio.sleep(0.05)
                continue
            await stream.aclose()
            return


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def trio_tasks() -> int:
    count = 0
    root = trio.lowlevel.current_root_task()
    assert root is not None  # called from inside trio.run
    pending = [root]
    while pending:
        task = pending.pop()
        count += 1
        for nursery in task.child_nurseries:
            pending.extend(nursery.child_tasks)
    return count


class Load:
    """The steady mix and the bursts; counts what happened."""

    def __init__(self, rt: sluice.Runtime) -> None:
        self.rt = rt
        self.counts = {"full": 0, "abandoned": 0, "plain": 0, "failing": 0, "burst": 0}
        self.errors: dict[str, int] = {}
        self.unexpected: list[str] = []

    def _error(self, exc: sluice.SluiceError) -> None:
        name = type(exc).__name__
        self.errors[name] = self.errors.get(name, 0) + 1

    async def one(self, i: int) -> None:
        rt = self.rt
        kind = i % 10
        try:
            if kind < 4:
                async with rt.stream(MODEL, f"full {i}") as call:
                    async for _ in call:
                        pass
                self.counts["full"] += 1
                if call.error is not None:
                    self._error(call.error)
            elif kind < 6:
                async with rt.stream(MODEL, f"abandoned {i}") as call:
                    async for event in call:
                        if isinstance(event, TextDelta):
                            break
                self.counts["abandoned"] += 1
            elif kind < 9:
                await rt.chat(MODEL, f"plain {i}", stream=False)
                self.counts["plain"] += 1
            else:
                self.counts["failing"] += 1
                await rt.chat(FAILING, f"failing {i}")
                self.unexpected.append("a failing call succeeded")
        except sluice.SluiceError as exc:
            self._error(exc)

    async def burst(self, n: int) -> None:
        requests = (ChatRequest(model=MODEL, messages=f"burst {j}") for j in range(n))
        async with self.rt.map(requests, max_in_flight=64) as outcomes:
            async for outcome in outcomes:
                self.counts["burst"] += 1
                if outcome.error is not None:
                    self._error(outcome.error)

    async def run(self, seconds: float, rate: float, burst: int, burst_every: float) -> None:
        interval = 1 / rate
        start = trio.current_time()
        async with trio.open_nursery() as nursery:

            async def bursts() -> None:
                while True:
                    await trio.sleep(burst_every)
                    nursery.start_soon(self.burst, burst)

            burster = trio.CancelScope()

            async def run_bursts() -> None:
                with burster:
                    await bursts()

            nursery.start_soon(run_bursts)
            i = 0
            while (now := trio.current_time()) < start + seconds:
                nursery.start_soon(self.one, i)
                i += 1
                await trio.sleep_until(max(now, start + i * interval))
            burster.cancel()


async def sample(rt: sluice.Runtime, t0: float, phase: str) -> dict[str, Any]:
    stats = await rt.statistics()
    gc.collect()
    quotas = stats.quotas.values()
    async with httpx.AsyncClient() as client:
        scraped = await client.get(f"http://127.0.0.1:{rt.metrics_port}/metrics")
    return {
        "t": round(trio.current_time() - t0, 1),
        "phase": phase,
        "rss_mb": round(rss_mb(), 2),
        "fds": open_fds(),
        "tasks": trio_tasks(),
        "gc_objects": len(gc.get_objects()),
        "py_blocks": sys.getallocatedblocks(),
        "calls": stats.calls_in_flight,
        "attempts": sum(stats.attempts_in_flight.values()),
        "pending": sum(q.pending for q in quotas),
        "streams": sum(q.open_streams for q in quotas),
        "queued": sum(sum(q.queued.values()) for q in quotas),
        "quota_keys": len(stats.quotas),
        "metrics_lines": scraped.text.count("\n"),
    }


def slope_mb_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MB), in MB per hour."""
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in points)
    return sxy / sxx * 3600


COLUMNS = (
    "t", "phase", "rss_mb", "fds", "tasks", "gc_objects", "py_blocks", "calls", "attempts",
    "pending", "streams", "queued", "quota_keys", "metrics_lines",
)  # fmt: skip


def table(samples: list[dict[str, Any]]) -> str:
    widths = {c: max(len(c), *(len(str(s[c])) for s in samples)) for c in COLUMNS}
    lines = ["  ".join(c.rjust(widths[c]) for c in COLUMNS)]
    lines += ["  ".join(str(s[c]).rjust(widths[c]) for c in COLUMNS) for s in samples]
    return "\n".join(lines)


async def run(a: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    process = start_simulator(port)
    try:
        await wait_listening(port, process)
        with tempfile.TemporaryDirectory() as folder:
            return await _soak(a, port, Path(folder))
    finally:
        process.terminate()
        process.wait(10)


async def _soak(a: argparse.Namespace, port: int, folder: Path) -> dict[str, Any]:
    base_url = f"http://127.0.0.1:{port}/v1"
    config = sluice.RuntimeConfig(
        providers={
            "soak": sluice.ProviderConfig(
                base_url=base_url, api_key=sluice.Secret("sk-soak"), breaker=None
            ),
            "soakfail": sluice.ProviderConfig(
                base_url=base_url,
                api_key=sluice.Secret("sk-soak"),
                headers={"x-sim-fault": "400"},
                breaker=None,
            ),
        },
        retry=sluice.RetryConfig(budget_min_per_second=50.0),
        ledger=sluice.LedgerConfig(path=str(folder / "ledger.sqlite3")),
        metrics=sluice.MetricsConfig(port=0),
    )
    hooked = [0]
    hooks = sluice.Hooks(on_call_end=lambda record: hooked.__setitem__(0, hooked[0] + 1))
    samples: list[dict[str, Any]] = []
    seconds = a.minutes * 60
    started = time.monotonic()
    async with sluice.open_runtime(config, hooks=hooks) as rt:
        load = Load(rt)
        t0 = trio.current_time()

        fit_from = max(a.warmup, seconds / 3)
        snapshots: list[tracemalloc.Snapshot] = []

        async def sampler() -> None:
            while True:
                await trio.sleep(a.sample_every)
                samples.append(await sample(rt, t0, "load"))
                if a.tracemalloc and not snapshots and samples[-1]["t"] >= fit_from:
                    snapshots.append(tracemalloc.take_snapshot())
                print(table(samples[-1:]).splitlines()[-1], file=sys.stderr, flush=True)

        samples.append(await sample(rt, t0, "start"))
        # One call of each kind starts both providers' actors and pools: the baseline.
        async with trio.open_nursery() as nursery:
            for i in range(10):
                nursery.start_soon(load.one, i)
        samples.append(await sample(rt, t0, "baseline"))
        if a.tracemalloc:
            tracemalloc.start(8)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sampler)
            await load.run(seconds, a.rate, a.burst, a.burst_every)
            nursery.cancel_scope.cancel()
        samples.append(await sample(rt, t0, "drained"))
        await trio.sleep(a.idle_wait)
        samples.append(await sample(rt, t0, "idle"))
        if snapshots:
            _print_growth(snapshots[0], tracemalloc.take_snapshot(), a.tracemalloc)
        ledger = (await rt.ledger_totals()).get(MODEL)
        hook_stats = rt.hook_statistics()
    # The fit: the last two thirds of the load (the last 20 minutes of 30), after warm-up.
    fit = [s for s in samples if s["phase"] == "load" and s["t"] >= fit_from]
    baseline = samples[1]
    final = samples[-1]
    stats_zero = all(final[k] == 0 for k in ("calls", "attempts", "pending", "streams", "queued"))
    return {
        "minutes": a.minutes,
        "rate": a.rate,
        "wall_s": round(time.monotonic() - started, 1),
        "counts": load.counts,
        "errors": load.errors,
        "unexpected": load.unexpected,
        "ledger_calls": ledger.calls if ledger is not None else 0,
        "hook_calls": hooked[0],
        "hook_dropped": hook_stats["dropped"],
        "samples": samples,
        "rss_slope_mb_per_hour": _round(slope_mb_per_hour([(s["t"], s["rss_mb"]) for s in fit])),
        "rss_fit_samples": len(fit),
        "fds_baseline": baseline["fds"],
        "fds_final": final["fds"],
        "tasks_baseline": baseline["tasks"],
        "tasks_final": final["tasks"],
        "statistics_zero": stats_zero,
    }


def _print_growth(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, n: int) -> None:
    """The ``n`` allocation sites whose live memory grew most, with their stacks."""
    print(f"# Python memory that grew from the start of the fit to the end (top {n}):")
    for stat in after.compare_to(before, "traceback")[:n]:
        print(f"#   {stat.size_diff / 1024:+.1f} KiB in {stat.count_diff:+d} blocks")
        for line in stat.traceback.format()[-8:]:
            print(f"#     {line}")


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    report = trio.run(run, a)
    print(table(report["samples"]))
    print(
        f"# RSS slope over the last 2/3 after warm-up: {report['rss_slope_mb_per_hour']} MB/h"
        f" ({report['rss_fit_samples']} samples); fds {report['fds_baseline']} -> "
        f"{report['fds_final']}; tasks {report['tasks_baseline']} -> {report['tasks_final']};"
        f" statistics at zero: {report['statistics_zero']}"
    )
    sys.stdout.buffer.write(orjson.dumps(report) + b"\n")
    sys.stdout.flush()
    return 1 if report["unexpected"] else 0


if __name__ == "__main__":
    sys.exit(main())
