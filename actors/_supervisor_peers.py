"""What the Supervisor's call tasks share: the handles of the other actors, the retry
settings and budget, the circuit breakers, the count of calls in flight and how a request is
prepared for a provider; and the route to a provider's actor."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeAlias

import attrs

from sluice._breaker import Breakers
from sluice._config import RetryConfig
from sluice._mail import ProviderMailbox
from sluice._record import Record
from sluice._retry_budget import RetryBudget
from sluice._routing import Routing
from sluice.providers._registry import ResolvedProvider

from ._breakers import breaker_key, find_breaker
from ._rate_limiter import RateLimiterHandle
from ._token_ledger import TokenLedgerHandle

if TYPE_CHECKING:
    from sluice._messages import ChatRequest
    from sluice._tools.preparation import Prepared

__all__ = ["CallCount", "Preparer", "Route", "SupervisorPeers", "default_preparer"]

Route = tuple[ResolvedProvider, ProviderMailbox]
"""A provider's resolved settings and its actor's mailbox."""


Preparer: TypeAlias = "Callable[[ChatRequest, ResolvedProvider], Prepared | None]"
"""Prepares a request's tools for a provider's backend; None for a request without tools.
Raises ``ConfigError`` when the tools or ``tool_choice`` cannot be used."""


def default_preparer(request: ChatRequest, provider: ResolvedProvider) -> Prepared | None:
    """Preparation with the provider's capabilities only (no per-model entries)."""
    if not request.tools and request.tool_choice is None and request.parallel_tool_calls is None:
        return None
    from sluice._tools.preparation import prepare  # only calls with tools load it

    return prepare(request, provider.capabilities, request.tool_options)


class CallCount:
    """The calls the Supervisor supervises now. Its call tasks alone change it; the runtime's
    statistics and drain only read it (one trio thread, so a read is never torn)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


@attrs.frozen(eq=False, repr=False)
class SupervisorPeers(Record):
    limiter: RateLimiterHandle
    ledger: TokenLedgerHandle
    retry: RetryConfig
    rng: random.Random
    resolve: Callable[[str], Awaitable[Route]]
    """Finds (starting it if needed) the provider actor for a ``provider:model`` fallback."""
    budget: RetryBudget
    breakers: Breakers = attrs.field(factory=Breakers)
    """One per model (or provider); idle ones are forgotten once there are many. Made and
    changed only by the Supervisor's call tasks; others only read them (see
    :mod:`sluice.actors._breakers`)."""
    catch_bugs: bool = True
    """Fail only the affected call on a bug (production); tests may let bugs propagate."""
    in_flight: CallCount = attrs.field(factory=CallCount)
    """Calls being supervised now, read by the runtime's statistics and drain."""
    prepare: Preparer = default_preparer
    """Prepares the caller's request again when a call falls back to another model."""
    routing: Routing | None = None
    """Model groups' routing state: told when a group's call moves or ends."""

    def breaker_state(self, provider: ResolvedProvider, model: str, now: float) -> str:
        """``closed``, ``open`` or ``half_open`` for ``model`` of ``provider`` (``closed``
        when it has no breaker, or none was made yet). Only reads."""
        breaker = find_breaker(self.breakers, provider, model)
        return "closed" if breaker is None else breaker.state(now)

    def breaker_open(self, provider: ResolvedProvider, model: str, now: float) -> bool:
        """Whether ``model`` of ``provider`` refuses attempts now (its breaker is open).
        Only reads: the runtime's group placement asks it from the caller's task."""
        breaker = find_breaker(self.breakers, provider, model)
        return breaker is not None and breaker.state(now) == "open"

    def breaker_key(self, provider: ResolvedProvider, model: str) -> str | None:
        """See :func:`sluice.actors._breakers.breaker_key`."""
        return breaker_key(provider, model)
