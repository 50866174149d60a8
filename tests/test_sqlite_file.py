"""The one way sluice opens its SQLite files (ledger, response cache)."""

from __future__ import annotations

import sqlite3

import pytest

from sluice._sqlite_file import open_versioned

CREATE = "CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v INTEGER)"


def test_creates_folder_schema_and_version_and_runs_tidy_in_the_same_transaction(tmp_path):
    seen = []

    def tidy(db):
        seen.append(db.in_transaction)
        db.execute("INSERT INTO t VALUES ('a', 1)")

    path, db = open_versioned(tmp_path / "deep" / "f.sqlite3", create=CREATE, version=3, what="x")
    db.execute("INSERT INTO t VALUES ('z', 0)")
    for name in ("f.sqlite3", "f.sqlite3-wal", "f.sqlite3-shm"):
        assert (path.parent / name).stat().st_mode & 0o777 == 0o600, name
    db.close()
    assert path.is_file()
    path, db = open_versioned(path, create=CREATE, version=3, what="x", tidy=tidy)
    assert seen == [True]
    assert db.execute("PRAGMA user_version").fetchone()[0] == 3
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("SELECT k, v FROM t ORDER BY k").fetchall() == [("a", 1), ("z", 0)]
    assert not db.in_transaction
    db.close()


def test_a_newer_schema_is_refused_not_misread(tmp_path):
    path = tmp_path / "f.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 9")
    with pytest.raises(OSError, match=r"newer sluice \(ledger schema 9, this one reads 2\)"):
        open_versioned(path, create=CREATE, version=2, what="ledger")


def test_a_file_that_is_not_sqlite_is_an_oserror_naming_the_store(tmp_path):
    path = tmp_path / "f.sqlite3"
    path.write_bytes(b"this is not a database, just some text " * 40)
    with pytest.raises(OSError, match=r"cannot open the response cache file .*f\.sqlite3"):
        open_versioned(path, create=CREATE, version=1, what="response cache")
    assert path.read_bytes().startswith(b"this is not")
