"""What survives faults, in both failure modes: completed and failed calls, requests sent per
call, retries and goodput at 10, 25 and 40 % faults.

    python -m benchmarks.chaos                          # 2000 calls x 3 levels x 2 modes
    python -m benchmarks.chaos --calls 200 --concurrency 20 --levels 0,0.2 --modes wait

Each level runs once per failure mode (``--modes``): ``fail_fast`` (an open breaker or a spent
retry budget fails the call) and ``wait`` (they delay it; ``--wait-max-attempts`` attempts).

For each fault level, a fresh simulator (in this process, real clock) and a fresh runtime;
``--calls`` streamed calls through ``rt.map(max_in_flight=--concurrency)``. The simulator
fails that share of generation requests at random, split evenly over a 429 (with a short
``Retry-After``, ``--retry-after``), a 500, a 529 and a disconnect after a few SSE events
(``--mix`` changes the split). sluice runs with its default retry policy, retry budget, circuit
breaker and limiter (no limits set). A level that runs longer than ``--max-seconds`` is
cancelled; its unfinished calls are reported.

Per level: calls completed and failed (by error class), attempts and retries (from the results'
and errors' ``attempt``, from the TokenLedger and from the server's request count), goodput
(completed calls and their output tokens per wall-clock second), and checks: every call ended
exactly once, every result is the full, undisturbed reply (same text, same token count: a
restarted stream must not leak a chunk of a failed attempt), and afterwards the runtime holds
nothing (calls and attempts in flight, pending slots, open streams, queued admissions all 0).

One JSON line on stdout (``levels``: one object per level); progress on stderr. Exit status 1
when a check failed or a level timed out.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import random
import sys
import time
from typing import TYPE_CHECKING, Any

import orjson
import trio

import sluice

from ._harness import API_KEY, machine_busy_s, versions

if TYPE_CHECKING:
    from collections.abc import Iterator

PROVIDER = "bench"
MODEL = "sim-small"
PROMPT = "Tell me about rivers."
FAULTS = ("429", "500", "529", "disconnect")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.chaos",
        description="Calls completed, failed and retried, and goodput, under random faults.",
    )
    p.add_argument("--calls", type=int, default=2000, help="calls per fault level (2000)")
    p.add_argument("--concurrency", type=int, default=200, help="calls in flight (200)")
    p.add_argument(
        "--levels",
        default="0.1,0.25,0.4",
        help="comma-separated shares of requests that fail (0.1,0.25,0.4)",
    )
    p.add_argument(
        "--modes",
        default="fail_fast,wait",
        help="comma-separated failure modes to run each level in (fail_fast,wait)",
    )
    p.add_argument(
        "--wait-max-attempts",
        type=int,
        default=16,
        help="RetryConfig.wait_max_attempts: the attempt limit of waiting calls (16)",
    )
    p.add_argument(
        "--mix",
        default="429=1,500=1,529=1,disconnect=1",
        help="relative weights of the faults (429=1,500=1,529=1,disconnect=1)",
    )
    p.add_argument(
        "--retry-after", type=float, default=0.2, help="Retry-After of the 429s, seconds (0.2)"
    )
    p.add_argument(
        "--disconnect-after",
        type=int,
        default=3,
        help="SSE events sent before a disconnect cuts the stream (3)",
    )
    p.add_argument("--ttft", type=float, default=0.02, help="seconds to the first chunk (0.02)")
    p.add_argument(
        "--tokens-per-second",
        type=float,
        default=500.0,
        help="stream pace after the first chunk; 0 = all at once (500)",
    )
    p.add_argument("--output-tokens", type=int, default=16, help="tokens per reply (16)")
    p.add_argument(
        "--cooldown-jitter",
        type=float,
        default=None,
        help="RateLimitConfig.cooldown_jitter: seconds over which calls held by a 429's "
        "cooldown are let go (sluice's default when not given)",
    )
    p.add_argument("--seed", type=int, default=1, help="fault dice and jitter seed (1)")
    p.add_argument(
        "--max-seconds", type=float, default=60.0, help="cap per level; the rest count (60)"
    )
    a = p.parse_args(argv)
    try:
        a.fault_levels = [float(x) for x in a.levels.split(",") if x.strip()]
        weights = dict(item.split("=", 1) for item in a.mix.split(",") if item.strip())
        a.weights = {kind: float(weights.get(kind, 0)) for kind in FAULTS}
    except ValueError:
        p.error("--levels must be numbers, --mix kind=weight pairs")
    unknown = set(weights) - set(FAULTS)
    if unknown:
        p.error(f"--mix: unknown fault kinds {sorted(unknown)}; known: {', '.join(FAULTS)}")
    if not a.fault_levels or any(not 0 <= x <= 1 for x in a.fault_levels):
        p.error("--levels must be shares between 0 and 1")
    if sum(a.weights.values()) <= 0:
        p.error("--mix needs a positive weight")
    a.failure_modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if not a.failure_modes or set(a.failure_modes) - {"fail_fast", "wait"}:
        p.error("--modes must list fail_fast and/or wait")
    if a.wait_max_attempts < 1:
        p.error("--wait-max-attempts must be at least 1")
    if a.calls < 1 or a.concurrency < 1:
        p.error("--calls and --concurrency must be at least 1")
    return a


def sim_config(a: argparse.Namespace, level: float) -> Any:
    from sluice.simulator import SimulatorConfig

    total = sum(a.weights.values())
    rate = {kind: level * weight / total for kind, weight in a.weights.items()}
    return SimulatorConfig(
        ttft=a.ttft,
        tokens_per_second=a.tokens_per_second,
        output_tokens=a.output_tokens,
        rate_429=rate["429"],
        retry_after=a.retry_after,
        rate_500=rate["500"],
        rate_529=rate["529"],
        rate_disconnect=rate["disconnect"],
        disconnect_after=a.disconnect_after,
        fault_seed=a.seed,
    )


def _held(stats: sluice.RuntimeStatistics) -> dict[str, int]:
    quotas = stats.quotas.values()
    return {
        "calls_in_flight": stats.calls_in_flight,
        "attempts_in_flight": sum(stats.attempts_in_flight.values()),
        "pending": sum(k.pending for k in quotas),
        "open_streams": sum(k.open_streams for k in quotas),
        "queued": sum(sum(k.queued.values()) for k in quotas),
    }


async def _quiet(rt: sluice.Runtime, within: float) -> dict[str, int]:
    """What the runtime still holds once settled (``within`` seconds at most).

    Attempts end with tells (settle, release) that the actors take a moment to handle.
    """
    end = trio.current_time() + within
    while True:
        held = _held(await rt.statistics())
        if not any(held.values()) or trio.current_time() >= end:
            return held
        await trio.sleep(0.01)


async def run_level(a: argparse.Namespace, level: float, mode: str) -> dict[str, Any]:
    from sluice.simulator import SimulatorApp, serve_simulator

    app = SimulatorApp(sim_config(a, level))
    outcomes: collections.Counter[str] = collections.Counter()
    ended_per_index: collections.Counter[int] = collections.Counter()
    attempts_ok = attempts_failed = 0
    failed_first_attempt = 0
    output_tokens = 0
    texts: collections.Counter[str] = collections.Counter()
    wrong_tokens = 0
    first_errors: list[str] = []

    def requests() -> Iterator[sluice.ChatRequest]:
        for _ in range(a.calls):
            yield sluice.ChatRequest(
                model=f"{PROVIDER}:{MODEL}",
                messages=PROMPT,
                failure_mode="wait" if mode == "wait" else "fail_fast",
            )

    async with trio.open_nursery() as services:
        port = await services.start(serve_simulator, app)
        limits = sluice.RateLimitConfig()
        if a.cooldown_jitter is not None:
            limits = sluice.RateLimitConfig(cooldown_jitter=a.cooldown_jitter)
        config = sluice.RuntimeConfig(
            providers={
                PROVIDER: sluice.ProviderConfig(
                    base_url=f"http://127.0.0.1:{port}/v1",
                    api_key=sluice.Secret(API_KEY),
                    rate_limit=limits,
                )
            },
            retry=sluice.RetryConfig(wait_max_attempts=a.wait_max_attempts),
        )
        async with sluice.open_runtime(config, rng=random.Random(a.seed)) as rt:
            busy0 = machine_busy_s()
            cpu0, t0 = time.process_time(), trio.current_time()
            with trio.move_on_after(a.max_seconds) as cap:
                async with rt.map(requests(), max_in_flight=a.concurrency) as results:
                    async for outcome in results:
                        ended_per_index[outcome.index] += 1
                        if outcome.result is not None:
                            result = outcome.result
                            outcomes["ok"] += 1
                            attempts_ok += result.attempts
                            output_tokens += result.usage.output_tokens
                            texts[result.text] += 1
                            if result.usage.output_tokens != a.output_tokens:
                                wrong_tokens += 1
                        else:
                            error = outcome.error
                            assert error is not None
                            outcomes[type(error).__name__] += 1
                            attempt = getattr(error, "attempt", 0)
                            attempts_failed += attempt
                            failed_first_attempt += attempt <= 1
                            if len(first_errors) < 5:
                                first_errors.append(f"{type(error).__name__}: {error}"[:300])
            wall = trio.current_time() - t0
            cpu = time.process_time() - cpu0
            busy1 = machine_busy_s()
            held = await _quiet(rt, 2.0)
            totals = await rt.ledger_totals()
            stats = await rt.statistics()
        services.cancel_scope.cancel()

    ok = outcomes["ok"]
    finished = sum(outcomes.values())
    attempts = attempts_ok + attempts_failed
    ledger = totals.get(f"{PROVIDER}:{MODEL}")
    server_requests = app.chat_requests_seen
    common = texts.most_common(1)[0][1] if texts else 0
    return {
        "fault_rate": level,
        "mode": mode,
        "calls": a.calls,
        "finished": finished,
        "completed": ok,
        "failed": finished - ok,
        "failed_by_kind": {k: v for k, v in sorted(outcomes.items()) if k != "ok"},
        "failed_without_retry": failed_first_attempt,
        "unfinished": a.calls - finished,
        "ended_twice": sum(1 for n in ended_per_index.values() if n > 1),
        "attempts": attempts,
        "retries": attempts - finished,
        "ledger_attempts": ledger.attempts if ledger else 0,
        "ledger_calls": ledger.calls if ledger else 0,
        "ledger_failures": ledger.failures if ledger else 0,
        "server_requests": server_requests,
        "requests_per_call": round(server_requests / a.calls, 3),
        "goodput_calls_per_s": round(ok / wall, 1) if wall else None,
        "goodput_output_tokens_per_s": round(output_tokens / wall, 1) if wall else None,
        "output_tokens": output_tokens,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "other_cpu_util": (
            round(max(0.0, busy1 - busy0 - cpu) / wall, 3)
            if busy0 is not None and busy1 is not None and wall
            else None
        ),
        "timed_out": cap.cancelled_caught,
        "distinct_texts": len(texts),
        "results_not_matching_the_common_text": ok - common,
        "results_with_wrong_token_count": wrong_tokens,
        "held_after": held,
        "leak_free": not any(held.values()),
        "retry_budget_available": round(stats.retry_budget_available, 1),
        "breakers": dict(stats.breakers),
        "first_errors": first_errors,
    }


async def run(a: argparse.Namespace) -> dict[str, Any]:
    levels = []
    for level in a.fault_levels:
        for mode in a.failure_modes:
            result = await run_level(a, level, mode)
            print(
                f"# {level:.0%} faults, {mode}: {result['completed']} completed,"
                f" {result['failed']} failed, {result['requests_per_call']} requests/call,"
                f" {result['goodput_calls_per_s']} calls/s, {result['wall_s']:.1f} s",
                file=sys.stderr,
                flush=True,
            )
            levels.append(result)
    return {
        "benchmark": "chaos",
        "calls": a.calls,
        "concurrency": a.concurrency,
        "mix": a.weights,
        "modes": a.failure_modes,
        "wait_max_attempts": a.wait_max_attempts,
        "retry_after": a.retry_after,
        "cooldown_jitter": (
            a.cooldown_jitter
            if a.cooldown_jitter is not None
            else sluice.RateLimitConfig().cooldown_jitter
        ),
        "sim": {
            "ttft": a.ttft,
            "tokens_per_second": a.tokens_per_second,
            "output_tokens": a.output_tokens,
            "disconnect_after": a.disconnect_after,
        },
        "seed": a.seed,
        "levels": levels,
        **versions(),
        "cpus": os.cpu_count(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def check(level: dict[str, Any]) -> bool:
    """True when every call ended exactly once, with whole replies, and nothing leaked."""
    return (
        level["finished"] == level["calls"]
        and level["ended_twice"] == 0
        and not level["timed_out"]
        and level["results_not_matching_the_common_text"] == 0
        and level["results_with_wrong_token_count"] == 0
        and level["leak_free"]
    )


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    report = trio.run(run, a)
    report["ok"] = all(check(level) for level in report["levels"])
    sys.stdout.buffer.write(orjson.dumps(report) + b"\n")
    sys.stdout.flush()
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
