"""Questions to the ledger's books and their answers: :class:`LedgerQuery` says which rows to
sum and how to group them, :class:`LedgerSummary` is one group's sums. Pure, no trio.

Kept apart from :mod:`sluice._ledger.book` because counting calls needs neither: a program
that never asks the ledger anything does not build their classes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from .._record import Value
from .book import COUNTERS, DIMENSIONS, Dimension, LedgerKey, LedgerTotals, parse_day

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Iterable, Sequence

__all__ = ["LedgerQuery", "LedgerSummary", "merge_summaries", "summarize", "summarize_rows"]


@attrs.frozen(eq=False, kw_only=True, repr=False)
class LedgerSummary(Value):
    """One group of a :func:`summarize`: the group's key and its summed counters.

    A dimension the summary is not grouped by is None. Grouping by ``model`` sets ``provider``
    too (a model is known by its provider).
    """

    provider: str | None = None
    model: str | None = None
    tag: str | None = None
    job: str | None = None
    day: str | None = None
    totals: LedgerTotals

    def group(self) -> dict[str, str]:
        """The grouped dimensions and their values."""
        return {name: value for name in DIMENSIONS if (value := getattr(self, name)) is not None}

    def as_dict(self) -> dict[str, str | int]:
        """Group values, every counter, and ``cost_usd`` as exact decimal text."""
        out: dict[str, str | int] = dict(self.group())
        for name in COUNTERS:
            out[name] = getattr(self.totals, name)
        out["cost_usd"] = self.totals.cost_usd
        return out


@attrs.frozen(eq=False, kw_only=True, repr=False)
class LedgerQuery(Value):
    """Which rows to sum and how to group them; build with :meth:`of`, which checks it."""

    by: tuple[Dimension, ...] = ("provider", "model")
    """The dimensions asked for (``()``: one grand total)."""
    since: str | None = None
    """First UTC day counted (``YYYY-MM-DD``), inclusive."""
    until: str | None = None
    """Last UTC day counted, inclusive."""
    job: str | None = None
    """Only rows of this job."""
    tag: str | None = None
    """Only rows of this tag (``""``: untagged rows)."""

    @classmethod
    def of(
        cls,
        by: Sequence[Dimension] = ("provider", "model"),
        *,
        since: str | dt.date | None = None,
        until: str | dt.date | None = None,
        job: str | None = None,
        tag: str | None = None,
    ) -> LedgerQuery:
        """A checked query.

        Raises:
            ValueError: an unknown dimension, or a date that is not one.
        """
        unknown = set(by) - set(DIMENSIONS)
        if unknown:
            raise ValueError(
                f"cannot group by {', '.join(sorted(unknown))}; choose from {', '.join(DIMENSIONS)}"
            )
        return cls(by=tuple(by), since=parse_day(since), until=parse_day(until), job=job, tag=tag)

    def grouped(self) -> tuple[Dimension, ...]:
        """The dimensions each group is keyed by, in :data:`DIMENSIONS` order (grouping by
        ``model`` also groups by ``provider``)."""
        wanted = set(self.by)
        if "model" in wanted:
            wanted.add("provider")
        return tuple(name for name in DIMENSIONS if name in wanted)

    def matches(self, key: LedgerKey) -> bool:
        """Whether the row at ``key`` is counted."""
        return (
            (self.since is None or key.day >= self.since)
            and (self.until is None or key.day <= self.until)
            and (self.job is None or key.job == self.job)
            and (self.tag is None or key.tag == self.tag)
        )


def _summary(group: tuple[str | None, ...], totals: LedgerTotals) -> LedgerSummary:
    return LedgerSummary(**dict(zip(DIMENSIONS, group, strict=True)), totals=totals)


def _ordered(groups: dict[tuple[str | None, ...], LedgerTotals]) -> list[LedgerSummary]:
    return [
        _summary(group, totals)
        for group, totals in sorted(groups.items(), key=lambda item: [v or "" for v in item[0]])
    ]


def summarize_rows(
    rows: Iterable[tuple[LedgerKey, LedgerTotals]], query: LedgerQuery
) -> list[LedgerSummary]:
    """Sum the ``rows`` that ``query`` counts, per group of its dimensions, sorted by group
    key; ``by=()`` gives one grand total (none when nothing matched). Every store answers
    exactly this, however it computes it."""
    wanted = set(query.grouped())
    groups: dict[tuple[str | None, ...], LedgerTotals] = {}
    for key, row in rows:
        if not query.matches(key):
            continue
        group = tuple(getattr(key, name) if name in wanted else None for name in DIMENSIONS)
        found = groups.get(group)
        if found is None:
            groups[group] = row.copy()
        else:
            found.add(row)
    return _ordered(groups)


def merge_summaries(*parts: Iterable[LedgerSummary]) -> list[LedgerSummary]:
    """Add summaries of the same grouping together (a store's answer and the increments not
    yet in it), sorted by group key like :func:`summarize_rows`."""
    groups: dict[tuple[str | None, ...], LedgerTotals] = {}
    for part in parts:
        for summary in part:
            group = tuple(getattr(summary, name) for name in DIMENSIONS)
            found = groups.get(group)
            if found is None:
                groups[group] = summary.totals.copy()
            else:
                found.add(summary.totals)
    return _ordered(groups)


def summarize(
    rows: Iterable[tuple[LedgerKey, LedgerTotals]],
    by: Sequence[Dimension] = ("provider", "model"),
    *,
    since: str | dt.date | None = None,
    until: str | dt.date | None = None,
    job: str | None = None,
    tag: str | None = None,
) -> list[LedgerSummary]:
    """Sum ``rows`` per group of the ``by`` dimensions, days from ``since`` to ``until``
    inclusive (UTC dates), only ``job``'s or ``tag``'s rows when given. ``by=()`` gives one
    grand total (none when nothing matched). Groups come sorted by their key.

    Raises:
        ValueError: an unknown dimension, or a date that is not one.
    """
    query = LedgerQuery.of(by, since=since, until=until, job=job, tag=tag)
    return summarize_rows(rows, query)
