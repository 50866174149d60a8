"""What hooks receive: one frozen record per finished call and per finished attempt.

Records hold summaries, never the prompt, the key or the request body: a hook that logs them
(Langfuse-style tools, one's own audit log) cannot leak what the caller did not mean to share.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal, TypeAlias

import attrs

from sluice._errors import SluiceError
from sluice._messages import ChatResult, Usage
from sluice._record import Value

__all__ = ["AttemptRecord", "CallHook", "AttemptHook", "CallRecord", "Hooks", "Outcome"]

Outcome: TypeAlias = Literal["ok", "error", "abandoned"]
"""How a call or attempt ended: a result, an error, or its consumer left first."""


@attrs.frozen(eq=False, kw_only=True, repr=False)
class CallRecord(Value):
    """One call, after its end: what was asked (in summary), how it ended, what it cost."""

    call_id: str
    provider: str
    """The provider that answered (the last one tried, for a failed call)."""
    model: str
    tag: str | None
    priority: str
    stream: bool
    messages: int
    """Messages in the request."""
    tools: int
    """Tools offered."""
    outcome: Outcome
    result: ChatResult | None
    error: SluiceError | None
    usage: Usage
    """The winning attempt's usage (zero without a result)."""
    cost_usd: float | None
    """The winning attempt's cost at the ledger's prices; None when unpriced."""
    attempts: int
    submitted_at: float
    """trio's clock."""
    duration: float
    """Submit until the end, in seconds."""
    time_to_first_token: float | None
    queued: float | None


@attrs.frozen(eq=False, kw_only=True, repr=False)
class AttemptRecord(Value):
    """One attempt, after its end (successful, failed or abandoned)."""

    call_id: str
    attempt: int
    provider: str
    model: str
    outcome: Outcome
    error: SluiceError | None
    usage: Usage | None
    """What the attempt used (estimated when the provider never said); None: nothing."""
    cost_usd: float | None
    started_at: float
    duration: float
    time_to_first_token: float | None
    """From the attempt's start."""
    delivered: int
    """Delta events that reached the consumer."""


CallHook: TypeAlias = Callable[[CallRecord], Awaitable[None] | None]
AttemptHook: TypeAlias = Callable[[AttemptRecord], Awaitable[None] | None]


@attrs.frozen(eq=False, kw_only=True, repr=False)
class Hooks(Value):
    """Callbacks told about every finished call and attempt, off the hot path.

    Records wait in a queue of ``queue_size`` and one task of the runtime hands them to the
    hooks in order; when the queue is full (a hook slower than the traffic) a record is dropped
    and counted (``sluice_hook_drops_total``, ``Runtime.hook_statistics``). A hook that raises
    is logged and counted; it never fails or delays a call. Hooks may be plain functions or
    coroutine functions.
    """

    on_call_end: CallHook | None = None
    on_attempt_end: AttemptHook | None = None
    queue_size: int = attrs.field(default=1024, validator=attrs.validators.ge(1))
    drain_timeout: float = 5.0
    """At shutdown, how long the records still queued may take."""
