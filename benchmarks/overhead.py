"""What does sluice cost per call, next to bare clients doing the same work?

    python -m benchmarks.overhead --base-url http://127.0.0.1:18080 --chunks 20
    python -m benchmarks.overhead --base-url http://127.0.0.1:18080/c200/t0/i0/v1
    python -m benchmarks.overhead --base-url http://127.0.0.1:18080 --chunks 50 --itl-ms 20 \
        --concurrency 256
    python -m benchmarks.overhead --sim --calls 200

Runs N streamed chat calls, against the same server and in one process run, through up to four
*sides*:

* ``sluice``: the whole runtime (Supervisor -> RateLimiter -> ProviderActor -> TokenLedger,
  events into each call's stream) on its default hot-path transport (sluice's own HTTP/1.1
  client, ``ProviderConfig(transport="fast")``);
* ``sluice_httpx``: the same runtime with ``ProviderConfig(transport="httpx")``;
* ``sluice_observed`` (with ``--observed``): a second runtime like ``sluice`` with Prometheus
  metrics and OpenTelemetry tracing on (the SDK's tracer provider, spans recorded and then
  dropped: no exporter), so ``observed_ratio`` is what observability costs per call;
* ``sluice_metrics`` and ``sluice_noop_tracing`` (with ``--observability``, which also adds
  ``sluice_observed``): metrics alone, and tracing alone through the OpenTelemetry API's no-op
  tracer provider (sluice's own tracing work, no SDK), each in a runtime of its own, so that
  sluice's part of observability and the SDK's are told apart in one run;
* ``bare``: a bare trio + httpx loop (``shared/perf/client_trio_httpx.py``: one shared
  ``AsyncClient`` with a pool sized to the concurrency, ``aiter_lines``, orjson per data line);
* ``aiohttp``: a bare asyncio + aiohttp loop (``shared/perf/client_asyncio_aiohttp.py``), when
  aiohttp is importable. It runs in a child process (``benchmarks._aiohttp_side``) that keeps
  its event loop and session for the whole run and runs a phase whenever this process asks.

A warm-up of each side, then R rounds alternating the order of the sides; with ``--blocks B``
(2 by default when observability is measured) each round runs every side B times on a share of
its calls, the order reversed from one block to the next (ABCD DCBA), so a drift of the
machine's load within a round falls on every side alike. A side that sat idle long enough for
its connection pool to close its connections gets them opened again, untimed, before its next
phase (see :data:`KEEP_WARM_S`). Each phase starts with a ``gc.collect()`` outside its timing
(no side pays for another's garbage) and is timed with ``time.process_time()`` (client CPU,
all threads; the aiohttp side measures its own process) and ``time.perf_counter()``. The
medians over the rounds go into one JSON line on stdout, with each observability ratio's
rounds, their spread, the ratio of all rounds pooled, and the median of the block pairs;
per-round progress goes to stderr. With ``--observability``, after the rounds, each sluice side
runs ``--count-calls`` calls once more under cProfile and a trio instrument: Python calls,
tasks and task steps per call (``counts_per_call``), which a busy machine does not blur.

``--base-url`` is the server's ``/v1`` root. A URL that does not end in ``/v1`` is taken to be
the root of the nginx mock of ``shared/perf`` and ``/c<chunks>/t<ttft>/i<itl>/v1`` is appended.
``--sim`` starts sluice's own simulator in this process instead: the server then shares the
CPU and its cost is included in every side's numbers (``"server": "in-process sim"``; for the
aiohttp side this process's CPU during the child's phase is added), so the ratios are diluted;
prefer the nginx mock for real numbers.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import importlib.util
import math
import os
import statistics
import subprocess
import sys
import time
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import orjson
import trio

import sluice

from ._harness import (
    API_KEY,
    BareClient,
    Expect,
    Phase,
    machine_busy_s,
    mock_url,
    run_phase,
    run_sluice,
    versions,
)
from ._harness import median as _median

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

MODEL = "mock"
PROVIDER = "bench"
PROVIDER_HTTPX = "bench_httpx"
SIDES = (
    "bare",
    "sluice",
    "sluice_httpx",
    "aiohttp",
    "sluice_aio",
    "sluice_sync",
    "sluice_observed",
    # -- observability's cost, split (--observability) --
    "sluice_metrics",
    "sluice_noop_tracing",
    # --
    "sluice_group",
)
"""Every side, in the order of the first round."""
OBSERVED_SIDES = {
    "sluice_metrics": "metrics",
    "sluice_noop_tracing": "tracing-api",
}
"""The split observability sides and the ``--observe`` mode each runs (``sluice_observed``
runs ``--observe``'s)."""
OBSERVABILITY_GOALS = {"metrics_ratio": 1.03, "noop_tracing_ratio": 1.03, "observed_ratio": 1.05}
"""Issue #35's ceilings, over the ``sluice`` side (the SDK-traced one is meant for 200 chunks)."""
GOAL_SIDES = {
    "metrics_ratio": "sluice_metrics",
    "noop_tracing_ratio": "sluice_noop_tracing",
    "observed_ratio": "sluice_observed",
}
DOORS = ("aio", "sync")
GROUP = "bench_group"
"""``--group N``: a model group of N deployments (provider entries at the same server)."""
"""``--api`` values that measure a front door next to the trio API (the ``sluice`` side then
runs the same per-call pattern as the door: ``async with rt.stream``, every event read)."""
KEEP_WARM_S = 3.0
"""A side idle longer than this gets ``--concurrency`` untimed calls before its next phase:
sluice's pool and httpx close a connection idle for 5 s (aiohttp after 15 s), and a phase
that opens its connections again pays for it, by how long the other sides ran before it, an
order effect rather than a cost of the side."""
AIOHTTP_SIDE = Path(__file__).resolve().with_name("_aiohttp_side.py")


def aiohttp_available() -> bool:
    return importlib.util.find_spec("aiohttp") is not None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.overhead",
        description="Client CPU per streamed call: sluice runtime (fast and httpx transports) "
        "vs bare trio + httpx and bare asyncio + aiohttp loops.",
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
    p.add_argument(
        "--itl-ms",
        type=int,
        default=0,
        help="nginx mock: gap between chunks, 0 = the whole body at once (burst); with --sim "
        "it paces the simulator at 1000/ITL tokens per second",
    )
    p.add_argument(
        "--warmup", type=int, default=None, help="warm-up calls per side (2 x concurrency)"
    )
    p.add_argument("--repeat", type=int, default=3, help="measured rounds; medians reported (3)")
    p.add_argument(
        "--api",
        choices=["map", "chat", "stream", *DOORS],
        default="map",
        help="how the sluice sides submit: rt.map (default), rt.chat per call, or rt.stream "
        "per call iterating every event; aio or sync add that front door's side "
        "(sluice.aio on an asyncio loop, sluice.sync from a pool of `concurrency` threads), "
        "each streaming per call, next to the trio API doing the same",
    )
    p.add_argument(
        "--uvloop", action="store_true", help="--api aio: run the asyncio loop on uvloop"
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
        help="the sluice providers' pool size (default: the concurrency, like the bare clients)",
    )
    p.add_argument(
        "--only",
        default="all",
        help="sides to measure: all (default; aiohttp only when importable), both (bare and "
        "sluice), or a comma-separated list of " + ", ".join(SIDES),
    )
    p.add_argument(
        "--cprofile",
        metavar="PATH",
        help="write cProfile stats of the measured sluice (fast transport) phases to PATH",
    )
    p.add_argument(
        "--cprofile-side",
        default="sluice",
        metavar="SIDE",
        help="the side --cprofile profiles (default sluice; e.g. sluice_observed)",
    )
    p.add_argument(
        "--max-seconds", type=float, default=600.0, help="cap on one phase; the rest fail"
    )
    p.add_argument(
        "--group",
        type=int,
        default=0,
        metavar="N",
        help="also measure sluice_group: the same calls to a model group of N deployments "
        "(N provider entries at the same server, least-busy routing)",
    )
    p.add_argument(
        "--observed",
        action="store_true",
        help="also measure sluice_observed: the runtime with metrics and tracing on",
    )
    p.add_argument(
        "--observe",
        choices=("both", "metrics", "tracing", "tracing-api", "off"),
        default="both",
        help="what sluice_observed turns on: both (default), metrics or tracing alone, or "
        "tracing-api (tracing through the API's no-op provider: sluice's own share, no SDK), "
        "or off (a second plain runtime: the A/A control, the method's own scatter)",
    )
    p.add_argument(
        "--plain-last",
        action="store_true",
        help="open the plain sluice runtime after the observed ones instead of before them: "
        "the control for an order effect (a runtime opened later may cost more for nothing "
        "it does); a run each way, averaged, cancels it",
    )
    p.add_argument(
        "--observability",
        action="store_true",
        help="measure observability's cost split in one run: sluice_metrics (metrics alone), "
        "sluice_noop_tracing (tracing through the API's no-op provider) and sluice_observed "
        "(--observe, default metrics and SDK tracing), with the SDK's replayed share",
    )
    p.add_argument(
        "--blocks",
        type=int,
        default=None,
        metavar="B",
        help="split each round's calls into B blocks per side, the sides' order reversed from "
        "one block to the next (ABCD DCBA ...), so that every side of a round meets the "
        "machine's drift alike; default 2 with --observed or --observability, else 1",
    )
    p.add_argument(
        "--count-calls",
        type=int,
        default=None,
        metavar="N",
        help="after the rounds, N calls per sluice side under cProfile and a trio instrument: "
        "Python function calls, tasks spawned and task steps per call, counts a busy machine "
        "does not blur (default 200 with --observability, else 0: off)",
    )
    p.add_argument(
        "--trace-sample",
        type=float,
        default=1.0,
        metavar="RATIO",
        help="the SDK sampler's ratio for sluice_observed (ParentBased(TraceIdRatioBased)); "
        "1.0 (default) records every call",
    )
    p.add_argument(
        "--gc",
        choices=("default", "tuned"),
        default="default",
        help="garbage-collector settings of every side: default (CPython's; what a library "
        "embedded in a program gets) or tuned (what sluice's own commands set, "
        "sluice._gc.tune_for_service, applied to this process and the aiohttp child alike)",
    )
    a = p.parse_args(argv)
    if a.calls < 1 or a.concurrency < 1 or a.repeat < 1:
        p.error("--calls, --concurrency and --repeat must be at least 1")
    if a.chunks is not None and a.chunks < 1:
        p.error("--chunks must be at least 1")
    if a.itl_ms < 0 or a.ttft_ms < 0:
        p.error("--itl-ms and --ttft-ms must not be negative")
    if a.base_url is not None:
        try:
            a.url, a.expect_chunks = mock_url(a.base_url, a.chunks, a.ttft_ms, a.itl_ms)
        except ValueError as exc:
            p.error(str(exc))
    if a.warmup is None:
        a.warmup = 2 * a.concurrency
    if a.blocks is None:
        a.blocks = 2 if a.observed or a.observability else 1
    if a.blocks < 1 or a.calls < a.blocks:
        p.error("--blocks must be at least 1 and at most --calls")
    if a.count_calls is None:
        a.count_calls = 200 if a.observability else 0
    if a.sluice_max_connections is None:
        a.sluice_max_connections = a.concurrency
    a.aiohttp_skipped = None
    doors = [f"sluice_{a.api}"] if a.api in DOORS else []
    if a.only == "all":
        optional = ("sluice_aio", "sluice_sync", "sluice_observed", "sluice_group")
        a.sides = [
            side for side in SIDES if not side.startswith(optional) and side not in OBSERVED_SIDES
        ]
        a.sides += doors
        if not aiohttp_available():
            a.sides.remove("aiohttp")
            a.aiohttp_skipped = "aiohttp is not importable"
    elif a.only == "both":
        a.sides = ["bare", "sluice", *doors]
    else:
        a.sides = [side.strip() for side in a.only.split(",") if side.strip()]
        unknown = [side for side in a.sides if side not in SIDES]
        if unknown or not a.sides or len(set(a.sides)) != len(a.sides):
            p.error(f"--only: expected all, both or a list of {', '.join(SIDES)}")
        if "aiohttp" in a.sides and not aiohttp_available():
            p.error("--only aiohttp: aiohttp is not importable")
        for door in ("sluice_aio", "sluice_sync"):
            if door in a.sides and door not in doors:
                p.error(f"--only {door}: give --api {door.removeprefix('sluice_')}")
        a.sides = [side for side in SIDES if side in a.sides]
    if a.observed and "sluice_observed" not in a.sides:
        a.sides.append("sluice_observed")
    # -- observability's cost, split --
    if a.observability:
        a.sides += [s for s in ("sluice_observed", *OBSERVED_SIDES) if s not in a.sides]
    # --
    if a.group < 0:
        p.error("--group must not be negative")
    if a.group and "sluice_group" not in a.sides:
        a.sides.append("sluice_group")
    if "sluice_group" in a.sides and not a.group:
        p.error("--only sluice_group: give --group N")
    return a


@asynccontextmanager
async def _observed_runtime(
    wanted: bool, config: sluice.RuntimeConfig, observe: str, sample: float
) -> AsyncIterator[tuple[sluice.Runtime | None, Any]]:
    """A runtime like the ``sluice`` side's with what ``observe`` names on, and its tracer
    provider (None, None if not wanted)."""
    if not wanted:
        yield None, None
        return
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import NoOpTracerProvider

    observed = attrs.evolve(
        config,
        metrics=sluice.MetricsConfig(enabled=observe in ("both", "metrics")),
        tracing=sluice.TracingConfig(enabled=observe not in ("metrics", "off")),
    )
    # "tracing-api": sluice's own tracing work with the API's no-op provider, without the SDK's.
    # "off": a second plain runtime, the A/A control that shows the method's own scatter.
    provider: Any = None
    if observe == "tracing-api":
        provider = NoOpTracerProvider()
    elif observe not in ("metrics", "off"):
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(sample)))
    async with sluice.open_runtime(observed, tracer_provider=provider) as rt:
        yield rt, provider


class AiohttpChild:
    """The asyncio + aiohttp side: a child process that runs a phase whenever asked.

    See :mod:`benchmarks._aiohttp_side` for the protocol. This process waits on the child's
    pipe meanwhile, so (against an external server) it uses next to no CPU during the child's
    phases.
    """

    def __init__(
        self,
        url: str,
        model: str,
        concurrency: int,
        chunks: int | None,
        max_seconds: float,
        gc_mode: str = "default",
    ) -> None:
        self.command = [sys.executable, str(AIOHTTP_SIDE), "--url", url, "--model", model]
        self.command += ["--concurrency", str(concurrency), "--max-seconds", str(max_seconds)]
        self.command += ["--gc", gc_mode]
        if chunks is not None:
            self.command += ["--chunks", str(chunks)]
        self.max_seconds = max_seconds
        self.process: trio.Process | None = None
        self.version: str | None = None
        self._buffer = bytearray()

    async def start(self) -> None:
        self.process = await trio.lowlevel.open_process(
            self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        with trio.fail_after(60):
            hello = await self._line()
        if not hello.get("ready"):
            raise RuntimeError(f"the aiohttp side did not start: {hello!r}")
        self.version = hello.get("aiohttp")

    async def _line(self) -> dict[str, Any]:
        assert self.process is not None and self.process.stdout is not None
        while b"\n" not in self._buffer:
            data = await self.process.stdout.receive_some(65536)
            if not data:
                raise RuntimeError(f"the aiohttp side exited (status {await self.process.wait()})")
            self._buffer += data
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        result: dict[str, Any] = orjson.loads(line)
        return result

    async def phase(self, name: str, calls: int, expect: Expect, *, add_own_cpu: bool) -> Phase:
        """One phase in the child; ``add_own_cpu`` adds this process's CPU meanwhile (--sim)."""
        assert self.process is not None and self.process.stdin is not None
        busy0 = machine_busy_s()
        own0 = time.process_time()
        await self.process.stdin.send_all(f"{calls}\n".encode())
        with trio.fail_after(self.max_seconds + 60):
            r = await self._line()
        own = time.process_time() - own0
        busy1 = machine_busy_s()
        other = None
        if busy0 is not None and busy1 is not None:
            other = max(0.0, busy1 - busy0 - r["cpu_s"] - own)
        return Phase(
            name=name,
            calls=calls,
            ok=r["ok"],
            errors=r["errors"],
            mismatched=r["mismatched"],
            cpu_s=r["cpu_s"] + (own if add_own_cpu else 0.0),
            wall_s=r["wall_s"],
            timed_out=r["timed_out"],
            first_errors=r["first_errors"],
            sample_text=r["sample_text"],
            other_cpu_s=other,
        )

    async def aclose(self) -> None:
        process = self.process
        if process is None:
            return
        with trio.CancelScope(shield=True):
            try:
                if process.stdin is not None:
                    await process.stdin.send_all(b"quit\n")
                    await process.stdin.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            with trio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


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
    aiohttp_version = None
    counts: dict[str, dict[str, float]] = {}
    replay: float | None = None
    own: dict[str, float] | None = None
    async with trio.open_nursery() as services:
        if a.sim:
            chunks = 20 if a.chunks is None else a.chunks
            # Burst replies by default (no time to first token): the client is the bottleneck.
            sim = SimulatorConfig(
                output_tokens=chunks,
                ttft=a.ttft_ms / 1000,
                tokens_per_second=1000 / a.itl_ms if a.itl_ms else 0.0,
            )
            port = await services.start(serve_simulator, sim)
            base_url = f"http://127.0.0.1:{port}/v1"
            server = "in-process sim"
        else:
            base_url, chunks = a.url, a.expect_chunks
            server = "external"
        expect = Expect(chunks)

        def provider(transport: str) -> sluice.ProviderConfig:
            return sluice.ProviderConfig(
                base_url=base_url,
                api_key=sluice.Secret(API_KEY),
                max_connections=a.sluice_max_connections,
                transport=transport,  # type: ignore[arg-type]
            )

        deployments = [f"{GROUP}{i}" for i in range(a.group)]
        config = sluice.RuntimeConfig(
            providers={
                PROVIDER: provider("fast"),
                PROVIDER_HTTPX: provider("httpx"),
                **{name: provider("fast") for name in deployments},
            },
            groups=(
                {GROUP: sluice.ModelGroup(deployments=[f"{d}:{MODEL}" for d in deployments])}
                if deployments
                else {}
            ),
        )
        models = {
            "sluice": f"{PROVIDER}:{MODEL}",
            "sluice_httpx": f"{PROVIDER_HTTPX}:{MODEL}",
            "sluice_group": GROUP,
        }
        bare = BareClient(base_url, MODEL, a.concurrency, per_worker=a.bare_pool == "perworker")
        child = None
        if "aiohttp" in a.sides:
            child = AiohttpChild(base_url, MODEL, a.concurrency, chunks, a.max_seconds, a.gc)
        sides = a.sides
        results: dict[str, list[Phase]] = {side: [] for side in sides}
        every_block: dict[str, list[Phase]] = {side: [] for side in sides}
        idle_since: dict[str, float] = {}
        refreshed: dict[str, int] = {}
        warmups: list[Phase] = []
        door: Any = None
        trio_api = "stream" if a.api in DOORS else a.api
        try:
            if child is not None:
                await child.start()
                aiohttp_version = child.version
            if a.api in DOORS:
                from ._doors import open_door

                api = "aio_uvloop" if a.api == "aio" and a.uvloop else a.api
                door = await trio.to_thread.run_sync(open_door, api, config, a.concurrency)
            async with AsyncExitStack() as opened:
                plain_runtime = sluice.open_runtime(config)
                rt = None if a.plain_last else await opened.enter_async_context(plain_runtime)
                rt_observed, tracer_provider = await opened.enter_async_context(
                    _observed_runtime("sluice_observed" in sides, config, a.observe, a.trace_sample)
                )
                rt_metrics, _ = await opened.enter_async_context(
                    _observed_runtime("sluice_metrics" in sides, config, "metrics", 1.0)
                )
                rt_noop_tracing, _ = await opened.enter_async_context(
                    _observed_runtime("sluice_noop_tracing" in sides, config, "tracing-api", 1.0)
                )
                if rt is None:
                    rt = await opened.enter_async_context(plain_runtime)
                if a.gc == "tuned":
                    from sluice._gc import tune_for_service

                    tune_for_service()  # once everything is started, as the sluice command does
                runtimes = {
                    "sluice_observed": rt_observed,
                    "sluice_metrics": rt_metrics,
                    "sluice_noop_tracing": rt_noop_tracing,
                }

                async def phase(side: str, calls: int, label: str) -> Phase:
                    """A phase of ``side``; first, untimed, a refresh of its connections if
                    it sat idle long enough for its pool to have closed them."""
                    last = idle_since.get(side)
                    if last is not None and time.monotonic() - last > KEEP_WARM_S:
                        refreshed[side] = refreshed.get(side, 0) + 1
                        await side_phase(side, a.concurrency, "refresh")
                    try:
                        return await side_phase(side, calls, label)
                    finally:
                        idle_since[side] = time.monotonic()

                async def side_phase(side: str, calls: int, label: str) -> Phase:
                    if side == "bare":
                        return await run_phase(
                            label,
                            calls,
                            expect,
                            lambda t: bare.run(calls, a.concurrency, t),
                            max_seconds=a.max_seconds,
                        )
                    if side == "aiohttp":
                        assert child is not None
                        return await child.phase(label, calls, expect, add_own_cpu=a.sim)
                    if side in ("sluice_aio", "sluice_sync"):

                        async def through_door(tally: Any) -> None:
                            model = models["sluice"]
                            await trio.to_thread.run_sync(
                                door.phase, model, calls, a.concurrency, tally
                            )

                        return await run_phase(
                            label, calls, expect, through_door, max_seconds=a.max_seconds
                        )
                    model = models.get(side, models["sluice"])
                    runtime = runtimes.get(side, rt)
                    assert runtime is not None
                    measured = side == a.cprofile_side and label.startswith("round")
                    profile = profiler if measured else None

                    async def body(tally: Any) -> None:
                        if profile is not None:
                            profile.enable()
                        try:
                            await run_sluice(runtime, model, calls, a.concurrency, trio_api, tally)
                        finally:
                            if profile is not None:
                                profile.disable()

                    return await run_phase(label, calls, expect, body, max_seconds=a.max_seconds)

                for side in sides:
                    if a.warmup:
                        warmups.append(await phase(side, a.warmup, "warm-up"))
                for i in range(a.repeat):
                    blocks: dict[str, list[Phase]] = {side: [] for side in sides}
                    for j, calls in enumerate(_block_sizes(a.calls, a.blocks)):
                        # ABCD DCBA ...: a drift within the round falls on every side alike
                        forward = (i * a.blocks + j) % 2 == 0
                        for side in sides if forward else sides[::-1]:
                            blocks[side].append(await phase(side, calls, f"round {i + 1}"))
                    line = []
                    for side in sides:
                        every_block[side] += blocks[side]
                        result = merge_phases(blocks[side])
                        results[side].append(result)
                        line.append(
                            f"{side} {result.cpu_s_per_1k:.3f} CPU-s/1k "
                            f"{result.calls_per_s:.0f} calls/s"
                        )
                    print(f"# round {i + 1}: " + ", ".join(line), file=sys.stderr, flush=True)
                if a.count_calls:
                    counts = {
                        side: await _count_calls(lambda n, s=side: phase(s, n, "counted"), a)
                        for side in sides
                        if side.startswith("sluice") and side not in ("sluice_aio", "sluice_sync")
                    }
                if "sluice_observed" in sides and a.observe in ("both", "tracing"):
                    replay = await _sdk_replay(
                        tracer_provider, lambda n: phase("sluice_observed", n, "capture")
                    )
                # -- observability's cost, split: sluice's own work, replayed --
                if "sluice_metrics" in sides and rt_metrics is not None:
                    own = await _observer_replay(
                        config, rt_metrics, lambda n: phase("sluice_metrics", n, "capture")
                    )
                # --
        finally:
            await bare.aclose()
            if door is not None:
                await trio.to_thread.run_sync(door.close)
            if child is not None:
                await child.aclose()
            services.cancel_scope.cancel()

    if profiler is not None:
        profiler.dump_stats(a.cprofile)
    report = _report(a, base_url, server, chunks, results, warmups, aiohttp_version)
    report["connections_refreshed"] = refreshed
    if replay is not None and report["sluice_cpu_s_per_1k"]:
        report["otel_sdk_replay_ms_per_call"] = _round(replay * 1000)
        report["otel_sdk_replay_share"] = _round(replay * 1000 / report["sluice_cpu_s_per_1k"], 3)
    _observability_report(report, results, replay, own, every_block)
    if counts:
        report["counts_per_call"] = counts
        plain = counts.get("sluice")
        if plain:
            report["python_calls_ratio"] = {
                side: _round(c["python_calls"] / plain["python_calls"], 4)
                for side, c in counts.items()
                if side != "sluice"
            }
            # Each ceiling also judged by the counts: what the side adds in Python calls.
            for key, goal in report.get("observability_goals", {}).items():
                by_counts = report["python_calls_ratio"].get(GOAL_SIDES[key])
                if by_counts is not None:
                    goal["python_calls_ratio"] = by_counts
                    goal["met_by_counts"] = by_counts <= goal["ceiling"]
    return report


def _block_sizes(calls: int, blocks: int) -> list[int]:
    """``calls`` split into ``blocks`` sizes that differ by at most one."""
    return [calls // blocks + (1 if k < calls % blocks else 0) for k in range(blocks)]


def merge_phases(phases: list[Phase]) -> Phase:
    """The blocks of one side's round as one phase: calls, outcomes, CPU and wall time added."""
    if len(phases) == 1:
        return phases[0]
    others = [p.other_cpu_s for p in phases]
    return Phase(
        name=phases[0].name,
        calls=sum(p.calls for p in phases),
        ok=sum(p.ok for p in phases),
        errors=sum(p.errors for p in phases),
        mismatched=sum(p.mismatched for p in phases),
        cpu_s=sum(p.cpu_s for p in phases),
        wall_s=sum(p.wall_s for p in phases),
        timed_out=any(p.timed_out for p in phases),
        first_errors=[e for p in phases for e in p.first_errors][:5],
        sample_text=next((p.sample_text for p in phases if p.sample_text is not None), None),
        other_cpu_s=None if None in others else sum(o for o in others if o is not None),
    )


class _TaskCounts(trio.abc.Instrument):
    def __init__(self) -> None:
        self.spawned = 0
        self.steps = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += 1

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1


async def _count_calls(run: Any, a: argparse.Namespace) -> dict[str, float]:
    """Per call of one side, over ``--count-calls`` calls: Python function calls (cProfile),
    trio tasks spawned and task steps. Deterministic up to the server's chunking and the
    runtime's timers, so sides compare where CPU seconds on a busy machine do not."""
    n = a.count_calls
    await run(a.concurrency)  # uncounted: the side warm, and any refresh of its connections done
    tasks = _TaskCounts()
    profiler = cProfile.Profile()
    trio.lowlevel.add_instrument(tasks)
    profiler.enable()
    try:
        await run(n)
    finally:
        profiler.disable()
        trio.lowlevel.remove_instrument(tasks)
    import pstats

    total: int = pstats.Stats(profiler).total_calls  # type: ignore[attr-defined]
    return {
        "python_calls": round(total / n, 1),
        "tasks_spawned": round(tasks.spawned / n, 2),
        "task_steps": round(tasks.steps / n, 2),
    }


# -- observability's cost, split (--observability) ---------------------------------------------


async def _observer_replay(
    config: sluice.RuntimeConfig, rt: sluice.Runtime, capture: Any
) -> dict[str, float] | None:
    """CPU seconds per call of sluice's own observer work (see
    :mod:`benchmarks._observer_replay`): a few calls through the metrics side are recorded
    (after the measured rounds), then replayed through observers with nothing, metrics, and
    no-op tracing on."""
    from sluice._ledger.setup import price_table

    from ._observer_replay import capture as recording
    from ._observer_replay import replay_costs

    with recording(500) as trail:
        await capture(500)
    quotas = (await rt.statistics()).quotas
    return replay_costs(trail, price_table(config.ledger), next(iter(quotas), PROVIDER))


def _observability_report(
    report: dict[str, Any],
    results: dict[str, list[Phase]],
    replay: float | None,
    own: dict[str, float] | None,
    every_block: dict[str, list[Phase]],
) -> None:
    """Each observability side over the ``sluice`` side (median of the per-round ratios, as
    the sides alternate within a round), and sluice's own part of the SDK-traced side: its
    ratio less the SDK's replayed cost. ``observability_goals`` holds issue #35's ceilings.
    With ``own`` (the observer replayed), sluice's own work per call for metrics and no-op
    tracing, in microseconds and as a ratio over the ``sluice`` side's CPU per call: the
    figure a busy machine does not blur."""
    plain = results.get("sluice")
    if not plain:
        return
    base_ms = _median([p.cpu_s_per_1k for p in plain])  # CPU-s per 1k calls = ms per call
    if own is not None and base_ms:
        report["observer_replay_us_per_call"] = {k: _round(v * 1e6, 2) for k, v in own.items()}
        for key in ("metrics", "noop_tracing"):
            extra_ms = (own[key] - own["off"]) * 1000
            report[f"{key}_own_ratio"] = _round(1 + extra_ms / base_ms, 4)

    def ratios(side: str) -> list[float]:
        return [
            o.cpu_s_per_1k / p.cpu_s_per_1k
            for o, p in zip(results.get(side, []), plain, strict=False)
            if p.cpu_s_per_1k
        ]

    def pooled(side: str) -> float | None:
        """All rounds' CPU per call over the plain side's (one ratio, every call weighed)."""
        mine, base = results.get(side, []), plain
        per_call = [sum(p.cpu_s for p in ps) / sum(p.calls for p in ps) for ps in (mine, base)]
        return per_call[0] / per_call[1] if mine and per_call[1] else None

    def spread(key: str, found: list[float], side: str) -> None:
        report[f"{key}_ratio_spread"] = [_round(min(found), 3), _round(max(found), 3)]
        report[f"{key}_ratio_pooled"] = _round(pooled(side), 3)
        # Each block over the plain side's block next to it in the same sweep: many close
        # pairs, whose median a burst of load elsewhere on the machine moves little.
        pairs = sorted(
            o.cpu_s_per_1k / p.cpu_s_per_1k
            for o, p in zip(every_block.get(side, []), every_block["sluice"], strict=False)
            if p.cpu_s_per_1k
        )
        if len(pairs) > len(found):
            quartiles = statistics.quantiles(pairs, n=4) if len(pairs) > 1 else pairs * 3
            report[f"{key}_ratio_of_blocks"] = _round(_median(pairs), 3)
            report[f"{key}_ratio_of_blocks_quartiles"] = [
                _round(quartiles[0], 3),
                _round(quartiles[2], 3),
            ]

    for side, key in (("sluice_metrics", "metrics"), ("sluice_noop_tracing", "noop_tracing")):
        if side not in results:
            continue
        found = ratios(side)
        report[f"{side}_cpu_s_per_1k"] = _round(_median([p.cpu_s_per_1k for p in results[side]]))
        report[f"{key}_ratio"] = _round(_median(found), 3)
        report[f"{key}_ratio_per_round"] = [_round(r, 3) for r in found]
        if found:
            spread(key, found, side)
    observed = ratios("sluice_observed")
    if observed:
        report["observed_ratio_of_rounds"] = _round(_median(observed), 3)
        spread("observed", observed, "sluice_observed")
    if observed and replay is not None:
        base = _median([p.cpu_s_per_1k for p in plain])
        if base:
            # What the SDK's replay says it spent, taken off the traced side's ratio.
            report["observed_ratio_without_sdk"] = _round(
                _median(observed) - replay * 1000 / base, 3
            )
    if any(side in results for side in ("sluice_metrics", "sluice_noop_tracing")):
        report["observability_goals"] = {
            key: {"ceiling": goal, "met": report.get(key) is not None and report[key] <= goal}
            for key, goal in OBSERVABILITY_GOALS.items()
            if report.get(key) is not None
        }


# --


async def _sdk_replay(provider: Any, capture: Any) -> float | None:
    """CPU seconds per call the SDK alone spends making the spans the observed runtime made
    (see :mod:`benchmarks._otel_replay`): runs a few calls with a collector added to the
    provider (after the measured rounds, which it would otherwise slow) and replays their
    spans."""
    from ._otel_replay import SpanCollector, replay_cost

    collector = SpanCollector(limit=2000)
    provider.add_span_processor(collector)
    await capture(500)
    return replay_cost(collector.spans, provider.sampler)


def _report(
    a: argparse.Namespace,
    base_url: str,
    server: str,
    chunks: int | None,
    results: dict[str, list[Phase]],
    warmups: list[Phase],
    aiohttp_version: str | None,
) -> dict[str, Any]:
    def med(side: str, attr: str) -> float | None:
        if side not in results:
            return None
        return _median([getattr(p, attr) for p in results[side]])

    def low(side: str) -> float | None:
        return min(p.cpu_s_per_1k for p in results[side]) if side in results else None

    def ratio(top: float | None, bottom: float | None) -> float | None:
        return top / bottom if top is not None and bottom else None

    def per_round(top: str, bottom: str) -> list[float | None]:
        return [
            _round(s.cpu_s_per_1k / b.cpu_s_per_1k, 3) if b.cpu_s_per_1k else None
            for s, b in zip(results.get(top, []), results.get(bottom, []), strict=False)
        ]

    cpu = {side: med(side, "cpu_s_per_1k") for side in SIDES}
    rate = {side: med(side, "calls_per_s") for side in SIDES}
    s_cpu, b_cpu = cpu["sluice"], cpu["bare"]
    every = [p for phases in results.values() for p in phases] + warmups
    samples = {p.sample_text for p in every if p.sample_text is not None}
    out: dict[str, Any] = {
        "calls": a.calls,
        "concurrency": a.concurrency,
        "chunks": chunks,
        "ttft_ms": a.ttft_ms,
        "itl_ms": a.itl_ms,
        "api": a.api,
        "warmup": a.warmup,
        "repeat": a.repeat,
        "blocks": a.blocks,
        "sides": list(results),
        "sluice_cpu_s_per_1k": _round(cpu["sluice"]),
        "sluice_httpx_cpu_s_per_1k": _round(cpu["sluice_httpx"]),
        "bare_cpu_s_per_1k": _round(cpu["bare"]),
        "aiohttp_cpu_s_per_1k": _round(cpu["aiohttp"]),
        "ratio": _round(ratio(s_cpu, b_cpu), 3),
        "ratio_aiohttp": _round(ratio(s_cpu, cpu["aiohttp"]), 3),
        "ratio_httpx": _round(ratio(cpu["sluice_httpx"], b_cpu), 3),
        "sluice_group_cpu_s_per_1k": _round(cpu["sluice_group"]),
        "ratio_group": _round(ratio(cpu["sluice_group"], s_cpu), 3),
        "group_deployments": a.group,
        "sluice_overhead_ms_per_call": _round(s_cpu - b_cpu if s_cpu and b_cpu else None),
        "sluice_cpu_s_per_1k_min": _round(low("sluice")),
        "sluice_httpx_cpu_s_per_1k_min": _round(low("sluice_httpx")),
        "bare_cpu_s_per_1k_min": _round(low("bare")),
        "aiohttp_cpu_s_per_1k_min": _round(low("aiohttp")),
        "sluice_calls_per_s": _round(rate["sluice"], 1),
        "sluice_httpx_calls_per_s": _round(rate["sluice_httpx"], 1),
        "bare_calls_per_s": _round(rate["bare"], 1),
        "aiohttp_calls_per_s": _round(rate["aiohttp"], 1),
        "sluice_observed_cpu_s_per_1k": _round(cpu["sluice_observed"]),
        "observed_ratio": _round(ratio(cpu["sluice_observed"], s_cpu), 3),
        "observe": a.observe if "sluice_observed" in a.sides else None,
        "trace_sample": a.trace_sample if "sluice_observed" in a.sides else None,
        "plain_opened": "last" if a.plain_last else "first",
        "observed_ratio_per_round": per_round("sluice_observed", "sluice"),
        "ratio_per_round": per_round("sluice", "bare"),
        "ratio_aiohttp_per_round": per_round("sluice", "aiohttp"),
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
        "gc": a.gc,
        "base_url": base_url,
        "bare_pool": a.bare_pool,
        "sluice_max_connections": a.sluice_max_connections,
        **versions(),
        "aiohttp": aiohttp_version,
        "cpus": os.cpu_count(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    if a.api in DOORS:
        door = f"sluice_{a.api}"
        out["door"] = door + ("_uvloop" if a.uvloop and a.api == "aio" else "")
        out["door_cpu_s_per_1k"] = _round(cpu[door])
        out["door_cpu_s_per_1k_min"] = _round(low(door))
        out["door_calls_per_s"] = _round(rate[door], 1)
        # the door's CPU per call over the trio API's (same per-call pattern, same run)
        out["ratio_door"] = _round(ratio(cpu[door], s_cpu), 3)
        out["ratio_door_per_round"] = per_round(door, "sluice")
    if a.aiohttp_skipped:
        out["aiohttp_skipped"] = a.aiohttp_skipped
    if a.sim:
        out["server_note"] = (
            "the simulator runs in this process: CPU numbers include it (for the aiohttp side, "
            "this process's CPU during the child's phase is added)"
        )
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
