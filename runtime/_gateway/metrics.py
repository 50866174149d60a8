"""The gateway's own Prometheus series, collected into the runtime's registry.

The hot path only bumps a number in a dict (:meth:`Gateway._counted`, ``Server.refused``);
this collector turns those numbers, and the server's connection counts, into metric families
at scrape time, so ``GET /metrics`` shows the gateway next to the runtime. Labels are
bounded: the route is one of the gateway's fixed routes or ``other``, the status one the
gateway sends (499: the client left before any response). Each ``--workers`` process has its
own registry: a scrape reaches one worker and shows that worker's counts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .app import Gateway

__all__ = ["GatewayCollector"]


class GatewayCollector(Collector):
    """``sluice_gateway_*``: requests by route and status, refusals, internal errors,
    connections."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    def collect(self) -> Iterator[Any]:
        gateway = self.gateway
        requests = CounterMetricFamily(
            "sluice_gateway_requests",
            "Requests the gateway answered, by route and status (499: the client left first).",
            labels=("route", "status"),
        )
        for (route, status), n in sorted(list(gateway.requests.items())):  # one atomic copy
            requests.add_metric((route, str(status)), n)
        yield requests
        server = gateway.server
        refused = CounterMetricFamily(
            "sluice_gateway_refused",
            "Requests (or connections past the cap) the HTTP server refused before routing"
            " them: malformed, too large, too slow, over the connection cap.",
            labels=("status",),
        )
        for status, n in sorted(list(server.refused.items()) if server is not None else ()):
            refused.add_metric((str(status),), n)
        yield refused
        errors = CounterMetricFamily(
            "sluice_gateway_internal_errors",
            "Unexpected exceptions (bugs) the HTTP server caught per request or connection;"
            " each is logged with its traceback.",
        )
        errors.add_metric((), server.internal_errors if server is not None else 0)
        yield errors
        connections = GaugeMetricFamily(
            "sluice_gateway_open_connections", "Client connections open now."
        )
        connections.add_metric((), server.connections if server is not None else 0)
        yield connections
        active = GaugeMetricFamily("sluice_gateway_active_requests", "Requests being answered now.")
        active.add_metric((), server.active if server is not None else 0)
        yield active
