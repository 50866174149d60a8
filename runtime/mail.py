"""Messages the actors send each other. All are frozen attrs classes.

Each actor has one mailbox union (``RateLimiterMsg``, ``ProviderMsg``, ``LedgerMsg``,
``SupervisorMsg``) that it dispatches with ``match`` and ``assert_never``. Requests that need an
answer carry a ``reply_to`` channel the asker made; actors answer with ``send_nowait`` and treat
a closed ``reply_to`` (the asker was cancelled) as normal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

import attrs
import trio

from .config import RateLimitConfig
from .errors import CallError
from .events import CallEvent
from .messages import ChatRequest, Usage
from .protocols.base import AttemptOutput
from .providers.registry import ResolvedProvider

__all__ = [
    "Acquire",
    "Admission",
    "AttemptFailed",
    "AttemptOutcome",
    "AttemptSucceeded",
    "Call",
    "ConsumerGone",
    "Cooldown",
    "EventBatch",
    "GetTotals",
    "LedgerMsg",
    "LedgerTotals",
    "ProviderMsg",
    "RateLimiterMsg",
    "RecordCall",
    "RecordUsage",
    "Release",
    "StartAttempt",
    "Submit",
    "SupervisorMsg",
]

EventBatch: TypeAlias = Sequence[CallEvent]
"""Events travel to the consumer in batches: every event decoded from one network read."""


@attrs.frozen(eq=False)
class Call:
    """One submitted call, as the actors see it. Created by the runtime, never by users."""

    call_id: str
    request: ChatRequest
    provider: ResolvedProvider
    provider_mailbox: trio.MemorySendChannel[ProviderMsg]
    model: str
    """The model name without the provider prefix."""
    events: trio.MemorySendChannel[EventBatch]
    """The consumer's stream. Providers push deltas here; the Supervisor owns and closes it."""
    submitted_at: float
    deadline: float
    """Absolute trio time at which the whole call fails (``inf`` for none)."""
    first_token_timeout: float | None
    idle_timeout: float | None


# RateLimiter ------------------------------------------------------------------------------


@attrs.frozen
class Admission:
    """An attempt may go. ``ticket`` names its pending slot until released."""

    ticket: int
    at: float


@attrs.frozen(eq=False)
class Acquire:
    """Ask for admission under quota key ``key``; the answer arrives on ``reply_to``."""

    key: str
    limits: RateLimitConfig
    reply_to: trio.MemorySendChannel[Admission]


@attrs.frozen
class Release:
    """Free the pending slot of ``ticket`` (its first chunk arrived, or the attempt ended).

    Releasing a ticket twice is harmless.
    """

    ticket: int


@attrs.frozen
class Cooldown:
    """Pause admissions under ``key`` for ``seconds`` (plus jitter): the provider said 429."""

    key: str
    seconds: float


RateLimiterMsg: TypeAlias = Acquire | Release | Cooldown


# ProviderActor ----------------------------------------------------------------------------


@attrs.frozen
class AttemptSucceeded:
    output: AttemptOutput
    first_token_at: float | None
    request_id: str | None


@attrs.frozen
class AttemptFailed:
    error: CallError
    delivered: int
    """Delta events of this attempt that already reached the consumer's stream."""


@attrs.frozen
class ConsumerGone:
    """The consumer closed its stream; the attempt was abandoned."""


AttemptOutcome: TypeAlias = AttemptSucceeded | AttemptFailed | ConsumerGone


@attrs.frozen(eq=False)
class StartAttempt:
    call: Call
    attempt: int
    ticket: int
    reply_to: trio.MemorySendChannel[AttemptOutcome]


ProviderMsg: TypeAlias = StartAttempt


# TokenLedger ------------------------------------------------------------------------------


@attrs.frozen
class RecordUsage:
    """Tokens one attempt used (successful or not)."""

    provider: str
    model: str
    usage: Usage


@attrs.frozen
class RecordCall:
    """A call ended: ``ok`` with a result, or failed for good."""

    provider: str
    model: str
    ok: bool
    attempts: int


@attrs.define
class LedgerTotals:
    """Running totals for one ``provider:model``."""

    calls: int = 0
    failures: int = 0
    attempts: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0


@attrs.frozen(eq=False)
class GetTotals:
    reply_to: trio.MemorySendChannel[dict[str, LedgerTotals]]


LedgerMsg: TypeAlias = RecordUsage | RecordCall | GetTotals


# Supervisor -------------------------------------------------------------------------------


@attrs.frozen(eq=False)
class Submit:
    call: Call


SupervisorMsg: TypeAlias = Submit
