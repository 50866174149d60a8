"""Whether a shared store still holds the history a process trusted: its run id. Pure.

A Redis that restarts without persistence (or is flushed) comes back empty: its windows have
forgotten what every process admitted in the last window, and trusting them at once would let a
second full window through. An empty store cannot be told from a new one by its keys alone
(idle keys expire too), so the store carries a run id: a random id written into ``{prefix}:run``
(no TTL) by the first admission that finds it missing. Every admission sends the run id its
process knows; the quota script refuses to admit when the store's differs, and answers with the
store's id. A process that knew another id has lost its history: :class:`HistoryLost`.

What to do then: the process tells the store again what it admitted itself in the last window
(the entries of its own windows, :mod:`sluice._limits.fallback`), admits nothing for
:data:`SEED_GRACE` while the other processes find the loss and do the same, then admits at its
local share (``store_local_share``) of its own windows *and* through the store, for one full
window of the key (:func:`distrusted_until`), before trusting the store alone again. The store
is whole again once every live process has told it its part; the share bounds what a process
that could not (one killed meanwhile) leaves out.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "RUN_CHECK",
    "RUN_KEY",
    "SEED_GRACE",
    "HistoryLost",
    "distrusted_until",
    "history_lost",
    "new_run_id",
]

RUN_KEY = "run"
"""The store's run id lives at ``{prefix}:run``."""
RUN_CHECK = 0.5
"""Seconds between two looks at the run id by each process's background task, so a process
that admits nothing (its last window's admissions count all the same) finds a loss too."""
SEED_GRACE = 3 * RUN_CHECK
"""Seconds a process waits after finding a loss before it admits again: every other live
process has found it by then and told the store its own admissions of the last window."""


class HistoryLost(Exception):
    """The store answered with a run id other than the one this process knew: it lost what
    it held (a restart without persistence, a flush). Nothing was admitted."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"the quota store's run id changed to {run_id}")
        self.run_id = run_id


def new_run_id() -> str:
    """A fresh random run id (proposed with every admission, written only if none is set)."""
    return uuid.uuid4().hex


def history_lost(known: str | None, seen: str) -> bool:
    """Whether a process that knew run id ``known`` (None: it never asked the store) lost its
    history when the store now reports ``seen``. A process's first answer only teaches it the
    id: it had no history to lose."""
    return known is not None and seen != known


def distrusted_until(lost_at: float, periods: Iterable[float]) -> float:
    """Until when a key whose windows have ``periods`` admits at the local share after its
    history was found lost at ``lost_at``: one full window (the longest), so every admission
    still inside a window has gone through the store again."""
    return lost_at + max(periods, default=0.0)
