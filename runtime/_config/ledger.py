"""The TokenLedger's settings: :class:`LedgerConfig`, with prices (:class:`PriceConfig`) and
spending limits (:class:`BudgetConfig`), which live in :mod:`.spending`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
from attrs.validators import gt

from .._record import Value, late_names

if TYPE_CHECKING:
    from .spending import BudgetConfig, PriceConfig  # noqa: TC004 (served below, PEP 562)

__all__ = ["BudgetConfig", "LedgerConfig", "PriceConfig"]


def __getattr__(name: str) -> Any:
    # Prices and budgets load with the first one asked for (a config without them builds none)
    # and stay names here, so the annotations below resolve (see the package's docstring).
    if name in ("BudgetConfig", "PriceConfig"):
        from . import spending

        globals().update(BudgetConfig=spending.BudgetConfig, PriceConfig=spending.PriceConfig)
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@late_names("PriceConfig")
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
