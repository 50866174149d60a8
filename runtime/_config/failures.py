"""What a call does after a failure: :class:`RetryConfig` (retries, backoff, the retry budget,
fallbacks) and :class:`BreakerConfig` (when a provider's circuit opens)."""

from __future__ import annotations

from typing import Literal

import attrs
from attrs.validators import ge, gt, le, optional

from .._record import Value

__all__ = ["BreakerConfig", "RetryConfig"]


@attrs.frozen(eq=False, kw_only=True, repr=False)
class RetryConfig(Value):
    """How the Supervisor retries a failed attempt."""

    max_attempts: int = attrs.field(default=4, validator=ge(1))
    """Attempts of a ``fail_fast`` call (an interactive one, by default) before it fails;
    waiting calls have ``wait_max_attempts``."""
    base_delay: float = attrs.field(default=0.5, validator=ge(0))
    """First backoff; each retry doubles it."""
    max_delay: float = attrs.field(default=8.0, validator=ge(0))
    jitter: float = attrs.field(default=0.25, validator=[ge(0), le(1)])
    """A backoff is shortened by up to this fraction, at random."""
    max_retry_after: float = attrs.field(default=120.0, validator=ge(0))
    """A provider's wait longer than this fails the call instead of waiting."""
    budget_ratio: float = attrs.field(default=0.2, validator=ge(0))
    """Process-wide: retries at most this fraction of recent first attempts (plus the floor)."""
    budget_min_per_second: float = attrs.field(default=10.0, validator=ge(0))
    """The floor of the retry budget, so isolated failures are always retried and a backend
    failing a share of requests at random is still retried at a useful rate (Finagle's and
    Linkerd's retry budgets use the same floor and ratio). However many calls wait out an
    outage, the backend sees at most this many retries per second beyond ``budget_ratio``."""
    budget_interval: float = attrs.field(default=10.0, validator=gt(0))
    """The interval the retry budget looks back over."""
    wait_max_attempts: int | None = attrs.field(default=None, validator=optional(ge(1)))
    """The attempt limit of a call in ``wait`` failure mode (see ``ChatRequest.failure_mode``).
    None (the default): no limit. Nobody waits on such a call, so it retries transient failures
    (429, 5xx, resets, timeouts, broken streams) until it succeeds or its wait deadline
    (``max_wait``, or the total deadline) passes; the backoff is capped at ``max_delay`` and the
    retry budget caps the rate of retries, so an outage brings no storm. ``max_attempts``
    limits ``fail_fast`` calls only."""
    hidden_retry_window: float = attrs.field(default=1.0, validator=ge(0))
    """For a call with ``retry_visible=False`` (the gateway's): seconds after submission within
    which a connection that failed before any reply byte is tried again. Its caller cannot see
    such a failure, and it waits for the answer, so the window is short."""
    wait_poll: float = attrs.field(default=1.0, validator=gt(0))
    """While a breaker probe is out, how often (seconds, jittered) a waiting call looks again."""
    fallback_on: tuple[str, ...] = (
        "Overloaded",
        "ContextTooLong",
        "CircuitOpen",
        "ContentFiltered",
    )
    """Error classes after which a call moves on to its next fallback model."""


@attrs.frozen(eq=False, kw_only=True, repr=False)
class BreakerConfig(Value):
    """When a provider's circuit breaker opens, and for how long."""

    min_failures: int = attrs.field(default=5, validator=ge(1))
    """Failures in the window needed before it can open."""
    failure_rate: float = attrs.field(default=0.5, validator=[gt(0), le(1)])
    """Share of the attempts started in the window that must have failed for it to open."""
    window: float = attrs.field(default=30.0, validator=gt(0))
    open_for: float = attrs.field(default=10.0, validator=gt(0))
    """Seconds it stays open before one probe call may go."""
    scope: Literal["model", "provider"] = "model"
    """One breaker per model of the provider (one failing model does not block the others),
    or one for the whole provider (every model behind one endpoint)."""
