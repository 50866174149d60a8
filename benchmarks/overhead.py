"""What does sluice cost per call, on top of a bare trio + httpx client?

    python -m benchmarks.overhead --base-url http://127.0.0.1:18080 --chunks 20
    python -m benchmarks.overhead --base-url http://127.0.0.1:18080/c200/t0/i0/v1
    python -m benchmarks.overhead --sim --calls 200

Runs N streamed chat calls through the whole runtime (Supervisor -> RateLimiter ->
ProviderActor -> TokenLedger, events into each call's stream) and the same N calls by a bare
trio + httpx loop (``shared/perf/client_trio_httpx.py``: one shared ``AsyncClient`` with a pool
sized to the concurrency, ``aiter_lines``, orjson per data line) against the same server, in
one process: a warm-up of each, then R rounds alternating which side goes first. Each phase
is timed with ``time.process_time()`` (client CPU, all threads) and ``time.perf_counter()``.
The medians over the rounds go into one JSON line on stdout; per-round progress goes to stderr.

``--base-url`` is the server's ``/v1`` root. A URL that does not end in ``/v1`` is taken to be
the root of the nginx mock of ``shared/perf`` and ``/c<chunks>/t<ttft>/i<itl>/v1`` is appended.
``--sim`` starts sluice's own simulator in this process instead: the server then shares the
CPU and its cost is included in both sides' numbers (``"server": "in-process sim"``), so the
ratio is diluted; prefer the nginx mock for real numbers.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import math
import os
import sys
from typing import Any

import orjson
import trio

import sluice

from ._harness import (
    API_KEY,
    BareClient,
    Expect,
    Phase,
    mock_url,
    run_phase,
    run_sluice,
    versions,
)
from ._harness import median as _median

MODEL = "mock"
PROVIDER = "bench"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.overhead",
        description="Client CPU per streamed call: sluice runtime vs a bare trio + httpx loop.",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--base-url",
        help="the server's /v1 root; a URL not ending in /v1 is the nginx mock's root "
        "(shared/perf/serve.sh) and /c<chunks>/t<ttft>/i<itl>/v1 is appended",
    )
    where.add_argument(
        "--sim", action="store_true", help="serve sluice's simulator in this process"
    )
    p.add_argument("--calls", type=int, default=2000, help="calls per measured phase (2000)")
    p.add_argument("--concurrency", type=int, default=64, help="calls in flight (64)")
    p.add_argument(
        "--chunks",
        type=int,
        default=None,
        help="content chunks per reply: builds the mock URL, sizes the simulator's replies and "
        "is checked against each reply's completion_tokens (default 20)",
    )
    p.add_argument("--ttft-ms", type=int, default=0, help="nginx mock: time to first token")
    p.add_argument("--itl-ms", type=int, default=0, help="nginx mock: gap between chunks (0)")
    p.add_argument(
        "--warmup", type=int, default=None, help="warm-up calls per side (2 x concurrency)"
    )
    p.add_argument("--repeat", type=int, default=3, help="measured rounds; medians reported (3)")
    p.add_argument(
        "--api",
        choices=["map", "chat", "stream"],
        default="map",
        help="how the sluice side submits: rt.map (default), rt.chat per call, or rt.stream "
        "per call iterating every event",
    )
    p.add_argument(
        "--bare-pool",
        choices=["shared", "perworker"],
        default="shared",
        help="bare client: one AsyncClient whose pool is sized to the concurrency (shared, the "
        "reference) or one 1-connection AsyncClient per worker (perworker)",
    )
    p.add_argument(
        "--sluice-max-connections",
        type=int,
        default=None,
        help="the sluice provider's pool size (default: the concurrency, like the bare client)",
    )
    p.add_argument(
        "--only",
        choices=["both", "bare", "sluice"],
        default="both",
        help="measure only one side (for profiling); no ratio then",
    )
    p.add_argument(
        "--cprofile",
        metavar="PATH",
        help="write cProfile stats of the measured sluice phases to PATH",
    )
    p.add_argument(
        "--max-seconds", type=float, default=600.0, help="cap on one phase; the rest fail"
    )
    a = p.parse_args(argv)
    if a.calls < 1 or a.concurrency < 1 or a.repeat < 1:
        p.error("--calls, --concurrency and --repeat must be at least 1")
    if a.chunks is not None and a.chunks < 1:
        p.error("--chunks must be at least 1")
    if a.base_url is not None:
        try:
            a.url, a.expect_chunks = mock_url(a.base_url, a.chunks, a.ttft_ms, a.itl_ms)
        except ValueError as exc:
            p.error(str(exc))
    if a.warmup is None:
        a.warmup = 2 * a.concurrency
    if a.sluice_max_connections is None:
        a.sluice_max_connections = a.concurrency
    return a


def _phase_summary(phase: Phase) -> dict[str, Any]:
    return {
        "cpu_s_per_1k": round(phase.cpu_s_per_1k, 4),
        "calls_per_s": round(phase.calls_per_s, 1),
        "cpu_s": round(phase.cpu_s, 4),
        "wall_s": round(phase.wall_s, 4),
        "errors": phase.errors + phase.mismatched,
        "other_cpu_util": (
            round(phase.other_cpu_s / phase.wall_s, 3)
            if phase.other_cpu_s is not None and phase.wall_s
            else None
        ),
    }


async def run(a: argparse.Namespace) -> dict[str, Any]:
    from sluice.simulator import SimulatorConfig, serve_simulator

    profiler = cProfile.Profile() if a.cprofile else None
    async with trio.open_nursery() as services:
        if a.sim:
            chunks = 20 if a.chunks is None else a.chunks
            # Burst replies (no pacing, no time to first token): the client is the bottleneck.
            sim = SimulatorConfig(output_tokens=chunks, ttft=0.0, tokens_per_second=0.0)
            port = await services.start(serve_simulator, sim)
            base_url = f"http://127.0.0.1:{port}/v1"
            server = "in-process sim"
        else:
            base_url, chunks = a.url, a.expect_chunks
            server = "external"
        expect = Expect(chunks)
        config = sluice.RuntimeConfig(
            providers={
                PROVIDER: sluice.ProviderConfig(
                    base_url=base_url,
                    api_key=sluice.Secret(API_KEY),
                    max_connections=a.sluice_max_connections,
                )
            }
        )
        model = f"{PROVIDER}:{MODEL}"
        bare = BareClient(base_url, MODEL, a.concurrency, per_worker=a.bare_pool == "perworker")
        sides = ["bare", "sluice"] if a.only == "both" else [a.only]
        results: dict[str, list[Phase]] = {side: [] for side in sides}
        warmups: list[Phase] = []
        try:
            async with sluice.open_runtime(config) as rt:

                async def phase(side: str, calls: int, label: str) -> Phase:
                    if side == "bare":
                        return await run_phase(
                            label,
                            calls,
                            expect,
                            lambda t: bare.run(calls, a.concurrency, t),
                            max_seconds=a.max_seconds,
                        )

                    async def body(tally: Any) -> None:
                        if profiler is not None and label != "warm-up":
                            profiler.enable()
                        try:
                            await run_sluice(rt, model, calls, a.concurrency, a.api, tally)
                        finally:
                            if profiler is not None:
                                profiler.disable()

                    return await run_phase(label, calls, expect, body, max_seconds=a.max_seconds)

                for side in sides:
                    if a.warmup:
                        warmups.append(await phase(side, a.warmup, "warm-up"))
                for i in range(a.repeat):
                    order = sides if i % 2 == 0 else sides[::-1]
                    line = []
                    for side in order:
                        result = await phase(side, a.calls, f"round {i + 1}")
                        results[side].append(result)
                        line.append(
                            f"{side} {result.cpu_s_per_1k:.3f} CPU-s/1k "
                            f"{result.calls_per_s:.0f} calls/s"
                        )
                    print(f"# round {i + 1}: " + ", ".join(line), file=sys.stderr, flush=True)
        finally:
            await bare.aclose()
            services.cancel_scope.cancel()

    if profiler is not None:
        profiler.dump_stats(a.cprofile)
    return _report(a, base_url, server, chunks, results, warmups)


def _report(
    a: argparse.Namespace,
    base_url: str,
    server: str,
    chunks: int | None,
    results: dict[str, list[Phase]],
    warmups: list[Phase],
) -> dict[str, Any]:
    def med(side: str, attr: str) -> float | None:
        if side not in results:
            return None
        return _median([getattr(p, attr) for p in results[side]])

    def low(side: str) -> float | None:
        return min(p.cpu_s_per_1k for p in results[side]) if side in results else None

    s_cpu, b_cpu = med("sluice", "cpu_s_per_1k"), med("bare", "cpu_s_per_1k")
    s_rate, b_rate = med("sluice", "calls_per_s"), med("bare", "calls_per_s")
    ratio = s_cpu / b_cpu if s_cpu is not None and b_cpu else None
    every = [p for phases in results.values() for p in phases] + warmups
    samples = {p.sample_text for p in every if p.sample_text is not None}
    out: dict[str, Any] = {
        "calls": a.calls,
        "concurrency": a.concurrency,
        "chunks": chunks,
        "api": a.api,
        "warmup": a.warmup,
        "repeat": a.repeat,
        "sluice_cpu_s_per_1k": _round(s_cpu),
        "bare_cpu_s_per_1k": _round(b_cpu),
        "ratio": _round(ratio, 3),
        "sluice_overhead_ms_per_call": _round(s_cpu - b_cpu if s_cpu and b_cpu else None),
        "sluice_cpu_s_per_1k_min": _round(low("sluice")),
        "bare_cpu_s_per_1k_min": _round(low("bare")),
        "sluice_calls_per_s": _round(s_rate, 1),
        "bare_calls_per_s": _round(b_rate, 1),
        "ratio_per_round": [
            _round(s.cpu_s_per_1k / b.cpu_s_per_1k, 3)
            for s, b in zip(results.get("sluice", []), results.get("bare", []), strict=False)
        ],
        "errors": sum(p.errors + p.mismatched for p in every),
        "timed_out": any(p.timed_out for p in every),
        "texts_match": len(samples) <= 1,
        "first_errors": [e for p in every for e in p.first_errors][:5],
        "rounds": {side: [_phase_summary(p) for p in phases] for side, phases in results.items()},
        "other_cpu_util": _round(
            _median(
                [p.other_cpu_s / p.wall_s for p in every if p.other_cpu_s is not None and p.wall_s]
            ),
            3,
        ),
        "server": server,
        "base_url": base_url,
        "bare_pool": a.bare_pool,
        "sluice_max_connections": a.sluice_max_connections,
        **versions(),
        "cpus": os.cpu_count(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    if a.sim:
        out["server_note"] = "the simulator runs in this process: CPU numbers include it"
    return out


def _round(value: float | None, digits: int = 4) -> float | None:
    if value is None or math.isnan(value):
        return None
    return round(value, digits)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    report = trio.run(run, a)
    sys.stdout.buffer.write(orjson.dumps(report) + b"\n")
    sys.stdout.flush()
    return 1 if report["errors"] or report["timed_out"] else 0


if __name__ == "__main__":
    sys.exit(main())
