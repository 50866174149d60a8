"""The Supervisor: owns every call from submission to its one final event.

For each submitted call it runs one task that asks the RateLimiter for admission, hands the
attempt to the call's ProviderActor, and decides what a failure means: retry after a backoff
(the provider's Retry-After as a floor), or give up. A retry after deltas already reached the
consumer emits ``StreamReset`` first, so the consumer can discard the partial output; the final
result holds only the winning attempt. Every call ends with exactly one ``Completed`` or
``Failed``, unless its consumer left first.
"""

from __future__ import annotations

import random

import attrs
import trio

from sluice.backoff import retry_delay
from sluice.config import RetryConfig
from sluice.errors import CallError, CallTimeout, RateLimited
from sluice.events import Admitted, CallEvent, Completed, Failed, Queued, Retrying, StreamReset
from sluice.mail import (
    AttemptFailed,
    AttemptOutcome,
    AttemptSucceeded,
    Call,
    ConsumerGone,
    RecordCall,
    Settle,
    StartAttempt,
    Submit,
    SupervisorMsg,
)
from sluice.messages import ChatResult, Timings, Usage

from .rate_limiter import RateLimiterHandle
from .token_ledger import TokenLedgerHandle

__all__ = ["SupervisorPeers", "run_supervisor"]


@attrs.frozen(eq=False)
class SupervisorPeers:
    limiter: RateLimiterHandle
    ledger: TokenLedgerHandle
    retry: RetryConfig
    rng: random.Random


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
            async for msg in inbox:
                match msg:
                    case Submit(call=call):
                        calls.start_soon(_supervise, peers, call, name=f"call {call.call_id}")


async def _supervise(peers: SupervisorPeers, call: Call) -> None:
    """Run ``call`` to its end; always closes the consumer's stream."""
    async with call.events:
        try:
            await _attempts(peers, call)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the consumer left; its attempt (if any) was already abandoned


async def _attempts(peers: SupervisorPeers, call: Call) -> None:
    send = call.events.send
    attempt = 0
    while True:
        attempt += 1
        queued_at = trio.current_time()
        await send((Queued(call.call_id, attempt, queued_at),))
        admission = None
        with trio.move_on_at(call.deadline):
            try:
                admission = await peers.limiter.acquire(
                    call.provider.quota_key(call.model),
                    call.provider.rate_limit,
                    call.cost,
                    call.request.priority,
                )
            except CallError as refused:
                error = refused.in_context(
                    call_id=call.call_id,
                    provider=call.provider.name,
                    model=call.model,
                    attempt=attempt,
                )
                await _fail(peers, call, error, attempt)
                return
        if admission is None:
            error = CallTimeout(
                "the call's total deadline passed while it waited for admission",
                timeout_kind="total",
            ).in_context(
                call_id=call.call_id, provider=call.provider.name, model=call.model, attempt=attempt
            )
            await _fail(peers, call, error, attempt)
            return
        try:
            await send((Admitted(call.call_id, attempt, admission.at, admission.at - queued_at),))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            await peers.limiter.settle(Settle(admission.ticket, "failed", Usage()))
            raise
        outcome = await _run_attempt(call, attempt, admission.ticket)
        match outcome:
            case AttemptSucceeded():
                result = _result(call, outcome, attempt, admission.at)
                await peers.ledger.record(RecordCall(call.provider.name, call.model, True, attempt))
                await send((Completed(call.call_id, result),))
                return
            case ConsumerGone():
                return
            case AttemptFailed(error=error, delivered=delivered):
                delay = _retry_delay(peers, call, error, attempt)
                if delay is None:
                    await _fail(peers, call, error, attempt)
                    return
                events: list[CallEvent] = []
                if delivered:
                    events.append(StreamReset(call.call_id, attempt, error.message))
                events.append(Retrying(call.call_id, attempt, delay, error))
                await send(events)
                await trio.sleep(delay)


def _retry_delay(
    peers: SupervisorPeers, call: Call, error: CallError, attempt: int
) -> float | None:
    """The backoff before the next attempt, or None when the call should fail now."""
    policy = peers.retry
    if not error.retryable or attempt >= policy.max_attempts:
        return None
    if isinstance(error, CallTimeout) and error.timeout_kind == "total":
        return None
    retry_after = error.retry_after if isinstance(error, RateLimited) else None
    if retry_after is not None and retry_after > policy.max_retry_after:
        return None
    delay = retry_delay(attempt, policy, peers.rng, retry_after)
    if trio.current_time() + delay >= call.deadline:
        return None
    return delay


async def _run_attempt(call: Call, attempt: int, ticket: int) -> AttemptOutcome:
    reply_to, reply = trio.open_memory_channel[AttemptOutcome](1)
    with reply_to, reply:
        await call.provider_mailbox.send(StartAttempt(call, attempt, ticket, reply_to))
        return await reply.receive()


async def _fail(peers: SupervisorPeers, call: Call, error: CallError, attempt: int) -> None:
    await peers.ledger.record(RecordCall(call.provider.name, call.model, False, attempt))
    await call.events.send((Failed(call.call_id, error),))


def _result(call: Call, outcome: AttemptSucceeded, attempts: int, admitted_at: float) -> ChatResult:
    output = outcome.output
    now = trio.current_time()
    ttft = None if outcome.first_token_at is None else outcome.first_token_at - call.submitted_at
    return ChatResult(
        call_id=call.call_id,
        provider=call.provider.name,
        model=call.model,
        message=output.message,
        finish_reason=output.finish_reason,
        raw_finish_reason=output.raw_finish_reason,
        usage=output.usage if output.usage is not None else Usage(),
        attempts=attempts,
        timings=Timings(
            queued=admitted_at - call.submitted_at,
            time_to_first_token=ttft,
            total=now - call.submitted_at,
        ),
        request_id=outcome.request_id or output.response_id,
    )
