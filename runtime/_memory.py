"""Giving the C allocator's free memory back to the system, for processes that run for weeks.

CPython keeps small objects in its own arenas and hands everything larger (dict tables, lists,
byte strings: most of a reply's bytes) to the C allocator. glibc's allocator keeps freed memory
in its heaps for reuse, so after a burst of concurrent calls a process's RSS stays at the burst's
peak, and slowly creeps up as rarer, higher peaks come (fragmentation). ``malloc_trim(0)`` gives
the free pages back (the whole heap, not only its top). It walks the allocator's free lists,
which is cheap next to the interval it runs at (a minute by default), and RSS then follows what
the process uses.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["TrimCount", "memory_trimmer", "trim_memory_forever"]


class TrimCount:
    """How many trims the trimmer task has done: it alone counts; statistics and tests read."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = 0


def memory_trimmer() -> Callable[[], object] | None:
    """glibc's ``malloc_trim(0)`` as a callable, or None where there is none (macOS, Windows,
    musl): there the service is a no-op rather than an error."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # here: a process that never trims never pays for loading ctypes

    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


async def trim_memory_forever(every: float, trims: TrimCount) -> None:
    """Trim every ``every`` seconds (trio's clock) until cancelled, counting each in
    ``trims``. Returns at once where there is nothing to call."""
    trim = memory_trimmer()
    if trim is None:
        return
    while True:
        await trio.sleep(every)
        trim()
        trims.done += 1
