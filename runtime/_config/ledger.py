"""The TokenLedger's settings: :class:`LedgerConfig`, with prices (:class:`PriceConfig`) and
spending limits (:class:`BudgetConfig`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs
from attrs.validators import ge, gt, le, optional

from .._record import Value

__all__ = ["BudgetConfig", "LedgerConfig", "PriceConfig"]


@attrs.frozen(eq=False, kw_only=True, repr=False)
class PriceConfig(Value):
    """One model's price in US dollars per million tokens."""

    input: float = attrs.field(validator=ge(0))
    output: float = attrs.field(validator=ge(0))
    cache_read: float | None = attrs.field(default=None, validator=optional(ge(0)))
    """Prompt tokens read from the provider's cache; unset: the input price."""
    cache_write: float | None = attrs.field(default=None, validator=optional(ge(0)))
    """Prompt tokens written to the provider's cache; unset: the input price."""
    batch_discount: int = attrs.field(default=50, validator=[ge(0), le(100)])
    """Percent off every price above for lines sent through the provider's Batch API."""


def _check_budget(instance: BudgetConfig, _attribute: Any, _value: Any) -> None:
    if instance.max_usd is None and instance.max_tokens is None:
        raise ValueError("a budget needs max_usd, max_tokens or both")
    if (instance.scope == "tag") != (instance.tag is not None):
        raise ValueError("a budget names a tag exactly when its scope is 'tag'")


@attrs.frozen(eq=False, kw_only=True, repr=False)
class BudgetConfig(Value):
    """A spending limit: calls that could pass it fail with ``BudgetExceeded`` unsent.

    ``global`` and ``tag`` budgets count what this runtime spends; a ``job`` budget also counts
    what the ledger already holds for the runtime's job (a resumed job keeps its budget).
    """

    scope: Literal["global", "tag", "job"] = attrs.field(default="global", validator=_check_budget)
    tag: str | None = None
    """The tag a ``tag`` budget covers (``ChatRequest.tag``)."""
    max_usd: float | None = attrs.field(default=None, validator=optional(ge(0)))
    max_tokens: int | None = attrs.field(default=None, validator=optional(ge(0)))
    """Input plus output tokens."""


@attrs.frozen(eq=False, kw_only=True, repr=False)
class LedgerConfig(Value):
    """The TokenLedger: where it keeps its rows, what tokens cost, and spending budgets."""

    persist: bool = True
    """Keep the ledger in a SQLite file across runs."""
    path: str | None = None
    """The SQLite file. Unset: ``$SLUICE_LEDGER_DB`` (``off`` turns persistence off), else
    ``ledger.sqlite3`` in the platform's user data folder (``~/.local/share/sluice``)."""
    flush_interval: float = attrs.field(default=1.0, validator=gt(0))
    """Seconds between batched writes; a crash loses at most this much."""
    job: str | None = None
    """The job (run id) recorded with every call; unset: a new id per runtime."""
    prices: Mapping[str, PriceConfig] = attrs.field(factory=dict)
    """``provider:model`` (or ``provider:*``) to price, over the shipped table."""
    budgets: tuple[BudgetConfig, ...] = ()
