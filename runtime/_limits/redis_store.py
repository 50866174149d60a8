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

Open with :func:`open_redis_store`. ``coredis`` is imported only here (it takes ~0.4 s).
"""

from __future__ import annotations

import logging
import math
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import orjson
import trio

from .._errors import ConfigError, InternalError, StoreUnavailable
from .redis_script import QUOTA_SCRIPT
from .store import (
    LEARNED_FOR,
    LEARNED_PERIOD,
    BudgetAsk,
    BudgetRefused,
    Reservation,
    TooLarge,
    WindowSpec,
)
from .store_epoch import RUN_CHECK, HistoryLost, history_lost, new_run_id

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence

    from .._ledger.redis import RedisLedgerStore
    from .cost import Cost
    from .headers import Dimension, Learned

__all__ = ["RedisQuotaStore", "open_redis_store"]

log = logging.getLogger("sluice._limits")

_LEARNED_PERIOD = repr(LEARNED_PERIOD)
SeedWindow: TypeAlias = "tuple[str, Dimension, float, Sequence[tuple[float, int, str]]]"
"""(quota key, dimension, period, [(admitted at, amount, reservation id or ""), ...] oldest
first): a reservation id for an attempt still under way, whose re-dating and settlement then
reach the copy."""
_SWEEP_LATE = 0.05
"""Seconds a sweep comes after the lapse it waits for: the store's clock may run a little
behind this process's, and a hold lapsing at the very instant is not yet lapsed."""


def _period(value: float) -> str:
    return repr(float(value))


def _amount(cost: Cost, dimension: str) -> int:
    if dimension == "requests":
        return cost.requests
    if dimension == "input_tokens":
        return cost.input_tokens
    if dimension == "output_tokens":
        return cost.output_tokens
    return cost.total_tokens


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
    ) -> None:
        self._client = client
        self._script = client.register_script(QUOTA_SCRIPT)
        self._base = "{" + prefix + "}"
        self.prefix = prefix
        self._caller_clock = clock == "caller"
        self.lapse = lapse
        self.poll = poll
        self.timeout = timeout
        self._ops: list[list[Any]] = []
        self._held: set[tuple[str, str]] = set()
        """(key, reservation id) of the slots this process holds, renewed until they end."""
        self._holds: set[str] = set()
        """Budget reservations this process holds, renewed until settled."""
        self._cooldowns: dict[str, float] = {}
        self._usage: dict[str, dict[str, tuple[int, int]]] = {}
        self._dirty = trio.Event()
        self._lock = trio.Lock()
        self.round_trips = 0
        """Script runs so far (admissions, cooldowns, learning and flushes)."""
        self.run_id: str | None = None
        """The store's run id as this process last saw it (None: not asked yet)."""
        self.lost_at: float | None = None
        """When this process last found the store without its history (None: never)."""
        self.history: Callable[[float], Sequence[SeedWindow]] | None = None
        """This process's own admissions still in their windows at a time: told to the store
        when it has lost its history (None: nothing to tell)."""
        self._seed_due = False
        self._fresh = new_run_id()
        """The run id this process proposes if the store has none (never the known one)."""

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
            try:
                return await self._send(request, ops, now)
            except _ScriptFailed as failed:
                if not ops or request["op"] == "flush":
                    if ops:
                        log.error("quota script failed on queued work, now dropped: %s", failed)
                    raise _bug(request, failed) from None
            except BaseException:
                self._ops = ops + self._ops
                raise
            # The request or the work queued before it failed: apply the work alone (it is
            # idempotent, so what the failed run applied is applied once), then ask again.
            try:
                await self._send({"op": "flush"}, ops, now)
            except _ScriptFailed as failed:
                log.error("quota script failed on queued work, now dropped: %s", failed)
            except BaseException:
                self._ops = ops + self._ops
                raise
            try:
                return await self._send(request, [], now)
            except _ScriptFailed as failed:
                raise _bug(request, failed) from None

    async def _send(self, request: dict[str, Any], ops: list[Any], now: float) -> list[Any]:
        """One script run; a failure is StoreUnavailable (an outage) or _ScriptFailed."""
        from coredis.exceptions import RedisError

        request["ops"] = ops
        request["now"] = now if self._caller_clock else -1.0
        try:
            with trio.fail_after(self.timeout):
                reply = await self._script(keys=[self._base], args=[orjson.dumps(request)])
        except RedisError as exc:
            if _script_failed(exc):
                raise _ScriptFailed(str(exc)) from None
            reason = str(exc) or type(exc).__name__
            raise StoreUnavailable(f"the quota store does not answer: {reason}") from None
        except (OSError, trio.TooSlowError) as exc:
            reason = str(exc) or type(exc).__name__
            raise StoreUnavailable(f"the quota store does not answer: {reason}") from None
        self.round_trips += 1
        return list(reply)

    def _queue(self, op: list[Any]) -> None:
        self._ops.append(op)
        self._dirty.set()

    async def flush(self, now: float = 0.0) -> None:
        """Send the queued settlements now."""
        if self._ops:
            await self._run({"op": "flush"}, now)

    async def sweep(self, now: float = 0.0) -> float | None:
        """Drop every lapsed slot and charge every lapsed budget hold in the store (any
        process's: one killed with ``kill -9`` never ends its own), sending the queued work
        with it. Returns the seconds until the next hold lapses (None: none is held)."""
        reply = await self._run({"op": "sweep"}, now)
        server_now, first = float(reply[1]), float(reply[2])
        return None if first < 0 else max(0.0, first - server_now)

    async def maintain(self, flush_interval: float = 0.02) -> None:
        """Flush queued work, renew held slots and budget holds, and sweep lapsed holds of
        every process (at the moment the next one lapses, and at least every third of a
        lapse), until cancelled. So a killed process's holds go on time without any admission
        having to look.

        Errors are logged, not raised: the queued work stays queued and is sent again.
        """
        renew_at = trio.current_time() + self.lapse / 3
        sweep_at = trio.current_time()
        check_at = trio.current_time() + RUN_CHECK
        while True:
            with trio.move_on_at(min(renew_at, sweep_at, check_at)):
                await self._dirty.wait()
                await trio.sleep(flush_interval)  # let a burst of settlements gather
            self._dirty = trio.Event()
            try:
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
                else:
                    await self.flush(now)
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
        request: dict[str, Any] = {
            "op": "reserve",
            "q": key,
            "specs": [[s.dimension, _period(s.period), s.limit] for s in specs],
            "cost": [cost.requests, cost.input_tokens, cost.output_tokens],
            "caps": [-1 if c is None else c for c in caps],
            "lapse": self.lapse,
            "poll": self.poll,
        }
        if budget is not None:
            request["budget"] = [
                budget.hold,
                budget.micros,
                budget.tokens,
                [
                    [a, -1 if m is None else m, -1 if t is None else t]
                    for a, m, t in budget.accounts
                ],
            ]
        reply = await self._admit(request, now)
        kind = reply[0]
        if kind == "ok":
            ref = str(reply[2])
            slots = tuple(
                (dimension, period)
                for slot in str(reply[3]).split(",")
                if slot
                for dimension, period in [slot.split(":", 1)]
            )
            if caps != (None, None):
                self._held.add((key, ref))
            if budget is not None:
                self._holds.add(budget.hold)
            return Reservation(key, cost, (), ref=ref, slots=slots)
        if kind == "wait":
            wait = float(reply[2])
            if reply[3] == "cooldown":
                self._note_cooldown(key, now, float(reply[1]), float(reply[4]))
            return wait
        if kind == "large":
            dimension: Dimension = reply[2]
            return TooLarge(dimension, int(reply[3]), int(reply[4]), float(reply[5]))
        if kind == "budget":
            return BudgetRefused(str(reply[2]), reply[3], int(reply[4]))
        raise AssertionError(f"unexpected reply from the quota script: {reply!r}")

    async def _admit(self, request: dict[str, Any], now: float) -> list[Any]:
        """Run an admission under the run id this process knows.

        Raises:
            HistoryLost: the store's run id changed since this process last saw it (nothing
                was admitted; the next admission runs under the new id).
        """
        if self._seed_due:
            await self._seed(now)
        request["fresh"] = self._fresh
        request["run"] = self.run_id or self._fresh
        reply = await self._run(request, now)
        if reply[0] == "ok" and len(reply) > 4:
            self.run_id = str(reply[4])  # (a script of an older version sends none)
        if self.run_id == self._fresh:
            self._fresh = new_run_id()  # the next proposal must differ from the known id
        if reply[0] != "epoch":
            return reply
        seen = str(reply[2])
        if history_lost(self.run_id, seen):
            await self._history_lost(seen, now)
            raise HistoryLost(seen)
        self.run_id = seen
        return await self._admit(request, now)  # the first answer only taught it the id

    async def check_run(self, now: float = 0.0) -> None:
        """Look at the store's run id (sending the queued work with it); on a loss, tell the
        store this process's part of its history (see :meth:`_history_lost`)."""
        reply = await self._run({"op": "flush", "fresh": self._fresh}, now)
        seen = str(reply[2])
        if seen == self._fresh:
            self._fresh = new_run_id()
        if history_lost(self.run_id, seen):
            await self._history_lost(seen, now)
        else:
            self.run_id = seen
            if self._seed_due:
                await self._seed(now)

    async def _history_lost(self, seen: str, now: float) -> None:
        """The store lost its history: adopt its new run id, note when, and tell it what this
        process admitted in the last window (again on the next round trip if this fails)."""
        self.run_id = seen
        self.lost_at = now
        self._seed_due = True
        log.warning(
            "quota store came back without its history (its run id changed): telling it this"
            " process's admissions of the last window; admissions at a local share for a window"
        )
        await self._seed(now)

    async def _seed(self, now: float) -> None:
        history = self.history(now) if self.history is not None else ()
        if history:
            windows = [
                [key, dimension, _period(period), [[now - at, n, ref] for at, n, ref in counted]]
                for key, dimension, period, counted in history
            ]
            await self._run({"op": "seed", "windows": windows}, now)
        self._seed_due = False

    def _note_cooldown(self, key: str, now: float, server_now: float, until: float) -> None:
        self._cooldowns[key] = until if self._caller_clock else now + (until - server_now)

    async def settle(self, reservation: Reservation, actual: Cost) -> None:
        if not reservation.ref:
            return
        amounts = [[d, p, _amount(actual, d)] for d, p in reservation.slots]
        self._queue(["s", reservation.key, reservation.ref, amounts])

    async def redate(self, reservation: Reservation, now: float) -> None:
        if not reservation.ref:
            return
        at = now if self._caller_clock else -1.0
        slots = [[d, p] for d, p in reservation.slots]
        self._queue(["r", reservation.key, reservation.ref, slots, at])

    async def end(self, reservation: Reservation) -> None:
        """The attempt is over: free its shared slots."""
        if not reservation.ref:
            return
        held = (reservation.key, reservation.ref)
        if held in self._held:
            self._held.discard(held)
            self._queue(["e", reservation.key, reservation.ref])

    async def settle_budget(self, hold: str, micros: int | None, tokens: int) -> None:
        """Charge a budget reservation what its attempt spent (None: all of it)."""
        if hold in self._holds:
            self._holds.discard(hold)
            self._queue(["b", hold, -1 if micros is None else micros, tokens])

    async def cooldown(self, key: str, seconds: float, now: float) -> float:
        reply = await self._run({"op": "cooldown", "q": key, "seconds": seconds}, now)
        server_now, until = float(reply[1]), float(reply[2])
        self._note_cooldown(key, now, server_now, until)
        return until - server_now

    async def cooldown_left(self, key: str, now: float) -> float:
        """What this process knows of the key's cooldown (no round trip): the admission
        script checks the shared cooldown itself and answers with a wait."""
        return max(0.0, self._cooldowns.get(key, -math.inf) - now)

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
            "specs": [[s.dimension, _period(s.period), s.limit] for s in specs],
            "learned": items,
            "per": _LEARNED_PERIOD,
            "keep": LEARNED_FOR,
        }
        await self._run(request, now)

    def ledger_mirror(self) -> RedisLedgerStore:
        """The ledger's aggregates in the same Redis, under the same prefix."""
        from .._ledger.redis import RedisLedgerStore

        return RedisLedgerStore(self._client, self.prefix)

    def usage(self, key: str, now: float) -> dict[str, tuple[int, int]]:
        """Not known without a round trip: statistics of a shared store show no windows."""
        return {}

    def forget(self, key: str, specs: Sequence[WindowSpec], now: float) -> bool:
        """Drop this process's note of the key's cooldown once it is over (Redis expires the
        key's own state)."""
        if self._cooldowns.get(key, -math.inf) > now:
            return False
        self._cooldowns.pop(key, None)
        self._usage.pop(key, None)
        return True


class _ScriptFailed(Exception):
    """The script ran and failed (its message says where)."""


def _bug(request: dict[str, Any], failed: _ScriptFailed) -> InternalError:
    log.error("quota script failed on %r: %s", request.get("op"), failed)
    return InternalError(f"the quota script failed: {failed}")


def _script_failed(exc: Exception) -> bool:
    """Whether Redis ran the script and the script itself failed: a Lua error in its code
    (``user_script:<line>: ...``) or a command on a key of the wrong type. Anything else (no
    connection, loading, read-only replica, out of memory, cluster down) is an outage."""
    from coredis.exceptions import ResponseError, WrongTypeError

    if isinstance(exc, WrongTypeError):
        return True
    return isinstance(exc, ResponseError) and str(exc).startswith("user_script:")


async def _ping(client: Any, url: str) -> None:
    from coredis.exceptions import RedisError

    try:
        with trio.fail_after(5):
            await client.ping()
    except (RedisError, OSError, trio.TooSlowError) as exc:
        raise ConfigError(f"cannot reach the quota store at {_safe(url)}: {exc}") from None


def _safe(url: str) -> str:
    """The URL without its password."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.rpartition('@')[2]}"


@asynccontextmanager
async def open_redis_store(
    url: str,
    *,
    prefix: str = "sluice",
    clock: Literal["server", "caller"] = "server",
    lapse: float = 30.0,
    flush_interval: float = 0.02,
) -> AsyncIterator[RedisQuotaStore]:
    """Connect to ``url`` (``redis://host:port/db``), yield the store, and keep its queued
    work flowing; on exit send what is still queued (briefly) and disconnect.

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
        raise ConfigError(f"store URL {_safe(url)!r}: {exc}") from None
    try:
        async with client:
            await _ping(client, url)
            store = RedisQuotaStore(client, prefix=prefix, clock=clock, lapse=lapse)
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
        leaf = _sole(group)
        if leaf is None:
            raise
        raise leaf from None


def _sole(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception in ``group`` that is not a cancellation, if there is exactly one."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        elif not isinstance(exc, trio.Cancelled):
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 else None
