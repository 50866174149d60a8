"""The Supervisor: owns every call from submission to its one final event.

For each submitted call it runs one task that, model by model (the call's model, then its
fallbacks), asks the circuit breaker and the RateLimiter for admission, hands the attempt to the
model's ProviderActor, and decides what a failure means: retry after a backoff (the provider's
wait as a floor, the process-wide retry budget permitting), move to the next fallback model, or
give up. A retry or fallback after deltas reached the consumer emits ``StreamReset`` first, so
the consumer can discard the partial output; the final result holds only the winning attempt.

Every call ends with exactly one ``Completed`` or ``Failed`` (unless its consumer left first).
A bug while supervising one call fails that call with ``InternalError`` and nothing else.

Tool calls: a call whose request has tools arrives prepared (:func:`sluice._tools.prepare`, at
submit; again for each fallback model, whose backend may differ). Each successful attempt's
output is finalized here (:func:`sluice._tools.finalize`): forced JSON turned back into tool
calls, arguments repaired, the reply checked against ``tool_choice``. A
:class:`~sluice._errors.ToolCallError` that a correction can fix is retried at once, with the
bad reply and a note about it appended as temporary messages to the prepared request
(:class:`sluice._tools.Corrections`): no backoff, no retry budget, and not counted against
``RetryConfig.max_attempts``; ``ToolOptions.max_corrections`` is the limit instead. The
caller's request is never changed, and the result holds only the finalized reply.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeAlias

import attrs
import trio

from sluice._breaker import NO_TICKET, Breakers, CircuitBreaker, Ticket
from sluice._config import RetryConfig
from sluice._errors import (
    CallError,
    CallTimeout,
    CircuitOpen,
    ConnectionFailed,
    InternalError,
    SluiceError,
    ToolCallError,
)
from sluice._events import (
    Admitted,
    CallEvent,
    Completed,
    Failed,
    FallingBack,
    Queued,
    Retrying,
    StreamReset,
)
from sluice._ledger.budget import BudgetClaim
from sluice._mail import (
    AttemptFailed,
    AttemptOutcome,
    AttemptProgress,
    AttemptSucceeded,
    Call,
    ConsumerGone,
    ProviderMsg,
    RecordCall,
    Settle,
    StartAttempt,
    Submit,
    SupervisorMsg,
)
from sluice._messages import ChatRequest, ChatResult, Timings, Usage
from sluice._record import Record
from sluice._retry_budget import RetryBudget
from sluice._retry_policy import (
    CallState,
    Fail,
    after_failure,
    blames_backend,
    call_state,
    describe,
    when_blocked,
)
from sluice._routing import Routing, breaker_mark
from sluice._tools.correct import NO_CORRECTIONS, Corrections
from sluice.providers._registry import ResolvedProvider

from ._rate_limiter import RateLimiterHandle
from ._tell import put, take
from ._token_ledger import TokenLedgerHandle

if TYPE_CHECKING:
    from sluice._protocols.base import AttemptOutput
    from sluice._tools.preparation import Prepared

__all__ = ["Preparer", "Route", "SupervisorPeers", "default_preparer", "run_supervisor"]

log = logging.getLogger("sluice.supervisor")

Route = tuple[ResolvedProvider, trio.MemorySendChannel[ProviderMsg]]
"""A provider's resolved settings and its actor's mailbox."""

_LOST_ATTEMPTS_MAX = 3


@attrs.frozen(eq=False)
class _Correct:
    """The reply broke the tool contract in a way a correction can fix: try again with it."""

    error: CallError
    delivered: int
    corrections: Corrections


@attrs.frozen(eq=False)
class _Lost:
    """The attempt's actor crashed without an answer, after ``delivered`` deltas."""

    delivered: int


@attrs.frozen(eq=False)
class _WaitedOut:
    """A waiting call reached its ``max_wait`` while it waited for admission."""


_WAITED_OUT = _WaitedOut()


def _circuit_open(route: Call, breaker: CircuitBreaker, wait: float) -> CircuitOpen:
    """The error for a call the breaker refuses: when it lets a probe through, and the
    failures that opened it (never a bare "open")."""
    name = f"{route.provider.name}:{route.model}"
    when = f"open for another {wait:.1f} s" if wait > 0 else "a probe call is testing it"
    causes = breaker.causes()
    why = f"; last failure: {causes[-1]}" if causes else ""
    return CircuitOpen(
        f"{name} failed repeatedly; its circuit breaker is {when}{why}", retry_after=wait
    )


Preparer: TypeAlias = "Callable[[ChatRequest, ResolvedProvider], Prepared | None]"
"""Prepares a request's tools for a provider's backend; None for a request without tools.
Raises ``ConfigError`` when the tools or ``tool_choice`` cannot be used."""


def default_preparer(request: ChatRequest, provider: ResolvedProvider) -> Prepared | None:
    """Preparation with the provider's capabilities only (no per-model entries)."""
    if not request.tools and request.tool_choice is None and request.parallel_tool_calls is None:
        return None
    from sluice._tools.preparation import prepare  # only calls with tools load it

    return prepare(request, provider.capabilities, request.tool_options)


@attrs.frozen(eq=False, repr=False)
class SupervisorPeers(Record):
    limiter: RateLimiterHandle
    ledger: TokenLedgerHandle
    retry: RetryConfig
    rng: random.Random
    resolve: Callable[[str], Awaitable[Route]]
    """Finds (starting it if needed) the provider actor for a ``provider:model`` fallback."""
    budget: RetryBudget
    breakers: Breakers = attrs.field(factory=Breakers)
    """One per model (or provider); idle ones are forgotten once there are many."""
    catch_bugs: bool = True
    """Fail only the affected call on a bug (production); tests may let bugs propagate."""
    in_flight: list[int] = attrs.field(factory=lambda: [0])
    """Calls being supervised now (one mutable cell, read by the runtime's statistics)."""
    prepare: Preparer = default_preparer
    """Prepares the caller's request again when a call falls back to another model."""
    routing: Routing | None = None
    """Model groups' routing state: told when a group's call moves or ends."""

    def breaker_state(self, provider: ResolvedProvider, model: str, now: float) -> str:
        """``closed``, ``open`` or ``half_open`` for ``model`` of ``provider`` (``closed``
        when it has no breaker)."""
        breaker = self.breaker(provider, model, now)
        return "closed" if breaker is None else breaker.state(now)

    def breaker_open(self, provider: ResolvedProvider, model: str, now: float) -> bool:
        """Whether ``model`` of ``provider`` refuses attempts now (its breaker is open)."""
        breaker = self.breaker(provider, model, now)
        return breaker is not None and breaker.state(now) == "open"

    def breaker_key(self, provider: ResolvedProvider, model: str) -> str | None:
        """The key of ``model`` of ``provider``'s breaker: ``provider:model``, or ``provider``
        when its config scopes the breaker to the whole provider; None without a breaker."""
        config = provider.breaker
        if config is None:
            return None
        return provider.name if config.scope == "provider" else f"{provider.name}:{model}"

    def breaker(self, provider: ResolvedProvider, model: str, now: float) -> CircuitBreaker | None:
        """The breaker for ``model`` of ``provider``: one per model unless the provider's
        config scopes it to the whole provider. Keyed ``provider:model`` or ``provider``.

        Look it up again after any wait without one of its tickets: an idle breaker may be
        forgotten meanwhile (see :class:`~sluice._breaker.Breakers`)."""
        config = provider.breaker
        if config is None:
            return None
        key = provider.name if config.scope == "provider" else f"{provider.name}:{model}"
        found = self.breakers.find(key)
        if found is not None:
            return found
        made = CircuitBreaker(
            min_failures=config.min_failures,
            failure_rate=config.failure_rate,
            window=config.window,
            open_for=config.open_for,
        )
        return self.breakers.add(key, made, now)


async def run_supervisor(
    peers: SupervisorPeers,
    inbox: trio.MemoryReceiveChannel[SupervisorMsg],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Supervise submitted calls; return when the inbox closes and every call has ended."""
    async with trio.open_nursery() as calls:
        task_status.started()
        async with inbox:
            while True:
                try:
                    msg = await take(inbox)
                except trio.EndOfChannel:
                    return
                match msg:
                    case Submit(call=call):
                        calls.start_soon(_supervise, peers, call, name=call.call_id)


async def _supervise(peers: SupervisorPeers, call: Call) -> None:
    """Run ``call`` to its end; always closes the consumer's stream."""
    peers.in_flight[0] += 1
    try:
        await _supervise_call(peers, call)
    finally:
        peers.in_flight[0] -= 1


async def _supervise_call(peers: SupervisorPeers, call: Call) -> None:
    with call.events:  # a plain close: `async with` would add a checkpoint per call
        try:
            await _CallRun(peers, call).run()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the consumer left; its attempt (if any) was already abandoned
        except Exception as exc:
            if not peers.catch_bugs:
                raise
            # The one place a bug is caught: it fails this call, never its siblings.
            log.exception("bug while supervising call %s", call.call_id)
            error = InternalError(
                f"sluice failed internally ({type(exc).__name__}); see the log"
            ).in_context(
                call_id=call.call_id, provider=call.provider.name, model=call.model, attempt=0
            )
            try:
                await put(call.events, (Failed(call.call_id, error),))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass


class _CallRun:
    """One call's way through its models and attempts."""

    def __init__(self, peers: SupervisorPeers, call: Call) -> None:
        self.peers = peers
        self.call = call
        self.attempt = 0
        self.models_tried: list[str] = []
        self.pending: list[CallEvent] = []
        """Events not yet sent: they go out with the next batch, whoever sends it."""
        self.corrected = 0
        """Correction retries so far, over every model (they do not count as transport
        attempts)."""
        self.deployment = call.request.model
        """A group's call: the deployment it is counted on (it moves on failover)."""
        self.backend_ttft: float | None = None
        """Admission to first token of the winning attempt (the backend's own latency)."""

    async def _emit(self, *events: CallEvent) -> None:
        """Send the pending events and ``events`` to the consumer as one batch."""
        batch = [*self.pending, *events]
        self.pending = []
        if self.call.quiet:
            batch = [e for e in batch if isinstance(e, Completed | Failed)]
        if batch:
            await put(self.call.events, batch)

    def _fix(self, error: CallError, route: Call) -> CallError:
        return error.in_context(
            call_id=route.call_id,
            provider=route.provider.name,
            model=route.model,
            attempt=self.attempt,
        )

    async def run(self) -> None:
        if self.call.group is None:
            await self._run()
            return
        # A group's call is counted in flight on its deployment until it ends, on every path.
        try:
            await self._run()
        finally:
            assert self.peers.routing is not None
            self.peers.routing.finished(
                self.call.group, self.deployment, self.backend_ttft, None, trio.current_time()
            )

    async def _run(self) -> None:
        call, peers = self.call, self.peers
        peers.budget.first_attempt(trio.current_time())
        route = call
        chain = (call.request.model, *call.request.fallbacks)
        for index, model in enumerate(chain):
            if index > 0:
                try:
                    route = await self._reroute(model)
                except SluiceError as exc:
                    error = exc if isinstance(exc, CallError) else CallError(str(exc))
                    await self._fail(self._fix(error, route))
                    return
            self.models_tried.append(f"{route.provider.name}:{route.model}")
            fails_over = index + 1 < call.failover
            outcome = await self._through_model(
                route, last=index + 1 == len(chain), fails_over=fails_over
            )
            if isinstance(outcome, ChatResult):
                await peers.ledger.record(
                    RecordCall(
                        route.provider.name, route.model, True, self.attempt, call.request.tag
                    )
                )
                await self._emit(*_forced_calls(route, outcome), Completed(call.call_id, outcome))
                return
            if outcome is None:
                return  # the consumer left
            error, delivered = outcome
            moves = fails_over and (error.retryable or error.kind in peers.retry.fallback_on)
            if moves or (index + 1 < len(chain) and error.kind in peers.retry.fallback_on):
                if index + 1 < call.failover:
                    assert peers.routing is not None and call.group is not None
                    now = trio.current_time()
                    peers.routing.moved(call.group, model, chain[index + 1], now, error)
                    self.deployment = chain[index + 1]
                events: list[CallEvent] = []
                if delivered:
                    events.append(StreamReset(call.call_id, self.attempt, error.message))
                events.append(FallingBack(call.call_id, model, chain[index + 1], error))
                await self._emit(*events)
                continue
            await self._fail(error, route)
            return

    async def _reroute(self, model: str) -> Call:
        spec, mailbox = await self.peers.resolve(model)
        name = model.partition(":")[2]
        call = self.call
        original = call.prepared.original if call.prepared is not None else call.request
        request = attrs.evolve(original, model=model)
        prepared = self.peers.prepare(request, spec)  # another backend, other capabilities
        return attrs.evolve(
            call,
            request=prepared.request if prepared is not None else request,
            prepared=prepared,
            provider=spec,
            provider_mailbox=mailbox,
            model=name,
        )

    async def _fail(self, error: CallError, route: Call | None = None) -> None:
        route = route or self.call
        await self.peers.ledger.record(
            RecordCall(route.provider.name, route.model, False, self.attempt, self.call.request.tag)
        )
        await self._emit(Failed(self.call.call_id, error))

    async def _through_model(
        self, route: Call, last: bool, fails_over: bool = False
    ) -> ChatResult | tuple[CallError, int] | None:
        """Attempts against one model until a result, a final error, or the consumer leaving.

        The decisions are :mod:`sluice._retry_policy`'s; this loop carries them out. ``last``:
        no fallback model follows, so a call in ``wait`` mode waits out an open breaker here
        instead of moving on. ``fails_over``: another deployment of the call's group follows,
        so a retryable failure returns at once for the call to move there, a cooldown is not
        waited out (another process's 429 included), and an attempt that does not answer
        within the group's hedge time is given up.
        """
        peers, call = self.peers, self.call
        waits = call.request.waits and last
        hedge = None
        if fails_over:
            assert peers.routing is not None and call.group is not None
            hedge = peers.routing.groups[call.group].hedge or None
        lost = 0
        corrections = NO_CORRECTIONS
        retrying: CallError | None = None
        """The failure being retried: the next attempt must first spend the retry budget."""
        last_error: CallError | None = None
        """The last failure of a waiting call: what it ends with when its wait runs out."""
        while True:
            if call.abandoned:
                return None  # the consumer left while the call waited
            now = trio.current_time()
            if waits and last_error is not None and now >= self._state(waits).wait_until:
                return last_error, 0
            if retrying is not None and not peers.budget.try_retry(now):
                blocked = when_blocked(self._state(waits), retrying, peers.budget.free_in(now), now)
                if isinstance(blocked, Fail):
                    return blocked.error, 0
                await self._pause(blocked.delay)
                continue
            retrying = None
            ticket = NO_TICKET
            # Looked up per attempt: between attempts no ticket holds it, so an idle breaker
            # may have been forgotten (and one made afresh in its place).
            breaker = peers.breaker(route.provider, route.model, now)
            if breaker is not None:
                admitted = breaker.admit(now)
                if admitted is None:
                    wait = breaker.retry_in(now)
                    error = self._fix(_circuit_open(route, breaker, wait), route)
                    free_in = (
                        wait if wait > 0 else peers.retry.wait_poll * (0.5 + peers.rng.random())
                    )
                    blocked = when_blocked(self._state(waits), error, free_in, now)
                    if isinstance(blocked, Fail):
                        self.attempt += 1
                        return attrs.evolve(blocked.error, attempt=self.attempt), 0
                    last_error = error
                    await self._pause(blocked.delay)
                    continue
                ticket = admitted
            with ticket:  # settles on every exit: a verdict below, or none (frees a probe)
                self.attempt += 1
                step = await self._attempt(route, ticket, corrections, waits, fails_over, hedge)
            match step:
                case ChatResult() | None:
                    return step
                case _WaitedOut():
                    if last_error is not None:
                        return last_error, 0
                    error = CallTimeout(
                        f"the call waited longer than its max_wait ({call.request.max_wait} s)"
                        " for admission",
                        timeout_kind="total",
                    )
                    return self._fix(error, route), 0
                case _Correct(error=error, delivered=delivered, corrections=corrections):
                    self.corrected += 1
                    reset = (
                        [StreamReset(call.call_id, self.attempt, error.message)]
                        if delivered
                        else []
                    )
                    await self._emit(*reset, Retrying(call.call_id, self.attempt, 0.0, error))
                    continue
                case _Lost(delivered=delivered):
                    # The attempt's actor crashed and took the attempt with it: resubmit it
                    # (a bounded number of times), telling the consumer to discard its deltas.
                    lost += 1
                    error = ConnectionFailed("the attempt was lost when its actor crashed")
                    if lost > _LOST_ATTEMPTS_MAX:
                        return self._fix(error, route), delivered
                    if delivered:
                        await put(
                            call.events, (StreamReset(call.call_id, self.attempt, error.message),)
                        )
                    continue
                case (error, delivered):
                    if fails_over and error.retryable:
                        return error, delivered
                    last_error = error
                    now = trio.current_time()
                    decision = after_failure(
                        self._state(waits), error, delivered, now, peers.retry, peers.rng
                    )
                    if isinstance(decision, Fail):
                        return decision.error, delivered
                    delay = decision.delay
                    if not peers.budget.try_retry(now):
                        blocked = when_blocked(
                            self._state(waits), error, peers.budget.free_in(now), now
                        )
                        if isinstance(blocked, Fail):
                            return blocked.error, delivered
                        retrying = error  # it still has to spend the budget after this wait
                        delay = max(delay, blocked.delay)
                    events: list[CallEvent] = []
                    if delivered:
                        events.append(StreamReset(call.call_id, self.attempt, error.message))
                    events.append(Retrying(call.call_id, self.attempt, delay, error))
                    await self._emit(*events)
                    await self._pause(delay)

    async def _pause(self, delay: float) -> None:
        """Sleep ``delay`` seconds, or less if the consumer leaves meanwhile (a waiting call
        may pause for long: an abandoned one must not linger)."""
        control = self.call.control
        with trio.CancelScope(deadline=trio.current_time() + delay) as pause:
            control.watch(pause)
            try:
                await trio.sleep_forever()
            finally:
                control.unwatch(pause)

    def _state(self, waits: bool) -> CallState:
        call = self.call
        state = call_state(
            call.request,
            self.peers.retry,
            self.attempt - self.corrected,
            call.submitted_at,
            call.deadline,
        )
        return state if waits or not state.waits else attrs.evolve(state, waits=False)

    async def _attempt(
        self,
        route: Call,
        ticket: Ticket,
        corrections: Corrections,
        waits: bool,
        moves: bool = False,
        hedge: float | None = None,
    ) -> ChatResult | tuple[CallError, int] | _Correct | _Lost | _WaitedOut | None:
        """Admission and one attempt, with ``ticket`` given its verdict on the backend when
        there is one. None: the consumer left. ``moves``: the call can move to another
        deployment, so it does not wait out a cooldown; ``hedge``: the attempt is given up
        when no answer came within that many seconds."""
        peers, call = self.peers, self.call
        now = trio.current_time()
        self.pending.append(Queued(call.call_id, self.attempt, now))
        admission = None
        # A waiting call stops waiting for admission at its max_wait (computed only then: this
        # is every call's path).
        deadline = self._state(waits).wait_until if waits else call.deadline
        with trio.CancelScope(deadline=deadline) as waiting:
            call.control.watch(waiting)  # a consumer that leaves stops the wait
            try:
                admission = await peers.limiter.acquire(
                    route.provider.quota_key(route.model),
                    route.provider.rate_limit,
                    call.cost,
                    call.request.priority,
                    budget=BudgetClaim(
                        route.provider.name,
                        route.model,
                        call.request.tag,
                        output_set=route.request.max_tokens is not None,
                    ),
                    fail_on_cooldown=moves or not call.request.retry_visible,
                    wait_for_store=deadline if waits else None,
                )
            except CallError as refused:
                return self._fix(refused, route), 0
            finally:
                call.control.unwatch(waiting)
        if call.abandoned:
            if admission is not None:
                await peers.limiter.settle(Settle(admission.ticket, "failed", unused=True))
            return None
        if admission is None:
            if trio.current_time() < call.deadline:
                return _WAITED_OUT
            error: CallError = CallTimeout(
                "the call's total deadline passed while it waited for admission",
                timeout_kind="total",
            )
            return self._fix(error, route), 0
        self.pending.append(Admitted(call.call_id, self.attempt, admission.at, admission.at - now))
        if admission.at > now:
            # It waited: tell the consumer now. Otherwise Queued and Admitted ride along
            # with the first chunk, saving the consumer two wake-ups per call.
            try:
                await self._emit()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                await peers.limiter.settle(Settle(admission.ticket, "failed", unused=True))
                raise
        progress = AttemptProgress(lead=self.pending)
        self.pending = []
        sent = route
        if corrections.messages:
            assert route.prepared is not None
            sent = attrs.evolve(route, request=corrections.apply(route.prepared))
        if admission.max_tokens is not None:
            # A budget near its end pays for only this much output (see _ledger.budget).
            capped = attrs.evolve(sent.request, max_tokens=admission.max_tokens)
            sent = attrs.evolve(sent, request=capped)
        outcome = await _run_attempt(sent, self.attempt, admission.ticket, progress, hedge)
        self.pending = progress.lead  # what the provider did not deliver (no first chunk)
        match outcome:
            case AttemptSucceeded():
                ticket.succeeded(trio.current_time())
                try:
                    output = self._finalize(route, outcome.output)
                except ToolCallError as exc:
                    error = self._fix(exc, route)
                    delivered = progress.delivered
                    assert route.prepared is not None
                    if not self._may_correct(corrections, exc, route.prepared, delivered):
                        return error, delivered
                    return _Correct(error, delivered, corrections.add(exc, route.prepared))
                return self._result(route, outcome, output, admission.at)
            case ConsumerGone():
                return None
            case None:
                return _Lost(progress.delivered)
            case AttemptFailed(error=error, delivered=delivered):
                if call.abandoned:
                    # A correction attempt runs on a copy of the call, which never sees
                    # abandon(): its provider reports the cancellation as a failure.
                    return None
                if blames_backend(error):
                    ticket.failed(trio.current_time(), describe(error))
                    self._share_breaker(route)
                return error, delivered

    def _share_breaker(self, route: Call) -> None:
        """After a failure of ``route``'s backend: with a shared store, if its breaker is open,
        have every process's routing pass it over until it half-opens (when this process
        probes it). Not on every call's path: only after a failure."""
        peers = self.peers
        shared = peers.routing.shared if peers.routing is not None else None
        if shared is None:
            return
        now = trio.current_time()
        key = peers.breaker_key(route.provider, route.model)
        breaker = peers.breaker(route.provider, route.model, now)
        if key is None or breaker is None:
            return
        if breaker.state(now) == "open":
            shared.avoid(breaker_mark(key), breaker.retry_in(now), now)

    def _finalize(self, route: Call, output: AttemptOutput) -> AttemptOutput:
        """The attempt's output with its tool calls recovered, repaired and checked.

        Only a request with tools is finalized: a plain chat reply is passed on as it came
        (an empty one included), exactly as before the tool layer existed.

        Raises:
            ToolCallError: the reply breaks the request's tool contract, or is empty.
        """
        prepared = route.prepared
        if prepared is None or not prepared.original.tools:
            return output
        from sluice._tools.finalization import finalize  # only calls with tools load it

        return finalize(output, prepared, rng=self.peers.rng)

    def _may_correct(
        self, corrections: Corrections, error: ToolCallError, prepared: Prepared, delivered: int
    ) -> bool:
        """Whether a correction retry may follow ``error``."""
        call = self.call
        if not corrections.allows(error, prepared):
            return False
        if delivered and call.request.on_partial == "fail":
            return False
        return trio.current_time() < call.deadline

    def _result(
        self, route: Call, outcome: AttemptSucceeded, output: AttemptOutput, admitted_at: float
    ) -> ChatResult:
        """The call's result from the winning attempt and its finalized ``output``."""
        call = self.call
        now = trio.current_time()
        first = outcome.first_token_at
        if first is not None:
            self.backend_ttft = first - admitted_at
        return ChatResult(
            call_id=call.call_id,
            provider=route.provider.name,
            model=route.model,
            message=output.message,
            finish_reason=output.finish_reason,
            raw_finish_reason=output.raw_finish_reason,
            usage=output.usage if output.usage is not None else Usage(),
            attempts=self.attempt,
            timings=Timings(
                queued=admitted_at - call.submitted_at,
                time_to_first_token=None if first is None else first - call.submitted_at,
                total=now - call.submitted_at,
            ),
            request_id=outcome.request_id or output.response_id,
            models_tried=tuple(self.models_tried),
            corrections=self.corrected,
            stop_sequence=output.stop_sequence,
            logprobs=output.logprobs,
            system_fingerprint=output.system_fingerprint,
            service_tier=output.service_tier,
        )


async def _run_attempt(
    route: Call, attempt: int, ticket: int, progress: AttemptProgress, hedge: float | None = None
) -> AttemptOutcome | None:
    """Hand the attempt to its provider; None when the provider died without an answer.

    The provider closes ``reply_to`` when its attempt task ends, answered or not, so a crash
    shows here as the end of the channel rather than a wait forever.
    """
    reply_to, reply = trio.open_memory_channel[AttemptOutcome](1)
    with reply_to, reply:
        try:
            await put(
                route.provider_mailbox,
                StartAttempt(route, attempt, ticket, progress, reply_to, hedge),
            )
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return None
        try:
            return await reply.receive()
        except trio.EndOfChannel:
            return None


def _forced_calls(call: Call, result: ChatResult) -> list[CallEvent]:
    """For a tool call forced through the reply's text, the finalized calls as
    ``ToolCallDelta`` events (the provider withheld the envelope text: see
    :class:`~sluice._tools.streaming.ForcedReplyDeltas`), so a consumer that builds tool calls
    from deltas sees them; nothing for every other call."""
    if call.prepared is None or call.prepared.plan is None:
        return []
    from sluice._tools.streaming import whole_call_deltas  # loaded by calls with tools only

    return [*whole_call_deltas(call.call_id, result.tool_calls)]
