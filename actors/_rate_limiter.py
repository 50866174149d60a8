"""The RateLimiter: the one admission point for every call.

One task owns every quota key's local state: its wait queues (by priority, with ageing), pending
slots (held from admission to the attempt's first chunk), open streams (held to the attempt's
end), its adaptive pending limit, and the spread of admissions after a cooldown. The windows and
the cooldown itself live in a :class:`~sluice._limits.store.QuotaStore`, so processes sharing an
account can share them. Keys never block each other.

An attempt is admitted when, for its key: the quota is not exhausted, no cooldown is active,
its turn in the post-cooldown spread has come, a pending slot and an open-stream slot are free,
and every window has room for its cost. Its tokens are reserved at admission and settled with
the real usage when the attempt ends.

Keys are made on first use, so with ``rate_limit.key = "model"`` callers naming models make
keys. Once many exist, a key whose state carries nothing is dropped (see
:func:`~sluice._limits.admission.at_rest`): no
waiter, nothing in flight, every window empty, no limit learned, no cooldown or spread left, an
adaptive limit back at its cap. Made again on its next use, it behaves exactly as it would have.

What to admit, refuse or wait for is decided by the pure :mod:`sluice._limits.admission` over
each key's state and the store's answers; this actor carries the decisions out.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
import uuid
from typing import TYPE_CHECKING, TypeAlias, assert_never

import attrs
import trio

from sluice._errors import CallError, InternalError, StoreUnavailable
from sluice._ledger.hold import NO_HOLD as _NO_HOLD
from sluice._ledger.hold import BudgetHold
from sluice._limits import admission
from sluice._limits.cost import Cost
from sluice._limits.headers import learned_limits
from sluice._limits.queue import Expiries
from sluice._limits.store import QuotaStore, Reservation
from sluice._mail import EXPIRED, Acquire, Admission, RateLimiterMsg, Release, Settle, Signal
from sluice._messages import Usage
from sluice._record import Record

from ._limiter_handle import LimiterTray, RateLimiterHandle
from ._tell import take

if TYPE_CHECKING:
    import random
    from collections.abc import Iterator

    from sluice._ledger.budget import BudgetBook
    from sluice._limits.store_rare import BudgetAsk
    from sluice._mail_rare import GetLimiterStats, KeyStatistics, Relimit, Withdraw

__all__ = ["RateLimiterHandle", "run_rate_limiter"]

_NOTHING = Cost(0, 0, 0)
_LEARN_EVERY = 0.25
KEYS_KEPT = 256
"""Quota keys kept before the limiter first looks for keys at rest to drop."""

_Key: TypeAlias = admission.QuotaKey[Acquire]


@attrs.define(eq=False, repr=False)
class _Ticket(Record):
    key: _Key
    reservation: Reservation
    admitted_at: float
    pending: bool = True
    hold: BudgetHold | None = None
    shared_hold: str = ""
    """The id of the shared store's budget reservation, if it took one."""


def _everyone(waiter: Acquire) -> bool:
    return True


def _refuse(waiter: Acquire, error: CallError | None) -> None:
    """Answer ``waiter`` with a refusal (None: it gave up at its ``give_up_at``)."""
    try:
        if error is None:
            waiter.reply_to.send_nowait(EXPIRED)
        else:
            from sluice._mail_rare import Refusal  # loaded by the first refusal

            waiter.reply_to.send_nowait(Refusal(error))
    except (trio.BrokenResourceError, trio.ClosedResourceError, trio.WouldBlock):
        pass  # the asker has gone


def _queued(key: _Key, waiter: Acquire) -> bool:
    return waiter in key.waiters


async def run_rate_limiter(
    inbox: trio.MemoryReceiveChannel[RateLimiterMsg],
    rng: random.Random,
    store: QuotaStore,
    ticket_numbers: Iterator[int] | None = None,
    budget: BudgetBook | None = None,
    *,
    keys_kept: int = KEYS_KEPT,
    tray: LimiterTray | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve admissions until every sender of ``inbox`` is closed.

    Guarantees: every ``Acquire`` gets exactly one ``Admission`` or ``Refusal``, unless its
    asker left first, in which case it consumes nothing (its reservation is refunded in full);
    a ticket's pending slot is freed by its first ``Release`` or its ``Settle``; the actor never
    awaits anything but its inbox and the store, so a slow asker cannot stall it.

    If the actor ends for any reason (a crash included), every queued asker's reply channel is
    closed, so nobody waits on an answer that cannot come; the handle then asks again (a
    restarted limiter) or reports the runtime closed. ``ticket_numbers`` outlives a restart, so
    a ticket of the crashed instance can never free a slot of the new one. So does ``store``
    (the runtime creates it): a restarted limiter admits against the windows and cooldowns the
    crashed one left, and the reservations of its lost tickets stay counted at their estimate.

    ``budget`` (outliving restarts too) adds spending budgets to the same decision: an
    ``Acquire`` that names a ``budget`` claim is admitted only when its worst-case cost fits
    every budget it falls under, waits while it fits only after attempts in flight settle, and
    is refused with ``BudgetExceeded`` when it can never fit (see :mod:`sluice._ledger.budget`).
    ``Settle`` charges the real usage and refunds the rest of the reservation.

    Keys: at most ``max(keys_kept, 2 * busy)`` are held, ``busy`` being the keys not at rest at
    the last sweep; a sweep runs when a new key would pass that size and drops every key at
    rest (see ``admission.at_rest`` and ``QuotaStore.forget``), so its cost is amortized constant
    per key made, and while fewer than ``keys_kept`` keys are in use none is dropped.

    ``tray`` (outliving restarts too): where the handle lays ends that need not wake this
    actor (see :class:`~sluice.actors._limiter_handle.LimiterTray`). It is opened only while
    the actor sleeps with no ask waiting on any key, no budget and no shared store, and every
    wake applies what it holds, at the times they were told, before anything else.
    """
    if budget is not None:
        budget.charge_outstanding()  # a crashed instance's tickets will never be settled
    limiter = _Limiter(
        store,
        rng,
        ticket_numbers if ticket_numbers is not None else itertools.count(1),
        budget,
        keys_kept,
        tray,
    )
    task_status.started()
    try:
        await limiter.serve(inbox)
    finally:
        limiter.abandon_waiters()


class _Limiter:
    """The RateLimiter's state; only its actor task touches it."""

    def __init__(
        self,
        store: QuotaStore,
        rng: random.Random,
        numbers: Iterator[int],
        budget: BudgetBook | None = None,
        keys_kept: int = KEYS_KEPT,
        tray: LimiterTray | None = None,
    ) -> None:
        self.store = store
        self.tray = tray
        self.waiting: set[_Key] = set()
        """Keys with asks queued, as their last look left them."""
        self.keys_kept = keys_kept
        self.sweep_at = keys_kept
        """A new key when this many are held sweeps the keys at rest first."""
        self.rng = rng
        self.numbers = numbers
        self.keys: dict[str, _Key] = {}
        self.tickets: dict[int, _Ticket] = {}
        self.timers: list[tuple[float, int, _Key]] = []  # (wake time, tie-breaker, key)
        self.timer_ids = itertools.count()
        self.budget = budget
        self.budget_waiting: set[_Key] = set()
        """Keys whose first waiter fits its budgets only once attempts in flight settle."""
        self.expiries: Expiries[_Key, Acquire] = Expiries(_queued)
        """Asks queued past their burst, by their ``give_up_at``."""
        self.touched: dict[_Key, None] = {}
        """Keys the current burst of messages changed, to be pumped once it ends (a dict:
        ordered, each key once)."""

    async def serve(self, inbox: trio.MemoryReceiveChannel[RateLimiterMsg]) -> None:
        """Handle messages as they come; the keys they touch are looked at (pumped) once per
        burst: after the last message already in the mailbox, not after each one. A burst of
        asks, first chunks and settlements then costs one look per key, and the look sees
        every waiter and every freed slot of the burst together."""
        wake_at = math.inf
        timers, burst = self.timers, self.touched
        clock = trio.lowlevel.current_clock().current_time  # trio.current_time, found once
        now = clock()
        tray = self.tray
        while True:
            msg: RateLimiterMsg | None = None
            try:
                if burst:
                    try:
                        msg = inbox.receive_nowait()
                    except trio.WouldBlock:
                        pass  # the burst is over: look at its keys below
                elif wake_at == math.inf:
                    if tray is not None:
                        tray.open = self._quiet()
                    msg = await take(inbox)
                else:
                    try:
                        msg = inbox.receive_nowait()
                    except trio.WouldBlock:
                        with trio.move_on_at(wake_at):
                            msg = await inbox.receive()
            except trio.EndOfChannel:
                if tray is not None:
                    await self._take_tray(tray)
                await self._pump_burst(now)
                return
            if tray is not None:
                await self._take_tray(tray)  # what was laid while it slept: before ``msg``
            now = clock()
            touched: _Key | None = None
            match msg:
                case None:
                    pass
                case Acquire():
                    touched = await self._enqueue(msg, now)
                case Release(ticket=number):
                    touched = await self._release(number, now)
                case Settle():
                    touched = await self.settle(msg, now)
                    if self.budget_waiting and touched is not None:
                        await self._pump_budget_waiting(touched, now)
                case _:
                    touched = await self._rare(msg, now)
            if touched is not None:
                burst[touched] = None
            if msg is not None and burst:
                continue  # take the rest of the burst first
            await self._pump_burst(now)
            self.expiries.burst_ended()
            while timers and timers[0][0] <= now:
                when, _, key = heapq.heappop(timers)
                if key.wake == when:
                    await self.pump(key, now)
            for key, waiter in self.expiries.due(now):
                if key.waiters.remove(waiter):
                    _refuse(waiter, None)
                    await self.pump(key, now)  # the waiters behind it may fit now
            wake_at = min(timers[0][0] if timers else math.inf, self.expiries.next_at())

    async def _release(self, number: int, now: float) -> _Key | None:
        """Free ticket ``number``'s pending slot (its first chunk came at ``now``); its key,
        or None when there was nothing to free."""
        ticket = self.tickets.get(number)
        if ticket is None or not ticket.pending:
            return None
        ticket.pending = False
        ticket.key.pending -= 1
        await self.store.redate(ticket.reservation, now)
        return ticket.key

    def _quiet(self) -> bool:
        """Whether an end may wait in the tray: nothing it frees is waited for, here or (no
        shared store) in another process, and no budget's readers see its refund late."""
        return (
            not self.waiting
            and not self.budget_waiting
            and self.budget is None
            and not self.store.shared
        )

    async def _take_tray(self, tray: LimiterTray) -> None:
        """The actor woke: close ``tray`` (ends go through the mailbox again) and apply the
        ends laid in it, each at the time it was told; their keys are looked at with the
        burst."""
        tray.open = False
        if not tray.items:
            return
        burst = self.touched
        for msg, at, wall in tray.take():
            if isinstance(msg, Release):
                key = await self._release(msg.ticket, at)
            else:
                key = await self.settle(msg, at, wall)
            if key is not None:
                burst[key] = None

    async def _enqueue(self, msg: Acquire, now: float) -> _Key | None:
        """Queue an ask on its key (made on first use) and return the key to look at, or
        refuse it at once when it asked not to wait out a cooldown (None: nothing queued)."""
        key = self.keys.get(msg.key)
        if key is None:
            if len(self.keys) >= self.sweep_at:
                self.sweep(now)
            key = self.keys[msg.key] = admission.new_key(msg.key, msg.limits)
        if msg.fail_on_cooldown and await self.cooling(key, now):
            _refuse(msg, admission.cooling_error(key, now))
            return None
        if msg.give_up_at <= now:
            _refuse(msg, None)
            return None
        key.waiters.push(msg)
        if msg.give_up_at < math.inf:
            self.expiries.arrived(msg.give_up_at, key, msg)
        return key

    async def _pump_burst(self, now: float) -> None:
        """Look once at every key the burst's messages touched, in the order they came."""
        burst = self.touched
        while burst:
            key = next(iter(burst))
            del burst[key]
            await self.pump(key, now)

    async def cooling(self, key: _Key, now: float) -> bool:
        """Whether ``key`` cools down now: after a 429 this process saw, or, with a shared
        store, one it knows another process saw (no round trip: what the store last heard)."""
        if key.cooldown_end > now:
            return True
        return admission.note_cooldown(key, await self.store.cooldown_left(key.name, now), now)

    def refuse_cooling(self, key: _Key, now: float) -> None:
        """Refuse the waiters that will not wait out ``key``'s cooldown (``fail_on_cooldown``)."""
        refused, error = admission.leave_cooling(key, now)
        for waiter in refused:
            _refuse(waiter, error)

    def sweep(self, now: float) -> int:
        """Drop every key at rest whose store state carries nothing; return how many."""
        keys, store, waiting, touched = self.keys, self.store, self.budget_waiting, self.touched
        dropped = [
            key
            for key in keys.values()
            if key not in waiting
            and key not in touched
            and admission.at_rest(key, now)
            and store.forget(key.name, key.specs, now)
        ]
        for key in dropped:
            del keys[key.name]
        self.sweep_at = max(self.keys_kept, 2 * len(keys))
        return len(dropped)

    async def _pump_budget_waiting(self, settled: _Key, now: float) -> None:
        """A settlement may have refunded budget: look again at keys waiting on budget."""
        waiting, self.budget_waiting = self.budget_waiting, set()
        for key in waiting:
            if key is not settled:
                await self.pump(key, now)

    def _hold_budget(self, waiter: Acquire) -> BudgetHold | CallError | None:
        """The waiter's budget reservation: a hold, an error (never fits), None (wait)."""
        if self.budget is None or waiter.budget is None:
            return _NO_HOLD
        return self.budget.hold(waiter.budget, waiter.cost)

    def _budget_ask(self, hold: BudgetHold) -> BudgetAsk | None:
        """The shared store's side of a budget hold: the same amounts, the same accounts."""
        if not hold.accounts or self.budget is None:
            return None
        from sluice._limits.store_rare import BudgetAsk  # with budgets only

        return BudgetAsk(
            uuid.uuid4().hex,
            hold.micros,
            hold.tokens,
            tuple(
                (self.budget.shared_name(a), a.budget.max_micros, a.budget.max_tokens)
                for a in hold.accounts
            ),
            tuple((a.spent_micros, a.spent_tokens) for a in hold.accounts),
        )

    def _release_budget(self, hold: BudgetHold) -> None:
        if self.budget is not None:
            self.budget.release(hold)

    def abandon_waiters(self) -> None:
        for key in self.keys.values():
            while (waiter := key.waiters.peek(math.inf)) is not None:
                key.waiters.pop(waiter)
                waiter.reply_to.close()

    async def pump(self, key: _Key, now: float) -> None:
        """Admit the key's waiters that fit now; schedule the key's next look."""
        wake = await self._admit(key, now)
        key.wake = wake
        if key.waiters:
            self.waiting.add(key)
        else:
            self.waiting.discard(key)
        if wake < math.inf:
            heapq.heappush(self.timers, (wake, next(self.timer_ids), key))

    async def _admit(self, key: _Key, now: float) -> float:
        """Admit what fits; return when to look again (inf: only a message can help).

        The decisions are :mod:`sluice._limits.admission`'s, in its order; this asks the
        store and the budgets and sends the answers."""
        error = admission.exhaustion(key, now)
        if error is not None:
            for refused in key.waiters.drop(_everyone):
                _refuse(refused, error)
            return math.inf
        if not key.waiters:
            return math.inf
        left = await self.store.cooldown_left(key.name, now)
        if admission.note_cooldown(key, left, now):
            self.refuse_cooling(key, now)
            return now + left
        admission.arm_spread(key, now, self.rng)
        while (waiter := key.waiters.peek(now)) is not None:
            wake = admission.blocked(key, now)
            if wake is not None:
                return wake
            hold = self._hold_budget(waiter)
            if hold is None:
                self.budget_waiting.add(key)
                return math.inf
            if isinstance(hold, CallError):
                key.waiters.pop(waiter)
                _refuse(waiter, hold)
                continue
            ask = self._budget_ask(hold) if self.store.shared else None
            decision = admission.decide(key, await self._reserve(key, waiter, ask, now), now)
            if not isinstance(decision, admission.Admit):
                self._release_budget(hold)
            match decision:
                case admission.Admit():
                    await self._grant(key, decision, hold, ask, now)
                case admission.Refuse():
                    _refuse(decision.waiter, decision.error)
                case admission.StoreDown():
                    for gone in decision.refused:
                        _refuse(gone, decision.error)
                    return decision.until
                case admission.Wait():
                    if self.store.shared and await self.cooling(key, now):
                        self.refuse_cooling(key, now)  # the store told of another process's 429
                    return decision.until
                case _:
                    assert_never(decision)
        key.spread = None
        return math.inf

    async def _reserve(
        self, key: _Key, waiter: Acquire, ask: BudgetAsk | None, now: float
    ) -> admission.StoreAnswer:
        """The store's answer to reserving ``waiter``'s cost (an error it raised, as a value).
        A shared store also takes the slots and the budget (``ask``) in the same step."""
        store = self.store
        try:
            if not store.shared:
                return await store.reserve(key.name, key.specs, waiter.cost, now)
            caps = (key.limits.max_pending, key.limits.max_open_streams)
            return await store.reserve(key.name, key.specs, waiter.cost, now, caps=caps, budget=ask)
        except (StoreUnavailable, InternalError) as exc:
            return exc

    async def _grant(
        self,
        key: _Key,
        admit: admission.Admit[Acquire],
        hold: BudgetHold,
        ask: BudgetAsk | None,
        now: float,
    ) -> None:
        """Send the admission and open its ticket; if the asker has left, refund everything."""
        number, reserved, store = next(self.numbers), admit.reservation, self.store
        try:
            admit.waiter.reply_to.send_nowait(Admission(number, now, hold.max_output))
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.WouldBlock):
            await store.settle(reserved, _NOTHING)
            await store.end(reserved)
            self._release_budget(hold)
            if ask is not None:
                await store.settle_budget(ask.hold, 0, 0)
            return
        shared_hold = ask.hold if ask is not None else ""
        self.tickets[number] = _Ticket(key, reserved, now, hold=hold, shared_hold=shared_hold)
        key.pending += 1
        key.open_streams += 1

    async def settle(self, msg: Settle, now: float, wall: float | None = None) -> _Key | None:
        """Apply attempt ``msg.ticket``'s end, told at ``now`` (``wall``: the wall time then,
        None: now); its key, or None for a ticket unknown here."""
        ticket = self.tickets.pop(msg.ticket, None)
        if ticket is None:
            return None
        key = ticket.key
        if ticket.pending:
            key.pending -= 1
            if not msg.unused:  # a reply (an error, say) proves the request arrived
                await self.store.redate(ticket.reservation, now)
        key.open_streams -= 1
        if msg.unused:  # it never went out: refund everything, the request included
            await self.store.settle(ticket.reservation, _NOTHING)
        elif msg.usage is not None:
            await self.store.settle(ticket.reservation, Cost.from_usage(msg.usage))
        await self.store.end(ticket.reservation)
        if self.budget is not None and ticket.hold is not None:
            usage = Usage() if msg.unused else msg.usage
            if ticket.shared_hold:
                micros, tokens = self.budget.charge(ticket.hold, usage)
                await self.store.settle_budget(ticket.shared_hold, micros, tokens)
            self.budget.settle(ticket.hold, usage)
        if (
            msg.headers
            and key.limits.learn_from_headers
            and (now >= key.learn_after or msg.signal == "rate_limited")
        ):
            # Limits change slowly: reading them from every reply would cost more than it
            # tells, so read at most every _LEARN_EVERY seconds per key, and on every 429.
            key.learn_after = now + _LEARN_EVERY
            learned = learned_limits(msg.headers, time.time() if wall is None else wall)
            if learned:
                try:
                    await self.store.learn(key.name, key.specs, learned, now)
                except (StoreUnavailable, InternalError):
                    pass  # the limits stay as they were; the next reply tells them again
        signal: Signal = msg.signal
        match signal:
            case "ok":
                if key.adaptive is not None:
                    key.adaptive.on_success()
            case "rate_limited":
                await self._rate_limited(key, msg, ticket.admitted_at, now)
            case "overloaded":
                if key.adaptive is not None:
                    key.adaptive.on_congestion(ticket.admitted_at, now)
            case "failed":
                pass
            case _:
                assert_never(signal)
        return key

    async def _rate_limited(self, key: _Key, msg: Settle, admitted_at: float, now: float) -> None:
        wait = msg.wait if msg.wait is not None else key.limits.default_cooldown
        if admission.exhausts(key, wait, msg.quota, now):
            return
        try:
            left = await self.store.cooldown(key.name, wait, now)
        except (StoreUnavailable, InternalError):
            left = wait  # this process pauses; admissions elsewhere fail until Redis answers
        admission.cooled(key, left, admitted_at, now)

    async def _rare(self, msg: Withdraw | GetLimiterStats | Relimit, now: float) -> _Key | None:
        """A message that no call going through at once sends: a withdrawn ask, a question
        for the statistics, new limits. Their classes load with the first of them; the key
        returned (if any) is one the message changed, to pump with the burst."""
        from sluice._mail_rare import GetLimiterStats, Relimit, Withdraw

        match msg:
            case Withdraw(acquire=acquire):
                withdrawn = self.keys.get(acquire.key)
                if withdrawn is not None and withdrawn.waiters.remove(acquire):
                    return withdrawn  # the waiters behind it may fit now
            case GetLimiterStats(reply_to=reply_to):
                try:
                    reply_to.send_nowait(self.statistics(now))
                except (trio.BrokenResourceError, trio.ClosedResourceError, trio.WouldBlock):
                    pass  # the asker gave up (a scrape waits only so long)
            case Relimit(limits=by_provider):
                for key in list(self.keys.values()):
                    new = by_provider.get(key.name.partition(":")[0])
                    if new is not None and new != key.limits:
                        admission.relimit(key, new)
                        await self.pump(key, now)
            case _:
                assert_never(msg)
        return None

    def statistics(self, now: float) -> dict[str, KeyStatistics]:
        from sluice._mail_rare import KeyStatistics  # loaded by the first question

        return {
            key.name: KeyStatistics(
                key=key.name,
                queued=key.waiters.depth(),
                pending=key.pending,
                open_streams=key.open_streams,
                pending_limit=key.pending_limit(),
                windows=self.store.usage(key.name, now),
                cooldown_left=max(0.0, key.cooldown_end - now),
                exhausted_left=max(0.0, key.exhausted_until - now)
                if key.exhausted_error is not None
                else 0.0,
                windows_age=self.store.usage_age(key.name, now),
            )
            for key in self.keys.values()
        }
