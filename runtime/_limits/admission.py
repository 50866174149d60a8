"""Whether a quota key's next waiter is admitted, refused or left to wait. Pure: no I/O, no trio.

The RateLimiter (:mod:`sluice.actors._rate_limiter`) owns one :class:`QuotaKey` per key and
carries out what these functions decide: it asks the quota store, sends the answers, keeps
the tickets and the timers. The functions read and update the key's state given the store's
answer, the clock and (for the spread after a cooldown) an injected rng, so every decision is
tested synchronously and exactly (``tests/test_admission.py``), like
:mod:`sluice._retry_policy`.

One look at a key goes, in order:

1. :func:`exhaustion`: a key whose quota is exhausted refuses every waiter until it resets.
2. The store's cooldown (``QuotaStore.cooldown_left``), noted by :func:`note_cooldown`:
   while it runs nobody is admitted, and the waiters that will not wait it out leave
   (:func:`leave_cooling`).
3. :func:`arm_spread`: the waiters of a cooldown that just ended get their turns, spread
   over a short time so they do not all reach the provider at the instant it ends.
4. For each head waiter: :func:`blocked` (its turn in the spread, a pending slot, an
   open-stream slot); the budget hold (the RateLimiter's ``BudgetBook``); the store's
   ``reserve``; then :func:`decide` over its answer.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeAlias, TypeVar

import attrs

from .._config import RateLimitConfig
from .._errors import CallError, InternalError, StoreUnavailable
from .._record import Record, Value
from .queue import WaitQueues
from .store import Reservation

if TYPE_CHECKING:
    import random

    from .._errors import RateLimited
    from .adaptive import AdaptiveLimit  # noqa: TC004 (only a type: loaded by an adaptive key)
    from .cost import Cost
    from .not_admitted import Refuse as Refuse
    from .not_admitted import StoreDown as StoreDown
    from .not_admitted import Wait as Wait
    from .queue import Priority
    from .store_rare import (
        BudgetRefused,
        TooLarge,
        WindowSpec,  # noqa: TC004 (only a type: loaded by a limit's windows)
    )

__all__ = [
    "STORE_GRACE",
    "Admit",
    "QuotaKey",
    "StoreAnswer",
    "arm_spread",
    "at_rest",
    "blocked",
    "cooled",
    "cooling_error",
    "decide",
    "exhaustion",
    "exhausts",
    "leave_cooling",
    "new_key",
    "note_cooldown",
    "relimit",
]

STORE_GRACE = 0.5
"""A waiter whose store wait ends within this of the next look at the store is refused now:
the refusal (naming the store) must reach it before its own deadline ends the wait, on a busy
machine too, where the look may come late."""


def __getattr__(name: str) -> Any:
    # What a look decides when it admits nobody loads with the first such look (see
    # sluice._limits.not_admitted); the RateLimiter matches on the names here.
    if name in ("Refuse", "StoreDown", "Wait"):
        from . import not_admitted

        return getattr(not_admitted, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Waiter(Protocol):
    """What the decisions read of a queued ask (``sluice._mail.Acquire``)."""

    @property
    def priority(self) -> Priority: ...

    @property
    def enqueued_at(self) -> float: ...

    @property
    def cost(self) -> Cost: ...

    @property
    def fail_on_cooldown(self) -> bool: ...

    @property
    def wait_for_store(self) -> float | None: ...


W = TypeVar("W", bound=Waiter)


@attrs.define(eq=False, repr=False)
class QuotaKey(Record, Generic[W]):
    """One quota key's admission state. Its RateLimiter's task alone changes it."""

    name: str
    limits: RateLimitConfig
    specs: tuple[WindowSpec, ...]
    waiters: WaitQueues[W]
    adaptive: AdaptiveLimit | None
    pending: int = 0
    """Admitted attempts whose first chunk has not come (nor their end)."""
    open_streams: int = 0
    """Admitted attempts not ended."""
    cooldown_end: float = -math.inf
    """When the last pause this process knows of ends (the store holds the pause itself)."""
    cooldown_wait: float = 0.0
    """How long that pause was: a spread after it lasts at most as long."""
    spread_armed: bool = False
    """The waiters get a spread when the pause ends."""
    spread: deque[float] | None = None
    """Admission times after a cooldown, while a spread is under way."""
    exhausted_until: float = -math.inf
    exhausted_error: CallError | None = None
    wake: float = math.inf
    """When the RateLimiter looks at the key again (inf: at the next message about it)."""
    learn_after: float = -math.inf
    """When the limits in the next reply's headers are read."""
    store_down_since: float | None = None
    """When the shared store stopped answering this key's admissions (None: it answers)."""

    def pending_limit(self) -> int | None:
        if self.adaptive is not None:
            return self.adaptive.current
        return self.limits.max_pending


_SPECS: dict[RateLimitConfig, tuple[WindowSpec, ...]] = {}
"""The window specs of each rate-limit config seen lately: the keys of one provider (one per
model with ``rate_limit.key = "model"``) share one tuple instead of a copy each."""
_SPECS_KEPT = 64


def _specs(limits: RateLimitConfig) -> tuple[WindowSpec, ...]:
    specs = _SPECS.get(limits)
    if specs is None:
        if len(_SPECS) >= _SPECS_KEPT:
            _SPECS.clear()  # configs only change on reload: a few at a time
        specs = _SPECS[limits] = _window_specs(limits)
    return specs


def _window_specs(limits: RateLimitConfig) -> tuple[WindowSpec, ...]:
    windows = limits.window_limits()
    if not windows:
        return ()  # no window: nothing to build, and no class to load for it
    from .store_rare import WindowSpec  # loaded by the first limit with windows

    return tuple(WindowSpec(w.dimension, w.limit, w.per, w.counted_from == "send") for w in windows)


def new_key(name: str, limits: RateLimitConfig) -> QuotaKey[W]:
    adaptive = None
    if limits.adaptive and limits.max_pending is not None:
        from .adaptive import AdaptiveLimit  # loaded by the first adaptive key

        adaptive = AdaptiveLimit(limits.max_pending)
    return QuotaKey(name, limits, _specs(limits), WaitQueues(limits.aging), adaptive)


def relimit(key: QuotaKey[W], limits: RateLimitConfig) -> None:
    """Give ``key`` new limits; what it holds (slots, windows' use, cooldown) stays.

    The next admission checks the new window limits against what the windows already count
    (the store applies the specs it is given on every reserve)."""
    fresh: QuotaKey[W] = new_key(key.name, limits)
    if (
        fresh.adaptive is None
        or key.adaptive is None
        or limits.max_pending != key.limits.max_pending
    ):
        key.adaptive = fresh.adaptive  # a learned adaptive limit stays if the cap did
    key.limits, key.specs = limits, fresh.specs


def at_rest(key: QuotaKey[W], now: float) -> bool:
    """Whether ``key``'s own state says nothing a fresh key would not: no waiter, no ticket out,
    no cooldown, exhaustion, spread or pending wake-up ahead, the adaptive limit at its cap
    (then its other fields are only read after a congestion signal, which resets them). The
    store's side (windows, learned limits) is the store's to judge (``QuotaStore.forget``)."""
    if key.waiters or key.pending or key.open_streams:
        return False
    if key.cooldown_end > now or key.learn_after > now:
        return False
    if key.exhausted_error is not None and key.exhausted_until > now:
        return False
    if key.spread and key.spread[-1] > now:
        return False
    if key.spread_armed and now < key.cooldown_end + min(
        key.limits.cooldown_jitter, key.cooldown_wait
    ):
        return False  # a spread still to start would place admissions after now
    if now < key.wake < math.inf:
        return False
    adaptive = key.adaptive
    return adaptive is None or adaptive.limit >= adaptive.cap


# -- before the store is asked -----------------------------------------------------------------


def exhaustion(key: QuotaKey[W], now: float) -> CallError | None:
    """The error every waiter of ``key`` gets now, its quota being exhausted; None when it is
    not (an exhaustion that has run out is forgotten here)."""
    if key.exhausted_error is None:
        return None
    if now < key.exhausted_until:
        return key.exhausted_error
    key.exhausted_error = None
    return None


def note_cooldown(key: QuotaKey[W], left: float, now: float) -> bool:
    """The store says ``key`` pauses ``left`` more seconds: note when the pause ends. True while
    it pauses."""
    if left <= 0:
        return False
    key.cooldown_end = max(key.cooldown_end, now + left)
    return True


def cooling_error(key: QuotaKey[W], now: float) -> RateLimited:
    """The refusal of an ask that will not wait out ``key``'s cooldown."""
    from .._errors import RateLimited  # loaded by a 429

    left = key.cooldown_end - now
    return RateLimited(
        f"the provider answered 429 for calls under {key.name!r}; it asked for a pause that"
        f" ends in {left:.1f} s",
        status=429,
        retry_after=left,
    )


def leave_cooling(key: QuotaKey[W], now: float) -> tuple[list[W], RateLimited]:
    """Take the waiters that will not wait out ``key``'s cooldown (``fail_on_cooldown``) out of
    its queue, with the refusal they get: they were queued before this process learned of the
    pause (another process's 429), or before it began."""
    return key.waiters.drop(lambda waiter: waiter.fail_on_cooldown), cooling_error(key, now)


def arm_spread(key: QuotaKey[W], now: float, rng: random.Random) -> None:
    """After a cooldown: give each waiter a turn at a random time within the first
    ``min(cooldown_jitter, pause)`` seconds from the pause's end, so they do not all reach
    the provider at the instant it ends (a short Retry-After must not hold the queue for
    longer than the pause itself). Does nothing unless a 429 armed it."""
    if not key.spread_armed:
        return
    key.spread_armed = False
    jitter = min(key.limits.cooldown_jitter, key.cooldown_wait)
    if jitter > 0:
        start = min(now, key.cooldown_end)
        offsets = sorted(rng.uniform(0.0, jitter) for _ in range(len(key.waiters)))
        key.spread = deque(start + offset for offset in offsets)


def blocked(key: QuotaKey[W], now: float) -> float | None:
    """When to look at ``key`` again because its head waiter may not be asked about yet: its
    turn in the spread is later, or every pending or open-stream slot is taken (inf: only a
    message frees one). None: ask the store now."""
    if key.spread and key.spread[0] > now:
        return key.spread[0]
    limit = key.pending_limit()
    if limit is not None and key.pending >= limit:
        return math.inf
    cap = key.limits.max_open_streams
    if cap is not None and key.open_streams >= cap:
        return math.inf
    return None


# -- the store's answer --------------------------------------------------------------------------

StoreAnswer: TypeAlias = (
    "Reservation | TooLarge | BudgetRefused | float | StoreUnavailable | InternalError"
)
"""What asking the store to reserve came to: what ``QuotaStore.reserve`` returned (a float is
the seconds to wait), or the error it raised. Text, so that the rarer answers' classes
(:mod:`sluice._limits.store_rare`) load only when one is met."""


@attrs.frozen(eq=False, repr=False)
class Admit(Value, Generic[W]):
    """Admit the head waiter (taken out of the queue) with ``reservation``."""

    waiter: W
    reservation: Reservation


def decide(
    key: QuotaKey[W], answer: StoreAnswer, now: float
) -> Admit[W] | Refuse[W] | Wait | StoreDown[W]:
    """What the store's ``answer`` for ``key``'s head waiter means.

    A reservation admits it; a cost that can never fit, a shared budget that can never cover
    it, or a store bug refuses it; a wait keeps everyone queued until the windows have room;
    a store that does not answer refuses the waiters that will not wait for it (or whose wait
    ends before the store is asked again) and keeps the others (see :func:`_store_down`)."""
    if isinstance(answer, StoreUnavailable):
        from .not_admitted import store_down  # a shared store that stopped answering

        return store_down(key, answer, now, STORE_GRACE)
    key.store_down_since = None
    if isinstance(answer, float | int):
        from .not_admitted import Wait  # the windows have no room for it yet

        return Wait(now + answer)
    waiter = key.waiters.peek(now)
    assert waiter is not None  # the answer is about the head waiter
    key.waiters.pop(waiter)
    if isinstance(answer, Reservation):
        if key.spread:
            key.spread.popleft()
        return Admit(waiter, answer)
    from .not_admitted import refusal  # it can never be admitted

    return refusal(waiter, answer)


# -- after a 429 ---------------------------------------------------------------------------------


def exhausts(key: QuotaKey[W], wait: float, quota: bool, now: float) -> bool:
    """A 429 asked ``key`` to wait ``wait`` seconds (``quota``: the provider says the account's
    quota is exhausted). True when that exhausts the key: a quota said so, or the wait is
    beyond ``max_cooldown``; every call under it then fails until it resets (see
    :func:`exhaustion`), instead of waiting. False: the key pauses (see :func:`cooled`)."""
    limits = key.limits
    if not quota and wait <= limits.max_cooldown:
        return False
    key.exhausted_until = now + min(wait, limits.max_cooldown)
    reason = (
        "the provider says the account's quota is exhausted"
        if quota
        else f"the provider asks for a {wait:g} s wait, beyond max_cooldown"
        f" ({limits.max_cooldown:g} s)"
    )
    from .._errors import RateLimited  # loaded by a 429

    key.exhausted_error = RateLimited(
        f"{reason}; calls under {key.name!r} fail until it resets",
        status=429,
        retry_after=wait,
        quota="quota",
    )
    return True


def cooled(key: QuotaKey[W], left: float, admitted_at: float, now: float) -> None:
    """The store paused ``key`` for ``left`` more seconds after a 429 to an attempt admitted at
    ``admitted_at``: arm the spread for its end (unless one is under way: a spread does not
    start again), and halve and restart the adaptive pending limit."""
    key.cooldown_end = max(key.cooldown_end, now + left)
    if not key.spread:
        key.spread_armed = True
        key.cooldown_wait = left
    if key.adaptive is not None:
        key.adaptive.on_congestion(admitted_at, now)
        key.adaptive.on_cooldown()
