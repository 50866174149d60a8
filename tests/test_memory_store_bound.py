"""The memory quota store keeps the windows a key's admissions go through between calls (they
only change with its limits): a reload's new limits, a limit learned from headers and its
lapse each take effect at the next admission all the same."""

from __future__ import annotations

from sluice._limits.cost import Cost
from sluice._limits.headers import Learned
from sluice._limits.store import LEARNED_FOR, MemoryQuotaStore, Reservation, WindowSpec

ONE = Cost(1, 0, 0)


async def _admitted(store: MemoryQuotaStore, specs: tuple[WindowSpec, ...], now: float) -> bool:
    return isinstance(await store.reserve("k", specs, ONE, now), Reservation)


async def test_new_specs_learned_limits_and_their_lapse_apply_at_the_next_admission() -> None:
    store = MemoryQuotaStore()
    two = (WindowSpec("requests", 2, 60.0),)
    assert [await _admitted(store, two, 0.0) for _ in range(3)] == [True, True, False]
    # A reload: a new specs tuple with a higher limit counts the same admissions against it.
    four = (WindowSpec("requests", 4, 60.0),)
    assert [await _admitted(store, four, 1.0) for _ in range(3)] == [True, True, False]
    # The window has emptied; a provider reports a lower limit than configured: it binds.
    await store.learn("k", four, [Learned("requests", 1, None, None)], 100.0)
    assert [await _admitted(store, four, 100.0) for _ in range(2)] == [True, False]
    # Once the learned limit lapses (and its window has emptied) the configured one is back.
    later = 100.0 + LEARNED_FOR + 60.0
    assert [await _admitted(store, four, later) for _ in range(5)] == [True] * 4 + [False]
