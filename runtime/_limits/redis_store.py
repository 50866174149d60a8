"""Quotas shared by every process of a deployment: a :class:`QuotaStore` in Redis.

Each decision is one atomic Lua script run (:mod:`sluice._limits.redis_script`) on the Redis
server's clock, so processes on several hosts agree without trusting each other's clocks, and
"at most N in any window" holds exactly across them. The script mirrors the in-memory window
step for step; a property test holds the two to the same admission times.

Round trips: one per admission attempt (the script checks the cooldown, every window, the shared
pending and open-stream slots and the shared budgets, then reserves). Settlements, re-datings
and slot releases are not sent on their own: they are queued and ride on the process's next
script run, or are flushed by a background task within ``flush_interval`` when nothing else is
sent, in one run for all of them (they are idempotent, so a run that fails is simply sent again).

Slots and budget reservations are held with a lapse time (``lapse`` seconds ahead, renewed by
the background task every third of it while the attempt lives): a process killed with
``kill -9`` stops renewing, and what it held is freed (slots) or charged in full (budgets, since
its calls may have spent it) when the lapse passes: the background task of every process sweeps
the store when the next hold lapses, so nothing waits for an admission to look. Window entries
need no lapse: they leave their window by themselves.

Cooldowns other processes set are known here without a round trip per call (:meth:`cooling`,
which model groups' routing asks for every call; :mod:`sluice._limits.redis_cooling`): from
every admission the script answered with a cooldown, and from a read of every key cooling down
that the background task makes at most every ``view_interval`` seconds while someone keeps
asking. The same read brings the names routing should avoid (:meth:`avoid`, :meth:`avoided`):
deployments some process found slow, breakers some process opened.

Statistics never wait for Redis: :meth:`RedisQuotaStore.usage` answers from the process's view
of each key's windows (:mod:`sluice._limits.view`), learned from every admission's answer and
refreshed by the background task every ``refresh`` seconds for the keys no answer has reported
since (one read-only run for all of them, sent beside the queue of runs so that a read hanging
on a stopped Redis holds up no admission), and :meth:`RedisQuotaStore.usage_age` says how old
it is.

A store that lost its history (restarted without its data: its run id, see
:mod:`sluice._limits.store_epoch`, changed; or budget accounts this process saw are gone)
fails the request with :class:`~sluice._errors.StoreUnavailable` and bumps
:attr:`RedisQuotaStore.generation`: nothing is admitted against it until the caller has
rebuilt what it must (:class:`~sluice._limits.fallback.FallbackQuotaStore` rebuilds the
budgets). Work queued for the lost store is dropped, and reservations made there are settled
no more: their ids mean other entries now; this process's own admissions of the last window
are told to the store again (:mod:`sluice._limits.redis_history`).

Open with :func:`open_redis_store`. ``coredis`` is imported only by this store's modules, on
first use: its import is slow, and most runs never use Redis.
"""

from __future__ import annotations

import contextlib
import logging
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal

import orjson
import trio

from .._errors import ConfigError, InternalError, StoreUnavailable
from .._exception_groups import sole_failure
from .redis_cooling import SharedCooling
from .redis_history import RunHistory, wire_period
from .redis_history import SeedWindow as SeedWindow
from .redis_script import QUOTA_SCRIPT
from .redis_wire import ScriptFailed, bug, safe_url, script_failed
from .store import (
    LEARNED_FOR,
    LEARNED_PERIOD,
    BudgetAsk,
    BudgetRefused,
    Reservation,
    TooLarge,
    WindowSpec,
    sent_slots,
)
from .store_epoch import RUN_CHECK, HistoryLost, new_run_id
from .view import WindowViews

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from .._ledger.redis import RedisLedgerStore
    from .cost import Cost
    from .headers import Dimension, Learned

__all__ = ["RedisQuotaStore", "open_redis_store"]

log = logging.getLogger("sluice._limits")

_LEARNED_PERIOD = repr(LEARNED_PERIOD)
_SWEEP_LATE = 0.05
"""Seconds a sweep comes after the lapse it waits for: the store's clock may run a little
behind this process's, and a hold lapsing at the very instant is not yet lapsed."""

_REFRESH_MOST = 64
"""Keys one refresh reads at most (the oldest views first): a bounded run on the server."""


class RedisQuotaStore:
    """A :class:`~sluice._limits.store.QuotaStore` in Redis, shared by every process that opens
    it with the same ``prefix``.

    ``clock="caller"`` uses the ``now`` each method is given instead of the server's clock: for
    tests that hold this store to the in-memory one at the same virtual times.
    """

    shared = True
    """Enforces slots and budgets across processes (the RateLimiter asks it to)."""

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "sluice",
        clock: Literal["server", "caller"] = "server",
        lapse: float = 30.0,
        poll: float = 0.05,
        timeout: float = 2.0,
        view_interval: float = 0.5,
        refresh: float = 1.0,
    ) -> None:
        self._client = client
        self._script = client.register_script(QUOTA_SCRIPT)
        self._base = "{" + prefix + "}"
        self.prefix = prefix
        self._caller_clock = clock == "caller"
        self.run = RunHistory()
        """The store's run id as this process knows it, and its part of the history."""
        self.lapse = lapse
        self.poll = poll
        self.timeout = timeout
        self.refresh = refresh
        """Seconds after which a key's view of its windows is read again (in ``maintain``)."""
        self._ops: list[list[Any]] = []
        self._held: set[tuple[str, str]] = set()
        """(key, reservation id) of the slots this process holds, renewed until they end."""
        self._holds: set[str] = set()
        """Budget reservations this process holds, renewed until settled."""
        self.cooling_view = SharedCooling(interval=view_interval, caller_clock=clock == "caller")
        """What this process knows of the cooldowns and names to avoid all processes share."""
        self.views = WindowViews()
        """The last known use and limit of each window of the keys in use."""
        self._dirty = trio.Event()
        self._lock = trio.Lock()
        self.round_trips = 0
        """Script runs so far (admissions, cooldowns, learning and flushes)."""
        self.balances: dict[str, tuple[int, int, int, int]] = {}
        """Per budget account, (spent micros, spent tokens, reserved micros, reserved tokens)
        as the store last reported them (kept across lost history: the last known truth)."""

    @property
    def view_interval(self) -> float:
        """Seconds between two reads of the shared cooldowns from Redis, at the most."""
        return self.cooling_view.interval

    @view_interval.setter
    def view_interval(self, seconds: float) -> None:
        self.cooling_view.interval = seconds

    @property
    def run_id(self) -> str:
        """The store's run id as this process knows it ("" before the first script run)."""
        return self.run.run_id

    @property
    def generation(self) -> int:
        """Times the store was found to have lost its history (a reservation's ``ref`` is
        ``"<generation>.<id>"``: one made before a loss means nothing to the store since)."""
        return self.run.generation

    @property
    def lost_at(self) -> float | None:
        """When this process last found the store's run id changed (None: never)."""
        return self.run.lost_at

    # -- the round trip ------------------------------------------------------------------

    async def _run(self, request: dict[str, Any], now: float) -> list[Any]:
        """Run the script with the queued operations first; they are dropped only once the
        server has applied them, or once they alone make the script fail.

        Raises:
            StoreUnavailable: Redis did not answer (the queued work stays queued).
            InternalError: the script failed on this request: a bug, which asking again
                cannot fix. Queued work that was not to blame is applied all the same.
        """
        async with self._lock:  # one run at a time: queued work reaches Redis in order
            ops = self._ops
            self._ops = []
            generation = self.generation
            try:
                return await self._send(request, ops, now)
            except ScriptFailed as failed:
                if not ops or request["op"] == "flush":
                    if ops:
                        log.error("quota script failed on queued work, now dropped: %s", failed)
                    raise bug(request, failed) from None
            except BaseException:
                if self.generation == generation:  # else the work was for a lost store
                    self._ops = ops + self._ops
                raise
            # The request or the work queued before it failed: apply the work alone (it is
            # idempotent, so what the failed run applied is applied once), then ask again.
            try:
                await self._send({"op": "flush"}, ops, now)
            except ScriptFailed as failed:
                log.error("quota script failed on queued work, now dropped: %s", failed)
            except BaseException:
                if self.generation == generation:
                    self._ops = ops + self._ops
                raise
            try:
                return await self._send(request, [], now)
            except ScriptFailed as failed:
                raise bug(request, failed) from None

    async def _send(self, request: dict[str, Any], ops: list[Any], now: float) -> list[Any]:
        """One script run; a failure is StoreUnavailable (an outage) or ScriptFailed."""
        from coredis.exceptions import RedisError

        request["ops"] = ops
        request["now"] = now if self._caller_clock else -1.0
        request["run"] = self.run.run_id
        request["fresh"] = new_run_id()  # never reused: a restarted store gets a new id
        try:
            with trio.fail_after(self.timeout):
                reply = await self._script(keys=[self._base], args=[orjson.dumps(request)])
        except RedisError as exc:
            if script_failed(exc):
                raise ScriptFailed(str(exc)) from None
            reason = str(exc) or type(exc).__name__
            raise StoreUnavailable(f"the quota store does not answer: {reason}") from None
        except (OSError, trio.TooSlowError) as exc:
            reason = str(exc) or type(exc).__name__
            raise StoreUnavailable(f"the quota store does not answer: {reason}") from None
        self.round_trips += 1
        reply = list(reply)
        if reply[0] == "epoch":  # only ever to a request that named a run id
            seen, account = str(reply[2]), str(reply[3]) if len(reply) > 3 else ""
            self._lost(seen, account, now)
            what = f"budget account {account!r} is gone" if account else "its run id changed"
            raise HistoryLost(
                f"the quota store lost its history ({what})", run_id=seen, account=account
            )
        if not request["run"] and str(reply[-1]).startswith("run:"):
            self.run.run_id = str(reply.pop())[4:]  # the first run: nothing known, nothing lost
        return reply

    def _lost(self, run: str, account: str, now: float) -> None:
        """The store lost what this process relied on: forget what was meant for it (see
        :meth:`RunHistory.lost`); on a new run id, tell it this process's part of its history
        (see :meth:`_seed`), from the background task if no admission does first."""
        self.run.lost(run, account, now)
        self._ops = []
        self._held.clear()
        self._holds.clear()
        if self.run.seed_due:
            self._dirty.set()

    def queue_booking(self, booking: str, amounts: Sequence[tuple[str, int, int]]) -> None:
        """Add (account, micros, tokens) to the accounts' spent with the next run, exactly
        once however often it is sent (``booking`` is its unique id)."""
        self._queue(["B", booking, [list(a) for a in amounts]])

    def queue_rebuild(
        self, process: str, accounts: Sequence[tuple[str, int, int, int, int]]
    ) -> None:
        """After lost history: raise each account's spent to at least its floor and to at
        least the sum of every process's own spend; (account, floor micros, floor tokens,
        own micros, own tokens), ``process`` naming this process (see ``rebuild`` in
        :mod:`sluice._limits.redis_script`)."""
        self._queue(["R", process, [list(a) for a in accounts]])

    def _note_balances(self, raw: Any) -> None:
        found = orjson.loads(raw) if raw else []
        if isinstance(found, list):  # Lua encodes an empty list as {}
            for name, sm, st, rm, rt in found:
                self.balances[str(name)] = (int(sm), int(st), int(rm), int(rt))

    def _queue(self, op: list[Any]) -> None:
        self._ops.append(op)
        self._dirty.set()

    async def flush(self, now: float = 0.0) -> None:
        """Send the queued settlements now."""
        if self._ops:
            await self._run({"op": "flush"}, now)

    async def read_views(self, now: float) -> None:
        """Flush the queued work, then read the windows of the keys whose view is ``refresh``
        seconds old or more (at most :data:`_REFRESH_MOST`, the oldest first) in one run.

        The read carries no queued work and takes no turn in the queue of runs: a read that
        hangs on a Redis that stopped answering holds up no admission.
        """
        await self.flush(now)
        due = self.views.stale(now, self.refresh, _REFRESH_MOST)
        if not due:
            return
        request: dict[str, Any] = {"op": "peek", "keys": due}
        try:
            reply = await self._send(request, [], now)
        except ScriptFailed as failed:
            raise bug(request, failed) from None
        for (key, _), usage in zip(due, reply[2:], strict=True):
            self.views.note(key, str(usage), now)

    async def sweep(self, now: float = 0.0) -> float | None:
        """Drop every lapsed slot and charge every lapsed budget hold in the store (any
        process's: one killed with ``kill -9`` never ends its own), sending the queued work
        with it. Returns the seconds until the next hold lapses (None: none is held)."""
        reply = await self._run({"op": "sweep"}, now)
        server_now, first = float(reply[1]), float(reply[2])
        return None if first < 0 else max(0.0, first - server_now)

    async def maintain(self, flush_interval: float = 0.02) -> None:
        """Flush queued work, renew held slots and budget holds, sweep lapsed holds of every
        process (at the moment the next one lapses, and at least every third of a lapse), look
        at the store's run id (every :data:`~sluice._limits.store_epoch.RUN_CHECK` seconds)
        and refresh the views of the windows (every ``refresh`` seconds), until cancelled. So
        a killed process's holds go on time without any admission having to look, and a
        process that admits nothing finds a loss of history too.

        Errors are logged, not raised: the queued work stays queued and is sent again.
        """
        renew_at = trio.current_time() + self.lapse / 3
        refresh_at = trio.current_time() + self.refresh
        sweep_at = trio.current_time()
        check_at = trio.current_time() + RUN_CHECK
        while True:
            with trio.move_on_at(min(renew_at, refresh_at, sweep_at, check_at)):
                await self._dirty.wait()
                await trio.sleep(flush_interval)  # let a burst of settlements gather
            self._dirty = trio.Event()
            try:
                now = trio.current_time()
                if self.run.seed_due:
                    await self._seed(now)
                if self.cooling_view.wanted:
                    await self.read_cooldowns(now)
                    now = trio.current_time()
                if now >= renew_at:
                    renew_at = now + self.lapse / 3
                    if self._held or self._holds:
                        held = [[key, ref] for key, ref in self._held]
                        self._queue(["h", self.lapse, held, list(self._holds)])
                if now >= check_at:
                    check_at = now + RUN_CHECK
                    await self.check_run(now)
                if now >= sweep_at:
                    sweep_at = now + self.lapse / 3  # a failed sweep is tried again then
                    lapses_in = await self.sweep(now)
                    if lapses_in is not None:
                        sweep_at = min(sweep_at, now + lapses_in + _SWEEP_LATE)
                if now >= refresh_at:
                    refresh_at = now + self.refresh
                    await self.read_views(now)
                else:
                    await self.flush(now)
            except HistoryLost:
                self._dirty.set()  # told its part of the history on the next turn
            except StoreUnavailable as exc:
                log.debug("quota store: queued work not sent yet (%s)", exc)
                await trio.sleep(min(1.0, self.lapse / 6))
                self._dirty.set()
            except InternalError:
                pass  # logged where it was raised; the work that failed is dropped

    # -- QuotaStore ------------------------------------------------------------------------

    async def reserve(
        self,
        key: str,
        specs: Sequence[WindowSpec],
        cost: Cost,
        now: float,
        *,
        caps: tuple[int | None, int | None] = (None, None),
        budget: BudgetAsk | None = None,
    ) -> Reservation | TooLarge | BudgetRefused | float:
        wire_specs = [[s.dimension, wire_period(s.period), s.limit] for s in specs]
        self.views.use(key, wire_specs)
        request: dict[str, Any] = {
            "op": "reserve",
            "q": key,
            "specs": wire_specs,
            "cost": [cost.requests, cost.input_tokens, cost.output_tokens],
            "caps": [-1 if c is None else c for c in caps],
            "lapse": self.lapse,
            "poll": self.poll,
        }
        if budget is not None:
            known = self.balances
            request["budget"] = [
                budget.hold,
                budget.micros,
                budget.tokens,
                [
                    [a, -1 if m is None else m, -1 if t is None else t, a in known]
                    for a, m, t in budget.accounts
                ],
            ]
        generation = self.generation
        try:
            reply = await self._admit(request, now)
        except StoreUnavailable:
            if budget is not None and self.generation == generation:
                # Redis may still run the request (a paused server reads it when it wakes):
                # the hold must then be freed, not lapse in full while others wait for it.
                self._queue(["b", budget.hold, 0, 0])
            raise
        kind = reply[0]
        if kind == "ok":
            if len(reply) > 4:  # a reply of the script before views has no usage
                self.views.note(key, str(reply[4]), now)
            rid = str(reply[2])
            slots = tuple(
                (dimension, period)
                for slot in str(reply[3]).split(",")
                if slot
                for dimension, period in [slot.split(":", 1)]
            )
            if caps != (None, None):
                self._held.add((key, rid))
            if budget is not None:
                self._holds.add(budget.hold)
                self._note_balances(reply[5])
            ref = self.run.ref(rid)
            return Reservation(key, cost, (), ref=ref, slots=slots, sent=sent_slots(specs))
        if kind == "wait":
            wait = float(reply[2])
            if reply[3] == "cooldown":
                self.cooling_view.note(key, now, float(reply[1]), float(reply[4]))
            elif reply[3] == "window" and len(reply) > 4:
                self.views.note(key, str(reply[4]), now)
            elif reply[3] == "budget":
                self._note_balances(reply[5])
            return wait
        if kind == "large":
            dimension: Dimension = reply[2]
            return TooLarge(dimension, int(reply[3]), int(reply[4]), float(reply[5]))
        if kind == "budget":
            return BudgetRefused(str(reply[2]), reply[3], int(reply[4]))
        raise AssertionError(f"unexpected reply from the quota script: {reply!r}")

    async def _admit(self, request: dict[str, Any], now: float) -> list[Any]:
        """Run an admission, first telling a store found without its history this process's
        part of it (if not done yet).

        Raises:
            HistoryLost: the store lost its history since this process last saw it (nothing
                was admitted; the next admission runs under the new run id).
        """
        if self.run.seed_due:
            await self._seed(now)
        try:
            return await self._run(request, now)
        except HistoryLost:
            if self.run.seed_due:  # told at once: the other processes' admissions count it
                with contextlib.suppress(StoreUnavailable):
                    await self._seed(now)
            raise

    async def check_run(self, now: float = 0.0) -> None:
        """Look at the store's run id (sending the queued work with it); on a loss, tell the
        store this process's part of its history (see :meth:`_seed`).

        Raises:
            StoreUnavailable: Redis did not answer (the telling is done on a later round trip).
        """
        try:
            await self._run({"op": "flush"}, now)
        except HistoryLost:
            pass  # noted by _lost: told below
        if self.run.seed_due:
            await self._seed(now)

    async def _seed(self, now: float) -> None:
        """Tell a store that lost its history what this process admitted in the last window
        (see :meth:`RunHistory.seed`)."""
        windows, carried = self.run.seed(now)
        if windows:
            await self._run({"op": "seed", "windows": windows}, now)
        self.run.seeded(carried)

    def cooling(self, key: str, now: float) -> float:
        """Seconds left of ``key``'s cooldown as this process knows it, another process's
        included, with no round trip: for routing, on every call's path. Asking also keeps
        the background task reading every key's cooldown from Redis, at most every
        ``view_interval`` seconds (none while nobody asks)."""
        if self.cooling_view.want(now):
            self._dirty.set()
        return self.cooling_view.left(key, now)

    def avoid(self, name: str, seconds: float, now: float) -> None:
        """Tell every process's routing to pass ``name`` over for ``seconds`` (more than 0):
        until the latest end any process gave. Queued: it rides on the next round trip."""
        self.cooling_view.avoid(name, seconds, now)
        self._queue(["k", name, seconds])

    def avoided(self, name: str, now: float) -> float:
        """Seconds ``name`` is still to be avoided, as this process knows (kept fresh as
        :meth:`cooling` keeps its view)."""
        if self.cooling_view.want(now):
            self._dirty.set()
        return self.cooling_view.avoided_for(name, now)

    async def read_cooldowns(self, now: float) -> None:
        """Learn every key's cooldown and every name to avoid from Redis now (one round trip,
        which also carries the queued work).

        Raises:
            StoreUnavailable: Redis did not answer (what is known stays as it was).
        """
        self.cooling_view.reading(now)
        reply = await self._run({"op": "cooling"}, now)
        self.cooling_view.learn(reply, now)

    async def settle(self, reservation: Reservation, actual: Cost) -> None:
        rid = self.run.live(reservation.ref)
        if rid is None:
            return
        amounts = [[d, p, actual.amount(d)] for d, p in reservation.slots]
        self._queue(["s", reservation.key, rid, amounts])

    async def redate(self, reservation: Reservation, now: float) -> None:
        rid = self.run.live(reservation.ref)
        if rid is None:
            return
        at = now if self._caller_clock else -1.0
        sent = reservation.sent
        slots = [[d, p] for d, p in reservation.slots if not sent or (d, float(p)) not in sent]
        self._queue(["r", reservation.key, rid, slots, at])

    async def end(self, reservation: Reservation) -> None:
        """The attempt is over: free its shared slots."""
        rid = self.run.live(reservation.ref)
        if rid is None:
            return
        held = (reservation.key, rid)
        if held in self._held:
            self._held.discard(held)
            self._queue(["e", reservation.key, rid])

    async def settle_budget(self, hold: str, micros: int | None, tokens: int) -> None:
        """Charge a budget reservation what its attempt spent (None: all of it)."""
        if hold in self._holds:
            self._holds.discard(hold)
            self._queue(["b", hold, -1 if micros is None else micros, tokens])

    async def cooldown(self, key: str, seconds: float, now: float) -> float:
        reply = await self._run({"op": "cooldown", "q": key, "seconds": seconds}, now)
        server_now, until = float(reply[1]), float(reply[2])
        self.cooling_view.note(key, now, server_now, until)
        return until - server_now

    async def cooldown_left(self, key: str, now: float) -> float:
        """What this process knows of the key's cooldown (no round trip): the admission
        script checks the shared cooldown itself and answers with a wait."""
        return self.cooling_view.left(key, now)

    async def learn(
        self, key: str, specs: Sequence[WindowSpec], learned: Sequence[Learned], now: float
    ) -> None:
        items = [
            [
                item.dimension,
                -1 if item.limit is None else item.limit,
                -1 if item.remaining is None else item.remaining,
                -1.0 if item.reset is None else item.reset,
            ]
            for item in learned
        ]
        request = {
            "op": "learn",
            "q": key,
            "specs": [[s.dimension, wire_period(s.period), s.limit] for s in specs],
            "learned": items,
            "per": _LEARNED_PERIOD,
            "keep": LEARNED_FOR,
        }
        await self._run(request, now)

    def ledger_mirror(self) -> RedisLedgerStore:
        """The ledger's aggregates in the same Redis, under the same prefix, given at least as
        long to answer as the quotas are (a batch of increments can be large)."""
        from .._ledger.redis import RedisLedgerStore

        mirror = RedisLedgerStore(self._client, self.prefix)
        mirror.timeout = max(mirror.timeout, self.timeout)
        return mirror

    def usage(self, key: str, now: float) -> dict[str, tuple[int, int]]:
        """The key's windows as Redis last reported them (no round trip; see ``usage_age``)."""
        return self.views.usage(key)

    def usage_age(self, key: str, now: float) -> float:
        """Seconds since Redis last reported the key's windows."""
        return self.views.age(key, now)

    def forget(self, key: str, specs: Sequence[WindowSpec], now: float) -> bool:
        """Drop this process's note of the key's cooldown once it is over, and its view of
        the key's windows (Redis expires the key's own state)."""
        if not self.cooling_view.forget(key, now):
            return False
        self.views.forget(key)
        return True


async def _ping(client: Any, url: str) -> None:
    from coredis.exceptions import RedisError

    try:
        with trio.fail_after(5):
            await client.ping()
    except (RedisError, OSError, trio.TooSlowError) as exc:
        raise ConfigError(f"cannot reach the quota store at {safe_url(url)}: {exc}") from None


@asynccontextmanager
async def open_redis_store(
    url: str,
    *,
    prefix: str = "sluice",
    clock: Literal["server", "caller"] = "server",
    lapse: float = 30.0,
    flush_interval: float = 0.02,
    refresh: float = 1.0,
) -> AsyncIterator[RedisQuotaStore]:
    """Connect to ``url`` (``redis://host:port/db``), yield the store, and keep its queued
    work flowing and its view of the windows read again every ``refresh`` seconds (see
    :meth:`RedisQuotaStore.read_views`); on exit send what is still queued (briefly) and
    disconnect.

    Raises:
        ConfigError: ``coredis`` is not installed, or the server does not answer.
    """
    try:
        import coredis
    except ImportError:
        raise ConfigError("a Redis store needs coredis: pip install 'sluice[redis]'") from None
    try:
        client = coredis.Redis.from_url(
            url, decode_responses=True, connect_timeout=2.0, stream_timeout=5.0
        )
    except ValueError as exc:
        raise ConfigError(f"store URL {safe_url(url)!r}: {exc}") from None
    try:
        async with client:
            await _ping(client, url)
            store = RedisQuotaStore(
                client, prefix=prefix, clock=clock, lapse=lapse, refresh=refresh
            )
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.maintain, flush_interval)
                try:
                    yield store
                finally:
                    nursery.cancel_scope.cancel()
                    with trio.move_on_after(2, shield=True):
                        try:
                            await store.flush(trio.current_time())
                        except (StoreUnavailable, InternalError):
                            log.warning("quota store: settlements not sent at exit")
    except BaseExceptionGroup as group:
        leaf = sole_failure(group)
        if leaf is None:
            raise
        raise leaf from None
