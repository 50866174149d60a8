"""Opening sluice's SQLite files (the ledger, the response cache): one way, one set of rules.

Imported only by the stores that use SQLite, so ``import sluice`` never loads ``sqlite3``.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["open_versioned"]


def open_versioned(
    given: str | os.PathLike[str],
    *,
    create: str,
    version: int,
    what: str,
    tidy: Callable[[sqlite3.Connection], None] | None = None,
) -> tuple[Path, sqlite3.Connection]:
    """Open (creating it and its folder) the SQLite file ``given`` for one of sluice's stores.

    Guarantees, so that every store behaves alike: WAL journal with ``synchronous=NORMAL``
    (readers never block the writer; a crash loses at most the last commits, never the file);
    autocommit mode, so each store decides its own transactions; ``create`` (the schema, with
    ``IF NOT EXISTS``) and then ``tidy`` run in one ``BEGIN IMMEDIATE`` transaction, so two
    processes opening the same new file cannot both half-create it; a file written by a newer
    schema than ``version`` is refused rather than misread. The connection may be used from
    any thread (``check_same_thread=False``); callers serialize their own use of it. A new
    file is created readable by its owner only (0600; SQLite gives its ``-wal`` and ``-shm``
    files the same mode), since it holds prompts and replies or what was spent.

    Raises:
        OSError: the folder cannot be made, the file cannot be opened or set up, or it holds
            a newer schema. The message names ``what`` (e.g. "ledger") and the path.
    """
    path = Path(given).expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:  # an empty file is a valid new database; creating it here sets its mode
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            pass
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10.0)
    except (OSError, sqlite3.Error) as exc:
        raise OSError(f"cannot open the {what} file {path}: {exc}") from None
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        found = db.execute("PRAGMA user_version").fetchone()[0]
        if found > version:
            raise OSError(
                f"{path} was written by a newer sluice ({what} schema {found}, this one reads "
                f"{version}); upgrade sluice or use another file"
            )
        db.execute("BEGIN IMMEDIATE")
        db.execute(create)
        db.execute(f"PRAGMA user_version = {version}")
        if tidy is not None:
            tidy(db)
        db.execute("COMMIT")
    except sqlite3.Error as exc:
        db.close()
        raise OSError(f"cannot open the {what} file {path}: {exc}") from None
    except BaseException:
        db.close()
        raise
    return path, db
