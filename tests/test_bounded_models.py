"""Ten thousand model names through one real runtime (simulator behind ``mock_transport``,
virtual time): breakers, quota keys and metric series stay within their stated bounds, and
every statistic is back to zero at the end."""

from __future__ import annotations

import itertools

import trio
from prometheus_client.parser import text_string_to_metric_families

import sluice
from sluice import LedgerConfig, MetricsConfig, RateLimitConfig, RuntimeConfig
from sluice._breaker import IDLE_KEPT
from sluice._config import ProviderConfig
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
