"""When an open-loop arrival's sender task starts: ahead of its due time, so the task that
wakes at that time is the one that sends. Pure."""

from __future__ import annotations

__all__ = ["BATCH", "EARLY", "LEAD", "sender_start"]

LEAD = 0.005
"""Seconds before an open-loop arrival is due that its sender task starts (and its prompt is
drawn) at the latest: enough for a late pass of the scheduler on a busy loop."""

EARLY = 0.05
"""Seconds before an open-loop arrival is due that its sender task starts at the earliest. Up
to this, a sender starts when the arrival before it is due: the scheduler's wake then shares
the pass of trio's loop (and the instant its timer fires) that the earlier request's wake
makes anyway, rather than making one of its own per request."""

BATCH = LEAD
"""Seconds of starts the scheduler makes in one wake: the senders of the arrivals whose start
falls within this of the one it woke for start with it. At high rates, where arrivals are
closer than :data:`LEAD`, a wake of the scheduler per arrival was much of what a request
cost; a sender started early only waits longer on its timer."""


def sender_start(scheduled: float, previous: float) -> float:
    """When the sender of an arrival due at ``scheduled`` starts, the one before it (of this
    process) due at ``previous``: when that one is due, but at least :data:`LEAD` and at most
    :data:`EARLY` before its own due time."""
    return min(scheduled - LEAD, max(previous, scheduled - EARLY))
