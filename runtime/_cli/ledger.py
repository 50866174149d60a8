"""``sluice ledger``: what was used and what it cost, from the ledger file."""

from __future__ import annotations

import csv
import io
import sqlite3
import sys
from pathlib import Path  # noqa: TC003 (cyclopts reads the annotations at runtime)
from typing import Annotated, Any, Literal

import orjson
import trio
from cyclopts import Parameter

from .._errors import ConfigError
from .._ledger.book import COUNTERS, DIMENSIONS, Dimension
from .._ledger.setup import ledger_path
from .._ledger.sqlite import summarize_ledger_file
from .._ledger.summary import LedgerQuery, LedgerSummary, merge_summaries
from ._common import EXIT_OK, build_config, fail

__all__ = ["ledger", "render_csv", "render_json", "render_table"]

_HEADINGS = {
    "calls": "calls",
    "failures": "failed",
    "attempts": "attempts",
    "retries": "retries",
    "input_tokens": "input",
    "output_tokens": "output",
    "cache_read_tokens": "cache read",
    "cache_write_tokens": "cache write",
    "reasoning_tokens": "reasoning",
    "usage_records": "records",
    "unpriced": "unpriced",
    "estimated": "estimated",
}
_TABLE_COUNTERS = (
    "calls",
    "failures",
    "retries",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "unpriced",
    "estimated",
)


def _dimensions(by: list[str]) -> tuple[Dimension, ...]:
    out: list[Dimension] = []
    for item in by:
        for name in item.split(","):
            name = name.strip()
            if name not in DIMENSIONS:
                raise ConfigError(
                    f"--by {name!r}: choose from {', '.join(DIMENSIONS)} (repeat --by for more)"
                )
            if name not in out:
                out.append(name)
    return tuple(out)


def _columns(by: tuple[Dimension, ...]) -> list[str]:
    wanted = set(by) | ({"provider"} if "model" in by else set())
    return [name for name in DIMENSIONS if name in wanted]


def render_json(rows: list[LedgerSummary], total: LedgerSummary | None, **query: Any) -> str:
    """``{"by", "since", "until", "rows": [...], "total": {...}}``; cost as exact text."""
    document = {
        **query,
        "rows": [row.as_dict() for row in rows],
        "total": total.as_dict() if total is not None else None,
    }
    return orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()


def render_csv(rows: list[LedgerSummary], by: tuple[Dimension, ...]) -> str:
    """One header line, then one line per group: the group's values, counters, cost_usd."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    columns = _columns(by)
    writer.writerow([*columns, *COUNTERS, "cost_usd"])
    for row in rows:
        values = row.as_dict()
        writer.writerow([values.get(c, "") for c in (*columns, *COUNTERS, "cost_usd")])
    return out.getvalue()


def render_table(
    rows: list[LedgerSummary], total: LedgerSummary | None, by: tuple[Dimension, ...]
) -> str:
    """A rich table; a total line when there is more than one group."""
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    columns = _columns(by)
    for name in columns:
        table.add_column(name)
    for name in _TABLE_COUNTERS:
        table.add_column(_HEADINGS[name], justify="right")
    table.add_column("cost $", justify="right")

    def counters(summary: LedgerSummary) -> list[str]:
        values = [f"{getattr(summary.totals, name):,}" for name in _TABLE_COUNTERS]
        return [*values, summary.totals.cost_usd]

    for row in rows:
        table.add_row(*[getattr(row, name) or "-" for name in columns], *counters(row))
    if total is not None and len(rows) > 1:
        table.add_section()
        label = ["total", *([""] * (len(columns) - 1))] if columns else []
        table.add_row(*label, *counters(total))
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(table)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    return str(text)


async def ledger(
    *,
    by: Annotated[list[str] | None, Parameter(consume_multiple=False, negative=())] = None,
    since: str | None = None,
    until: str | None = None,
    format: Literal["table", "json", "csv"] = "table",
    db: Path | None = None,
    config_file: Annotated[Path | None, Parameter(name="--config")] = None,
    store: str | None = None,
) -> int:
    """Summarize usage and cost from the ledger file.

    Rows are summed per group; counters: calls, failures, attempts, retries, input, output,
    cache read and write and reasoning tokens, cost in dollars (priced models only), usage
    records of unpriced models and estimated usage records. Days are UTC.

    Args:
        by: group by model, provider, tag, job or day (repeat, or comma-separate, for more;
            default model).
        since: first day to count, YYYY-MM-DD (UTC).
        until: last day to count, YYYY-MM-DD (UTC), inclusive.
        format: table, json or csv.
        db: the ledger file (default: ledger.path of the config, $SLUICE_LEDGER_DB, else the
            platform's user data folder).
        config_file: the config file to read ledger.path (and store_prefix) from.
        store: a redis://host:port/db URL: sum what every process sharing that Redis (under
            the config's store_prefix) recorded, instead of one ledger file.
    """
    try:
        dimensions = _dimensions(by or ["model"])
        query = LedgerQuery.of(dimensions, since=since, until=until)
        if store is not None:
            prefix = build_config(config_file=config_file).store_prefix
            return _show(await _read_redis(store, prefix, query), query, format)
        if db is None:
            path = ledger_path(build_config(config_file=config_file).ledger)
            if path is None:
                raise ConfigError("ledger persistence is off here; name the file with --db")
        else:
            path = db
    except (ConfigError, ValueError) as exc:
        return fail(str(exc))
    try:
        # The file sums its rows itself (GROUP BY): no row is read into Python.
        rows = await trio.to_thread.run_sync(summarize_ledger_file, path, query)
    except FileNotFoundError as exc:
        if db is not None:  # a file named on purpose that is not there: likely a typo
            return fail(f"{exc}; leave out --db for the default ledger")
        rows = []  # a fresh machine: nothing was recorded yet, which is not an error
    except sqlite3.Error as exc:
        return fail(f"cannot read the ledger file {path}: {exc}")
    return _show(rows, query, format)


async def _read_redis(url: str, prefix: str, query: LedgerQuery) -> list[LedgerSummary]:
    from .._limits.redis_store import open_redis_store

    async with open_redis_store(url, prefix=prefix) as quota:
        try:
            return await quota.ledger_mirror().summarize(query)
        except OSError as exc:
            raise ConfigError(str(exc)) from None


def _total(rows: list[LedgerSummary]) -> LedgerSummary | None:
    """The grand total of ``rows`` (groups never overlap, so their sum is the total)."""
    if not rows:
        return None
    (total,) = merge_summaries([LedgerSummary(totals=row.totals) for row in rows])
    return total


def _show(rows: list[LedgerSummary], query: LedgerQuery, format: str) -> int:
    dimensions = query.by
    total = _total(rows)
    if format == "json":
        text = (
            render_json(rows, total, by=list(dimensions), since=query.since, until=query.until)
            + "\n"
        )
    elif format == "csv":
        text = render_csv(rows, dimensions)
    else:
        text = render_table(rows, total, dimensions) if rows else "no usage recorded yet\n"
    sys.stdout.write(text)
    sys.stdout.flush()
    return EXIT_OK
