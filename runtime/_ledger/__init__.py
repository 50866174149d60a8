"""The TokenLedger's pure parts: prices, books, budgets and stores.

* :mod:`~sluice._ledger.prices`: the shipped price table, config overrides, cost in integer
  micro-dollars.
* :mod:`~sluice._ledger.book`: counters per provider, model, tag, job and UTC day.
* :mod:`~sluice._ledger.summary`: questions to the books (what to sum, how to group) and
  their answers.
* :mod:`~sluice._ledger.budget`: budgets that admission reserves from and settlement refunds.
* :mod:`~sluice._ledger.store` and :mod:`~sluice._ledger.sqlite`: where rows outlive a run.

The actor that owns a book is ``sluice.actors._token_ledger``; nothing here starts a task.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .book import LedgerKey as LedgerKey
    from .book import LedgerTotals as LedgerTotals
    from .budget import BudgetStatus as BudgetStatus
    from .prices import ModelPrice as ModelPrice
    from .prices import PriceTable as PriceTable
    from .store import LedgerStore as LedgerStore
    from .store import MemoryLedgerStore as MemoryLedgerStore
    from .summary import LedgerSummary as LedgerSummary
    from .summary import summarize as summarize

__all__ = [
    "BudgetStatus",
    "LedgerKey",
    "LedgerStore",
    "LedgerSummary",
    "LedgerTotals",
    "MemoryLedgerStore",
    "ModelPrice",
    "PriceTable",
    "summarize",
]

# Each name is imported from its module on first use, so `import sluice` does not load this
# package's heavier modules (schemas, repair, storage) until a call needs them.
_HOMES = {
    "LedgerKey": "book",
    "LedgerSummary": "summary",
    "LedgerTotals": "book",
    "summarize": "summary",
    "BudgetStatus": "budget",
    "ModelPrice": "prices",
    "PriceTable": "prices",
    "LedgerStore": "store",
    "MemoryLedgerStore": "store",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
