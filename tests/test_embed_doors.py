"""``embed`` and ``embed_many`` through the front doors (sluice.aio, sluice.sync), end to end
over loopback against the simulator in a thread of its own. Real clock, short timeouts,
assertions on behaviour only."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

import sluice
import sluice.aio
import sluice.sync
from sluice import BadRequest, EmbedRequest, ProviderConfig, RuntimeConfig
from sluice.simulator import SimulatorConfig

from .sim_thread import WatchedSimulator, simulator_thread

if TYPE_CHECKING:
    from collections.abc import Iterator

LIMIT = 20.0
KEYS = {"ANTHROPIC_API_KEY": "sk-ant-test"}


@pytest.fixture
def sim() -> Iterator[WatchedSimulator]:
    with simulator_thread(SimulatorConfig()) as sim:
        yield sim


def config(sim: WatchedSimulator) -> RuntimeConfig:
    return RuntimeConfig(
        providers={"sim": ProviderConfig(base_url=sim.url)},
        ledger=sluice.LedgerConfig(persist=False),
    )


def run(main: Any) -> Any:
    async def bounded() -> Any:
        async with asyncio.timeout(LIMIT):
            return await main()

    return asyncio.run(bounded())


def test_asyncio_door_embeds_one_and_many(sim: WatchedSimulator) -> None:
    async def main() -> Any:
        async with sluice.aio.open_runtime(config(sim), environ=KEYS) as rt:
            one = await rt.embed("sim:emb", ["a", "b"], dimensions=4)
            same = await rt.embed(EmbedRequest(model="sim:emb", input="b", dimensions=4))
            async with rt.embed_many(
                [f"t{i}" for i in range(250)], model="sim:emb", batch_size=100, dimensions=4
            ) as outcomes:
                listed = [o async for o in outcomes]

            async def produce() -> Any:
                for i in range(30):
                    await asyncio.sleep(0)
                    yield f"p{i}"

            async with rt.embed_many(produce(), model="sim:emb", batch_size=7) as outcomes:
                produced = [o async for o in outcomes]
            with pytest.raises(BadRequest, match="no embeddings endpoint"):
                async with rt.embed_many(["x"], model="anthropic:claude-haiku-4-5") as outcomes:
                    [o async for o in outcomes]
            return one, same, listed, produced

    one, same, listed, produced = run(main)
    assert len(one.vectors) == 2 and same.vectors[0] == one.vectors[1]
    assert [o.index for o in listed] == list(range(250))
    assert all(o.error is None and len(o.vector or ()) == 4 for o in listed)
    assert [o.text for o in produced] == [f"p{i}" for i in range(30)]


def test_blocking_door_embeds_one_and_many(sim: WatchedSimulator) -> None:
    def texts() -> Iterator[str]:
        for i in range(600):
            yield f"g{i}"

    with sluice.sync.open_runtime(config(sim), environ=KEYS) as rt:
        one = rt.embed("sim:emb", "hello", dimensions=3)
        with rt.embed_many(texts(), model="sim:emb", batch_size=50, dimensions=3) as outcomes:
            found = list(outcomes)
        with pytest.raises(BadRequest, match="no embeddings endpoint"):
            list(rt.embed_many(["x"], model="anthropic:claude-haiku-4-5"))
        stats = rt.statistics()
    assert len(one.vectors) == 1 and len(one.vectors[0]) == 3
    assert [o.text for o in found] == [f"g{i}" for i in range(600)]
    assert all(o.vector is not None and len(o.vector) == 3 for o in found)
    assert stats.calls_in_flight == 0
