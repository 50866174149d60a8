"""Telling a shared store that lost its history from one that kept it: its run id.

A Redis server restarted without its data (or flushed) answers as if nothing had happened:
every window is empty, every budget unspent. Trusting it would let a second full window, or a
second full budget, through. So the first script run against a store writes a random run id
(``{prefix}:run``) if none is there, and every later run names the id the process knows: a
different or missing id means the history the process relied on is gone.

This module holds the pieces both sides use: the Lua fragment the quota script runs first, and
the pure rule for reading its answer. What to do about lost history (rebuild budgets from the
ledgers, admit at the local share meanwhile) is the caller's.
"""

from __future__ import annotations

import uuid

__all__ = ["EPOCH_LUA", "new_run_id", "store_epoch_changed"]

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
if req.run ~= '' and req.run ~= run and req.op ~= 'peek' then return {'epoch', fmt(now), run} end
"""
"""Expects ``P`` (the key prefix), ``req`` (with ``run``: the id the process knows, ``""`` at
first; ``fresh``: an id to write when there is none), ``now`` and ``fmt`` in scope; the
script's own reply to a request with ``run`` empty must end with ``"run:" + run``."""


def new_run_id() -> str:
    """A run id no other store will have."""
    return uuid.uuid4().hex


def store_epoch_changed(known: str, seen: str) -> bool:
    """Whether a store answering with run id ``seen`` lost the history of the one this process
    knew as ``known``. ``known`` empty is a first contact: nothing was relied on, nothing lost."""
    return bool(known) and seen != known
