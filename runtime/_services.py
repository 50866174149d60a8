"""The housekeeping and observability tasks a runtime runs beside its actors, in the
services nursery of ``open_runtime`` (cancelled last, after the actors have stopped)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ._config import RuntimeConfig
    from ._memory import TrimCount
    from ._observe.metrics import Metrics
    from ._observe.observer import Observer
    from ._runtime import Runtime
    from ._snapshots import RuntimeStatistics

__all__ = ["refresh_gauges", "start_services"]

GAUGES_EVERY = 5.0
"""Seconds between refreshes of the metrics gauges' snapshot."""


async def start_services(
    config: RuntimeConfig,
    observer: Observer,
    services: trio.Nursery,
    trims: TrimCount,
    statistics: Callable[[], Awaitable[RuntimeStatistics | None]],
    rt: Runtime,
) -> int | None:
    """Start the housekeeping and observability tasks the config asks for: the memory trimmer
    (counting in ``trims``), the hook runner, the gauges' refresher (over ``statistics``), the
    metrics endpoint (``rt.render_metrics``), and the watcher that logs breaker and cooldown
    changes (``rt.health``, when ``sluice`` logs at INFO). Returns the metrics endpoint's
    port, None without one."""
    if config.trim_memory_every is not None:
        from ._memory import trim_memory_forever

        every = config.trim_memory_every
        services.start_soon(trim_memory_forever, every, trims, name="memory trim")
    if observer.hooks is not None:
        services.start_soon(observer.hooks.run, name="hooks")
    if observer.metrics is not None:
        services.start_soon(refresh_gauges, observer.metrics, statistics, name="metrics gauges")
    if observer.logs_changes():
        from ._observe.logs import watch_changes

        services.start_soon(watch_changes, rt.health, name="health watcher")
    metrics = config.metrics
    if metrics.port is None:
        return None
    from ._observe.server import serve_metrics

    port: int = await services.start(
        serve_metrics, rt.render_metrics, metrics.host, metrics.port, name="metrics endpoint"
    )
    return port


async def refresh_gauges(
    metrics: Metrics, statistics: Callable[[], Awaitable[RuntimeStatistics | None]]
) -> None:
    """Keep the gauges' snapshot at most :data:`GAUGES_EVERY` seconds old, so that a
    synchronous ``rt.metrics.render()`` (a scraper of one's own) shows recent gauges."""
    while True:
        await trio.sleep(GAUGES_EVERY)
        stats = await statistics()
        if stats is not None:  # None: the actors are not running
            metrics.gauges.update(stats)
