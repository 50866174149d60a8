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

Only the way of a success is defined here: ``READY``, :class:`Go`, :class:`Won` (and the
consumer leaving). What a failure, a refusal, a lost attempt or a wait that ran out is told and
decides lives in :mod:`sluice._call_setbacks`, which loads with a call's first setback; its
names are served from here too (``__getattr__``), so ``sluice._call_step.Retry`` is the class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

import attrs

from ._errors import CallError
from ._messages import ChatResult
from ._record import Record
from ._tools.correct import NO_CORRECTIONS, Corrections

if TYPE_CHECKING:
    import random
    from collections.abc import Callable

    # The setbacks' classes load with a call's first setback (see __getattr__ below).
    from ._call_setbacks import LOST_ATTEMPTS_MAX as LOST_ATTEMPTS_MAX
    from ._call_setbacks import Correct as Correct
    from ._call_setbacks import Failure as Failure
    from ._call_setbacks import GiveUp as GiveUp
    from ._call_setbacks import Lost as Lost
    from ._call_setbacks import Misfired as Misfired
    from ._call_setbacks import MoveOn as MoveOn
    from ._call_setbacks import Pause as Pause
    from ._call_setbacks import Refused as Refused
    from ._call_setbacks import Resubmit as Resubmit
    from ._call_setbacks import Retry as Retry
    from ._call_setbacks import Setback
    from ._call_setbacks import WaitedOut as WaitedOut
    from ._config import RetryConfig
    from ._embeddings import EmbedResult  # noqa: TC004 (only a type: a chat never loads it)
    from ._retry_policy import CallState  # the policy loads with a first failure

__all__ = [
    "GO",
    "GO_SPENDING",
    "LEAVE",
    "LEFT",
    "READY",
    "first_tries",
    "Go",
    "Leave",
    "Left",
    "Ready",
    "Tries",
    "Won",
    "step",
]


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
class Won(Record):
    """The attempt's reply, finalized. Also the decision that follows it: finish with it
    (one object on the path of every successful call, not two)."""

    result: ChatResult | EmbedResult


READY = Ready()
LEFT = Left()


# ---- what the loop does next --------------------------------------------------------------


@attrs.frozen(eq=False, repr=False)
class Go(Record):
    """Make an attempt (ask the breaker, then the RateLimiter); first spend a retry from the
    budget when ``spend_retry`` (it has room: ``free_in`` said 0 at this ``now``)."""

    spend_retry: bool


@attrs.frozen(eq=False, repr=False)
class Leave(Record):
    """The consumer left: end the call without a word."""


GO = Go(spend_retry=False)
GO_SPENDING = Go(spend_retry=True)
LEAVE = Leave()

if TYPE_CHECKING:  # aliases for annotations: they name the setbacks' classes
    Seen: TypeAlias = Ready | Left | Won | Setback
    Ending: TypeAlias = Won | Leave | MoveOn | GiveUp
    """Decisions that end the call's time on its model."""
    Decision: TypeAlias = Go | Pause | Retry | Correct | Resubmit | Ending

_SETBACKS = frozenset(
    (
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
        "WaitedOut",
    )
)


def __getattr__(name: str) -> Any:
    # What only a setback needs loads with the first one (sluice._call_setbacks).
    if name in _SETBACKS:
        from . import _call_setbacks

        return getattr(_call_setbacks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    from ._call_setbacks import after_setback  # loaded by a call's first setback

    return after_setback(tries, seen, now, state, free_in, policy, rng)


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
        from ._call_setbacks import leave  # a waiting call's wait ran out after a setback

        return leave(tries, last_error, 0, policy)
    retrying = tries.retrying
    if retrying is None:
        return GO
    free = free_in(now)
    if free <= 0:
        return GO_SPENDING
    from ._call_setbacks import wait_for_budget  # not on the way of a success

    return wait_for_budget(tries, retrying, free, now, state, policy)
