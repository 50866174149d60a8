"""The response cache's file: results kept in SQLite across runs.

One table of ``(key, stored_at, value)``, where ``value`` is the result as JSON (through
:mod:`sluice._serde`) and ``stored_at`` wall-clock seconds. The file is opened in WAL mode with
``synchronous=NORMAL``: readers never wait for a writer, and a commit does not wait for the
disk.

Reads and writes run on the trio thread, synchronously, on purpose: each is one statement on an
indexed key in a local file, cheaper than the hand-off to a worker thread and back would
be, and SQLite is told to give up after :data:`BUSY_TIMEOUT` when another process
holds the write lock. The cache is best effort: a locked, failing or unreadable file means a
miss or an unstored result (logged), never a failed call. Opening the file (which may create
it and prune it) is the one slow step; the runtime does it in a worker thread.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import TYPE_CHECKING, Final, TypeVar

import orjson

from .._messages import ChatResult
from .._serde import get_converter
from .._sqlite_file import open_versioned

if TYPE_CHECKING:
    import os
    from pathlib import Path

    from .._embeddings import EmbedResult

__all__ = ["BUSY_TIMEOUT", "SQLiteCacheStore"]

R = TypeVar("R", "ChatResult", "EmbedResult")

log = logging.getLogger("sluice._cache")

BUSY_TIMEOUT: Final = 0.02
"""Seconds a read or write waits for another process's write lock before giving up."""
_SCHEMA_VERSION: Final = 1
_TRIM: Final = (
    "DELETE FROM responses WHERE key IN"
    " (SELECT key FROM responses ORDER BY stored_at DESC LIMIT -1 OFFSET ?)"
)
"""Drops the oldest entries beyond the given count."""
_CREATE: Final = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    stored_at REAL NOT NULL,
    value BLOB NOT NULL
) WITHOUT ROWID
"""


class SQLiteCacheStore:
    """Cached results in one SQLite file. Open with :meth:`open` (blocking)."""

    def __init__(
        self, path: Path, db: sqlite3.Connection, ttl: float | None, max_stored: int
    ) -> None:
        self.path = path
        self.ttl = ttl
        self.max_stored = max_stored
        self._db: sqlite3.Connection | None = db
        self._trim_every = max(1, max_stored // 10)
        self._puts_since_trim = 0

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        ttl: float | None,
        max_stored: int,
        now: float,
    ) -> SQLiteCacheStore:
        """Open (creating it and its folder if needed) the file at ``path``, dropping the
        entries expired at ``now`` and the oldest beyond ``max_stored``. Blocking.

        Raises:
            OSError: the folder cannot be made, the file cannot be opened, or it was written
                by a newer sluice.
        """

        def tidy(db: sqlite3.Connection) -> None:
            if ttl is not None:
                db.execute("DELETE FROM responses WHERE stored_at <= ?", (now - ttl,))
            db.execute(_TRIM, (max_stored,))

        where, db = open_versioned(
            path, create=_CREATE, version=_SCHEMA_VERSION, what="response cache", tidy=tidy
        )
        db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
        return cls(where, db, ttl, max_stored)

    def get(self, key: str, now: float, kind: type[R] = ChatResult) -> R | None:  # type: ignore[assignment]
        """The result stored under ``key`` (a ``kind``: a chat or an embedding result); None
        when there is none, it has expired, or it cannot be read (the last two are
        dropped)."""
        db = self._db
        if db is None:
            return None
        try:
            row = db.execute(
                "SELECT stored_at, value FROM responses WHERE key = ?", (key,)
            ).fetchone()
        except sqlite3.Error as exc:
            log.warning("reading the response cache file %s failed: %s", self.path, exc)
            return None
        if row is None:
            return None
        stored_at, value = row
        if self.ttl is not None and now - stored_at >= self.ttl:
            self.delete(key)
            return None
        try:
            result: R = get_converter().structure(orjson.loads(value), kind)
        except Exception as exc:  # written by another version, or damaged: a miss
            log.warning("dropping an unreadable entry of %s: %s", self.path, exc)
            self.delete(key)
            return None
        return result

    def put(self, key: str, result: ChatResult | EmbedResult, now: float) -> None:
        """Store ``result`` under ``key`` (best effort: a failure is logged).

        Every ``max_stored // 10`` stores the oldest entries beyond ``max_stored`` are dropped,
        so a long run keeps the file within ``max_stored`` plus a tenth (a trim sorts the
        table; doing it each time would cost more than the store).
        """
        db = self._db
        if db is None:
            return
        value = orjson.dumps(get_converter().unstructure(result))
        try:
            db.execute(
                "INSERT OR REPLACE INTO responses (key, stored_at, value) VALUES (?, ?, ?)",
                (key, now, value),
            )
            self._puts_since_trim += 1
            if self._puts_since_trim >= self._trim_every:
                self._puts_since_trim = 0
                db.execute(_TRIM, (self.max_stored,))
        except sqlite3.Error as exc:
            log.warning("writing the response cache file %s failed: %s", self.path, exc)

    def delete(self, key: str) -> None:
        db = self._db
        if db is None:
            return
        try:
            db.execute("DELETE FROM responses WHERE key = ?", (key,))
        except sqlite3.Error as exc:
            log.warning("writing the response cache file %s failed: %s", self.path, exc)

    def clear(self) -> None:
        db = self._db
        if db is None:
            return
        try:
            db.execute("DELETE FROM responses")
        except sqlite3.Error as exc:
            log.warning("writing the response cache file %s failed: %s", self.path, exc)

    def count(self) -> int:
        """Entries in the file (expired ones included)."""
        if self._db is None:
            return 0
        row = self._db.execute("SELECT count(*) FROM responses").fetchone()
        return int(row[0])

    def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()
