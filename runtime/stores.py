"""Where a runtime keeps what must outlive a call: the stores, sluice's extension point for them.

:func:`sluice.open_runtime` takes ``quota_store=`` (the RateLimiter's windows, cooldowns, slots
and budget holds) and ``ledger_store=`` (the TokenLedger's rows). Any object with the methods of
:class:`QuotaStore` or :class:`LedgerStore` will do; these are the ones sluice ships. Each name
is imported on first use, so ``import sluice.stores`` loads neither SQLite nor Redis.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._ledger.redis import RedisLedgerStore as RedisLedgerStore
    from ._ledger.sqlite import SQLiteLedgerStore as SQLiteLedgerStore
    from ._ledger.store import LedgerStore as LedgerStore
    from ._ledger.store import MemoryLedgerStore as MemoryLedgerStore
    from ._ledger.summary import LedgerQuery as LedgerQuery
    from ._limits.cost import Cost as Cost
    from ._limits.headers import Learned as Learned
    from ._limits.redis_store import RedisQuotaStore as RedisQuotaStore
    from ._limits.store import MemoryQuotaStore as MemoryQuotaStore
    from ._limits.store import QuotaStore as QuotaStore
    from ._limits.store import Reservation as Reservation
    from ._limits.store_rare import BudgetAsk as BudgetAsk
    from ._limits.store_rare import BudgetRefused as BudgetRefused
    from ._limits.store_rare import TooLarge as TooLarge
    from ._limits.store_rare import WindowSpec as WindowSpec
    from ._limits.window import WindowEntry as WindowEntry

__all__ = [
    "BudgetAsk",
    "BudgetRefused",
    "Cost",
    "Learned",
    "LedgerQuery",
    "LedgerStore",
    "MemoryLedgerStore",
    "MemoryQuotaStore",
    "QuotaStore",
    "RedisLedgerStore",
    "RedisQuotaStore",
    "Reservation",
    "SQLiteLedgerStore",
    "TooLarge",
    "WindowEntry",
    "WindowSpec",
]

_HOMES = {
    "LedgerQuery": "sluice._ledger.summary",
    "WindowEntry": "sluice._limits.window",
    "RedisLedgerStore": "sluice._ledger.redis",
    "Learned": "sluice._limits.headers",
    "Cost": "sluice._limits.cost",
    "WindowSpec": "sluice._limits.store_rare",
    "TooLarge": "sluice._limits.store_rare",
    "Reservation": "sluice._limits.store",
    "BudgetRefused": "sluice._limits.store_rare",
    "BudgetAsk": "sluice._limits.store_rare",
    "LedgerStore": "sluice._ledger.store",
    "MemoryLedgerStore": "sluice._ledger.store",
    "SQLiteLedgerStore": "sluice._ledger.sqlite",
    "QuotaStore": "sluice._limits.store",
    "MemoryQuotaStore": "sluice._limits.store",
    "RedisQuotaStore": "sluice._limits.redis_store",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
