"""The TokenLedger's pure parts: prices, books, budgets and stores.

* :mod:`~sluice.ledger.prices`: the shipped price table, config overrides, cost in integer
  micro-dollars.
* :mod:`~sluice.ledger.book`: counters per provider, model, tag, job and UTC day; summaries.
* :mod:`~sluice.ledger.budget`: budgets that admission reserves from and settlement refunds.
* :mod:`~sluice.ledger.store` and :mod:`~sluice.ledger.sqlite`: where rows outlive a run.

The actor that owns a book is ``sluice.actors.token_ledger``; nothing here starts a task.
"""

from .book import LedgerKey as LedgerKey
from .book import LedgerSummary as LedgerSummary
from .book import LedgerTotals as LedgerTotals
from .book import summarize as summarize
from .budget import BudgetStatus as BudgetStatus
from .prices import ModelPrice as ModelPrice
from .prices import PriceTable as PriceTable
from .store import LedgerStore as LedgerStore
from .store import MemoryLedgerStore as MemoryLedgerStore

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
