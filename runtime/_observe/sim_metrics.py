"""Prometheus metrics of ``sluice sim``: the simulator's replies by status.

The simulator is not a runtime, so it has no calls or quotas to show; what a load test wants
from it is how many requests it answered and how (200, 429, 5xx), next to the client's view.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, generate_latest

from sluice.simulator import SimulatorApp

if TYPE_CHECKING:
    from sluice.simulator._app import Headers, SimResponse

__all__ = ["CountingSimulator"]


class CountingSimulator(SimulatorApp):
    """A :class:`SimulatorApp` that counts its replies in its own registry."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.registry = CollectorRegistry(auto_describe=False)
        self._replies = Counter(
            "sluice_sim_replies",
            "Replies the simulator sent, by HTTP status and path.",
            ("status", "path"),
            registry=self.registry,
        )

    async def handle(self, method: str, path: str, headers: Headers, body: bytes) -> SimResponse:
        response = await super().handle(method, path, headers, body)
        route = path.split("?", 1)[0]
        known = route.endswith(("/chat/completions", "/messages", "/models"))
        self._replies.labels(str(response.status), route if known else "other").inc()
        return response

    async def render(self) -> bytes:
        return generate_latest(self.registry)
