"""What an admitted attempt holds of the budgets, and who asks: the two values the
RateLimiter handles on every admission, budgets or not (one with no budget holds nothing).

They live apart from :mod:`sluice._ledger.budget` so that a runtime without budgets never
loads the book itself; that module re-exports both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from .._record import Record, Value

if TYPE_CHECKING:
    from .budget import Account  # noqa: TC004 (only a type: the hold never builds one)

__all__ = ["NO_HOLD", "BudgetClaim", "BudgetHold"]


@attrs.frozen(eq=False, repr=False)
class BudgetClaim(Value):
    """Who asks: the model an attempt goes to, and the call's tag."""

    provider: str
    model: str
    tag: str | None = None
    output_set: bool = True
    """The call set ``max_tokens`` itself. False: the output of its cost is the configured
    guess, which a budget near its end may lower (see :attr:`BudgetHold.max_output`)."""


@attrs.define(eq=False, repr=False)
class BudgetHold(Record):
    """What one admitted attempt reserved; settled exactly once."""

    accounts: tuple[Account, ...]
    micros: int
    tokens: int
    claim: BudgetClaim
    settled: bool = False
    max_output: int | None = None
    """The ``max_tokens`` the attempt must be sent with, when the budget lowered its guessed
    output to what is left (None: as asked)."""


NO_HOLD = BudgetHold((), 0, 0, BudgetClaim("", ""))
"""The hold of an attempt no budget applies to (settling it changes nothing)."""
