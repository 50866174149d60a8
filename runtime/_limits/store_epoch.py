"""Whether a shared store still holds the history a process trusted: its run id.

A Redis that restarts without persistence (or is flushed) comes back empty and answers as if
nothing had happened: its windows have forgotten what every process admitted in the last
window, its budgets what was spent. Trusting it at once would let a second full window, or a
second full budget, through. An empty store cannot be told from a new one by its keys alone
(idle keys expire too), so the store carries a run id: a random id written into
``{prefix}:run`` (no TTL) by the first script run that finds it missing. Every later run names
the id its process knows; the quota script serves nothing (queued work included) when the
store's differs, and answers ``epoch`` with the store's id. A process that knew another id has
lost its history: :class:`HistoryLost`.

What to do then (:mod:`sluice._limits.fallback`):

* windows: the process tells the store again what it admitted itself in the last window (the
  entries of its own windows), admits nothing for :data:`SEED_GRACE` while the other processes
  find the loss and do the same, then admits at its local share (``store_local_share``) of its
  own windows *and* through the store, for one full window of the key
  (:func:`distrusted_until`), before trusting the store alone again;
* budgets: they are rebuilt from what each process last knew of the store, its own spend and
  the ledger's aggregates before anything more is spent through the store (``rebuild`` in
  :mod:`sluice._limits.redis_script`).

This module holds the pieces both sides use: the Lua fragment the quota script runs first, the
pure rules for reading its answer, and the timings. Pure.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import attrs

from .._errors import StoreUnavailable

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "EPOCH_LUA",
    "RUN_CHECK",
    "RUN_KEY",
    "SEED_GRACE",
    "HistoryLost",
    "distrusted_until",
    "history_lost",
    "new_run_id",
]


@attrs.define(eq=False, repr=False)
class HistoryLost(StoreUnavailable):
    """The shared store answered with a run id other than the one this process knew (it lost
    what it held: a restart without persistence, a flush), or budget accounts this process saw
    are gone. Nothing was done. The store layer handles it (budgets rebuilt, windows written
    back); as a :class:`StoreUnavailable`, a caller that sees it treats the store as briefly
    not there. It lives here, beside the run id it is about, not in :mod:`sluice._errors`:
    only a shared store raises it, so a program without one never defines it."""

    run_id: str = ""
    """The run id the store answered with."""
    account: str = ""
    """The budget account found gone, if that was the sign."""


RUN_KEY = "run"
"""The store's run id lives at ``{prefix}:run``."""
RUN_CHECK = 0.5
"""Seconds between two looks at the run id by each process's background task, so a process
that admits nothing (its last window's admissions count all the same) finds a loss too."""
SEED_GRACE = 3 * RUN_CHECK
"""Seconds a process waits after finding a loss before it admits again: every other live
process has found it by then and told the store its own admissions of the last window."""

EPOCH_LUA = r"""
-- The store's run id: written at first use; a request naming another one (a store restarted
-- without its data) gets {'epoch', now, id} and nothing else is done, queued work included.
-- A request naming none (the process's first) is served, with the id added to its reply.
-- A read of windows ('peek', sent beside the queue of runs) is only a view: it is served.
local run = redis.call('GET', P .. ':run')
if not run then
  run = req.fresh
  redis.call('SET', P .. ':run', run)
end
if req.run ~= '' and req.run ~= run and req.op ~= 'peek' then
  return {'epoch', fmt(now), run}
end
"""
"""Expects ``P`` (the key prefix), ``req`` (with ``run``: the id the process knows, ``""`` at
first; ``fresh``: an id to write when there is none), ``now`` and ``fmt`` in scope; the
script's own reply to a request with ``run`` empty must end with ``"run:" + run``."""


def new_run_id() -> str:
    """A run id no other store will have."""
    return uuid.uuid4().hex


def history_lost(known: str | None, seen: str) -> bool:
    """Whether a process that knew run id ``known`` lost its history when the store now
    reports ``seen``. ``known`` empty or None is a first contact: nothing was relied on,
    nothing lost."""
    return bool(known) and seen != known


def distrusted_until(lost_at: float, periods: Iterable[float]) -> float:
    """Until when a key whose windows have ``periods`` admits at the local share after its
    history was found lost at ``lost_at``: one full window (the longest), so every admission
    still inside a window has gone through the store again."""
    return lost_at + max(periods, default=0.0)
