"""Ten thousand model names through one real runtime (simulator behind ``mock_transport``,
virtual time): breakers, quota keys and metric series stay within their stated bounds, and
every statistic is back to zero at the end."""

from __future__ import annotations

import gc
import itertools
import tracemalloc

import trio
from prometheus_client.parser import text_string_to_metric_families

import sluice
from sluice import LedgerConfig, MetricsConfig, RateLimitConfig, RuntimeConfig
from sluice._breaker import IDLE_KEPT
from sluice._config import ProviderConfig
from sluice._ledger.book import LedgerBook
from sluice._observe.metrics import OTHER
from sluice.actors._rate_limiter import KEYS_KEPT
from sluice.simulator import SimulatorConfig, mock_transport

from .helpers import virtual_deadline

NAMES = 10_000
WORKERS = 10
GAP = 10.0
"""Seconds each worker waits between calls: about 60 names a minute, so about 60 quota keys
have a call in their one-minute window at any time (well under half of what is kept)."""
CAP = 100


def series(text: str) -> dict[str, set[tuple[tuple[str, str], ...]]]:
    """Per family name, the label sets of its samples."""
    found: dict[str, set[tuple[tuple[str, str], ...]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found.setdefault(f"{family.type}:{s.name}", set()).add(tuple(sorted(s.labels.items())))
    return found


def label_values(found: dict[str, set[tuple[tuple[str, str], ...]]], label: str) -> set[str]:
    return {v for sets in found.values() for labels in sets for k, v in labels if k == label}


@virtual_deadline(NAMES / WORKERS * GAP + 600)
async def test_ten_thousand_model_names_leave_breakers_keys_and_series_bounded(autojump_clock):
    config = RuntimeConfig(
        providers={
            "sim": ProviderConfig(rate_limit=RateLimitConfig(key="model", requests_per_minute=1000))
        },
        metrics=MetricsConfig(enabled=True, max_label_values=CAP),
        ledger=LedgerConfig(persist=False),
    )
    sim = SimulatorConfig(output_tokens=2)
    numbers = itertools.count()
    breakers_high = keys_high = 0
    ok = 0
    early: dict[str, set[tuple[tuple[str, str], ...]]] = {}
    async with sluice.open_runtime(config, transport=mock_transport(sim)) as rt:
        assert rt._peers is not None
        breakers = rt._peers.breakers

        async def worker() -> None:
            nonlocal breakers_high, keys_high, ok, early
            while (i := next(numbers)) < NAMES:
                result = await rt.chat(f"sim:m-{i}", "hi", max_tokens=2)
                ok += result.model == f"m-{i}"
                breakers_high = max(breakers_high, len(breakers))
                if i % 10 == 0:
                    keys_high = max(keys_high, len((await rt.statistics()).quotas))
                if i == 1000:
                    early = series((await rt.render_metrics()).decode())
                await trio.sleep(GAP)

        async with trio.open_nursery() as nursery:
            for _ in range(WORKERS):
                nursery.start_soon(worker)
        stats = await rt.statistics()
        late = series((await rt.render_metrics()).decode())
    assert ok == NAMES
    # Breakers: at most IDLE_KEPT (2 x the busy ones, at most WORKERS, is less), and near it
    # between sweeps (seen only when calls end, WORKERS at a time).
    assert IDLE_KEPT - WORKERS <= breakers_high <= IDLE_KEPT
    assert len(stats.breakers) <= IDLE_KEPT
    # Quota keys, one per model here: at most KEYS_KEPT (about 60 are busy at any time).
    assert 2 * 70 < keys_high <= KEYS_KEPT
    assert len(stats.quotas) <= KEYS_KEPT
    # Series: each capped label has exactly CAP values and "other"; the counters' and
    # histograms' series stopped growing once the cap was reached (by name 1000).
    models = label_values(late, "model")
    assert len(models) == CAP + 1 and OTHER in models
    assert len(label_values(late, "key")) == CAP + 1
    assert {k: v for k, v in late.items() if not k.startswith("gauge:")} == {
        k: v for k, v in early.items() if not k.startswith("gauge:")
    }
    breaker_series = late["gauge:sluice_breaker_state"]
    assert len(breaker_series) <= 3 * (CAP + 1)
    # Every statistic is zero when idle.
    assert stats.calls_in_flight == 0
    assert set(stats.attempts_in_flight.values()) <= {0}
    assert all(q.open_streams == 0 and q.pending == 0 for q in stats.quotas.values())
    assert all(not any(q.queued.values()) for q in stats.quotas.values())


ROUNDS = (200,) * 4
"""New names per round: the first two warm everything up (quota keys are dropped in sweeps
that run as new keys come, so the kept number settles from the second round on); memory is
compared from the end of the second on."""
ROW_BYTES = 480
"""What a new name may leave in memory: its ledger row (the record, kept in memory when
nothing is written to disk), a price looked up, and some slack for dicts resizing."""


@virtual_deadline(len(ROUNDS) * 700)
async def test_new_model_names_leave_nothing_but_their_ledger_row(autojump_clock):
    """Rounds of names never seen before, each ten minutes after the last (so the previous
    round's quota keys and breakers are at rest): memory grows by no more than the new
    names' ledger rows, which the book keeps once (no copy waiting for a flush that never
    comes without a store). A name that left more (its quota key or breaker kept, a metric
    series, a cache entry never dropped) would show here."""
    config = RuntimeConfig(
        providers={
            "sim": ProviderConfig(rate_limit=RateLimitConfig(key="model", requests_per_minute=1000))
        },
        metrics=MetricsConfig(enabled=True, max_label_values=CAP),
        ledger=LedgerConfig(persist=False),
    )
    numbers = itertools.count()
    traced: list[int] = []
    async with sluice.open_runtime(config, transport=mock_transport(SimulatorConfig())) as rt:

        async def worker(end: int) -> None:
            while (i := next(numbers)) < end:
                await rt.chat(f"sim:m-{i}", "hi", max_tokens=2)

        tracemalloc.start()
        try:
            end = 0
            for names in ROUNDS:
                end += names
                async with trio.open_nursery() as nursery:
                    for _ in range(WORKERS):
                        nursery.start_soon(worker, end)
                numbers = itertools.count(end)
                await rt.render_metrics()
                # Past every window and every call's deadline: trio keeps a cancel scope in its
                # deadline heap until that deadline passes, which is not ours to measure.
                await trio.sleep(601)
                gc.collect()
                traced.append(tracemalloc.get_traced_memory()[0])
        finally:
            tracemalloc.stop()
        rows = await rt.ledger.rows()
        (book,) = [o for o in gc.get_objects() if isinstance(o, LedgerBook)]
    per_name = (traced[-1] - traced[1]) / sum(ROUNDS[2:])
    assert per_name < ROW_BYTES, traced
    assert len(rows) == sum(ROUNDS)  # the record: one row per name
    assert book.keep_rows and book.dirty == {}  # kept once
