"""The ledger's books: counters per provider, model, tag, job and UTC day. Pure, no trio.
(The questions asked of them and their answers are :mod:`sluice._ledger.summary`'s.)

Every usage record and every call end lands in one row keyed by :class:`LedgerKey`, and in a
second map of the changes not yet written to the store (``dirty``), so a flush hands over only
the increments. Stores add increments rather than overwrite totals, so several processes can
share one store, and a flush that fails is merged back to be written with the next one.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import TYPE_CHECKING, Literal, NamedTuple, TypeAlias

import attrs

from .._record import Record
from .prices import PriceTable, format_usd

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._messages import Usage

__all__ = [
    "COUNTERS",
    "DIMENSIONS",
    "Dimension",
    "LedgerBook",
    "LedgerKey",
    "LedgerTotals",
    "parse_day",
    "utc_day",
]

Dimension: TypeAlias = Literal["provider", "model", "tag", "job", "day"]
DIMENSIONS: tuple[Dimension, ...] = ("provider", "model", "tag", "job", "day")


class LedgerKey(NamedTuple):
    """Where one record is counted. ``tag`` and ``job`` are ``""`` when there is none."""

    day: str
    """UTC date, ``YYYY-MM-DD``."""
    provider: str
    model: str
    tag: str
    job: str


@attrs.define(repr=False)
class LedgerTotals(Record):
    """Counters for one row (or any sum of rows). All integers; cost in micro-dollars."""

    calls: int = 0
    """Calls that ended (with a result or for good)."""
    failures: int = 0
    """Calls that ended without a result."""
    attempts: int = 0
    """Attempts of the calls that ended (the first one and every retry)."""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    retries: int = 0
    """Attempts beyond the first, over the calls that ended."""
    cost_micros: int = 0
    """What the priced usage records cost; unpriced ones add nothing here."""
    usage_records: int = 0
    """Attempts whose usage was recorded (succeeded, or failed after output began)."""
    unpriced: int = 0
    """Usage records of models with no known price (their cost is unknown, not zero)."""
    estimated: int = 0
    """Usage records estimated by sluice because the provider never reported usage."""

    def add(self, other: LedgerTotals) -> None:
        """Add ``other``'s counters to these."""
        for name in COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def copy(self) -> LedgerTotals:
        return attrs.evolve(self)

    @property
    def cost_usd(self) -> str:
        """The known cost in dollars, exact (``"0.012345"``)."""
        return format_usd(self.cost_micros)


COUNTERS: tuple[str, ...] = tuple(a.name for a in attrs.fields(LedgerTotals))


def utc_day(wall: float) -> str:
    """The UTC date of the epoch time ``wall``, ``YYYY-MM-DD``."""
    return dt.datetime.fromtimestamp(wall, dt.UTC).date().isoformat()


def parse_day(value: str | dt.date | None) -> str | None:
    """``value`` as ``YYYY-MM-DD`` (a date, or text in that form); None stays None.

    Raises:
        ValueError: text that is not a date.
    """
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return (
            value.astimezone(dt.UTC).date().isoformat()
            if value.tzinfo
            else value.date().isoformat()
        )
    if isinstance(value, dt.date):
        return value.isoformat()
    try:
        return dt.date.fromisoformat(value.strip()).isoformat()
    except ValueError:
        raise ValueError(f"not a date (YYYY-MM-DD): {value!r}") from None


class LedgerBook:
    """This run's rows, plus the increments not yet flushed. Owned by the TokenLedger actor.

    The book never holds the store's history: a store answers questions about what it holds
    with aggregates (:meth:`~sluice._ledger.store.LedgerStore.summarize`), and what the book
    has not yet handed over (``dirty``) is added to the answer.

    Args:
        prices: prices usage records with; an unknown price counts the record as unpriced.
        job: the job (run id) of records that do not name one.
        keep_rows: True when no store flushes the book: every row of this run is kept in
            ``rows`` (the record, and the answer to questions) and ``dirty`` stays empty.
            False with a store: only ``dirty`` fills, and the store's flusher drains it; a
            runtime that runs for weeks keeps no second copy in memory either way. Whoever
            makes the book must know which (see :func:`~sluice._ledger.setup.open_ledger`).
    """

    def __init__(self, prices: PriceTable, job: str, *, keep_rows: bool = True) -> None:
        self.prices = prices
        self.job = job
        self.keep_rows = keep_rows
        self.rows: dict[LedgerKey, LedgerTotals] = {}
        self.dirty: dict[LedgerKey, LedgerTotals] = {}
        self._day_number = -1
        self._day = ""
        self.dirty_since: float | None = None
        """``time.monotonic()`` when the oldest increment not yet taken was recorded (the
        ledger's write lag, for metrics); None while nothing is waiting."""
        self._taken_since: float | None = None

    def _today(self, wall: float) -> str:
        number = int(wall // 86400)
        if number != self._day_number:
            self._day_number, self._day = number, utc_day(wall)
        return self._day

    def _rows(self, key: LedgerKey) -> tuple[LedgerTotals, ...]:
        if self.keep_rows:
            # No store: the rows are the record and nothing ever takes ``dirty``, so a second
            # copy there would only grow (a daemon with persist = false runs for weeks).
            row = self.rows.get(key)
            if row is None:
                row = self.rows[key] = LedgerTotals()
            return (row,)
        delta = self.dirty.get(key)
        if delta is None:
            if not self.dirty and self.dirty_since is None:
                self.dirty_since = time.monotonic()
            delta = self.dirty[key] = LedgerTotals()
        return (delta,)

    def record_usage(
        self,
        provider: str,
        model: str,
        usage: Usage,
        *,
        wall: float,
        tag: str | None = None,
        job: str | None = None,
        estimated: bool = False,
        batch: bool = False,
    ) -> int | None:
        """Count one attempt's usage; return its cost in micro-dollars (None: unpriced),
        at the Batch API's price with ``batch``."""
        key = LedgerKey(self._today(wall), provider, model, tag or "", job or self.job)
        cost = self.prices.cost(provider, model, usage, batch=batch)
        for t in self._rows(key):
            t.input_tokens += usage.input_tokens
            t.output_tokens += usage.output_tokens
            t.cache_read_tokens += usage.cache_read_tokens
            t.cache_write_tokens += usage.cache_write_tokens
            t.reasoning_tokens += usage.reasoning_tokens
            t.usage_records += 1
            if cost is None:
                t.unpriced += 1
            else:
                t.cost_micros += cost
            if estimated:
                t.estimated += 1
        return cost

    def record_call(
        self,
        provider: str,
        model: str,
        ok: bool,
        attempts: int,
        *,
        wall: float,
        tag: str | None = None,
        job: str | None = None,
    ) -> None:
        """Count one call's end."""
        key = LedgerKey(self._today(wall), provider, model, tag or "", job or self.job)
        for t in self._rows(key):
            t.calls += 1
            t.failures += 0 if ok else 1
            t.attempts += attempts
            t.retries += max(0, attempts - 1)

    def take_dirty(self) -> dict[LedgerKey, LedgerTotals]:
        """The increments since the last take; the book starts a new batch."""
        batch, self.dirty = self.dirty, {}
        self._taken_since, self.dirty_since = self.dirty_since, None
        return batch

    def restore_dirty(self, batch: Mapping[LedgerKey, LedgerTotals]) -> None:
        """Put back a batch whose write failed, to go out with the next one."""
        if batch:
            taken, now = self._taken_since, self.dirty_since
            self.dirty_since = taken if now is None or (taken is not None and taken < now) else now
        for key, delta in batch.items():
            found = self.dirty.get(key)
            if found is None:
                self.dirty[key] = delta
            else:
                found.add(delta)

    def by_model(self) -> dict[str, LedgerTotals]:
        """Totals per ``provider:model`` over every tag, job and day."""
        out: dict[str, LedgerTotals] = {}
        for key, row in self.rows.items():
            name = f"{key.provider}:{key.model}"
            found = out.get(name)
            if found is None:
                out[name] = row.copy()
            else:
                found.add(row)
        return out
