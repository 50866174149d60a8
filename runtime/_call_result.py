"""A chat call's result, built from the attempt that won: pure, so the Supervisor only hands
over what it counted (attempts, models tried, corrections) and the times it read; and read back
from a quiet call's final batch (:func:`outcome_of`, what ``Runtime.chat`` and ``map`` give)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._errors import RuntimeClosed
from ._events import Completed
from ._messages import ChatResult, Timings, Usage

if TYPE_CHECKING:
    from ._errors import SluiceError
    from ._events import CallEvent
    from ._mail import AttemptSucceeded, Call, EventBatch
    from ._protocols.base import AttemptOutput

__all__ = ["call_timings", "chat_result", "forced_call_deltas", "outcome_of"]


def call_timings(call: Call, outcome: AttemptSucceeded, admitted_at: float, now: float) -> Timings:
    """A call's timings, each counted from its submission: queued until the winning attempt's
    admission, the first token (None when none came), the whole call until ``now``."""
    first = outcome.first_token_at
    return Timings(
        queued=admitted_at - call.submitted_at,
        time_to_first_token=None if first is None else first - call.submitted_at,
        total=now - call.submitted_at,
    )


def chat_result(
    call: Call,
    route: Call,
    outcome: AttemptSucceeded,
    output: AttemptOutput,
    *,
    attempts: int,
    models_tried: tuple[str, ...],
    corrections: int,
    admitted_at: float,
    now: float,
) -> ChatResult:
    """The result of ``call`` (as first submitted) won by ``route`` (the model that answered)
    with the finalized ``output``, ended at ``now``: the timings count from the submission,
    the usage is never None (an empty :class:`Usage` when the provider sent none), and the
    request id is the transport's, else the reply body's."""
    return ChatResult(
        call_id=call.call_id,
        provider=route.provider.name,
        model=route.model,
        message=output.message,
        finish_reason=output.finish_reason,
        raw_finish_reason=output.raw_finish_reason,
        usage=output.usage if output.usage is not None else Usage(),
        attempts=attempts,
        timings=call_timings(call, outcome, admitted_at, now),
        request_id=outcome.request_id or output.response_id,
        models_tried=models_tried,
        corrections=corrections,
        stop_sequence=output.stop_sequence,
        logprobs=output.logprobs,
        system_fingerprint=output.system_fingerprint,
        service_tier=output.service_tier,
    )


def forced_call_deltas(call: Call, result: ChatResult) -> list[CallEvent]:
    """For a tool call forced through the reply's text, the finalized calls as
    ``ToolCallDelta`` events (the provider withheld the envelope text: see
    :class:`~sluice._tools.streaming.ForcedReplyDeltas`), so a consumer that builds tool calls
    from deltas sees them; nothing for every other call."""
    if call.prepared is None or call.prepared.plan is None:
        return []
    from ._tools.streaming import whole_call_deltas  # loaded by calls with tools only

    return [*whole_call_deltas(call.call_id, result.tool_calls)]


def outcome_of(
    batch: EventBatch, call_id: str
) -> tuple[ChatResult, None] | tuple[None, SluiceError]:
    """A quiet call's result or error from its one final batch (empty: the call ended without
    one, the runtime having stopped), as :class:`~sluice._cursor.EventCursor` reads it."""
    last = batch[-1] if batch else None
    if isinstance(last, Completed):
        return last.result, None
    from ._events import Failed  # (with the first call that did not complete)

    if isinstance(last, Failed):
        return None, last.error
    return None, RuntimeClosed(f"call {call_id} ended without a result")
