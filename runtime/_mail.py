"""Messages the actors send each other. All are frozen attrs classes, and the messages are
compared by identity (``eq=False``): a message is one event sent once, never a value to
compare, and each generated ``__eq__``/``__hash__`` pair would only add to the cost of
``import sluice``. Snapshots they carry (:class:`~sluice._mail_rare.KeyStatistics`) are values.

Each actor has one mailbox union (``RateLimiterMsg``, ``ProviderMsg``, ``LedgerMsg``,
``SupervisorMsg``) that it dispatches with ``match`` and ``assert_never``. Requests that need an
answer carry a ``reply_to`` the asker made (a one-shot :class:`~sluice._reply.Reply` on every
call's path, a channel elsewhere); actors answer with ``send_nowait`` and treat a closed or left
``reply_to`` (the asker was cancelled) as normal.

The messages a call that goes through at once never sends (a withdrawal, a refusal, a
failed attempt, a consumer gone or an attempt lost, statistics, reloads, the ledger's
questions) are defined in :mod:`sluice._mail_rare`, loaded when first asked for here (PEP
562); the unions name them as text, so they need not exist before then.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

import attrs
import trio

from ._config import RateLimitConfig
from ._ledger.book import LedgerTotals
from ._limits.cost import Cost
from ._limits.queue import Priority
from ._messages import ChatRequest, Usage
from ._protocols.base import AttemptOutput
from ._record import Record
from ._reply import Reply
from .providers._registry import ResolvedProvider

if TYPE_CHECKING:
    from ._embeddings import EmbedOutput, EmbedRequest  # noqa: TC004 (a chat never loads them)
    from ._events import CallEvent  # noqa: TC004 (only a type: it loads with the rarer events)
    from ._ledger.hold import BudgetClaim  # noqa: TC004 (only a type here)
    from ._mail_rare import AttemptFailed as AttemptFailed
    from ._mail_rare import AttemptLost as AttemptLost
    from ._mail_rare import ConsumerGone as ConsumerGone
    from ._mail_rare import FlushLedger as FlushLedger
    from ._mail_rare import GetLimiterStats as GetLimiterStats
    from ._mail_rare import KeyStatistics as KeyStatistics
    from ._mail_rare import QueryLedger as QueryLedger
    from ._mail_rare import Refusal as Refusal  # noqa: TC004 (only a type: Acquire's reply)
    from ._mail_rare import Relimit as Relimit
    from ._mail_rare import ReloadProvider as ReloadProvider
    from ._mail_rare import Withdraw as Withdraw

    # Only a type here: Call is never structured by cattrs, and importing the tool layer's
    # schema code for every `import sluice` would cost more than the whole actor system.
    from ._tools.preparation import Prepared  # noqa: TC004
    from .transport._phases import HttpPhases  # noqa: TC004 (the same: only a type here)

__all__ = [
    "Acquire",
    "Admission",
    "EXPIRED",
    "Expired",
    "GetLimiterStats",
    "KeyStatistics",
    "Refusal",
    "Relimit",
    "Settle",
    "Signal",
    "Withdraw",
    "AttemptFailed",
    "AttemptOutcome",
    "AttemptLost",
    "AttemptSucceeded",
    "attempt_failure",
    "Call",
    "CallControl",
    "Cancellable",
    "ConsumerGone",
    "EventBatch",
    "EventSink",
    "FlushLedger",
    "LedgerMsg",
    "LedgerTotals",
    "ProviderMailbox",
    "ProviderMsg",
    "QueryLedger",
    "RateLimiterMsg",
    "RecordCall",
    "RecordUsage",
    "Release",
    "ReloadProvider",
    "StartAttempt",
    "Submit",
    "SupervisorMsg",
]

_RARE = frozenset(
    (
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
    )
)


def __getattr__(name: str) -> Any:
    # The messages a call that goes through at once never sends load when first asked for.
    if name in _RARE:
        from . import _mail_rare

        return getattr(_mail_rare, name)
    if name == "EventBatch":
        # Made from the union of every event, which loads with the rarer events: kept here
        # once made, so it is one object however often asked for.
        from ._events import CallEvent

        batch: Any = globals().setdefault("EventBatch", Sequence[CallEvent])  # first one kept
        return batch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    EventBatch: TypeAlias = Sequence[CallEvent]
    """Events travel to the consumer in batches: every event decoded from one network read
    (a ``Sequence`` of :data:`~sluice._events.CallEvent`, made when first asked for)."""


class EventSink(Protocol):
    """Where a call's events go: the send end of a memory channel for a consumer that reads
    them (``Runtime.stream``), or, for a quiet call, a one-shot end that takes the call's one
    final batch (``Runtime.chat``, ``Runtime.map``: see :mod:`sluice._streams`). The
    Supervisor closes it when the call has ended; whatever the consumer's side is, a send
    raises ``BrokenResourceError`` or ``ClosedResourceError`` once the consumer has left."""

    def send_nowait(self, value: EventBatch, /) -> None: ...

    async def send(self, value: EventBatch, /) -> None: ...

    def close(self) -> None: ...


@attrs.frozen(eq=False, repr=False)
class Call(Record):
    """One submitted call, as the actors see it. Created by the runtime, never by users."""

    call_id: str
    request: ChatRequest
    """The request this route sends: the caller's, or its prepared form (see ``prepared``);
    a correction retry sends a copy with the correction appended."""
    provider: ResolvedProvider
    provider_mailbox: ProviderMailbox
    model: str
    """The model name without the provider prefix."""
    events: EventSink
    """The consumer's stream. Providers push deltas here (never for a ``quiet`` call); the
    Supervisor owns and closes it."""
    submitted_at: float
    deadline: float
    """Absolute trio time at which the whole call fails (``inf`` for none)."""
    first_token_timeout: float | None
    idle_timeout: float | None
    cost: Cost
    """The reservation each attempt asks the RateLimiter for."""
    quiet: bool = False
    """The consumer wants only the final ``Completed`` or ``Failed`` (``Runtime.chat`` and
    ``Runtime.map``): nothing else is sent, so a call costs its consumer one wake-up, and a
    restarted attempt has nothing to retract."""
    prepared: Prepared | None = None
    """How the request's tools were prepared for this route's backend (``prepared.original``
    is the caller's request); None for a request without tools, which is sent as it is."""
    control: CallControl = attrs.field(factory=lambda: CallControl())
    """How the consumer stops the call when it leaves (shared by every copy of the call:
    fallback and correction routes are copies; see :class:`CallControl` for who writes what)."""
    group: str | None = None
    """The model group the caller named, when it named one (see :mod:`sluice._routing`)."""
    failover: int = 0
    """How many of the request's models (``model``, then ``fallbacks``) are deployments of
    ``group``: a retryable failure on one moves the call to the next at once."""
    phases: HttpPhases | None = None
    """Where the caller wants each attempt's HTTP phases noted (the load tester); the
    provider hands it to its transport, which starts it over for every request it sends.
    Shared by every copy of the call; None, the usual case, costs nothing."""
    embed: EmbedRequest | None = None
    """An embedding call (None for every chat call). ``request`` then carries the fields the
    two kinds share (model and fallbacks, tag, priority, deadlines, failure mode, retry
    visibility, headers), so the Supervisor routes, admits and retries it as any call (see
    :mod:`sluice._embed_calls`); the provider sends this request's inputs to the model
    ``request`` names now (a fallback or a group's deployment), whatever ``embed.model`` says."""

    @property
    def abandoned(self) -> bool:
        return self.control.abandoned

    def abandon(self) -> None:
        """The consumer left: stop whatever the call is waiting on. Harmless once it ended."""
        self.control.abandon()


class Cancellable(Protocol):
    """What a call waits under: a cancel scope, or the reply it waits for admission on."""

    def cancel(self) -> None: ...


@attrs.define(eq=False, repr=False)
class CallControl(Record):
    """Lets a consumer that leaves stop its call wherever it waits: for admission, in a pause
    between attempts, or in an attempt a provider runs.

    Each field has one writer. ``abandoned`` is set once, by the consumer's task
    (:meth:`abandon`). ``waiting`` is the one thing the call waits under now, set and cleared
    only by the Supervisor's task for the call (:meth:`watch`, :meth:`unwatch`): the reply it
    waits for admission on (see :meth:`sluice._reply.Reply.cancel`), its own scope around a
    pause, or the scope it hands a provider in :class:`StartAttempt`, which the provider
    enters and sets deadlines on. The consumer only cancels it; the provider only reads
    ``abandoned`` (to tell a consumer leaving from a deadline).
    """

    abandoned: bool = False
    waiting: Cancellable | None = None

    def abandon(self) -> None:
        """The consumer's task: the call is abandoned; cancel what it waits under now."""
        self.abandoned = True
        waiting = self.waiting
        if waiting is not None:
            waiting.cancel()

    def watch(self, scope: Cancellable) -> None:
        """The Supervisor's task: the call waits under ``scope`` now (cancelled at once if the
        call is already abandoned)."""
        self.waiting = scope
        if self.abandoned:
            scope.cancel()

    def unwatch(self) -> None:
        """The Supervisor's task: the wait under the watched scope is over."""
        self.waiting = None


# RateLimiter ------------------------------------------------------------------------------


@attrs.frozen(eq=False, repr=False)
class Admission(Record):
    """An attempt may go. ``ticket`` names its slots and reservation until settled."""

    ticket: int
    at: float
    max_tokens: int | None = None
    """The ``max_tokens`` the attempt goes with: a spending budget near its end lowered the
    guessed output of a call that set none (None: as the call asked)."""


class Expired:
    """The ask was still queued at its ``give_up_at``: it is out of the queue, nothing taken.
    One value, :data:`EXPIRED` (a plain class: an attrs class would add to every import)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "EXPIRED"


EXPIRED = Expired()


@attrs.frozen(eq=False, repr=False)
class Acquire(Record):
    """Ask for admission under quota key ``key``; the answer arrives on ``reply_to``."""

    key: str
    limits: RateLimitConfig
    cost: Cost
    priority: Priority
    enqueued_at: float
    reply_to: Reply[Admission | Refusal | Expired]
    budget: BudgetClaim | None = None
    """Who to charge in the spending budgets (None: no budget applies)."""
    fail_on_cooldown: bool = False
    """Refuse at once with :class:`~sluice._errors.RateLimited` (the cooldown's remaining
    seconds as ``retry_after``) instead of queueing while the key cools down after a 429:
    for a proxy's call, whose client waits out the provider's Retry-After on its own."""
    wait_for_store: float | None = None
    """Until when (trio time) to stay queued while a shared quota store does not answer,
    asking it again with a backoff; None: refused with
    :class:`~sluice._errors.StoreUnavailable` at once. For a call in ``wait`` mode, given its
    wait deadline: it is refused with ``StoreUnavailable`` when no later look at the store
    would come before that deadline."""
    give_up_at: float = math.inf
    """When (trio time) the asker stops waiting: the RateLimiter takes the ask out of the
    queue then and answers :data:`EXPIRED` (a call's deadline, or its ``max_wait``), so the
    asker needs no cancel scope of its own for it."""


@attrs.frozen(eq=False, repr=False)
class Release(Record):
    """Free the pending slot of ``ticket``: its first chunk arrived. Twice is harmless."""

    ticket: int


Signal: TypeAlias = Literal["ok", "rate_limited", "overloaded", "failed"]


@attrs.frozen(eq=False, repr=False)
class Settle(Record):
    """Attempt ``ticket`` ended: free its slots and settle its reservation.

    ``usage`` replaces the token estimate (None: keep it, the attempt may have used it all).
    ``signal`` feeds the cooldown and the adaptive limit; ``wait`` is the provider's wait for a
    429; ``quota`` marks a 429 that means the quota is exhausted; ``headers`` are the reply's
    headers, read for learned limits.
    """

    ticket: int
    signal: Signal
    usage: Usage | None = None
    wait: float | None = None
    quota: bool = False
    headers: Mapping[str, str] | None = None
    unused: bool = False
    """The attempt never went out (its caller left first): refund everything."""


RateLimiterMsg: TypeAlias = "Acquire | Withdraw | Release | Settle | GetLimiterStats | Relimit"
"""Text, so that its rarer members (:mod:`sluice._mail_rare`) load only when first sent."""


# ProviderActor ----------------------------------------------------------------------------


@attrs.frozen(eq=False, repr=False)
class AttemptSucceeded(Record):
    output: AttemptOutput | EmbedOutput
    """An embedding call's (``Call.embed``) is an :class:`EmbedOutput`."""
    first_token_at: float | None
    request_id: str | None
    delivered: int
    """Delta events of this attempt that reached the consumer's stream."""


AttemptOutcome: TypeAlias = "AttemptSucceeded | AttemptFailed | ConsumerGone | AttemptLost"
"""An attempt's one answer, a value the provider sends and never touches again. The lead
events went out with the reply's first chunk when deltas were delivered, or when a success
has a ``first_token_at`` (a whole reply without deltas still sends them). All but a success
are :mod:`sluice._mail_rare`'s."""


def attempt_failure(outcome: AttemptOutcome | None) -> AttemptFailed | None:
    """``outcome`` if it is an :class:`~sluice._mail_rare.AttemptFailed`, else None.

    Told without looking the class up for a success or for no outcome at all, so that
    :mod:`sluice._mail_rare` loads with a call's first failure, not on every call's path."""
    if outcome is None or type(outcome) is AttemptSucceeded:
        return None
    from ._mail_rare import AttemptFailed

    return outcome if isinstance(outcome, AttemptFailed) else None


@attrs.frozen(eq=False, repr=False)
class StartAttempt(Record):
    call: Call
    """The call as routed for this attempt (a fallback routes it to another model)."""
    attempt: int
    ticket: int
    lead: Sequence[CallEvent]
    """Events the Supervisor has not sent yet (Queued, Admitted): the provider puts them in
    front of its first batch, so a call that was not kept waiting costs its consumer no extra
    wake-up. Whether they went out, the outcome says (see :data:`AttemptOutcome`)."""
    scope: trio.CancelScope
    """The scope the attempt runs under, made unentered by the Supervisor: the provider enters
    it and moves its deadline; a consumer that leaves cancels it (``Call.abandon``)."""
    reply_to: Reply[AttemptOutcome]
    hedge: float | None = None
    """A model group's hedge time when the call has another deployment to move to: the
    attempt gives up (``CallTimeout`` of kind ``hedge``) if no answer came by then (a stream:
    its first chunk; a whole reply: its head)."""


ProviderMsg: TypeAlias = "StartAttempt | ReloadProvider"


class ProviderMailbox(Protocol):
    """A ProviderActor's mailbox as its senders hold it (a memory channel's send end, or the
    actor's door, :class:`sluice.actors._provider.ProviderDoor`)."""

    def send_nowait(self, msg: ProviderMsg, /) -> None: ...

    async def send(self, msg: ProviderMsg, /) -> None: ...


# TokenLedger ------------------------------------------------------------------------------


@attrs.frozen(eq=False, repr=False)
class RecordUsage(Record):
    """Tokens one attempt used (successful or not)."""

    provider: str
    model: str
    usage: Usage
    tag: str | None = None
    job: str | None = None
    """None: the runtime's job."""
    estimated: bool = False
    """sluice estimated ``usage``: the provider never reported it (the attempt broke or was
    abandoned after output began, or the provider sends no usage)."""
    batch: bool = False
    """The line went through the provider's Batch API: priced at its batch price."""


@attrs.frozen(eq=False, repr=False)
class RecordCall(Record):
    """A call ended: ``ok`` with a result, or failed for good."""

    provider: str
    model: str
    ok: bool
    attempts: int
    tag: str | None = None
    job: str | None = None


LedgerMsg: TypeAlias = "RecordUsage | RecordCall | QueryLedger | FlushLedger"


# Supervisor -------------------------------------------------------------------------------


@attrs.frozen(eq=False, repr=False)
class Submit(Record):
    call: Call


SupervisorMsg: TypeAlias = Submit
