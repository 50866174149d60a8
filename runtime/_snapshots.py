"""What the runtime reports about itself: :class:`RuntimeStatistics` (what is in flight) and
:class:`ProviderHealth` (whether a provider takes calls now), and how health is judged from
the actors' state (:func:`provider_health`, pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import attrs

from ._mail_rare import KeyStatistics
from ._record import Record
from ._routing_stats import DeploymentStatistics

if TYPE_CHECKING:
    from ._breaker import Breakers

__all__ = ["ProviderHealth", "RuntimeStatistics", "provider_health"]


@attrs.frozen(repr=False)
class RuntimeStatistics(Record):
    """A snapshot of the runtime: what is in flight and what each quota key holds.

    After every call has ended, every count here is zero: anything else is a leak.
    """

    calls_in_flight: int
    attempts_in_flight: Mapping[str, int]
    """Per provider."""
    quotas: Mapping[str, KeyStatistics]
    retry_budget_available: float
    breakers: Mapping[str, str]
    """Per provider: ``closed``, ``open`` or ``half_open``."""
    groups: Mapping[str, tuple[DeploymentStatistics, ...]] = attrs.field(factory=dict)
    """Per model group used so far: its deployments, in the configured order."""


@attrs.frozen(repr=False)
class ProviderHealth(Record):
    """Whether new calls to one provider can go out now, and why not."""

    provider: str
    usable: bool
    """Its breaker lets attempts through and none of its quota keys is cooling down."""
    breaker: str
    """``closed``, ``open`` or ``half_open`` (``closed`` without a breaker)."""
    cooldown_left: float
    """Seconds until its longest cooldown (after a 429, or an exhausted quota) ends."""
    last_error: str | None
    """The class and message of its last failed attempt."""
    last_error_age: float | None
    """Seconds since then."""


def provider_health(
    names: Iterable[str],
    breakers: Breakers,
    quotas: Mapping[str, KeyStatistics],
    last_errors: Mapping[str, tuple[float, str]],
    now: float,
) -> dict[str, ProviderHealth]:
    """Per provider of ``names``, in name order: usable unless its breaker is open or one of
    its quota keys (``provider`` or ``provider:model``) cools down or is exhausted; with its
    last error (time and text) from ``last_errors``."""
    found: dict[str, ProviderHealth] = {}
    for name in sorted(names):
        breaker = breakers.get(name)
        state = breaker.state(now) if breaker is not None else "closed"
        cooldown = max(
            (
                max(ks.cooldown_left, ks.exhausted_left)
                for key, ks in quotas.items()
                if key == name or key.startswith(name + ":")
            ),
            default=0.0,
        )
        error = last_errors.get(name)
        found[name] = ProviderHealth(
            provider=name,
            usable=state != "open" and cooldown <= 0,
            breaker=state,
            cooldown_left=cooldown,
            last_error=error[1] if error is not None else None,
            last_error_age=now - error[0] if error is not None else None,
        )
    return found
