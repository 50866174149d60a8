"""The actors' messages that a call which goes through at once never sends: an ask withdrawn
or refused, an attempt that failed, whose consumer left or whose actor died, the quota keys'
statistics, a reload, and the ledger's questions and flushes.

They are :mod:`sluice._mail`'s messages (that module serves every name here, and its mailbox
unions name them), kept apart so that a program which only makes calls does not build their
classes: each attrs class costs the import a compiled ``__init__``. The actors match the
messages of every call first and import this module only in the branch that takes the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs
import trio

from ._config import RateLimitConfig
from ._errors import CallError
from ._ledger.summary import LedgerQuery, LedgerSummary
from ._limits.queue import Priority
from ._record import Record, Value
from .providers._registry import ResolvedProvider

if TYPE_CHECKING:
    from ._mail import Acquire  # noqa: TC004 (only a type here: _mail serves this module's names)

__all__ = [
    "AttemptFailed",
    "AttemptLost",
    "ConsumerGone",
    "FlushLedger",
    "GetLimiterStats",
    "KeyStatistics",
    "QueryLedger",
    "Refusal",
    "Relimit",
    "ReloadProvider",
    "Withdraw",
]


# RateLimiter ------------------------------------------------------------------------------


@attrs.frozen(eq=False, repr=False)
class Refusal(Record):
    """The attempt can never be admitted (or not before the quota resets): fail the call."""

    error: CallError


@attrs.frozen(eq=False, repr=False)
class Withdraw(Record):
    """The asker of ``acquire`` gave up while queued: take it out of the queue."""

    acquire: Acquire


@attrs.frozen(eq=False, repr=False)
class KeyStatistics(Value):
    """A snapshot of one quota key."""

    key: str
    queued: Mapping[Priority, int]
    """Waiting calls per priority."""
    pending: int
    open_streams: int
    pending_limit: int | None
    """The pending-slot limit in force (adaptive or configured); None for unlimited."""
    windows: Mapping[str, tuple[int, int]]
    """``{"dimension/period": (used, limit)}``."""
    cooldown_left: float
    exhausted_left: float
    windows_age: float = 0.0
    """Seconds since ``windows`` were current: 0 with the in-memory store; with a shared
    store, since its server last reported them (statistics never wait for it)."""


@attrs.frozen(eq=False, repr=False)
class GetLimiterStats(Record):
    reply_to: trio.MemorySendChannel[dict[str, KeyStatistics]]


@attrs.frozen(eq=False, repr=False)
class Relimit(Record):
    """The config was reloaded: each provider's quota keys take its new limits now (a key
    otherwise keeps the limits it was created with, whatever a later ``Acquire`` carries)."""

    limits: Mapping[str, RateLimitConfig]
    """Per provider name."""


# ProviderActor ----------------------------------------------------------------------------


@attrs.frozen(eq=False, repr=False)
class ConsumerGone(Record):
    """The consumer closed its stream; the attempt was abandoned."""


@attrs.frozen(eq=False, repr=False)
class AttemptFailed(Record):
    """The attempt failed with ``error`` (the one outcome of a failure, so a call that
    succeeds at once never builds the class)."""

    error: CallError
    delivered: int
    """Delta events of this attempt that already reached the consumer's stream."""


@attrs.frozen(eq=False, repr=False)
class AttemptLost(Record):
    """The attempt's task died without an outcome (its actor crashed and cancelled it, or a
    bug): what it had delivered by then, so the Supervisor resubmits it knowing what the
    consumer saw. A reply channel closed without any answer means the same with nothing
    delivered (the attempt never started)."""

    delivered: int


@attrs.frozen(eq=False, repr=False)
class ReloadProvider(Record):
    """``Runtime.reload`` resolved the provider again: every attempt that starts after this
    message sends with ``spec``'s key, headers and base URL."""

    spec: ResolvedProvider


# TokenLedger ------------------------------------------------------------------------------


@attrs.frozen(eq=False, repr=False)
class QueryLedger(Record):
    """Ask for the ledger summed as ``query`` asks: what the store holds plus what is not yet
    written to it. The answer is the summaries, or the ``OSError`` the store raised."""

    query: LedgerQuery
    reply_to: trio.MemorySendChannel[list[LedgerSummary] | OSError]


@attrs.frozen(eq=False, repr=False)
class FlushLedger(Record):
    """Write what is not yet stored now; ``reply_to`` is closed once it is written."""

    reply_to: trio.MemorySendChannel[None]
