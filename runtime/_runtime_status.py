"""The runtime's views of its running state: ``statistics``, ``health``, the metrics and the
hook counts, kept out of :mod:`sluice._runtime` in :class:`StatusMethods`, a base class of
:class:`~sluice._runtime.Runtime`. Each reads what the actors own (through their handles or the
Supervisor's shared counters) and changes nothing.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import trio

from ._errors import ConfigError

if TYPE_CHECKING:
    from sluice.actors._rate_limiter import RateLimiterHandle
    from sluice.actors._supervisor_peers import SupervisorPeers

    from ._observe.metrics import Metrics
    from ._observe.observer import Observer
    from ._prepare import GroupPlacement
    from ._snapshots import ProviderHealth, RuntimeStatistics
    from ._startup import Providers

__all__ = ["StatusMethods"]

_SCRAPE_WAIT = 0.25
"""Seconds a scrape waits for fresh statistics before it shows the last snapshot: the
RateLimiter answers between admissions, and one may be waiting on a quota store that does not
answer."""


class StatusMethods:
    """The state views of :class:`~sluice._runtime.Runtime` (which sets every attribute
    declared here)."""

    _providers: Providers | None
    _peers: SupervisorPeers | None
    _limiter: RateLimiterHandle
    _groups: GroupPlacement
    _observer: Observer | None

    async def statistics(self) -> RuntimeStatistics:
        """What is in flight now, per actor (see :class:`RuntimeStatistics`)."""
        from ._snapshots import RuntimeStatistics  # the snapshots load when first asked for

        assert self._providers is not None and self._peers is not None
        now = trio.current_time()
        peers = self._peers
        return RuntimeStatistics(
            calls_in_flight=peers.in_flight.value,
            attempts_in_flight=self._providers.in_flight(),
            quotas=await self._limiter.statistics(),
            retry_budget_available=peers.budget.available(now),
            breakers={name: b.state(now) for name, b in peers.breakers.items()},
            groups=self._groups.routing.statistics(now, partial(self._breaker_state, now)),
        )

    def _breaker_state(self, now: float, provider: str, model: str) -> str:
        """The breaker state of a group's deployment (a provider a reload dropped: closed)."""
        assert self._providers is not None and self._peers is not None
        spec = self._providers.spec(provider)
        return "closed" if spec is None else self._peers.breaker_state(spec, model, now)

    @property
    def metrics(self) -> Metrics | None:
        """The Prometheus metrics (``.registry``), when ``config.metrics`` enables them."""
        return self._observer.metrics if self._observer is not None else None

    async def render_metrics(self) -> bytes:
        """The metrics in Prometheus' text format, gauges as of now (for a ``/metrics``
        endpoint of one's own, such as a gateway's). Never waits long: when the actors do not
        answer within :data:`_SCRAPE_WAIT` (one may be waiting on a quota store that is down),
        the gauges are the last snapshot's, the windows' ages growing.

        Raises:
            ConfigError: metrics are not enabled (``RuntimeConfig(metrics=...)``).
        """
        metrics = self.metrics
        if metrics is None:
            raise ConfigError("metrics are off: enable them with RuntimeConfig(metrics=...)")
        with trio.move_on_after(_SCRAPE_WAIT):
            stats = await self._gauge_statistics()
            if stats is not None:  # else the last gauges stand
                metrics.gauges.update(stats)
        return metrics.render()

    if TYPE_CHECKING:

        async def _gauge_statistics(self) -> RuntimeStatistics | None:
            """:meth:`statistics`, or None when the actors do not run (``Runtime`` defines
            it, next to the services it hands it to)."""
            ...

    def hook_statistics(self) -> dict[str, int]:
        """Hook records ``dropped`` (queue full) and hook calls ``failed`` (raised) so far."""
        hooks = self._observer.hooks if self._observer is not None else None
        if hooks is None:
            return {"dropped": 0, "failed": 0}
        return {"dropped": hooks.dropped, "failed": hooks.failed}

    async def health(self) -> dict[str, ProviderHealth]:
        """Per provider started so far: whether new calls can go out now, and why not."""
        from ._snapshots import provider_health

        if self._providers is None or self._peers is None:
            return {}
        now = trio.current_time()
        quotas = await self._limiter.statistics()
        last = self._observer.last_errors if self._observer is not None else {}
        names = {*self._providers.names(), *self._peers.breakers}
        return provider_health(names, self._peers.breakers, quotas, last, now)
