"""The RateLimiter: the one admission point for every call.

One task owns every quota key's state in its locals. A call's attempt is admitted when, for its
key, no cooldown is active, a pending slot is free (a slot is held from admission until the
attempt's first chunk, or its end), and the requests-per-minute window has room. Waiters are
admitted in arrival order per key; keys do not block each other.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, assert_never

import attrs
import trio

from sluice.config import RateLimitConfig
from sluice.errors import RuntimeClosed
from sluice.mail import Acquire, Admission, Cooldown, RateLimiterMsg, Release
from sluice.window import SlidingWindow

if TYPE_CHECKING:
    import random

__all__ = ["RateLimiterHandle", "run_rate_limiter"]


@attrs.define
class _Key:
    limits: RateLimitConfig
    window: SlidingWindow | None
    waiters: deque[Acquire] = attrs.field(factory=deque)
    pending: int = 0
    cooldown_until: float = -math.inf


def _new_key(limits: RateLimitConfig) -> _Key:
    window = None
    if limits.requests_per_minute is not None:
        window = SlidingWindow(max(1, math.floor(limits.requests_per_minute)), 60.0)
    return _Key(limits=limits, window=window)


async def run_rate_limiter(
    inbox: trio.MemoryReceiveChannel[RateLimiterMsg],
    rng: random.Random,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve admissions until every sender of ``inbox`` is closed.

    Guarantees: an ``Acquire`` is answered with exactly one ``Admission`` (unless its asker left
    first, in which case it uses no slot); a ticket's slot is freed by the first ``Release`` of
    it; a ``Cooldown`` ends ``seconds`` plus up to ``cooldown_jitter`` later, drawn from ``rng``.
    The actor never awaits anything but its own inbox, so a slow asker cannot stall it.
    """
    keys: dict[str, _Key] = {}
    tickets: dict[int, _Key] = {}
    next_ticket = 0
    wake_at = math.inf

    def pump(key: _Key, now: float) -> float:
        """Admit the key's waiters that fit now; return the time to try again (inf: on message)."""
        nonlocal next_ticket
        while key.waiters:
            if now < key.cooldown_until:
                return key.cooldown_until
            if key.limits.max_pending is not None and key.pending >= key.limits.max_pending:
                return math.inf
            if key.window is not None:
                free_at = key.window.next_free(now)
                if free_at > now:
                    return free_at
            waiter = key.waiters.popleft()
            next_ticket += 1
            try:
                waiter.reply_to.send_nowait(Admission(next_ticket, now))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                continue  # the asker was cancelled while queued: it takes no slot
            key.pending += 1
            tickets[next_ticket] = key
            if key.window is not None:
                key.window.record(now)
        return math.inf

    task_status.started()
    async with inbox:
        while True:
            msg: RateLimiterMsg | None = None
            with trio.move_on_at(wake_at):
                try:
                    msg = await inbox.receive()
                except trio.EndOfChannel:
                    return
            now = trio.current_time()
            match msg:
                case None:
                    pass
                case Acquire(key=name, limits=limits):
                    key = keys.get(name)
                    if key is None:
                        key = keys[name] = _new_key(limits)
                    key.waiters.append(msg)
                case Release(ticket=ticket):
                    held = tickets.pop(ticket, None)
                    if held is not None:
                        held.pending -= 1
                case Cooldown(key=name, seconds=seconds):
                    key = keys.get(name)
                    if key is not None:
                        until = now + seconds + rng.uniform(0.0, key.limits.cooldown_jitter)
                        key.cooldown_until = max(key.cooldown_until, until)
                case _:
                    assert_never(msg)
            wake_at = math.inf
            for key in keys.values():
                if key.waiters:
                    wake_at = min(wake_at, pump(key, now))


@attrs.frozen
class RateLimiterHandle:
    """What the other actors hold to reach the RateLimiter. Created by the runtime."""

    _mailbox: trio.MemorySendChannel[RateLimiterMsg]

    async def acquire(self, key: str, limits: RateLimitConfig) -> Admission:
        """Wait until an attempt under ``key`` is admitted.

        If the caller is cancelled while waiting, no slot stays held: an admission that had
        already been granted is released before the cancellation propagates.
        """
        reply_to, reply = trio.open_memory_channel[Admission](1)
        granted: Admission | None = None
        try:
            with reply_to, reply:
                try:
                    await self._mailbox.send(Acquire(key, limits, reply_to))
                    return await reply.receive()
                except (trio.BrokenResourceError, trio.EndOfChannel) as exc:
                    raise RuntimeClosed("the rate limiter has stopped") from exc
                except trio.Cancelled:
                    try:
                        granted = reply.receive_nowait()
                    except trio.WouldBlock:
                        pass
                    raise
        finally:
            if granted is not None:
                await self.release(granted.ticket)

    async def release(self, ticket: int) -> None:
        """Free ``ticket``'s pending slot. Safe to call more than once, and under cancellation."""
        with trio.CancelScope(shield=True):
            try:
                await self._mailbox.send(Release(ticket))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the limiter has stopped: nothing left to free

    async def cooldown(self, key: str, seconds: float) -> None:
        """Pause admissions under ``key`` for ``seconds`` plus jitter."""
        with trio.CancelScope(shield=True):
            try:
                await self._mailbox.send(Cooldown(key, seconds))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
