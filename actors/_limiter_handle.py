"""The handle the other actors hold to reach the RateLimiter (:mod:`sluice.actors._rate_limiter`):
asking for admission, and telling it of first chunks and settlements."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeAlias

import attrs
import trio

from sluice._errors import RuntimeClosed
from sluice._mail import (
    EXPIRED,
    Acquire,
    Admission,
    CallControl,
    Expired,
    RateLimiterMsg,
    Release,
    Settle,
)
from sluice._record import Record
from sluice._reply import Reply, WaitStopped

from ._tell import tell

if TYPE_CHECKING:
    from sluice._config import RateLimitConfig
    from sluice._ledger.hold import BudgetClaim
    from sluice._limits.cost import Cost
    from sluice._limits.queue import Priority
    from sluice._mail_rare import KeyStatistics, Refusal

__all__ = ["LimiterTray", "RateLimiterHandle"]

_ASK_AGAIN = 8  # admissions asked again after the limiter crashed under a waiting caller
TRAY_SIZE = 256
"""Ends a tray holds before the next goes through the mailbox (and wakes the RateLimiter)."""

Laid: TypeAlias = "tuple[Release | Settle, float, float]"
"""A first chunk or an attempt's end, the trio time and the wall time it was told at."""


class LimiterTray:
    """First chunks and attempts' ends that did not wake the RateLimiter.

    An attempt made alone frees a slot that nobody waits for: the RateLimiter has nothing to
    decide until the next ask, and waking it for the end alone would cost every call made
    alone a trip through the scheduler. So while the RateLimiter says nothing can come of an
    end (:attr:`open`: no ask waits on any key, no budget and no shared store, whose other
    processes would see the slot held), the handle lays ``Release`` and a successful
    ``Settle`` here with the times they were told, and the RateLimiter applies them at those
    times before anything else it does when it next wakes (an ask, a question, its end): the
    windows, the learned limits and the statistics come out as if it had woken for each.
    Otherwise, or when the tray is full, they go through the mailbox as before.
    """

    __slots__ = ("items", "open")

    def __init__(self) -> None:
        self.items: list[Laid] = []
        self.open = False
        """Written by the RateLimiter only: True while it sleeps with nothing an end could
        change at once; False from the moment it wakes."""

    def take(self) -> list[Laid]:
        """Everything laid so far, in order; the tray is empty afterwards."""
        items, self.items = self.items, []
        return items


def _now() -> float:
    return trio.lowlevel.current_clock().current_time()


def _ready(reply: Reply[Admission | Refusal | Expired]) -> Admission | Refusal | Expired | None:
    """The answer already in ``reply``, if any."""
    try:
        return reply.receive_nowait()
    except (trio.WouldBlock, trio.EndOfChannel):
        return None


@attrs.frozen(eq=False, repr=False)
class RateLimiterHandle(Record):
    """What the other actors hold to reach the RateLimiter. Created by the runtime."""

    _mailbox: trio.MemorySendChannel[RateLimiterMsg]
    on_admitted: Callable[[str, float], None] | None = None
    """Told each admission's quota key and seconds waited (the admission-wait metric)."""
    tray: LimiterTray | None = None
    """Where ends go that need not wake the RateLimiter (the runtime's handle has one; see
    :class:`LimiterTray`). None: every end goes through the mailbox."""

    async def acquire(
        self,
        key: str,
        limits: RateLimitConfig,
        cost: Cost,
        priority: Priority = "interactive",
        *,
        budget: BudgetClaim | None = None,
        fail_on_cooldown: bool = False,
        wait_for_store: float | None = None,
    ) -> Admission:
        """Wait until an attempt under ``key`` is admitted.

        If the caller is cancelled while waiting, it leaves the queue and consumes nothing: an
        admission granted in the meantime is refunded before the cancellation propagates. If
        the limiter crashes while the caller waits, the caller asks its restarted successor.

        ``budget`` names who the attempt is charged to in the spending budgets, if any apply.
        ``fail_on_cooldown``: refuse with ``RateLimited`` while ``key`` cools down after a 429
        instead of waiting (see :class:`~sluice._mail.Acquire`). ``wait_for_store``: until when
        to wait while the shared quota store does not answer (None: fail with
        ``StoreUnavailable`` at once).

        Raises:
            CallError: the RateLimiter refused the attempt (too large, quota exhausted,
                ``BudgetExceeded``).
            RuntimeClosed: the RateLimiter has stopped.
        """
        admitted = await self.acquire_until(
            key,
            limits,
            cost,
            priority,
            budget=budget,
            fail_on_cooldown=fail_on_cooldown,
            wait_for_store=wait_for_store,
        )
        assert admitted is not None  # it gives up only at a give_up_at, or when stopped
        return admitted

    async def acquire_until(
        self,
        key: str,
        limits: RateLimitConfig,
        cost: Cost,
        priority: Priority = "interactive",
        *,
        budget: BudgetClaim | None = None,
        fail_on_cooldown: bool = False,
        wait_for_store: float | None = None,
        give_up_at: float = math.inf,
        control: CallControl | None = None,
        asked: float | None = None,
    ) -> Admission | None:
        """:meth:`acquire`, which gives up without a cancel scope of the caller's: None when
        the ask was still queued at ``give_up_at`` (the RateLimiter takes it out then), or
        when ``control``'s call was abandoned meanwhile (the wait is watched as what the call
        waits under). Either way it consumes nothing, as after a cancellation. ``asked``: the
        time now, when the caller has just read it (None: read here).

        Raises: as :meth:`acquire`.
        """
        if asked is None:
            asked = trio.current_time()
        at: float | None = asked
        for _ in range(_ASK_AGAIN):
            answer = await self._ask(
                key,
                limits,
                cost,
                priority,
                budget,
                fail_on_cooldown,
                wait_for_store,
                at,
                give_up_at,
                control,
            )
            at = None  # a second ask (its limiter crashed) is made at its own time
            if isinstance(answer, Admission):
                if self.on_admitted is not None:
                    self.on_admitted(key, answer.at - asked)
                return answer
            if isinstance(answer, Expired):
                return None
            if answer is not None:  # a Refusal (sluice._mail_rare), the one answer left
                raise answer.error
        raise RuntimeClosed("the rate limiter keeps crashing; giving up on admission")

    async def relimit(self, limits: Mapping[str, RateLimitConfig]) -> None:
        """Give each provider's quota keys its new limits (``Runtime.reload``)."""
        from sluice._mail_rare import Relimit  # loaded by the first reload

        await tell(self._mailbox, Relimit(limits))

    async def _ask(
        self,
        key: str,
        limits: RateLimitConfig,
        cost: Cost,
        priority: Priority,
        budget: BudgetClaim | None = None,
        fail_on_cooldown: bool = False,
        wait_for_store: float | None = None,
        now: float | None = None,
        give_up_at: float = math.inf,
        control: CallControl | None = None,
    ) -> Admission | Refusal | Expired | None:
        """One request for admission (made at ``now``, default: now); None when the limiter
        ended without answering; :data:`EXPIRED` when it gave up (``give_up_at``, or
        ``control``'s call abandoned)."""
        reply: Reply[Admission | Refusal | Expired] = Reply()  # not Reply[...](): see _reply
        msg = Acquire(
            key,
            limits,
            cost,
            priority,
            trio.current_time() if now is None else now,
            reply,
            budget,
            fail_on_cooldown,
            wait_for_store,
            give_up_at,
        )
        try:
            try:
                sent = await self._send(msg, reply, give_up_at, control)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise RuntimeClosed("the rate limiter has stopped") from exc
            if not sent:
                return EXPIRED  # gave up before the ask reached the limiter: nothing to undo
            try:
                return await reply.receive()
            except trio.EndOfChannel:
                return None
            except trio.Cancelled:
                await self._give_up(msg, reply)
                raise
            except WaitStopped:
                await self._give_up(msg, reply)
                return EXPIRED
        finally:
            reply.leave()
            if control is not None:
                control.unwatch()

    async def _send(
        self,
        msg: Acquire,
        reply: Reply[Admission | Refusal | Expired],
        give_up_at: float,
        control: CallControl | None,
    ) -> bool:
        """Put ``msg`` in the mailbox; False if the asker gave up first. Then ``control`` (if
        any) watches ``reply``. Only a full mailbox makes this wait, under a scope that ends
        at ``give_up_at`` or when ``control``'s call is abandoned (a send either delivers or
        is cancelled, never half): the limiter is not there yet to give the ask up itself.
        """
        try:
            self._mailbox.send_nowait(msg)
        except trio.WouldBlock:
            with trio.CancelScope(deadline=give_up_at) as sending:
                if control is not None:
                    control.watch(sending)
                await self._mailbox.send(msg)
            if sending.cancelled_caught:
                if control is not None:
                    control.unwatch()
                return False
        if control is not None:
            control.watch(reply)  # a consumer that leaves stops the wait for the answer
        return True

    async def _give_up(self, msg: Acquire, reply: Reply[Admission | Refusal | Expired]) -> None:
        """Leave the queue after a cancellation, consuming nothing.

        An admission that arrived first is settled as unused. Otherwise a ``Withdraw`` goes
        out; while it waits for room in a full mailbox, the limiter may still admit the ask,
        so the reply is looked at again afterwards. The caller leaves the reply right after
        this returns, with no checkpoint between: an admission sent later fails to arrive,
        and the limiter refunds it itself.
        """
        answer = _ready(reply)
        if answer is None:
            from sluice._mail_rare import Withdraw  # loaded by the first ask given up

            await self._send_shielded(Withdraw(msg))
            answer = _ready(reply)
        if isinstance(answer, Admission):
            await self.settle(Settle(answer.ticket, "failed", unused=True))

    async def release(self, ticket: int) -> None:
        """Free ``ticket``'s pending slot (its first chunk arrived)."""
        await self._tell_end(Release(ticket))

    async def settle(self, msg: Settle) -> None:
        """Report an attempt's end. Shielded: a cancelled attempt still frees its slots."""
        await self._tell_end(msg)

    async def _tell_end(self, msg: Release | Settle) -> None:
        """In the tray when the RateLimiter said an end can wait (see :class:`LimiterTray`),
        else through the mailbox. Only a successful end waits: a failure's signal (a
        cooldown, the adaptive limit) and a refund of an attempt never sent act at once."""
        tray = self.tray
        if (
            tray is not None
            and tray.open
            and len(tray.items) < TRAY_SIZE
            and (type(msg) is Release or msg.signal == "ok")  # type: ignore[union-attr]
        ):
            tray.items.append((msg, _now(), time.time()))
            return
        await self._send_shielded(msg)

    async def statistics(self) -> dict[str, KeyStatistics]:
        """A snapshot of every quota key."""
        from sluice._mail_rare import GetLimiterStats, KeyStatistics  # with the first question

        reply_to, reply = trio.open_memory_channel[dict[str, KeyStatistics]](1)
        with reply_to, reply:
            try:
                await self._mailbox.send(GetLimiterStats(reply_to))
                return await reply.receive()
            except (trio.BrokenResourceError, trio.EndOfChannel) as exc:
                raise RuntimeClosed("the rate limiter has stopped") from exc

    async def _send_shielded(self, msg: RateLimiterMsg) -> None:
        await tell(self._mailbox, msg)
