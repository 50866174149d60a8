"""Turning a :class:`~sluice._config.LedgerConfig` into the ledger's parts, for ``open_runtime``.

Which file the ledger is kept in, first match wins: ``ledger.path`` in the config; the
environment variable ``SLUICE_LEDGER_DB`` (a path, or ``off`` for none); the platform's user
data folder. ``ledger.persist = false`` keeps nothing on disk. A file named in the config or
the environment that cannot be opened is a :class:`~sluice._errors.ConfigError`; the default
file failing to open only turns persistence off, with a warning, so a read-only home folder
never stops a program from running.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import trio

from .._errors import ConfigError
from .._record import Record
from .book import LedgerBook
from .prices import ModelPrice, PriceTable, usd_to_micros

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._config import LedgerConfig
    from .budget import BudgetBook  # noqa: TC004 (only a type: budgets load when configured)
    from .redis import RedisLedgerStore
    from .sqlite import SQLiteLedgerStore
    from .store import LedgerStore  # noqa: TC004 (only a type: a store brings its own)

__all__ = ["LEDGER_DB_ENV", "LedgerSetup", "ledger_path", "new_job_id", "open_ledger"]

log = logging.getLogger("sluice._ledger")

LEDGER_DB_ENV = "SLUICE_LEDGER_DB"
_OFF = frozenset({"off", "none", "0", "false", "no", ""})


def new_job_id(wall: float | None = None) -> str:
    """A fresh job id: the UTC start time and a random suffix (``20251130T120000Z-3f9a1c``)."""
    moment = dt.datetime.now(dt.UTC) if wall is None else dt.datetime.fromtimestamp(wall, dt.UTC)
    return f"{moment:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def ledger_path(config: LedgerConfig, environ: Mapping[str, str] | None = None) -> Path | None:
    """The ledger file ``config`` asks for, or None for no persistence."""
    if not config.persist:
        return None
    if config.path is not None:
        return Path(config.path).expanduser()
    env = os.environ if environ is None else environ
    value = env.get(LEDGER_DB_ENV)
    if value is not None:
        return None if value.strip().lower() in _OFF else Path(value).expanduser()
    from .sqlite import default_ledger_path

    return default_ledger_path()


def price_table(config: LedgerConfig) -> PriceTable:
    """The shipped prices with the config's laid over them.

    Raises:
        ConfigError: a price key is not ``provider:model``.
    """
    overrides = {
        name: ModelPrice.usd(
            p.input, p.output, p.cache_read, p.cache_write, batch_discount=p.batch_discount
        )
        for name, p in config.prices.items()
    }
    try:
        return PriceTable(overrides)
    except ValueError as exc:
        raise ConfigError(f"ledger.prices: {exc}") from None


@attrs.frozen(eq=False, repr=False)
class LedgerSetup(Record):
    """The ledger's parts for one runtime."""

    book: LedgerBook
    store: LedgerStore | None
    owned: bool
    """The runtime opened ``store`` and closes it."""
    budgets: BudgetBook | None
    flush_interval: float

    async def aclose(self) -> None:
        if self.owned and self.store is not None:
            await self.store.aclose()


async def open_ledger(
    config: LedgerConfig,
    store: LedgerStore | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    mirror: RedisLedgerStore | None = None,
) -> LedgerSetup:
    """Open the store (``store`` if given, else the file the config names), a new book, and
    the budgets.

    ``mirror`` (a runtime whose quota store is Redis) also gets every batch: the store becomes
    a :class:`~sluice._ledger.redis.MirroredLedgerStore` of the file (or of rows in memory when
    there is none). The book is made knowing whether a store flushes it: with one, it keeps
    only the increments not yet handed over; without, it keeps the rows and nothing else, so
    neither way does a copy build up that nobody drains.

    The store's history is not loaded: only what the budgets need is asked for, as a sum (a
    ``job`` budget starts with what the store holds for the job; ``global`` and ``tag``
    budgets count this runtime's spending), so opening costs the same over a ledger of a
    million rows as over an empty one.

    Raises:
        ConfigError: the config's or the environment's ledger file cannot be opened or read,
            or a price key is malformed.
    """
    prices = price_table(config)
    owned = False
    if store is None:
        path = ledger_path(config, environ)
        if path is not None:  # only then is the SQLite code loaded
            from .sqlite import default_ledger_path

            store = await _open_file(path, explicit=path != default_ledger_path())
            owned = store is not None
    if mirror is not None:
        from .redis import MirroredLedgerStore

        store, owned = MirroredLedgerStore(store, mirror, close_primary=owned), True
    book = LedgerBook(prices, config.job or new_job_id(), keep_rows=store is None)
    budgets = None
    if config.budgets:
        spent = (0, 0)
        if store is not None and any(b.scope == "job" for b in config.budgets):
            try:
                spent = await _spent_by_job(store, book.job)
            except OSError as exc:
                if owned:
                    with trio.CancelScope(shield=True):
                        await store.aclose()
                raise ConfigError(f"cannot read the ledger: {exc}") from None
        from .budget import Budget, BudgetBook  # a runtime without budgets never loads it

        budgets = BudgetBook(
            [
                Budget(
                    scope=b.scope,
                    tag=b.tag,
                    max_micros=None if b.max_usd is None else usd_to_micros(b.max_usd),
                    max_tokens=b.max_tokens,
                )
                for b in config.budgets
            ],
            prices,
            job=book.job,
            spent_by_job=spent,
        )
    return LedgerSetup(book, store, owned, budgets, config.flush_interval)


async def _spent_by_job(store: LedgerStore, job: str) -> tuple[int, int]:
    """(micro-dollars, input + output tokens) ``store`` holds for ``job``."""
    from .summary import LedgerQuery  # only with budgets

    found = await store.summarize(LedgerQuery(by=(), job=job))
    if not found:
        return 0, 0
    totals = found[0].totals
    return totals.cost_micros, totals.input_tokens + totals.output_tokens


async def _open_file(path: Path, *, explicit: bool) -> SQLiteLedgerStore | None:
    import sqlite3

    from .sqlite import SQLiteLedgerStore

    try:
        return await SQLiteLedgerStore.open(path)
    except (OSError, sqlite3.Error) as exc:
        if explicit:
            raise ConfigError(f"cannot open the ledger file {path}: {exc}") from None
        log.warning("cannot open the ledger file %s (%s); usage is not kept on disk", path, exc)
        return None
