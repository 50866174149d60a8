"""What a call does after a setback: the part of :func:`sluice._call_step.step` that only a
failed attempt, a refusal, a lost attempt or a wait that ran out reaches. Pure.

A call that succeeds at its first attempt is told :data:`~sluice._call_step.READY`, goes and
wins; it never needs what is here. So :mod:`sluice._call_step` loads this module with a call's
first setback (as it loads the retry policy), and a program whose calls succeed never defines
these eleven classes. The Supervisor names them through :mod:`sluice._call_step`, whose
``__getattr__`` hands them over from here; ``tests/test_call_step.py`` tests them with the step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import attrs

from ._errors import CallError, ToolCallError
from ._record import Record

if TYPE_CHECKING:
    import random
    from collections.abc import Callable

    # Only a type here: sluice._call_step loads this module, never the other way.
    from ._call_step import Tries  # noqa: TC004
    from ._config import RetryConfig
    from ._retry_policy import CallState

    # Only a type here: a call without tools never loads the tool layer's preparation code.
    from ._tools.preparation import Prepared  # noqa: TC004

__all__ = [
    "LOST_ATTEMPTS_MAX",
    "Correct",
    "Failure",
    "GiveUp",
    "Lost",
    "Misfired",
    "MoveOn",
    "Pause",
    "Refused",
    "Resubmit",
    "Retry",
    "Setback",
    "WaitedOut",
    "after_setback",
    "leave",
    "wait_for_budget",
]

LOST_ATTEMPTS_MAX = 3
"""Attempts a call may lose to crashing actors on one model before it fails."""


# ---- what the loop has seen ---------------------------------------------------------------


@attrs.frozen(eq=False, repr=False)
class Refused(Record):
    """The breaker refused the attempt: ``error`` (a ``CircuitOpen``) says why; it lets a probe
    through in ``retry_in`` seconds (0: one is testing it now)."""

    error: CallError
    retry_in: float


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


Setback: TypeAlias = Refused | Failure | Misfired | Lost | WaitedOut
"""What the loop can see besides ``READY``, ``LEFT`` and a win."""


# ---- what the loop does next --------------------------------------------------------------


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


def after_setback(
    tries: Tries,
    seen: Setback,
    now: float,
    state: Callable[[bool], CallState],
    free_in: Callable[[float], float],
    policy: RetryConfig,
    rng: random.Random,
) -> Pause | Retry | Correct | Resubmit | MoveOn | GiveUp:
    """:func:`~sluice._call_step.step` after a setback (its arguments, as it was given them)."""
    match seen:
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
                return leave(tries, error, delivered, policy)
            again = attrs.evolve(tries, lost=tries.lost + 1, retrying=None)
            return Resubmit(error, delivered > 0, again)
        case WaitedOut(error=error):
            last_error = tries.last_error
            return leave(tries, error if last_error is None else last_error, 0, policy)
        case Refused(error=error, retry_in=retry_in):
            from ._retry_policy import Fail, when_blocked

            jittered = policy.wait_poll * (0.5 + rng.random()) if retry_in <= 0 else retry_in
            blocked = when_blocked(state(tries.waits), error, jittered, now)
            if isinstance(blocked, Fail):
                counted = attrs.evolve(blocked.error, attempt=blocked.error.attempt + 1)
                return leave(tries, counted, 0, policy, refused=True)
            return Pause(blocked.delay, attrs.evolve(tries, retrying=None, last_error=error))


def wait_for_budget(
    tries: Tries,
    retrying: CallError,
    free: float,
    now: float,
    state: Callable[[bool], CallState],
    policy: RetryConfig,
) -> Pause | MoveOn | GiveUp:
    """Before a retry the retry budget has no room for yet (``free`` seconds until it has):
    wait for it (a waiting call, or one whose wait fits), or end the call's time on the model."""
    from ._retry_policy import Fail, when_blocked

    blocked = when_blocked(state(tries.waits), retrying, free, now)
    if isinstance(blocked, Fail):
        return leave(tries, blocked.error, 0, policy)
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
) -> Retry | MoveOn | GiveUp:
    """After a failed attempt: fail over at once when another deployment follows and the
    error is retryable; else the retry policy's backoff, paid from the retry budget now, or
    after a longer wait for it (a waiting call), or the model's end."""
    if tries.fails_over and error.retryable:
        return leave(tries, error, delivered, policy)
    from ._retry_policy import Fail, after_failure, when_blocked  # loaded by a first failure

    tries = attrs.evolve(tries, retrying=None, last_error=error)
    call = state(tries.waits)
    decision = after_failure(call, error, delivered, now, policy, rng)
    if isinstance(decision, Fail):
        return leave(tries, decision.error, delivered, policy)
    free = free_in(now)
    if free <= 0:
        return Retry(decision.delay, error, delivered > 0, True, tries)
    blocked = when_blocked(call, error, free, now)
    if isinstance(blocked, Fail):
        return leave(tries, blocked.error, delivered, policy)
    delay = max(decision.delay, blocked.delay)
    return Retry(delay, error, delivered > 0, False, attrs.evolve(tries, retrying=error))


def leave(
    tries: Tries, error: CallError, delivered: int, policy: RetryConfig, refused: bool = False
) -> MoveOn | GiveUp:
    """The model is done with ``error``: fail over to the group's next deployment (any
    retryable error, or one in ``fallback_on``), fall back to the chain's next model (an error
    in ``fallback_on``), or fail."""
    named = error.kind in policy.fallback_on
    if (tries.fails_over and (error.retryable or named)) or (tries.falls_back and named):
        return MoveOn(error, delivered > 0, tries.fails_over, refused)
    return GiveUp(error, refused)
