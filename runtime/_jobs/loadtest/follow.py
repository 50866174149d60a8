"""Following one load-test request: its events read into a :class:`~.metrics.Tracker`, and
the record of how it ended (with the transport's HTTP phases and the error's details)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from ..._errors import CallError, SluiceError
from ..._events import (
    Admitted,
    ReasoningDelta,
    Retrying,
    StreamReset,
    TextDelta,
    ToolCallDelta,
    UsageReported,
)
from .metrics import estimate_tokens

if TYPE_CHECKING:
    from ..._messages import ChatResult
    from ..._runtime import CallStream
    from ...transport._phases import HttpPhases
    from .metrics import RequestRecord, Tracker

__all__ = ["error_fields", "finished", "follow", "http_fields"]


async def follow(call: CallStream, tracker: Tracker, origin: float) -> bool:
    """Read ``call``'s events into ``tracker`` (times relative to ``origin``, the run's
    start on trio's clock); True when the provider reported usage.

    The clock is read once per batch: a batch is what one network read decoded (or several,
    when the reader fell behind), so its deltas share one arrival time and the tracker
    merges them into one chunk whose tokens split the gap since the previous read. Reading
    the clock per event would give the first of them the whole gap and the rest gaps of a
    few microseconds: the time this loop took, not anything the server did."""
    usage_seen = False
    now = trio.current_time
    while (batch := await call.next_events()) is not None:
        at = now() - origin
        tokens = 0  # the batch's output, handed to the tracker once (it merges them anyway)
        for event in batch:
            match event:
                case TextDelta(text=text) | ReasoningDelta(text=text):
                    tokens += estimate_tokens(text)
                case ToolCallDelta(arguments=text):
                    tokens += estimate_tokens(text)
                case Admitted(waited=waited, at=admitted):
                    tracker.queue_wait += waited
                    tracker.admitted = admitted - origin
                case Retrying(delay=delay):
                    tracker.retry_wait += delay
                case UsageReported():
                    usage_seen = True
                case StreamReset():  # what came before it in the batch is dropped too
                    tokens = 0
                    tracker.reset()
        tracker.tokens(at, tokens)
    return usage_seen


def finished(
    tracker: Tracker,
    end: float,
    result: ChatResult | None,
    error: SluiceError | None,
    usage_seen: bool,
    described: dict[str, Any],
) -> RequestRecord:
    """The record of a request that ended at ``end`` with ``result`` or ``error``."""
    if result is None:
        return tracker.finish(
            end,
            input_tokens=None,
            output_tokens=None,
            ok=False,
            **error_fields(error),
            **described,
        )
    usage = result.usage
    reported = usage_seen or usage.output_tokens > 0
    return tracker.finish(
        end,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens if reported else None,
        ok=True,
        attempts=result.attempts,
        request_id=result.request_id,
        **described,
    )


def http_fields(phases: HttpPhases) -> dict[str, Any]:
    """The record's ``http_*`` fields from what the transport noted."""
    return {
        "http_connect": phases.connect,
        "http_headers": phases.time_to_headers,
        "http_receive": phases.receive,
        "http_reused": phases.reused,
    }


def error_fields(error: SluiceError | None) -> dict[str, Any]:
    if error is None:
        return {"error_type": "RuntimeClosed", "error": "the call ended without a result"}
    if isinstance(error, CallError):
        return {
            "status": error.status,
            "error_type": error.error_type or error.kind,
            "error": error.message,
            "attempts": max(error.attempt, 1),
            "request_id": error.request_id,
        }
    return {"error_type": type(error).__name__, "error": str(error)}
