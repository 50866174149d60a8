"""Garbage-collector settings for the processes sluice owns (the ``sluice`` command, the
gateway's workers); a library embedded in someone's program never changes them.

A call's objects live for the call, among hundreds of concurrent calls: long enough to outlive
CPython's young-generation collections, which run every 700 net allocations. So they are copied
up the generations and every so often force a full collection, which walks every object the
process has. Under streaming load that is a visible share of sluice's CPU (benchmarks/README.md,
"Numbers behind choices in the code"). Two standard remedies, as long-running Python servers use
them:

- ``gc.freeze()`` once the process has started: what exists then (modules, classes, config)
  lives as long as the process, and a full collection no longer walks it.
- A young-generation threshold of 10,000 instead of 700: most of a call's objects are freed by
  reference counting before a collection comes (only reference cycles wait for one), so
  collections become rare and promote little. The memory cost is bounded: at most that many
  objects' worth of garbage cycles waits for the next collection.

``SLUICE_GC=default`` in the environment keeps CPython's own settings (to compare, or for an
operator with a policy of their own).
"""

from __future__ import annotations

import gc
import os

__all__ = ["freeze_setup", "tune_for_service"]

YOUNG_THRESHOLD = 10_000


def tune_for_service() -> None:
    """Freeze what exists now and raise the young-generation threshold (never lower it),
    unless ``SLUICE_GC=default``."""
    if os.environ.get("SLUICE_GC") == "default":
        return
    gc.freeze()
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, YOUNG_THRESHOLD), middle, old)


def freeze_setup() -> None:
    """In a process :func:`tune_for_service` tuned (its startup frozen), collect and freeze
    again once the process has set itself up for long (the load tester, after its runtime
    started and its warm-up ran): the objects made since (actors, pools, codecs) last as
    long as the process, and a collection no longer walks them. Where the startup was not
    frozen (a library in someone's program, ``SLUICE_GC=default``) it does nothing."""
    if gc.get_freeze_count() == 0 or os.environ.get("SLUICE_GC") == "default":
        return
    gc.collect()
    gc.freeze()
