"""What a call does next after a failed attempt, or when something keeps it from trying. Pure.

The Supervisor's loop carries out the action these functions return; they read only the call's
state, the outcome, the clock and an injected random draw, so every decision is tested
synchronously and exactly (``tests/test_retry_policy.py``), like :mod:`sluice._backoff`.

Two failure modes (``ChatRequest.failure_mode``):

- ``fail_fast``: an open breaker or a spent retry budget fails the call at once, with the error
  that stopped it.
- ``wait``: they delay the call instead, and its attempts are not counted against a limit
  (unless ``RetryConfig.wait_max_attempts`` sets one): nobody waits on such a call, so a run of
  transient failures or an outage is waited out, the backoff capped at ``max_delay`` and the
  process-wide retry budget capping the rate of retries. It ends only with a result, an error
  retrying cannot fix, or its wait deadline (``max_wait`` after submission, or the total
  deadline, whichever comes first). The error it ends with is the one that kept it waiting.

A call with ``ChatRequest.retry_visible=False`` (a proxy's, whose client retries on its own)
is retried only after a failure its caller cannot see: no connection, or one that dropped
before any reply byte, within ``RetryConfig.hidden_retry_window`` of submission. Anything the
provider answered goes back at once.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import attrs

from ._backoff import retry_delay
from ._errors import (
    CallError,
    CallTimeout,
    ConnectionFailed,
    Overloaded,
    ProtocolError,
    RateLimited,
    ServerError,
    StreamBroken,
)
from ._record import Value

if TYPE_CHECKING:
    import random

    from ._config import RetryConfig
    from ._messages import ChatRequest

__all__ = [
    "CallState",
    "Fail",
    "Retry",
    "Wait",
    "after_failure",
    "blames_backend",
    "call_state",
    "describe",
    "unseen",
    "when_blocked",
]

_BODY_CHARS = 200

# Failures that say the backend is unhealthy, and so count against its circuit breaker.
_BACKEND_FAILURES = (
    ServerError,
    Overloaded,
    CallTimeout,
    ConnectionFailed,
    StreamBroken,
    ProtocolError,
)


@attrs.frozen(eq=False, repr=False)
class CallState(Value):
    """What the policy needs to know about a call."""

    attempts: int
    """Transport attempts so far (correction retries excluded: they have their own limit)."""
    max_attempts: int | None
    """None: no attempt limit (a waiting call without ``wait_max_attempts``)."""
    waits: bool
    """``wait`` failure mode."""
    deadline: float
    """The total deadline (absolute trio time)."""
    wait_until: float
    """When a waiting call gives up: ``min(deadline, submitted + max_wait)``."""
    restart_partial: bool = True
    """``on_partial == "restart"``: a failure after delivered output may still be retried."""
    retry_visible: bool = True
    """``ChatRequest.retry_visible``: failures the provider answered may be retried."""
    hidden_until: float = math.inf
    """When ``retry_visible`` is off: the time after which no failure is retried at all."""


@attrs.frozen(eq=False, repr=False)
class Retry(Value):
    """Try again after ``delay`` seconds (the retry budget permitting)."""

    delay: float


@attrs.frozen(eq=False, repr=False)
class Wait(Value):
    """Something blocks the call; look again after ``delay`` seconds."""

    delay: float


@attrs.frozen(eq=False, repr=False)
class Fail(Value):
    """End the call (or move to its next fallback model) with ``error``."""

    error: CallError


def call_state(
    request: ChatRequest, policy: RetryConfig, attempts: int, submitted_at: float, deadline: float
) -> CallState:
    """The state of a call from its request and the runtime's retry policy: a waiting call's
    attempts are limited only by ``wait_max_attempts`` (None: not at all)."""
    waits = request.waits
    wait_until = deadline
    if waits and request.max_wait is not None:
        wait_until = min(deadline, submitted_at + request.max_wait)
    return CallState(
        attempts=attempts,
        max_attempts=policy.wait_max_attempts if waits else policy.max_attempts,
        waits=waits,
        deadline=deadline,
        wait_until=wait_until,
        restart_partial=request.on_partial == "restart",
        retry_visible=request.retry_visible,
        hidden_until=math.inf
        if request.retry_visible
        else submitted_at + policy.hidden_retry_window,
    )


def after_failure(
    state: CallState,
    error: CallError,
    delivered: int,
    now: float,
    policy: RetryConfig,
    rng: random.Random,
) -> Retry | Fail:
    """After attempt ``state.attempts`` failed with ``error``: retry after a backoff, or stop.

    Stops for an error retrying cannot fix, the attempt limit (a waiting call has none unless
    configured), output already delivered under ``on_partial="fail"``, the total deadline
    having passed, a provider's wait beyond ``max_retry_after`` (``fail_fast`` only: a waiting
    call waits), and a backoff that would end past the deadline the call may wait until.
    Without ``retry_visible``, it also stops for every failure but one before the reply began
    (:func:`unseen`), and for a backoff that would end past the hidden-retry window.
    """
    if not error.retryable:
        return Fail(error)
    if state.max_attempts is not None and state.attempts >= state.max_attempts:
        return Fail(error)
    if delivered and not state.restart_partial:
        return Fail(error)
    if not state.retry_visible and (delivered or not unseen(error)):
        return Fail(error)
    if isinstance(error, CallTimeout) and error.timeout_kind == "total":
        return Fail(error)
    retry_after = error.retry_after if isinstance(error, RateLimited) else None
    if retry_after is not None and retry_after > policy.max_retry_after and not state.waits:
        return Fail(error)
    delay = retry_delay(state.attempts, policy, rng, retry_after)
    until = state.wait_until if state.waits else state.deadline
    if now + delay >= min(until, state.hidden_until):
        return Fail(error)
    return Retry(delay)


def unseen(error: CallError) -> bool:
    """Whether ``error`` happened before the provider answered anything: the connection could
    not be made, or dropped before the reply began, or connecting timed out. A caller that
    retries on its own sees every other failure, so only these are worth hiding from it."""
    if isinstance(error, CallTimeout):
        return error.timeout_kind == "connect"
    return isinstance(error, ConnectionFailed) and error.status is None


def when_blocked(state: CallState, error: CallError, free_in: float, now: float) -> Wait | Fail:
    """An open breaker or a spent retry budget (``error`` says which, and why) keeps the call
    from trying for ``free_in`` seconds: wait if the call may and its wait deadline allows
    looking again, else fail with ``error``."""
    if not state.waits or not math.isfinite(free_in):
        return Fail(error)
    if now >= state.wait_until:
        return Fail(error)
    # Look again at the wait deadline at the latest, so the call fails on time.
    return Wait(max(0.0, min(free_in, state.wait_until - now)))


def describe(error: CallError) -> str:
    """One line naming what went wrong: the status (or the error's class when there was no
    reply), the provider's error type, and the first 200 characters of its message, e.g.
    ``HTTP 502: <html><head><title>502 Bad Gateway``."""
    head = f"HTTP {error.status}" if error.status else error.kind
    if error.error_type:
        head = f"{head} {error.error_type}"
    text = " ".join(error.message.split())[:_BODY_CHARS]
    return f"{head}: {text}" if text else head


def blames_backend(error: CallError) -> bool:
    """Whether ``error`` says the backend is unhealthy (server errors, overloads, timeouts,
    broken connections and streams), so it counts against the backend's circuit breaker. A
    429, a bad request, an empty reply or a refusal of our own says nothing about its health."""
    return isinstance(error, _BACKEND_FAILURES)
