"""A process that holds shared slots and a budget hold, then idles until killed:
``python tests/redis_holder.py URL PREFIX LAPSE``. Prints ``held`` once it holds them; its
store keeps renewing them every third of ``LAPSE`` until the process dies."""

from __future__ import annotations

import sys

import trio

from sluice._limits.cost import Cost
from sluice._limits.redis_store import open_redis_store
from sluice._limits.store import BudgetAsk, Reservation

ACCOUNT = (("global", 1000, None),)


async def main(url: str, prefix: str, lapse: float) -> None:
    async with open_redis_store(url, prefix=prefix, lapse=lapse) as store:
        budget = BudgetAsk("held-by-the-dead", 400, 10, ACCOUNT)
        held = await store.reserve("k", (), Cost(), 0.0, caps=(5, 5), budget=budget)
        assert isinstance(held, Reservation)
        print("held", flush=True)
        await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], float(sys.argv[3]))
