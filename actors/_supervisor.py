"""The Supervisor: owns every call from submission to its one final event.

For each submitted call it runs one task that, model by model (the call's model, then its
fallbacks), asks the circuit breaker and the RateLimiter for admission, hands the attempt to the
model's ProviderActor, and carries out what :func:`sluice._call_step.step` decides after each
attempt: retry after a backoff (the provider's wait as a floor, the process-wide retry budget
permitting), correct a tool call, resubmit an attempt a crashed actor lost, fail over or fall
back to the next model, finish, or give up. A retry or move after deltas reached the consumer
emits ``StreamReset`` first, so the consumer can discard the partial output; the final result
holds only the winning attempt.

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
from typing import TYPE_CHECKING, assert_never

import attrs
import trio

import sluice._call_step as steps
import sluice._errors as errors
import sluice._events as events
from sluice._breaker import NO_TICKET, Ticket
from sluice._call_result import chat_result, forced_call_deltas
from sluice._call_step import LEFT, READY, Go, Leave, Left, Tries, Won, first_tries, step
from sluice._errors import CallError, ConnectionFailed, InternalError, SluiceError
from sluice._events import Completed
from sluice._ledger.hold import BudgetClaim
from sluice._mail import (
    Admission,
    AttemptOutcome,
    AttemptSucceeded,
    Call,
    RecordCall,
    Settle,
    StartAttempt,
    Submit,
    SupervisorMsg,
)
from sluice._messages import ChatResult
from sluice._reply import Reply
from sluice._routing import breaker_mark

from ._breakers import breaker_for, breaker_key, circuit_open, share_if_open
from ._tell import put, take

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice._call_step import Ending, Seen
    from sluice._embeddings import EmbedResult
    from sluice._events import CallEvent
    from sluice._mail_rare import AttemptFailed, AttemptLost, ConsumerGone
    from sluice._protocols.base import AttemptOutput
    from sluice._retry_policy import CallState

    from ._doors import SupervisorDoor
    from ._supervisor_peers import SupervisorPeers

__all__ = ["run_supervisor"]

log = logging.getLogger("sluice.supervisor")


async def run_supervisor(
    peers: SupervisorPeers,
    inbox: trio.MemoryReceiveChannel[SupervisorMsg],
    *,
    door: SupervisorDoor | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Supervise submitted calls; return when the inbox closes and every call has ended.
    ``door``: the senders' side of ``inbox``, whose submissions start their calls in this
    actor's nursery directly while it runs (see :class:`~sluice.actors._doors.SupervisorDoor`)."""
    # The run's clock, read directly (``trio.current_time`` takes three calls to find it).
    clock = trio.lowlevel.current_clock().current_time
    count = peers.in_flight
    async with trio.open_nursery() as calls:

        def start(call: Call) -> None:
            calls.start_soon(_supervise, peers, call, clock, name=call.call_id)
            count.value += 1  # counted from its start, so the door sees a burst as it comes

        if door is not None:
            door.open(start, count)
        task_status.started()
        try:
            await _serve(inbox, start)
        finally:
            if door is not None:
                door.shut()


async def _serve(
    inbox: trio.MemoryReceiveChannel[SupervisorMsg], start: Callable[[Call], None]
) -> None:
    """The mailbox loop: what arrives in the mailbox (not through the door) starts here."""
    async with inbox:
        while True:
            try:
                msg = await take(inbox)
            except trio.EndOfChannel:
                return
            match msg:
                case Submit(call=call):
                    start(call)


async def _supervise(peers: SupervisorPeers, call: Call, clock: Callable[[], float]) -> None:
    """Run ``call`` to its end; always closes the consumer's stream. ``clock`` reads the
    run's time (``trio.current_time``, found once).

    As few frames as the logic allows between the call's task and its wait: each is held for
    as long as the call's stream is open.
    """
    try:  # counted in by the start that made this task
        try:
            run = _CallRun(peers, call, clock)
            await (run.run() if call.group is None else run.run_in_group())
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the consumer left; its attempt (if any) was already abandoned
        except Exception as exc:
            if not peers.catch_bugs:
                raise
            await _fail_on_bug(call, exc)  # before the stream closes: it carries Failed
    finally:
        # A plain close (a channel's `async with` would add a checkpoint per call); a quiet
        # call's one-shot end is no context manager.
        call.events.close()
        peers.in_flight.value -= 1


async def _fail_on_bug(call: Call, exc: Exception) -> None:
    """The one place a bug is caught: it fails this call, never its siblings."""
    log.exception("bug while supervising call %s", call.call_id, exc_info=exc)
    error = InternalError(
        f"sluice failed internally ({type(exc).__name__}); see the log"
    ).in_context(call_id=call.call_id, provider=call.provider.name, model=call.model, attempt=0)
    try:
        await put(call.events, (events.Failed(call.call_id, error),))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


class _CallRun:
    """One call's way through its models and attempts: :func:`sluice._call_step.step`
    decides each next move; this class carries the decisions out."""

    def __init__(self, peers: SupervisorPeers, call: Call, clock: Callable[[], float]) -> None:
        self.peers = peers
        self.call = call
        self.clock = clock
        """Reads the run's time: what ``trio.current_time`` returns, in one call."""
        self.attempt = 0
        self.models_tried: tuple[str, ...] = ()
        self.pending: tuple[CallEvent, ...] = ()
        """Events not yet sent: they go out with the next batch, whoever sends it. A tuple, as
        ``models_tried``: an empty one is no object of the call's own (a quiet call's stays
        empty), and a call lives long enough for each of its objects to cost the collector."""
        self.corrected = 0
        """Correction retries so far, over every model (not counted as transport attempts)."""
        self.deployment = call.request.model
        """A group's call: the deployment it is counted on (it moves on failover)."""
        self.backend_ttft: float | None = None
        """Admission to first token of the winning attempt (the backend's own latency)."""

    async def _emit(self, *said: CallEvent) -> None:
        """Send the pending events and ``said`` to the consumer as one batch (to a quiet
        consumer only the call's end: nothing is ever pending for it)."""
        if self.call.quiet:
            ends = [e for e in said if _is_end(e)]
            if ends:
                await put(self.call.events, ends)
            return
        batch = [*self.pending, *said]
        self.pending = ()
        if batch:
            await put(self.call.events, batch)

    async def _start_over(self, reset: bool, error: CallError, *said: CallEvent) -> None:
        """Tell the consumer the attempt starts over: ``StreamReset`` first when it had
        deltas to discard, then ``said`` (nothing at all when there is nothing to say)."""
        if reset:
            said = (events.StreamReset(self.call.call_id, self.attempt, error.message), *said)
        if said:
            await self._emit(*said)

    def _fix(self, error: CallError, route: Call) -> CallError:
        return error.in_context(
            call_id=route.call_id,
            provider=route.provider.name,
            model=route.model,
            attempt=self.attempt,
        )

    async def run_in_group(self) -> None:
        """:meth:`run` for a group's call: counted in flight on its deployment until it ends,
        on every path."""
        group, routing = self.call.group, self.peers.routing
        assert group is not None and routing is not None
        try:
            await self.run()
        finally:
            routing.finished(group, self.deployment, self.backend_ttft, None, self.clock())

    async def run(self) -> None:
        call, peers = self.call, self.peers
        peers.budget.first_attempt(self.clock())
        route = call
        chain = (call.request.model, *call.request.fallbacks)
        # A range, not enumerate: its iterator is no object the collector tracks, and this
        # loop lasts as long as the call.
        for index in range(len(chain)):
            model = chain[index]
            if index > 0:
                try:
                    route = await self._reroute(model)
                except SluiceError as exc:
                    error = exc if isinstance(exc, CallError) else CallError(str(exc))
                    await self._fail(self._fix(error, route))
                    return
            self.models_tried = (*self.models_tried, f"{route.provider.name}:{route.model}")
            last = index + 1 == len(chain)
            tries = first_tries(call.request.waits and last, index + 1 < call.failover, not last)
            match await self._through_model(route, tries):
                case Won(result=result):
                    await peers.ledger.record(
                        RecordCall(
                            route.provider.name, route.model, True, self.attempt, call.request.tag
                        )
                    )
                    if isinstance(result, ChatResult):
                        await self._emit(
                            *forced_call_deltas(route, result), Completed(call.call_id, result)
                        )
                    else:  # an embedding call's
                        await self._emit(events.Embedded(call.call_id, result))
                    return
                case Leave():
                    return
                # The setbacks' patterns come last: looking their classes up loads them
                # (sluice._call_setbacks), which a call that ends otherwise never needs.
                case steps.MoveOn(error=error, reset=reset, failover=failover, refused=refused):
                    self.attempt += refused  # a refused attempt counts, as its error says
                    if failover:
                        assert peers.routing is not None and call.group is not None
                        now = self.clock()
                        peers.routing.moved(call.group, model, chain[index + 1], now, error)
                        self.deployment = chain[index + 1]
                    moving = events.FallingBack(call.call_id, model, chain[index + 1], error)
                    await self._start_over(reset, error, moving)
                case steps.GiveUp(error=error, refused=refused):
                    self.attempt += refused
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
        await self._emit(events.Failed(self.call.call_id, error))

    async def _through_model(self, route: Call, tries: Tries) -> Ending:
        """Attempts against one model until :func:`~sluice._call_step.step` ends the call's
        time on it: a result, a failure to move on with or end with, or the consumer leaving.

        The step decides; this loop carries its decisions out (an attempt, a pause, what a
        retry, correction or resubmission tells the consumer) and tells it what it saw. With
        ``tries.fails_over`` an attempt that does not answer within the group's hedge time is
        given up, for the call to move to the next deployment.
        """
        peers, call = self.peers, self.call
        budget = peers.budget
        hedge = None
        if tries.fails_over:
            assert peers.routing is not None and call.group is not None
            hedge = peers.routing.groups[call.group].hedge or None
        seen: Seen = READY
        while True:
            if seen is READY and call.abandoned:
                seen = LEFT  # the consumer left while the call waited
            now = self.clock()
            decision = step(tries, seen, now, self._state, budget.free_in, peers.retry, peers.rng)
            match decision:
                case Go(spend_retry=spend):
                    if spend:
                        budget.try_retry(now)  # free_in(now) was 0: there is room
                    seen = await self._go(route, tries, hedge, now)
                    if isinstance(seen, Won):
                        return seen  # the step's decision after a win: no need to ask it
                    continue
                case Won() | Leave() | steps.MoveOn() | steps.GiveUp():
                    return decision  # (Won and Leave first: see run)
                case steps.Pause(delay=delay, tries=tries):
                    await self._pause(delay)
                case steps.Retry(
                    delay=delay, error=error, reset=reset, spend_retry=spend, tries=tries
                ):
                    if spend:
                        budget.try_retry(now)
                    retrying = events.Retrying(call.call_id, self.attempt, delay, error)
                    await self._start_over(reset, error, retrying)
                    await self._pause(delay)
                case steps.Correct(error=error, reset=reset, tries=tries):
                    self.corrected += 1
                    retrying = events.Retrying(call.call_id, self.attempt, 0.0, error)
                    await self._start_over(reset, error, retrying)
                case steps.Resubmit(error=error, reset=reset, tries=tries):
                    await self._start_over(reset, error)
            seen = READY

    async def _pause(self, delay: float) -> None:
        """Sleep ``delay`` seconds, or less if the consumer leaves meanwhile (a waiting call
        may pause for long: an abandoned one must not linger)."""
        control = self.call.control
        with trio.CancelScope(deadline=self.clock() + delay) as pause:
            control.watch(pause)
            try:
                await trio.sleep_forever()
            finally:
                control.unwatch()

    def _state(self, waits: bool) -> CallState:
        from sluice._retry_policy import call_state  # only slow paths ask

        call = self.call
        state = call_state(
            call.request,
            self.peers.retry,
            self.attempt - self.corrected,
            call.submitted_at,
            call.deadline,
        )
        return state if waits or not state.waits else attrs.evolve(state, waits=False)

    async def _go(self, route: Call, tries: Tries, hedge: float | None, now: float) -> Seen:
        """One attempt, if the breaker lets it through (looked up per attempt: between
        attempts no ticket holds it, so an idle breaker may have been forgotten, and one made
        afresh in its place): admission, then the attempt, its ticket given its verdict on the
        backend when there is one. ``hedge``: the attempt is given up when no answer came
        within that many seconds. ``now``: the step's time, which is still the time.

        One method from the breaker to the wait for the attempt's answer, and the ticket
        settled by ``finally`` rather than a ``with`` block (whose bound ``__exit__`` it would
        hold): the call's task holds every frame and object here while its attempt runs."""
        breaker = breaker_for(self.peers.breakers, route.provider, route.model, now)
        ticket = NO_TICKET
        if breaker is not None:
            admitted = breaker.admit(now)
            if admitted is None:
                wait = breaker.retry_in(now)
                refusal = circuit_open(f"{route.provider.name}:{route.model}", breaker, wait)
                return steps.Refused(self._fix(refusal, route), wait)
            ticket = admitted
        self.attempt += 1
        try:  # settles on every exit: a verdict in _seen, or none (frees a probe)
            admission = await self._admit(route, tries, now)
            if not isinstance(admission, Admission):
                return admission
            sent = route
            if tries.corrections.messages:
                assert route.prepared is not None
                sent = attrs.evolve(route, request=tries.corrections.apply(route.prepared))
            if admission.max_tokens is not None:
                # A budget near its end pays for only this much output (see _ledger.budget).
                capped = attrs.evolve(sent.request, max_tokens=admission.max_tokens)
                sent = attrs.evolve(sent, request=capped)
            lead = self.pending
            self.pending = ()
            # The attempt runs under a scope made here and watched as what the call waits on,
            # so a consumer that leaves cancels it. The provider closes the reply when its
            # attempt task ends, so an actor that died before starting it shows as the end of
            # the reply: an attempt lost with nothing delivered.
            control = self.call.control
            scope = trio.CancelScope()
            reply: Reply[AttemptOutcome] = Reply()  # not Reply[...](): see sluice._reply
            control.watch(scope)
            try:
                await put(
                    sent.provider_mailbox,
                    StartAttempt(sent, self.attempt, admission.ticket, lead, scope, reply, hedge),
                )
                outcome = await reply.receive()
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.EndOfChannel):
                from sluice._mail_rare import AttemptLost  # the provider's actor is gone

                outcome = AttemptLost(0)
            finally:
                reply.leave()
                control.unwatch()
            if not _lead_went_out(outcome):
                self.pending = lead  # no first chunk carried them: they go with the next batch
            return self._seen(route, ticket, admission, outcome)
        finally:
            ticket.release()

    async def _admit(
        self, route: Call, tries: Tries, now: float
    ) -> Admission | steps.Failure | steps.WaitedOut | Left:
        """Wait for the RateLimiter's admission (asked at ``now``). A call that can move to
        another deployment (``tries.fails_over``) does not wait out a cooldown; a waiting call
        stops at its ``max_wait``; a consumer that leaves stops the wait."""
        peers, call = self.peers, self.call
        quiet = call.quiet  # its consumer never sees Queued or Admitted: none is made
        if not quiet:
            self.pending = (*self.pending, events.Queued(call.call_id, self.attempt, now))
        waits = tries.waits
        # A waiting call stops waiting for admission at its max_wait (computed only then: this
        # is every call's path).
        deadline = self._state(waits).wait_until if waits else call.deadline
        # No cancel scope of its own: the RateLimiter gives the ask up at the deadline, and a
        # consumer that leaves stops the wait through the control (see acquire_until).
        try:
            admission = await peers.limiter.acquire_until(
                route.provider.quota_key(route.model),
                route.provider.rate_limit,
                call.cost,
                call.request.priority,
                budget=None
                if peers.ledger.budget_book is None  # no budget: nobody to charge
                else BudgetClaim(
                    route.provider.name,
                    route.model,
                    call.request.tag,
                    output_set=route.request.max_tokens is not None,
                ),
                fail_on_cooldown=tries.fails_over or not call.request.retry_visible,
                wait_for_store=deadline if waits else None,
                give_up_at=deadline,
                control=call.control,
                asked=now,
            )
        except CallError as refused:
            return steps.Failure(self._fix(refused, route), 0)
        if call.abandoned:
            if admission is not None:
                await peers.limiter.settle(Settle(admission.ticket, "failed", unused=True))
            return LEFT
        if admission is None:
            return self._not_admitted(route)
        if quiet:
            return admission
        admitted = events.Admitted(call.call_id, self.attempt, admission.at, admission.at - now)
        self.pending = (*self.pending, admitted)
        if admission.at > now:
            # It waited: tell the consumer now. Otherwise Queued and Admitted ride along
            # with the first chunk, saving the consumer two wake-ups per call.
            try:
                await self._emit()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                await peers.limiter.settle(Settle(admission.ticket, "failed", unused=True))
                raise
        return admission

    def _not_admitted(self, route: Call) -> steps.Failure | steps.WaitedOut:
        """The wait for admission ran out: the call's max_wait, or its total deadline."""
        from sluice._errors import CallTimeout  # loaded by the first wait that runs out

        call = self.call
        if self.clock() < call.deadline:
            waited = CallTimeout(
                f"the call waited longer than its max_wait ({call.request.max_wait} s)"
                " for admission",
                timeout_kind="total",
            )
            return steps.WaitedOut(self._fix(waited, route))
        error = CallTimeout(
            "the call's total deadline passed while it waited for admission",
            timeout_kind="total",
        )
        return steps.Failure(self._fix(error, route), 0)

    def _seen(
        self, route: Call, ticket: Ticket, admission: Admission, outcome: AttemptOutcome
    ) -> Seen:
        """What the step is told of ``outcome``; ``ticket`` gets the backend's verdict."""
        match outcome:
            case AttemptSucceeded():
                now = self.clock()
                ticket.succeeded(now)
                if route.embed is not None:
                    return Won(self._embed_result(route, outcome, admission.at))
                try:
                    output = self._finalize(route, outcome.output)  # type: ignore[arg-type]
                except errors.ToolCallError as exc:  # (looked up only when one was raised)
                    assert route.prepared is not None
                    fixed = self._fix(exc, route)
                    assert isinstance(fixed, errors.ToolCallError)
                    return steps.Misfired(fixed, route.prepared, outcome.delivered)
                return Won(self._result(route, outcome, output, admission.at, now))
            case _:
                return self._setback(route, ticket, outcome)

    def _setback(
        self, route: Call, ticket: Ticket, outcome: AttemptFailed | ConsumerGone | AttemptLost
    ) -> Seen:
        """The attempt failed, its consumer left, or it was lost (their classes load with the
        first: sluice._mail_rare)."""
        from sluice._mail_rare import AttemptFailed, AttemptLost, ConsumerGone

        match outcome:
            case AttemptFailed(error=error, delivered=delivered):
                if self.call.abandoned:
                    # The consumer left as the attempt failed (its cancel may surface as a
                    # failure of the exchange): nobody waits for a retry.
                    return LEFT
                from sluice._retry_policy import blames_backend, describe  # after a failure

                if blames_backend(error):
                    ticket.failed(self.clock(), describe(error))
                    self._share_breaker(route)
                return steps.Failure(error, delivered)
            case ConsumerGone():
                return LEFT
            case AttemptLost(delivered=delivered):
                lost = ConnectionFailed("the attempt was lost when its actor crashed")
                return steps.Lost(self._fix(lost, route), delivered)
            case _:
                assert_never(outcome)

    def _share_breaker(self, route: Call) -> None:
        """After a failure of ``route``'s backend, with a shared store: an open breaker is
        passed over by every process (not on every call's path: only after a failure)."""
        peers = self.peers
        shared = peers.routing.shared if peers.routing is not None else None
        key = breaker_key(route.provider, route.model)
        if shared is not None and key is not None:
            now = self.clock()
            breaker = breaker_for(peers.breakers, route.provider, route.model, now)
            share_if_open(shared, breaker_mark(key), breaker, now)

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

    def _embed_result(
        self, route: Call, outcome: AttemptSucceeded, admitted_at: float
    ) -> EmbedResult:
        from sluice._embed_calls import embed_result  # only embedding calls load it

        first = outcome.first_token_at
        if first is not None:
            self.backend_ttft = first - admitted_at
        return embed_result(
            self.call,
            route,
            outcome,
            attempts=self.attempt,
            models_tried=self.models_tried,
            admitted_at=admitted_at,
        )

    def _result(
        self,
        route: Call,
        outcome: AttemptSucceeded,
        output: AttemptOutput,
        admitted_at: float,
        now: float,
    ) -> ChatResult:
        """The call's result from the winning attempt and its finalized ``output``, at
        ``now``."""
        first = outcome.first_token_at
        if first is not None:
            self.backend_ttft = first - admitted_at
        return chat_result(
            self.call,
            route,
            outcome,
            output,
            attempts=self.attempt,
            models_tried=self.models_tried,
            corrections=self.corrected,
            admitted_at=admitted_at,
            now=now,
        )


def _is_end(event: CallEvent) -> bool:
    """Whether ``event`` ends a call (all a quiet consumer gets): ``Completed``, or, looked up
    only for another event, ``Failed`` or ``Embedded`` (sluice._events.rare loads then)."""
    if isinstance(event, Completed):
        return True
    return isinstance(event, (events.Failed, events.Embedded))


def _lead_went_out(outcome: AttemptOutcome) -> bool:
    """Whether the provider sent the attempt's lead events: they go in front of the reply's
    first chunk, which reached the consumer when deltas did (or, for a whole reply without
    any, when a success noted its first token)."""
    if isinstance(outcome, AttemptSucceeded):
        return outcome.first_token_at is not None
    from sluice._mail_rare import AttemptFailed, AttemptLost  # loaded by a setback

    if isinstance(outcome, AttemptFailed):
        return outcome.delivered > 0
    return not isinstance(outcome, AttemptLost) or outcome.delivered > 0  # a consumer gone: yes
