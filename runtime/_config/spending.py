"""A ledger's prices (:class:`PriceConfig`) and spending limits (:class:`BudgetConfig`).

Loaded with the first price or budget a config sets (or the first time these names are asked
for): a runtime whose config sets neither never builds one, so :mod:`.ledger` and the package
serve them (PEP 562) instead of importing them.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs
from attrs.validators import ge, le, optional

from .._record import Value

__all__ = ["BudgetConfig", "PriceConfig"]


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
