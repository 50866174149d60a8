"""What a call does next, attempt by attempt and model by model. Pure.

The Supervisor's task for a call is a loop: it tells :func:`step` what it has just seen (it is
about to try: :data:`READY`; the consumer left: :data:`LEFT`; the breaker refused; an attempt's
outcome) and carries out the decision it gets back. Everything that decides lives here: retry
after a backoff, correct a tool call, resubmit an attempt its actor lost, pause while a breaker
or the retry budget blocks the call, fail over to the group's next deployment, fall back to the
next model, finish, or fail. The loop keeps only what it must do itself: admission, the attempt,
the events it emits, the pauses.

:func:`step` reads nothing but its arguments: the state of the call's tries on its current model
(:class:`Tries`, a value it returns changed), what was seen, the clock, and three read-only
views of the caller: the call's :class:`~sluice._retry_policy.CallState` (a function, since
only the slow paths need it and it costs a few objects to build), the retry budget's
``free_in``, and the injected random draw. So every decision is tested synchronously and
exactly (``tests/test_call_step.py``), like :mod:`sluice._retry_policy`, whose functions it
applies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import attrs

from ._errors import CallError, ToolCallError
from ._messages import ChatResult
from ._record import Record
from ._tools.correct import NO_CORRECTIONS, Corrections

if TYPE_CHECKING:
    import random
    from collections.abc import Callable

    from ._config import RetryConfig
    from ._embeddings import EmbedResult  # noqa: TC004 (only a type: a chat never loads it)
    from ._retry_policy import CallState  # the policy loads with a first failure

    # Only a type here: a call without tools never loads the tool layer's preparation code.
    from ._tools.preparation import Prepared  # noqa: TC004

__all__ = [
    "GO",
    "GO_SPENDING",
    "LEAVE",
    "LEFT",
    "LOST_ATTEMPTS_MAX",
    "READY",
    "Correct",
    "Decision",
    "Ending",
    "Failure",
    "first_tries",
    "GiveUp",
    "Go",
    "Leave",
    "Left",
    "Lost",
    "Misfired",
    "MoveOn",
    "Pause",
    "Ready",
    "Refused",
    "Resubmit",
    "Retry",
    "Seen",
    "Tries",
    "WaitedOut",
    "Won",
    "step",
]

LOST_ATTEMPTS_MAX = 3
"""Attempts a call may lose to crashing actors on one model before it fails."""


@attrs.frozen(eq=False, repr=False)
class Tries(Record):
    """The state of a call's tries on its current model; a value (made afresh per model)."""

    waits: bool
    """Open breakers and a spent retry budget are waited out here: a ``wait``-mode call on the
    last model of its chain (earlier, a blocked model falls back instead)."""
    fails_over: bool
    """Another deployment of the call's group follows: a retryable failure moves the call there
    at once (and the attempt does not wait out a cooldown, or a group's hedge time)."""
    falls_back: bool
    """Another model follows in the chain: a failure in ``RetryConfig.fallback_on`` moves on."""
    lost: int = 0
    """Attempts lost to a crashing actor on this model."""
    retrying: CallError | None = None
    """A retry decided but not yet paid for: the next attempt first spends the retry budget
    (:class:`Go`); every decision after that attempt clears it."""
    last_error: CallError | None = None
    """The last failure: what a waiting call ends with when its wait runs out."""
    corrections: Corrections = NO_CORRECTIONS
    """Tool-call corrections made on this model (each fallback model starts over)."""


_FIRST = {
    (waits, fails_over, falls_back): Tries(waits, fails_over, falls_back)
    for waits in (False, True)
    for fails_over in (False, True)
    for falls_back in (False, True)
}


def first_tries(waits: bool, fails_over: bool, falls_back: bool) -> Tries:
    """The state on a model before its first attempt: one of eight shared values (a
    :class:`Tries` is never changed), so a call's first model costs no new object."""
    return _FIRST[waits, fails_over, falls_back]


# ---- what the loop has seen ---------------------------------------------------------------


@attrs.frozen(eq=False, repr=False)
class Ready(Record):
    """The call is about to try (its first attempt on the model, or after a pause)."""


@attrs.frozen(eq=False, repr=False)
class Left(Record):
    """The consumer left: before an attempt, or as its end."""


@attrs.frozen(eq=False, repr=False)
class Refused(Record):
    """The breaker refused the attempt: ``error`` (a ``CircuitOpen``) says why; it lets a probe
    through in ``retry_in`` seconds (0: one is testing it now)."""

    error: CallError
    retry_in: float


@attrs.frozen(eq=False, repr=False)
class Won(Record):
    """The attempt's reply, finalized. Also the decision that follows it: finish with it
    (one object on the path of every successful call, not two)."""

    result: ChatResult | EmbedResult


@attrs.frozen(eq=False, repr=False)
class Failure(Record):
    """The attempt failed (or admission refused it) after ``delivered`` deltas reached the
    consumer."""

    error: CallError
    delivered: int


@attrs.frozen(eq=False, repr=False)
class Misfired(Record):
    """The reply broke the call's tool contract (``prepared`` says how it was prepared)."""

    error: ToolCallError
    prepared: Prepared
    delivered: int


@attrs.frozen(eq=False, repr=False)
class Lost(Record):
    """The attempt's actor died without an answer, after ``delivered`` deltas."""

    error: CallError
    delivered: int


@attrs.frozen(eq=False, repr=False)
class WaitedOut(Record):
    """A waiting call reached its ``max_wait`` while it waited for admission; ``error`` says so
    (it ends with its last failure instead, when it had one)."""

    error: CallError


READY = Ready()
LEFT = Left()

Seen: TypeAlias = Ready | Left | Refused | Won | Failure | Misfired | Lost | WaitedOut


# ---- what the loop does next --------------------------------------------------------------


@attrs.frozen(eq=False, repr=False)
class Go(Record):
    """Make an attempt (ask the breaker, then the RateLimiter); first spend a retry from the
    budget when ``spend_retry`` (it has room: ``free_in`` said 0 at this ``now``)."""

    spend_retry: bool


@attrs.frozen(eq=False, repr=False)
class Pause(Record):
    """Something blocks the call: wait ``delay`` seconds, then it is :data:`READY` again."""

    delay: float
    tries: Tries


@attrs.frozen(eq=False, repr=False)
class Retry(Record):
    """Tell the consumer (``StreamReset`` first when ``reset``) and retry after ``delay``
    seconds; spend a retry from the budget now when ``spend_retry`` (else ``tries.retrying``
    says the next attempt pays for it)."""

    delay: float
    error: CallError
    reset: bool
    spend_retry: bool
    tries: Tries


@attrs.frozen(eq=False, repr=False)
class Correct(Record):
    """Retry at once with ``tries.corrections``: no backoff, no budget, not a transport
    attempt (``StreamReset`` first when ``reset``)."""

    error: ToolCallError
    reset: bool
    tries: Tries


@attrs.frozen(eq=False, repr=False)
class Resubmit(Record):
    """Send the lost attempt again (``StreamReset`` first when ``reset``)."""

    error: CallError
    reset: bool
    tries: Tries


@attrs.frozen(eq=False, repr=False)
class Leave(Record):
    """The consumer left: end the call without a word."""


@attrs.frozen(eq=False, repr=False)
class MoveOn(Record):
    """Leave this model for the chain's next (``StreamReset`` first when ``reset``):
    ``failover`` when it is the group's next deployment. ``refused``: the breaker refused the
    attempt that was due, which counts as an attempt (``error`` is numbered so)."""

    error: CallError
    reset: bool
    failover: bool
    refused: bool = False


@attrs.frozen(eq=False, repr=False)
class GiveUp(Record):
    """The call fails with ``error``; ``refused`` as for :class:`MoveOn`."""

    error: CallError
    refused: bool = False


GO = Go(spend_retry=False)
GO_SPENDING = Go(spend_retry=True)
LEAVE = Leave()

Ending: TypeAlias = Won | Leave | MoveOn | GiveUp
"""Decisions that end the call's time on its model."""
Decision: TypeAlias = Go | Pause | Retry | Correct | Resubmit | Ending


def step(
    tries: Tries,
    seen: Seen,
    now: float,
    state: Callable[[bool], CallState],
    free_in: Callable[[float], float],
    policy: RetryConfig,
    rng: random.Random,
) -> Decision:
    """What the call does after ``seen``, at ``now``.

    ``state(tries.waits)`` is the call's state for the retry policy (its transport attempts so
    far); ``free_in(now)`` the seconds until the retry budget may spend a retry (0: now).
    Neither is asked on the way of a call that succeeds at its first attempt.
    """
    match seen:
        case Ready():
            return _ready(tries, now, state, free_in, policy)
        case Won():
            return seen  # finish with it
        case Left():
            return LEAVE
        case Failure(error=error, delivered=delivered):
            return _failed(tries, error, delivered, now, state, free_in, policy, rng)
        case Misfired(error=error, prepared=prepared, delivered=delivered):
            call = state(tries.waits)
            if (
                tries.corrections.allows(error, prepared)
                and not (delivered and not call.restart_partial)
                and now < call.deadline
            ):
                added = tries.corrections.add(error, prepared)
                moved = attrs.evolve(tries, retrying=None, corrections=added)
                return Correct(error, delivered > 0, moved)
            return _failed(tries, error, delivered, now, state, free_in, policy, rng)
        case Lost(error=error, delivered=delivered):
            if tries.lost + 1 > LOST_ATTEMPTS_MAX:
                return _leave(tries, error, delivered, policy)
            again = attrs.evolve(tries, lost=tries.lost + 1, retrying=None)
            return Resubmit(error, delivered > 0, again)
        case WaitedOut(error=error):
            last_error = tries.last_error
            return _leave(tries, error if last_error is None else last_error, 0, policy)
        case Refused(error=error, retry_in=retry_in):
            from ._retry_policy import Fail, when_blocked  # not on the way of a success

            jittered = policy.wait_poll * (0.5 + rng.random()) if retry_in <= 0 else retry_in
            blocked = when_blocked(state(tries.waits), error, jittered, now)
            if isinstance(blocked, Fail):
                counted = attrs.evolve(blocked.error, attempt=blocked.error.attempt + 1)
                return _leave(tries, counted, 0, policy, refused=True)
            return Pause(blocked.delay, attrs.evolve(tries, retrying=None, last_error=error))


def _ready(
    tries: Tries,
    now: float,
    state: Callable[[bool], CallState],
    free_in: Callable[[float], float],
    policy: RetryConfig,
) -> Decision:
    """Before an attempt: a waiting call whose wait ran out ends with its last failure; a
    retry must first find room in the budget, or wait for it (a waiting call) or fail."""
    last_error = tries.last_error
    if tries.waits and last_error is not None and now >= state(True).wait_until:
        return _leave(tries, last_error, 0, policy)
    retrying = tries.retrying
    if retrying is None:
        return GO
    free = free_in(now)
    if free <= 0:
        return GO_SPENDING
    from ._retry_policy import Fail, when_blocked  # not on the way of a success

    blocked = when_blocked(state(tries.waits), retrying, free, now)
    if isinstance(blocked, Fail):
        return _leave(tries, blocked.error, 0, policy)
    return Pause(blocked.delay, tries)


def _failed(
    tries: Tries,
    error: CallError,
    delivered: int,
    now: float,
    state: Callable[[bool], CallState],
    free_in: Callable[[float], float],
    policy: RetryConfig,
    rng: random.Random,
) -> Decision:
    """After a failed attempt: fail over at once when another deployment follows and the
    error is retryable; else the retry policy's backoff, paid from the retry budget now, or
    after a longer wait for it (a waiting call), or the model's end."""
    if tries.fails_over and error.retryable:
        return _leave(tries, error, delivered, policy)
    from ._retry_policy import Fail, after_failure, when_blocked  # loaded by a first failure

    tries = attrs.evolve(tries, retrying=None, last_error=error)
    call = state(tries.waits)
    decision = after_failure(call, error, delivered, now, policy, rng)
    if isinstance(decision, Fail):
        return _leave(tries, decision.error, delivered, policy)
    free = free_in(now)
    if free <= 0:
        return Retry(decision.delay, error, delivered > 0, True, tries)
    blocked = when_blocked(call, error, free, now)
    if isinstance(blocked, Fail):
        return _leave(tries, blocked.error, delivered, policy)
    delay = max(decision.delay, blocked.delay)
    return Retry(delay, error, delivered > 0, False, attrs.evolve(tries, retrying=error))


def _leave(
    tries: Tries, error: CallError, delivered: int, policy: RetryConfig, refused: bool = False
) -> MoveOn | GiveUp:
    """The model is done with ``error``: fail over to the group's next deployment (any
    retryable error, or one in ``fallback_on``), fall back to the chain's next model (an error
    in ``fallback_on``), or fail."""
    named = error.kind in policy.fallback_on
    if (tries.fails_over and (error.retryable or named)) or (tries.falls_back and named):
        return MoveOn(error, delivered > 0, tries.fails_over, refused)
    return GiveUp(error, refused)
