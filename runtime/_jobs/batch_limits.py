"""A batch's limits and budget, laid over the runtime config. Pure: no I/O, no trio.

``--rpm``, ``--tpm`` and ``--max-pending`` become the RateLimiter quota
(:class:`~sluice._config.RateLimitConfig`) of every provider the batch calls, and ``--budget``
becomes a ``job`` budget of the TokenLedger (:class:`~sluice._config.BudgetConfig`). There is
no limiter of the batch's own: the RateLimiter admits every call, so interactive calls in the
same runtime share the same quota (and go first: batch calls run at priority ``batch``), and
the budget is checked in the same step as the quota, so calls in flight cannot overshoot it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
from attrs.validators import ge, optional

from .._config import BudgetConfig, ProviderConfig, RuntimeConfig, WindowLimit

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["BatchLimits", "apply_limits", "pacing_window"]


@attrs.frozen(kw_only=True)
class BatchLimits:
    """What a batch may use; None leaves the config's own setting in force."""

    rpm: int | None = attrs.field(default=None, validator=optional(ge(1)))
    """Requests per minute, per provider, spread evenly (see :func:`pacing_window`)."""
    tpm: int | None = attrs.field(default=None, validator=optional(ge(1)))
    """Input plus output tokens per minute, per provider."""
    max_pending: int | None = attrs.field(default=None, validator=optional(ge(1)))
    """Calls per provider waiting for their first chunk at once."""
    budget: float | None = attrs.field(default=None, validator=optional(ge(0)))
    """US dollars the job may spend, over every run of the same job (``--job``)."""

    @property
    def quota_set(self) -> bool:
        """True when a quota (not only the budget) is set."""
        return self.rpm is not None or self.tpm is not None or self.max_pending is not None

    @property
    def any_set(self) -> bool:
        return self.quota_set or self.budget is not None


def pacing_window(rpm: int) -> WindowLimit:
    """The window that spreads ``rpm`` requests evenly over the minute.

    ``requests_per_minute`` alone lets the whole minute's quota go at once, then nothing for a
    minute; providers often enforce a per-minute limit over shorter periods (OpenAI: "60,000
    requests/minute may be enforced as 1,000 requests/second"), so such a burst is refused.
    This window admits ``ceil(rpm / 60)`` requests per ``60 * ceil(rpm / 60) / rpm`` seconds:
    exactly ``rpm`` a minute, in steps of about a second (one request per ``60 / rpm``
    seconds below 60 a minute). It never admits more than ``rpm`` in any minute.

    It counts sends (``counted_from="send"``): a provider's window counts each request from
    its first chunk, when the provider surely has it, but this one is a pace of our own, and
    counted from the first chunk each step would last a period plus the time to first token,
    so the batch would fall behind its rate whenever replies are slow to start. The provider's
    per-minute limit is still held by ``requests_per_minute`` (the same ``rpm``), which counts
    from the first chunk as before.
    """
    count = -(-rpm // 60)
    return WindowLimit(dimension="requests", limit=count, per=60 * count / rpm, counted_from="send")


def _entry(config: RuntimeConfig, provider: str) -> ProviderConfig:
    """The config entry the registry would use for ``provider`` (an alias finds its builtin's)."""
    found = config.providers.get(provider)
    if found is not None:
        return found
    from ..providers._builtins import BUILTIN_BY_ID

    definition = BUILTIN_BY_ID.get(provider)
    if definition is not None:
        found = config.providers.get(definition.id)
    return found if found is not None else ProviderConfig()


def apply_limits(
    config: RuntimeConfig, limits: BatchLimits, providers: Iterable[str]
) -> RuntimeConfig:
    """``config`` with ``limits`` laid over the entry of each of ``providers``.

    A limit that is set replaces the provider's configured one (``rpm`` also adds its
    :func:`pacing_window` to the configured windows); the rest of the provider's settings
    stay. ``budget`` adds a ``job`` budget in dollars to the configured budgets.
    """
    if limits.quota_set:
        entries = dict(config.providers)
        for provider in sorted(set(providers)):
            entry = _entry(config, provider)
            quota = entry.rate_limit
            if limits.rpm is not None:
                quota = attrs.evolve(
                    quota,
                    requests_per_minute=limits.rpm,
                    windows=(*quota.windows, pacing_window(limits.rpm)),
                )
            if limits.tpm is not None:
                quota = attrs.evolve(quota, tokens_per_minute=limits.tpm)
            if limits.max_pending is not None:
                quota = attrs.evolve(quota, max_pending=limits.max_pending)
            entries[provider] = attrs.evolve(entry, rate_limit=quota)
        config = attrs.evolve(config, providers=entries)
    if limits.budget is not None:
        budget = BudgetConfig(scope="job", max_usd=limits.budget)
        ledger = attrs.evolve(config.ledger, budgets=(*config.ledger.budgets, budget))
        config = attrs.evolve(config, ledger=ledger)
    return config
