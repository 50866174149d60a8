"""The ledger in a local SQLite file (WAL), written in batches from a worker thread.

One table, one row per (day, provider, model, tag, job), integer counters, and two indexes
(by job, by tag) so that the questions a runtime asks when it opens (what has this job spent?)
read only that job's rows. Questions are answered in SQL (``SUM`` ... ``GROUP BY``): a million
rows never cross into Python. A batch is added in
one transaction (``INSERT ... ON CONFLICT DO UPDATE SET n = n + excluded.n``), so a process
killed at any moment leaves the file with whole batches only: SQLite's journal rolls back a
half-written transaction at the next open, and ``PRAGMA integrity_check`` stays ``ok``. With
``synchronous=NORMAL`` a committed batch survives the process being killed; only a power cut
may lose the last batches (never corrupt the file). Several processes may share one file:
they add increments, and SQLite serializes their writes (``busy_timeout``).

The blocking calls run in ``trio.to_thread.run_sync``, one at a time, never on the trio thread.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from .._sqlite_file import open_versioned
from .book import COUNTERS, DIMENSIONS, LedgerKey, LedgerTotals
from .summary import LedgerQuery, LedgerSummary

if TYPE_CHECKING:
    import os
    from collections.abc import Iterator, Mapping

__all__ = [
    "SQLiteLedgerStore",
    "connect",
    "default_ledger_path",
    "read_ledger_file",
    "summarize_ledger_file",
]

_SCHEMA_VERSION = 1
_KEYS = ("day", "provider", "model", "tag", "job")
_COLUMNS = ", ".join((*_KEYS, *COUNTERS))
_CREATE = f"""
CREATE TABLE IF NOT EXISTS ledger (
    day TEXT NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    tag TEXT NOT NULL,
    job TEXT NOT NULL,
    {", ".join(f"{name} INTEGER NOT NULL DEFAULT 0" for name in COUNTERS)},
    PRIMARY KEY (day, provider, model, tag, job)
) WITHOUT ROWID
"""
_UPSERT = (
    f"INSERT INTO ledger ({_COLUMNS}) VALUES ({', '.join('?' * (len(_KEYS) + len(COUNTERS)))})"
    f" ON CONFLICT ({', '.join(_KEYS)}) DO UPDATE SET "
    + ", ".join(f"{name} = {name} + excluded.{name}" for name in COUNTERS)
)
_SELECT = f"SELECT {_COLUMNS} FROM ledger"
# Made at every open (a no-op once they exist), so files written before them gain them; an
# older sluice reads a file with them unchanged, hence no new schema version.
_INDEXES = (
    "CREATE INDEX IF NOT EXISTS ledger_by_job ON ledger (job, day)",
    "CREATE INDEX IF NOT EXISTS ledger_by_tag ON ledger (tag, day)",
)
_SUMS = ", ".join(f"SUM({name})" for name in COUNTERS)


def default_ledger_path() -> Path:
    """``<user data dir>/sluice/ledger.sqlite3`` (``~/.local/share/sluice`` on Linux)."""
    import platformdirs

    return Path(platformdirs.user_data_dir("sluice")) / "ledger.sqlite3"


def _indexes(db: sqlite3.Connection) -> None:
    for statement in _INDEXES:
        db.execute(statement)


def connect(given: str | os.PathLike[str]) -> tuple[Path, sqlite3.Connection]:
    """Open (creating it) the ledger file ``given`` for blocking use: its path and connection
    (autocommit; for the store, and for tools that write many rows at once).

    Raises:
        OSError: see :func:`~sluice._sqlite_file.open_versioned`.
    """
    return open_versioned(
        given, create=_CREATE, version=_SCHEMA_VERSION, what="ledger", tidy=_indexes
    )


def _sql(query: LedgerQuery) -> tuple[str, list[str]]:
    """The ``SELECT`` that answers ``query``, and its parameters. Only fixed column names
    are ever put into the text; every value is a parameter.

    Grouping by columns other than a prefix of the primary key makes SQLite sort every row
    (a temporary B-tree). When the query reads the whole table (no job or tag), the rows are
    first summed per the shortest key prefix that holds the grouped columns, which SQLite
    does in key order as it reads, without sorting; only those partial sums are then
    grouped and sorted. Asking by model sorts one sum per day and model, not every row."""
    grouped = query.grouped()
    where: list[str] = []
    params: list[str] = []
    for column, op, value in (
        ("day", ">=", query.since),
        ("day", "<=", query.until),
        ("job", "=", query.job),
        ("tag", "=", query.tag),
    ):
        if value is not None:
            where.append(f"{column} {op} ?")
            params.append(value)
    condition = f" WHERE {' AND '.join(where)}" if where else ""
    by = f" GROUP BY {', '.join(grouped)}" if grouped else ""
    prefix = _KEYS[: max((_KEYS.index(name) + 1 for name in grouped), default=0)]
    if query.job is None and query.tag is None and len(grouped) < len(prefix) < len(_KEYS):
        partial = ", ".join((*prefix, *(f"SUM({name}) AS {name}" for name in COUNTERS)))
        inner = (
            f"SELECT {partial}, COUNT(*) AS n FROM ledger{condition} GROUP BY {', '.join(prefix)}"
        )
        return f"SELECT {', '.join((*grouped, _SUMS, 'SUM(n)'))} FROM ({inner}){by}", params
    return f"SELECT {', '.join((*grouped, _SUMS, 'COUNT(*)'))} FROM ledger{condition}{by}", params


def _summarize(db: sqlite3.Connection, query: LedgerQuery) -> list[LedgerSummary]:
    grouped = query.grouped()
    width = len(grouped)
    out = []
    text, params = _sql(query)
    for record in db.execute(text, params):
        if not record[-1]:  # no group at all: SUM over nothing is NULL
            continue
        values = dict(zip(grouped, record[:width], strict=True))
        totals = LedgerTotals(*record[width:-1])
        out.append(LedgerSummary(**values, totals=totals))
    # Sorted in Python, as summarize_rows sorts, whatever order SQLite grouped in.
    out.sort(key=lambda s: [getattr(s, name) or "" for name in DIMENSIONS])
    return out


def _rows(db: sqlite3.Connection) -> list[tuple[LedgerKey, LedgerTotals]]:
    out = []
    width = len(_KEYS)
    for record in db.execute(_SELECT):
        counters = dict(zip(COUNTERS, record[width:], strict=True))
        out.append((LedgerKey(*record[:width]), LedgerTotals(**counters)))
    return out


def _add(db: sqlite3.Connection, batch: Mapping[LedgerKey, LedgerTotals]) -> None:
    params = [(*key, *(getattr(delta, name) for name in COUNTERS)) for key, delta in batch.items()]
    db.execute("BEGIN IMMEDIATE")
    try:
        db.executemany(_UPSERT, params)
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def read_ledger_file(path: str | os.PathLike[str]) -> list[tuple[LedgerKey, LedgerTotals]]:
    """Every row of the ledger file at ``path`` (blocking; for the command line).

    Raises:
        FileNotFoundError: there is no file at ``path``.
        sqlite3.DatabaseError: the file is not a sluice ledger.
    """
    with _open_existing(path) as db:
        return _rows(db)


def summarize_ledger_file(path: str | os.PathLike[str], query: LedgerQuery) -> list[LedgerSummary]:
    """The ledger file at ``path`` summed as ``query`` asks (blocking; for the command line).

    Raises:
        FileNotFoundError: there is no file at ``path``.
        sqlite3.DatabaseError: the file is not a sluice ledger.
    """
    with _open_existing(path) as db:
        return _summarize(db, query)


@contextlib.contextmanager
def _open_existing(path: str | os.PathLike[str]) -> Iterator[sqlite3.Connection]:
    """A connection to the ledger file at ``path``, closed on exit; FileNotFoundError if there
    is none (sqlite3 would quietly create an empty one)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no ledger file at {path}")
    db = sqlite3.connect(path, isolation_level=None, timeout=10.0)
    try:
        yield db
    finally:
        db.close()


class SQLiteLedgerStore:
    """A :class:`~sluice._ledger.store.LedgerStore` in one SQLite file. Open with :meth:`open`."""

    def __init__(self, path: Path, db: sqlite3.Connection) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = db
        self._one = trio.CapacityLimiter(1)

    @classmethod
    async def open(cls, path: str | os.PathLike[str]) -> SQLiteLedgerStore:
        """Open (creating it and its folder if needed) the ledger file at ``path``.

        Raises:
            OSError: the folder cannot be made, the file cannot be opened (or is not a
                SQLite database), or it holds a newer ledger schema.
        """
        where, db = await trio.to_thread.run_sync(connect, path)
        return cls(where, db)

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise OSError(f"the ledger file {self.path} is closed")
        return self._db

    async def load(self) -> list[tuple[LedgerKey, LedgerTotals]]:
        """Every row (for tests and tools: a runtime asks :meth:`summarize` instead)."""
        return await trio.to_thread.run_sync(_rows, self._conn(), limiter=self._one)

    async def summarize(self, query: LedgerQuery) -> list[LedgerSummary]:
        try:
            return await trio.to_thread.run_sync(_summarize, self._conn(), query, limiter=self._one)
        except sqlite3.Error as exc:
            raise OSError(f"reading the ledger file {self.path} failed: {exc}") from exc

    async def add(self, batch: Mapping[LedgerKey, LedgerTotals]) -> None:
        if not batch:
            return
        try:
            await trio.to_thread.run_sync(_add, self._conn(), batch, limiter=self._one)
        except sqlite3.Error as exc:
            raise OSError(f"writing the ledger file {self.path} failed: {exc}") from exc

    async def aclose(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            await trio.to_thread.run_sync(db.close, limiter=self._one)
