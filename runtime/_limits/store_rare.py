"""The quota store's rarer terms: :class:`WindowSpec`, a window a rate limit configures;
:class:`TooLarge` and :class:`BudgetRefused`, which the store answers instead of a reservation
when a cost can never fit a window or a shared budget can never cover it; and
:class:`BudgetAsk`, the budget reservation a RateLimiter with budgets asks for.

:mod:`sluice._limits.store` serves these names (PEP 562); they live apart so that a runtime
without windows or budgets, which never meets them, does not build their classes.
"""

from __future__ import annotations

from typing import Literal

import attrs

from .._record import Value
from .headers import Dimension

__all__ = ["BudgetAsk", "BudgetRefused", "TooLarge", "WindowSpec"]


@attrs.frozen(eq=False, repr=False)
class WindowSpec(Value):
    """A configured limit: at most ``limit`` units of ``dimension`` per ``period`` seconds."""

    dimension: Dimension
    limit: int
    period: float
    from_send: bool = False
    """Counted from the admission, never re-dated (``WindowLimit.counted_from == "send"``)."""


@attrs.frozen(eq=False, repr=False)
class TooLarge(Value):
    """The cost exceeds a whole window: waiting can never admit it."""

    dimension: Dimension
    amount: int
    limit: int
    period: float


@attrs.frozen(eq=False, repr=False)
class BudgetAsk(Value):
    """A budget reservation to take in the same step as the quota's."""

    hold: str
    """A unique id for the reservation."""
    micros: int
    tokens: int
    accounts: tuple[tuple[str, int | None, int | None], ...]
    """(account name, max micro-dollars, max tokens) of every budget the call falls under."""
    spent: tuple[tuple[int, int], ...] = ()
    """(micro-dollars, tokens) this process's own ledger holds for each account, earlier runs
    of a job included: what it reports if the store loses its history."""


@attrs.frozen(eq=False, repr=False)
class BudgetRefused(Value):
    """The shared budget can never cover the call (spending only grows)."""

    account: str
    unit: Literal["usd", "tokens"]
    left: int
