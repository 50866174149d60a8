"""How fast does the RateLimiter admit, and how much of a real limit does sluice use?

    python -m benchmarks.limiter                      # both parts, defaults (~40 s)
    python -m benchmarks.limiter --only actor --cycles 100000
    python -m benchmarks.limiter --only sim --limit 600 --per 60 --windows 1
    python -m benchmarks.limiter --store redis://127.0.0.1:6379/0 --processes 1,4,16

Part ``redis`` (only with ``--store``): see :mod:`benchmarks.limiter_redis`.

Part ``actor``: the RateLimiter actor on its own (real clock, no HTTP). ``--concurrency``
tasks run ``--cycles`` acquire + release + settle cycles between them, spread round-robin over
1, 10 and 1,000 quota keys, under a requests-per-minute window too large ever to block. Reports
admissions per second and client CPU microseconds per admission (the actor plus the handle's
side of each cycle: ``time.process_time``) for each key count.

Part ``sim``: limit utilisation under saturation. sluice's simulator runs in this process and
enforces ``--limit`` requests per ``--per`` seconds itself (a sliding window counted when each
request reaches it); sluice is configured with the same window. ``rt.map`` keeps ``--demand``
calls in flight (each takes ~0.1 s, so they could go far faster than the limit allows) for
``--windows`` whole windows after the first admission; then the calls already in flight drain.
Reports the largest number of admissions in any interval of ``--per`` seconds (sluice's, from
its quota store, and the server's, from the requests its quota accepted), utilisation (the
admissions in the first ``--windows`` windows over ``windows x limit``, on both sides), the
429s the server sent and when, and the calls that failed. All times are trio's clock, which is
the real clock here.

The simulator's own quota is per minute. For a window other than 60 s the benchmark gives the
simulator a ``QuotaWindow`` of that length; the simulator still reports its limit in
``x-ratelimit-*`` headers, which sluice reads as per-minute limits (as providers mean them), so
learning from headers is turned off in that case (``--learn`` turns it back on).

One JSON line on stdout; progress on stderr. Exit status 1 when sluice exceeded a window, a
call did not end, the runtime still held something afterwards, or the run hit its time cap.
Calls that failed (the server's 429s after the retries allowed) are reported, not fatal.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import gc
import math
import os
import random
import sys
import time
from typing import TYPE_CHECKING, Any

import orjson
import trio

import sluice
from sluice._limits.cost import Cost
from sluice._limits.store import MemoryQuotaStore, Reservation
from sluice._mail import RateLimiterMsg, Settle
from sluice.actors._rate_limiter import RateLimiterHandle, run_rate_limiter
from sluice.actors._tell import MAILBOX_BUFFER
from sluice.simulator import SimulatorApp, SimulatorConfig, serve_simulator
from sluice.simulator._quota import QuotaWindow

from ._harness import API_KEY, machine_busy_s, versions

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from sluice._limits.store import BudgetAsk, BudgetRefused, TooLarge, WindowSpec
    from sluice.simulator import SimResponse
    from sluice.simulator._app import Headers

PROVIDER = "bench"
MODEL = "sim-small"
PROMPT = "hi"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.limiter",
        description="RateLimiter admissions per second, and limit utilisation under saturation.",
    )
    p.add_argument(
        "--only", choices=["both", "actor", "sim"], default="both", help="which part to run"
    )
    actor = p.add_argument_group("actor: the RateLimiter alone")
    actor.add_argument(
        "--cycles", type=int, default=50_000, help="acquire+release+settle cycles per key count"
    )
    actor.add_argument("--concurrency", type=int, default=100, help="tasks cycling at once (100)")
    actor.add_argument("--keys", default="1,10,1000", help="comma-separated key counts (1,10,1000)")
    sim = p.add_argument_group("sim: utilisation against the simulator")
    sim.add_argument("--limit", type=int, default=100, help="requests per window (100)")
    sim.add_argument("--per", type=float, default=10.0, help="the window in seconds (10)")
    sim.add_argument(
        "--windows",
        type=int,
        default=2,
        help="whole windows of saturation after the first admission (2)",
    )
    sim.add_argument(
        "--demand",
        type=int,
        default=None,
        help="calls in flight, queued ones included (the limit; more makes the drain after "
        "the run wait for further windows)",
    )
    sim.add_argument(
        "--ttft", type=float, default=0.05, help="simulator: seconds to the first chunk (0.05)"
    )
    sim.add_argument(
        "--output-tokens", type=int, default=16, help="simulator: tokens per reply (16)"
    )
    sim.add_argument(
        "--tokens-per-second",
        type=float,
        default=400.0,
        help="simulator: stream pace after the first chunk; 0 = all at once (400)",
    )
    sim.add_argument(
        "--learn",
        action="store_true",
        help="learn limits from the simulator's headers even when --per is not 60",
    )
    sim.add_argument(
        "--max-seconds",
        type=float,
        default=None,
        help="hard cap on the saturation run and its drain (windows x per + 2 x per + 10)",
    )
    shared = p.add_argument_group("redis: the RateLimiter over a shared Redis store")
    shared.add_argument(
        "--store",
        default=None,
        help="a redis:// URL: run only this part, the actor over Redis in several processes",
    )
    shared.add_argument(
        "--processes", default="1,4,16", help="comma-separated process counts (1,4,16)"
    )
    a = p.parse_args(argv)
    try:
        a.process_counts = [int(k) for k in a.processes.split(",") if k.strip()]
    except ValueError:
        p.error("--processes must be comma-separated integers")
    try:
        a.key_counts = [int(k) for k in a.keys.split(",") if k.strip()]
    except ValueError:
        p.error("--keys must be comma-separated integers")
    if a.cycles < 1 or a.concurrency < 1 or not a.key_counts or min(a.key_counts) < 1:
        p.error("--cycles, --concurrency and every --keys count must be at least 1")
    if a.limit < 1 or a.per <= 0 or a.windows < 1:
        p.error("--limit and --windows must be at least 1, --per above 0")
    if a.demand is None:
        a.demand = a.limit
    if a.demand < 1:
        p.error("--demand must be at least 1")
    if a.max_seconds is None:
        a.max_seconds = (a.windows + 2) * a.per + 10.0
    return a


# Part 1: the actor alone ------------------------------------------------------------------


async def actor_run(keys: int, cycles: int, concurrency: int) -> dict[str, Any]:
    """``cycles`` acquire + release + settle cycles over ``keys`` keys; never blocked."""
    limits = sluice.RateLimitConfig(requests_per_minute=10**12)
    names = [f"key-{i}" for i in range(keys)]
    cost = Cost(1, 20, 100)
    usage = sluice.Usage(input_tokens=20, output_tokens=80)
    send, inbox = trio.open_memory_channel[RateLimiterMsg](MAILBOX_BUFFER)
    handle = RateLimiterHandle(send)
    left = cycles
    counter = 0
    slowest = 0.0

    async def worker() -> None:
        nonlocal left, counter, slowest
        while left > 0:
            left -= 1
            name = names[counter % keys]
            counter += 1
            t0 = time.perf_counter()
            admission = await handle.acquire(name, limits, cost)
            slowest = max(slowest, time.perf_counter() - t0)
            await handle.release(admission.ticket)
            await handle.settle(Settle(admission.ticket, "ok", usage))

    async with trio.open_nursery() as nursery:
        await nursery.start(run_rate_limiter, inbox, random.Random(0), MemoryQuotaStore())
        gc.collect()
        busy0 = machine_busy_s()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        async with trio.open_nursery() as workers:
            for _ in range(min(concurrency, cycles)):
                workers.start_soon(worker)
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
        busy1 = machine_busy_s()
        other = None if busy0 is None or busy1 is None else max(0.0, busy1 - busy0 - cpu)
        stats = await handle.statistics()
        send.close()
    held = sum(s.pending + s.open_streams + sum(s.queued.values()) for s in stats.values())
    return {
        "keys": keys,
        "cycles": cycles,
        "admissions_per_s": round(cycles / wall, 1),
        "cpu_us_per_admission": round(1e6 * cpu / cycles, 2),
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "slowest_acquire_ms": round(1000 * slowest, 2),
        "other_cpu_util": None if other is None else round(other / wall, 3),
        "keys_seen": len(stats),
        "held_after": held,
    }


# Part 2: utilisation against the simulator ------------------------------------------------


class RecordingStore(MemoryQuotaStore):
    """The in-memory quota store, noting when each request was admitted (and refunds)."""

    def __init__(self) -> None:
        super().__init__()
        self.admitted: dict[int, float] = {}
        self.refunded = 0
        self.first = trio.Event()
        """Set at the first admission."""
        self._ids: Iterator[int] = iter(range(1, 1 << 62))
        self._of: dict[int, int] = {}

    async def reserve(
        self,
        key: str,
        specs: Sequence[WindowSpec],
        cost: Cost,
        now: float,
        *,
        caps: tuple[int | None, int | None] = (None, None),
        budget: BudgetAsk | None = None,
    ) -> Reservation | TooLarge | BudgetRefused | float:
        reserved = await super().reserve(key, specs, cost, now, caps=caps, budget=budget)
        if isinstance(reserved, Reservation) and cost.requests:
            number = next(self._ids)
            self.admitted[number] = now
            self._of[id(reserved)] = number
            self.first.set()
        return reserved

    async def settle(self, reservation: Reservation, actual: Cost) -> None:
        await super().settle(reservation, actual)
        number = self._of.pop(id(reservation), None)
        if number is not None and actual.requests == 0:
            # Refunded in full (the asker left before it heard of its admission).
            del self.admitted[number]
            self.refunded += 1

    def times(self) -> list[float]:
        return sorted(self.admitted.values())


def max_in_window(times: Sequence[float], per: float) -> int:
    """The most of ``times`` (sorted) inside any half-open interval ``[t, t + per)``."""
    best, j = 0, 0
    for i, start in enumerate(times):
        j = max(j, i)
        while j < len(times) and times[j] < start + per:
            j += 1
        best = max(best, j - i)
    return best


class RecordingQuota(QuotaWindow):
    """The simulator's quota window, noting when it accepted and refused each request."""

    def __init__(self, rpm: int, window: float) -> None:
        super().__init__(rpm=rpm, tpm=None, window=window)
        self.accepted: list[float] = []
        self.refused: list[float] = []

    def admit(self, now: float, tokens: int) -> tuple[float, str] | None:
        refusal = super().admit(now, tokens)
        (self.accepted if refusal is None else self.refused).append(now)
        return refusal


class CountingApp(SimulatorApp):
    """A simulator whose quota is ``rpm`` requests per ``per`` seconds, recorded.

    The simulator's config only knows per-minute quotas; ``QuotaWindow`` takes the length.
    """

    def __init__(self, config: SimulatorConfig, rpm: int, per: float) -> None:
        super().__init__(config)
        self.quota = self._quota = RecordingQuota(rpm, per)
        self.statuses: collections.Counter[int] = collections.Counter()

    async def handle(self, method: str, path: str, headers: Headers, body: bytes) -> SimResponse:
        response = await super().handle(method, path, headers, body)
        if method == "POST" and path.startswith("/v1/chat/completions"):
            self.statuses[response.status] += 1
        return response


async def _quiet(rt: sluice.Runtime, within: float) -> sluice.RuntimeStatistics:
    """Statistics once nothing is in flight any more (or after ``within`` seconds)."""
    end = trio.current_time() + within
    while True:
        stats = await rt.statistics()
        if _held(stats) == 0 or trio.current_time() >= end:
            return stats
        await trio.sleep(0.02)


def _held(stats: sluice.RuntimeStatistics) -> int:
    held = stats.calls_in_flight + sum(stats.attempts_in_flight.values())
    for key in stats.quotas.values():
        held += key.pending + key.open_streams + sum(key.queued.values())
    return held


class Demand:
    """The requests for ``rt.map``: ``in_flight`` calls at all times until ``stop_at``.

    A request is handed over only when a call has ended, so ``rt.map`` (which pulls its next
    request before it waits for a free slot) never holds one back across ``stop_at``: after
    it, only the calls already running or queued are left to drain.
    """

    def __init__(self, in_flight: int) -> None:
        self.in_flight = in_flight
        self.stop_at = math.inf
        self.stopped_at: float | None = None
        self.pulled = 0
        self.done = 0
        self._room = trio.Event()

    def ended(self) -> None:
        self.done += 1
        self._room.set()

    def __aiter__(self) -> Demand:
        return self

    async def __anext__(self) -> sluice.ChatRequest:
        while self.pulled - self.done >= self.in_flight:
            self._room = trio.Event()
            await self._room.wait()
        if trio.current_time() >= self.stop_at:
            if self.stopped_at is None:
                self.stopped_at = trio.current_time()
            raise StopAsyncIteration
        self.pulled += 1
        return sluice.ChatRequest(model=f"{PROVIDER}:{MODEL}", messages=PROMPT)


async def sim_run(a: argparse.Namespace) -> dict[str, Any]:
    sim_config = SimulatorConfig(
        rpm=a.limit,
        ttft=a.ttft,
        tokens_per_second=a.tokens_per_second,
        output_tokens=a.output_tokens,
    )
    app = CountingApp(sim_config, a.limit, a.per)
    learn = a.per == 60.0 or a.learn
    window = sluice.WindowLimit(dimension="requests", limit=a.limit, per=a.per)
    limits = sluice.RateLimitConfig(windows=(window,), learn_from_headers=learn)
    store = RecordingStore()
    outcomes: collections.Counter[str] = collections.Counter()
    first_errors: list[str] = []
    attempts = 0
    span = a.windows * a.per
    demand = Demand(a.demand)

    async with trio.open_nursery() as services:
        port = await services.start(serve_simulator, app)
        config = sluice.RuntimeConfig(
            providers={
                PROVIDER: sluice.ProviderConfig(
                    base_url=f"http://127.0.0.1:{port}/v1",
                    api_key=sluice.Secret(API_KEY),
                    rate_limit=limits,
                )
            }
        )
        async with sluice.open_runtime(config, quota_store=store, rng=random.Random(0)) as rt:
            started = trio.current_time()
            with trio.move_on_after(a.max_seconds) as cap:
                async with trio.open_nursery() as inner:

                    async def stopper() -> None:
                        # Saturate for `windows` whole windows after the first admission.
                        await store.first.wait()
                        demand.stop_at = min(store.admitted.values()) + span

                    inner.start_soon(stopper)
                    async with rt.map(demand, max_in_flight=a.demand) as results:
                        async for outcome in results:
                            demand.ended()
                            if outcome.result is not None:
                                outcomes["ok"] += 1
                                attempts += outcome.result.attempts
                            else:
                                assert outcome.error is not None
                                outcomes[type(outcome.error).__name__] += 1
                                attempts += max(1, getattr(outcome.error, "attempt", 0))
                                if len(first_errors) < 5:
                                    first_errors.append(str(outcome.error)[:300])
            timed_out = cap.cancelled_caught
            ended = trio.current_time()
            stats = await _quiet(rt, 5.0)
        services.cancel_scope.cancel()

    times = store.times()
    t0 = times[0] if times else started
    in_span = sum(1 for t in times if t < t0 + span)
    accepted = app.quota.accepted
    server_in_span = sum(1 for t in accepted if t < t0 + span)
    finished = sum(outcomes.values())
    client_max = max_in_window(times, a.per)
    return {
        "limit": a.limit,
        "per_s": a.per,
        "windows": a.windows,
        "demand_in_flight": a.demand,
        "learn_from_headers": learn,
        "admitted": len(times),
        "admitted_in_windows": in_span,
        "utilisation": round(in_span / (a.windows * a.limit), 4),
        "max_admitted_in_any_window": client_max,
        "window_exceeded": client_max > a.limit,
        "server_accepted": len(accepted),
        "server_accepted_in_windows": server_in_span,
        "server_utilisation": round(server_in_span / (a.windows * a.limit), 4),
        "server_max_in_any_window": max_in_window(accepted, a.per),
        "server_requests": sum(app.statuses.values()),
        "server_statuses": {str(k): v for k, v in sorted(app.statuses.items())},
        "server_429s": app.statuses.get(429, 0),
        "server_429s_at_s": sorted({round(t - t0, 2) for t in app.quota.refused})[:20],
        "refunded_admissions": store.refunded,
        "calls": demand.pulled,
        "calls_finished": finished,
        "calls_ok": outcomes["ok"],
        "calls_failed": finished - outcomes["ok"],
        "failed_by_kind": {k: v for k, v in sorted(outcomes.items()) if k != "ok"},
        "first_errors": first_errors,
        "attempts": attempts,
        "admissions_per_s": round(in_span / span, 3),
        "limit_per_s": round(a.limit / a.per, 3),
        "wall_s": round(ended - started, 3),
        "drain_s": round(ended - demand.stopped_at, 3) if demand.stopped_at else None,
        "timed_out": timed_out,
        "held_after": _held(stats),
        "sim": {
            "ttft": a.ttft,
            "tokens_per_second": a.tokens_per_second,
            "output_tokens": a.output_tokens,
            "quota_window_s": a.per,
        },
    }


async def run(a: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {"benchmark": "limiter"}
    if a.store is not None:
        from .limiter_redis import run_processes

        report["redis"] = {
            "concurrency": a.concurrency,
            "runs": await trio.to_thread.run_sync(
                run_processes, a.store, a.process_counts, a.cycles, a.concurrency
            ),
        }
    elif a.only in ("both", "actor"):
        runs = []
        for keys in a.key_counts:
            result = await actor_run(keys, a.cycles, a.concurrency)
            print(
                f"# actor, {keys} keys: {result['admissions_per_s']:.0f} admissions/s, "
                f"{result['cpu_us_per_admission']:.1f} CPU-us each",
                file=sys.stderr,
                flush=True,
            )
            runs.append(result)
        report["actor"] = {"concurrency": a.concurrency, "runs": runs}
    if a.only in ("both", "sim") and a.store is None:
        print(
            f"# sim: {a.limit} requests per {a.per:g} s, saturating for {a.windows} windows",
            file=sys.stderr,
            flush=True,
        )
        report["saturation"] = await sim_run(a)
    report.update(versions())
    report["cpus"] = os.cpu_count()
    report["date"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return report


def failed(report: dict[str, Any]) -> bool:
    bad = any(r["held_after"] for r in report.get("actor", {}).get("runs", []))
    sat = report.get("saturation")
    if sat is not None:
        bad = bad or sat["window_exceeded"] or sat["timed_out"]
        bad = bad or sat["held_after"] > 0 or sat["calls_finished"] != sat["calls"]
    return bad


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    report = trio.run(run, a)
    sys.stdout.buffer.write(orjson.dumps(report) + b"\n")
    sys.stdout.flush()
    return 1 if failed(report) else 0


if __name__ == "__main__":
    sys.exit(main())
