"""One process of the multi-process budget test: ``python tests/redis_worker.py URL PREFIX
CALLS BUDGET_MICROS``. Runs CALLS concurrent calls against an in-process simulator under a
global dollar budget shared through Redis and prints one JSON line: calls done, calls refused,
micro-dollars spent."""

from __future__ import annotations

import sys

import orjson
import trio

import sluice
from sluice import BudgetExceeded, ChatRequest, RetryConfig, RuntimeConfig
from sluice._config import BudgetConfig, LedgerConfig
from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport


async def main(url: str, prefix: str, calls: int, budget_micros: int) -> None:
    sim = SimulatorApp(SimulatorConfig(output_tokens=100, ttft=0.05, tokens_per_second=2000))
    config = RuntimeConfig(
        retry=RetryConfig(jitter=0.0),
        ledger=LedgerConfig(persist=False, budgets=(BudgetConfig(max_usd=budget_micros / 1e6),)),
        store=url,
        store_prefix=prefix,
    )
    done = refused = 0
    async with sluice.open_runtime(config, transport=mock_transport(sim)) as rt:
        request = ChatRequest(model="sim:sim-small", messages="hi", max_tokens=100)

        async def one() -> None:
            nonlocal done, refused
            try:
                await rt.chat(request)
                done += 1
            except BudgetExceeded:
                refused += 1

        async with trio.open_nursery() as nursery:
            for _ in range(calls):
                nursery.start_soon(one)
        (total,) = await rt.ledger.snapshot(by=())
    out = {
        "done": done,
        "refused": refused,
        "micros": total.totals.cost_micros,
        "sent": sim.chat_requests_seen,
    }
    print(orjson.dumps(out).decode(), flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
