"""Which circuit breaker guards a backend, and who may make one.

One breaker per ``provider:model`` (per provider when its config says ``scope = "provider"``;
none when it has no ``breaker`` config), held in the Supervisor's
:class:`~sluice._breaker.Breakers` map. Ownership: only the Supervisor's call tasks make
breakers (:func:`breaker_for`, as an attempt asks one) and change them (its tickets); the
runtime's group placement, statistics and health only read them (:func:`find_breaker`), so a
look from a caller's task never adds to the map.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice._breaker import Breakers, CircuitBreaker
from sluice._errors import CircuitOpen

if TYPE_CHECKING:
    from sluice._routing import SharedMarks
    from sluice.providers._registry import ResolvedProvider

__all__ = ["breaker_for", "breaker_key", "circuit_open", "find_breaker", "share_if_open"]


def breaker_key(provider: ResolvedProvider, model: str) -> str | None:
    """The key of ``model`` of ``provider``'s breaker: ``provider:model``, or ``provider``
    when its config scopes the breaker to the whole provider; None without a breaker."""
    config = provider.breaker
    if config is None:
        return None
    return provider.name if config.scope == "provider" else f"{provider.name}:{model}"


def find_breaker(
    breakers: Breakers, provider: ResolvedProvider, model: str
) -> CircuitBreaker | None:
    """The breaker of ``model`` of ``provider`` if one exists now; never makes one."""
    key = breaker_key(provider, model)
    return None if key is None else breakers.find(key)


def breaker_for(
    breakers: Breakers, provider: ResolvedProvider, model: str, now: float
) -> CircuitBreaker | None:
    """The breaker of ``model`` of ``provider``, made (and added) if there is none. For the
    Supervisor's call tasks only.

    Look it up again after any wait without one of its tickets: an idle breaker may be
    forgotten meanwhile (see :class:`~sluice._breaker.Breakers`)."""
    config = provider.breaker
    if config is None:
        return None
    key = provider.name if config.scope == "provider" else f"{provider.name}:{model}"
    found = breakers.find(key)
    if found is not None:
        return found
    made = CircuitBreaker(
        min_failures=config.min_failures,
        failure_rate=config.failure_rate,
        window=config.window,
        open_for=config.open_for,
    )
    return breakers.add(key, made, now)


def circuit_open(name: str, breaker: CircuitBreaker, wait: float) -> CircuitOpen:
    """The error for a call ``name``'s breaker refuses: when it lets a probe through, and the
    failures that opened it (never a bare "open")."""
    when = f"open for another {wait:.1f} s" if wait > 0 else "a probe call is testing it"
    causes = breaker.causes()
    why = f"; last failure: {causes[-1]}" if causes else ""
    return CircuitOpen(
        f"{name} failed repeatedly; its circuit breaker is {when}{why}", retry_after=wait
    )


def share_if_open(
    shared: SharedMarks, mark: str, breaker: CircuitBreaker | None, now: float
) -> None:
    """With a shared store: if ``breaker`` is open, have every process's routing pass its
    backend (``mark``) over until it half-opens, when this process probes it."""
    if breaker is not None and breaker.state(now) == "open":
        shared.avoid(mark, breaker.retry_in(now), now)
