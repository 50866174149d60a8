"""The hook runner: a bounded queue and one task that calls the user's hooks.

The hot path only does ``send_nowait``: a full queue drops the record (counted) rather than
wait, so a slow hook costs calls nothing, and a failing hook is logged and counted.
"""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from .records import AttemptRecord, CallRecord, Hooks

__all__ = ["HookRunner"]

log = logging.getLogger("sluice.hooks")


class HookRunner:
    """Queues records for the hooks; :meth:`run` hands them over, in order."""

    def __init__(self, hooks: Hooks) -> None:
        self.hooks = hooks
        self._send, self._receive = trio.open_memory_channel[Any](hooks.queue_size)
        self.dropped = 0
        """Records dropped because the queue was full."""
        self.failed = 0
        """Hook calls that raised."""
        self.done = trio.Event()

    def call_ended(self, record: CallRecord) -> None:
        if self.hooks.on_call_end is not None:
            self._offer(record)

    def attempt_ended(self, record: AttemptRecord) -> None:
        if self.hooks.on_attempt_end is not None:
            self._offer(record)

    def _offer(self, record: Any) -> None:
        try:
            self._send.send_nowait(record)
        except trio.WouldBlock:
            self.dropped += 1
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            self.dropped += 1

    def close(self) -> None:
        """No more records: :meth:`run` returns once it has handed over what is queued."""
        self._send.close()

    async def run(self) -> None:
        """Call the hooks with each queued record until :meth:`close`; never raises for them."""
        from .records import CallRecord

        try:
            async with self._receive:
                async for record in self._receive:
                    hook = (
                        self.hooks.on_call_end
                        if isinstance(record, CallRecord)
                        else self.hooks.on_attempt_end
                    )
                    assert hook is not None
                    try:
                        returned = hook(record)
                        if inspect.isawaitable(returned):
                            await returned
                    except Exception:
                        self.failed += 1
                        log.exception(
                            "a %s hook raised; the call is not affected", type(record).__name__
                        )
        finally:
            self.done.set()
