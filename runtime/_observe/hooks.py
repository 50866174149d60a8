"""The hook runner: a bounded queue per hook and one task each that calls it.

The hot path only does ``send_nowait``: a full queue drops the record (counted) rather than
wait, so a slow hook costs calls nothing, and a failing hook is logged and counted. Each hook
has its own queue, so a slow ``on_attempt_end`` does not starve ``on_call_end``.
"""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from collections.abc import Callable

    from .records import AttemptRecord, CallRecord, Hooks

__all__ = ["HookRunner"]

log = logging.getLogger("sluice.hooks")


class _Lane:
    """One hook and its queue."""

    def __init__(self, hook: Callable[[Any], Any], size: int) -> None:
        self.hook = hook
        self.send, self.receive = trio.open_memory_channel[Any](size)


class HookRunner:
    """Queues records for the hooks; :meth:`run` hands them over, in order."""

    def __init__(self, hooks: Hooks) -> None:
        self.hooks = hooks
        size = hooks.queue_size
        self._calls = _Lane(hooks.on_call_end, size) if hooks.on_call_end else None
        self._attempts = _Lane(hooks.on_attempt_end, size) if hooks.on_attempt_end else None
        self.dropped = 0
        """Records dropped because a hook's queue was full."""
        self.failed = 0
        """Hook calls that raised."""
        self.done = trio.Event()

    def call_ended(self, record: CallRecord) -> None:
        if self._calls is not None:
            self._offer(self._calls, record)

    def attempt_ended(self, record: AttemptRecord) -> None:
        if self._attempts is not None:
            self._offer(self._attempts, record)

    def _offer(self, lane: _Lane, record: Any) -> None:
        try:
            lane.send.send_nowait(record)
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            self.dropped += 1

    def close(self) -> None:
        """No more records: :meth:`run` returns once the hooks have what is queued."""
        for lane in (self._calls, self._attempts):
            if lane is not None:
                lane.send.close()

    async def run(self) -> None:
        """Hand each queued record to its hook until :meth:`close`; never raises for a hook."""
        try:
            async with trio.open_nursery() as nursery:
                for lane in (self._calls, self._attempts):
                    if lane is not None:
                        nursery.start_soon(self._serve, lane)
        finally:
            self.done.set()

    async def _serve(self, lane: _Lane) -> None:
        async with lane.receive:
            async for record in lane.receive:
                try:
                    returned = lane.hook(record)
                    if inspect.isawaitable(returned):
                        await returned
                except Exception:
                    self.failed += 1
                    log.exception(
                        "a %s hook raised; the call is not affected", type(record).__name__
                    )
