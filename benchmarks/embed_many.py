"""``Runtime.embed_many`` over a large corpus against the simulator, under a token quota.

    python -m benchmarks.embed_many                       # 100,000 texts, 400,000 TPM (~2 min)
    python -m benchmarks.embed_many --texts 5000 --tpm 20000 --per 5   # a quick run

The simulator runs in this process on loopback and enforces the same token quota itself
(``--tpm`` tokens per ``--per`` seconds, a sliding window counted when each request reaches
it, tokens by its own rule); sluice is given the same limit as a ``total_tokens`` window. The
corpus is a generator of short texts (``chunk N: a short text about topic M``), never a list:
``embed_many`` reads it as it goes.

Reports, as one JSON line on stdout (progress on stderr):

* ``max_tokens_in_any_window`` (the server's count of the tokens it accepted, over every
  window of ``--per`` seconds starting at a request) against ``limit``, and the 429s the
  server sent (``server_429``; the server refuses anything over its quota);
* ``in_order``: every outcome came with the next index and its own text, and a vector of
  ``--dimensions`` floats;
* ``rss_mb``: the process's resident memory after every 10,000 outcomes, and
  ``rss_spread_mb`` (the largest sample less the smallest), which stays small because inputs
  are read only as far ahead as the requests in flight; ``rss_before_mb`` is the memory
  before the first request (the runtime, the simulator, no connection yet);
* ``requests`` and ``inputs_per_request`` (the server's counts), ``failed`` inputs,
  ``seconds`` and inputs per second.

Exit status 1 when the quota was exceeded, an outcome came out of order, or an input failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING, Any

import orjson
import trio

import sluice
from sluice.simulator import SimulatorApp, SimulatorConfig, serve_simulator
from sluice.simulator._quota import QuotaWindow
from sluice.simulator._text import count_tokens

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sluice.simulator._app import Headers, SimResponse

_PAGE = os.sysconf("SC_PAGE_SIZE")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--texts", type=int, default=100_000, help="inputs in the corpus")
    p.add_argument("--tpm", type=int, default=400_000, help="tokens per window (both sides)")
    p.add_argument("--per", type=float, default=60.0, help="the window's length in seconds")
    p.add_argument("--dimensions", type=int, default=32)
    p.add_argument("--max-in-flight", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=None, help="default: the provider's")
    p.add_argument("--ttft", type=float, default=0.05, help="the simulator's reply latency")
    p.add_argument("--max-seconds", type=float, default=900.0, help="give up after this")
    return p.parse_args(argv)


def rss_mb() -> float:
    """The process's resident memory now (not its peak), in MB."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE / 1e6


class RecordingApp(SimulatorApp):
    """The simulator, noting every embeddings request: when it arrived, its inputs, its tokens
    by the simulator's rule, and the status it got."""

    def __init__(self, config: SimulatorConfig, tpm: int, per: float) -> None:
        super().__init__(config)
        self._quota = QuotaWindow(rpm=None, tpm=tpm, window=per)
        self.requests: list[tuple[float, int, int, int]] = []

    async def handle(self, method: str, path: str, headers: Headers, body: bytes) -> SimResponse:
        arrived = trio.current_time()
        response = await super().handle(method, path, headers, body)
        if method == "POST" and path.startswith("/v1/embeddings"):
            inputs = orjson.loads(body)["input"]
            tokens = sum(count_tokens(text) for text in inputs)
            self.requests.append((arrived, len(inputs), tokens, response.status))
        return response


def corpus(n: int) -> Iterator[str]:
    for i in range(n):
        yield text(i)


def text(i: int) -> str:
    return f"chunk {i}: a short text about topic {i % 97}"


def max_in_window(points: list[tuple[float, int]], per: float) -> int:
    """The most ``amount`` summed over any window ``[t, t + per)`` that starts at a point."""
    best = 0
    for start, _ in points:
        best = max(best, sum(amount for at, amount in points if start <= at < start + per))
    return best


async def run(a: argparse.Namespace) -> dict[str, Any]:
    app = RecordingApp(SimulatorConfig(ttft=a.ttft, ttft_jitter=0.0), a.tpm, a.per)
    window = sluice.WindowLimit(dimension="total_tokens", limit=a.tpm, per=a.per)
    limits = sluice.RateLimitConfig(windows=(window,), learn_from_headers=a.per == 60.0)
    rss: list[float] = []
    in_order = True
    seen = failed = 0
    async with trio.open_nursery() as services:
        port = await services.start(serve_simulator, app)
        config = sluice.RuntimeConfig(
            providers={
                "sim": sluice.ProviderConfig(
                    base_url=f"http://127.0.0.1:{port}/v1", rate_limit=limits
                )
            },
            ledger=sluice.LedgerConfig(persist=False),
        )
        async with sluice.open_runtime(config) as rt:
            started = time.perf_counter()
            before = rss_mb()
            with trio.move_on_after(a.max_seconds) as cap:
                async with rt.embed_many(
                    corpus(a.texts),
                    model="sim:sim-embed",
                    batch_size=a.batch_size,
                    max_in_flight=a.max_in_flight,
                    dimensions=a.dimensions,
                ) as outcomes:
                    async for outcome in outcomes:
                        if outcome.error is not None:
                            failed += 1
                        elif outcome.vector is None or len(outcome.vector) != a.dimensions:
                            in_order = False
                        if outcome.index != seen or outcome.text != text(seen):
                            in_order = False
                        seen += 1
                        if seen % 10_000 == 0:
                            rss.append(rss_mb())
                            print(f"{seen} inputs, {rss[-1]:.1f} MB", file=sys.stderr)
            seconds = time.perf_counter() - started
        services.cancel_scope.cancel()
    accepted = [(at, tokens) for at, _, tokens, status in app.requests if status == 200]
    sizes = [n for _, n, _, status in app.requests if status == 200]
    worst = max_in_window(accepted, a.per)
    return {
        "texts": a.texts,
        "outcomes": seen,
        "failed": failed,
        "in_order": in_order and seen == a.texts,
        "limit": a.tpm,
        "per_seconds": a.per,
        "max_tokens_in_any_window": worst,
        "within_limit": worst <= a.tpm,
        "server_429": sum(1 for *_, status in app.requests if status == 429),
        "requests": len(sizes),
        "inputs_per_request": {
            "mean": round(sum(sizes) / len(sizes), 1) if sizes else 0,
            "max": max(sizes, default=0),
            "min": min(sizes, default=0),
        },
        "tokens": sum(tokens for _, tokens in accepted),
        "seconds": round(seconds, 1),
        "inputs_per_s": round(seen / seconds, 1) if seconds else 0,
        "rss_before_mb": round(before, 1),
        "rss_mb": [round(m, 1) for m in rss],
        "rss_spread_mb": round(max(rss) - min(rss), 1) if rss else 0.0,
        "timed_out": cap.cancelled_caught,
    }


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    report = trio.run(run, a)
    print(orjson.dumps(report).decode())
    ok = report["in_order"] and report["within_limit"] and not report["failed"]
    return 0 if ok and not report["timed_out"] else 1


if __name__ == "__main__":
    sys.exit(main())
