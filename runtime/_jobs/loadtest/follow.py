"""Following one load-test request: its events read into a :class:`~.metrics.Tracker`, and
the record of how it ended (with the transport's HTTP phases and the error's details)."""

from __future__ import annotations

from itertools import compress, repeat
from operator import attrgetter, is_, not_
from typing import TYPE_CHECKING, Any

import trio

from ..._errors import CallError, SluiceError
from ..._events import (
    Admitted,
    Completed,
    Failed,
    FallingBack,
    FirstToken,
    Queued,
    ReasoningDelta,
    ReasoningSignature,
    Retrying,
    StreamReset,
    TextDelta,
    ToolCallDelta,
    UsageReported,
)
from ..._streams import Followed
from .metrics import estimate_tokens

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ..._mail import EventBatch
    from ..._messages import ChatRequest, ChatResult
    from ..._runtime import CallStream, Runtime
    from ...transport._phases import HttpPhases
    from .handover import Handed
    from .metrics import RequestRecord, Tracker

__all__ = [
    "Follower",
    "error_fields",
    "finished",
    "follow",
    "follow_call",
    "http_fields",
    "read_batch",
]


class Follower(Followed):
    """Follows one load-test request as its events arrive (see :class:`~sluice._streams.Followed`):
    each batch, what one network read decoded, is read into the tracker stamped with the
    moment it was put, right after that read, with one clock read; ``usage_seen`` once the
    provider reported usage. The request's task is not woken per batch, only at the end."""

    def __init__(
        self, tracker: Tracker, origin: float, now: Callable[[], float] | None = None
    ) -> None:
        super().__init__()
        self.tracker = tracker
        self.origin = origin
        self.usage_seen = False
        self.now = now or trio.current_time
        """Reads trio's clock (the run's clock's own reading: fewer calls per batch)."""

    def read(self, batch: EventBatch) -> None:
        origin = self.origin
        if read_batch(self.tracker, batch, self.now() - origin, origin):
            self.usage_seen = True


async def follow(call: CallStream, tracker: Tracker, origin: float) -> bool:
    """Read ``call``'s events into ``tracker`` (times relative to ``origin``, the run's
    start on trio's clock); True when the provider reported usage. For a call with a
    channel (one answered from the response cache); the others are followed by a
    :class:`Follower` as their events arrive.

    The clock is read once per batch: a batch is what one network read decoded (or several,
    when the reader fell behind), so its deltas share one arrival time and the tracker
    merges them into one chunk whose tokens split the gap since the previous read. Reading
    the clock per event would give the first of them the whole gap and the rest gaps of a
    few microseconds: the time this loop took, not anything the server did."""
    usage_seen = False
    now = trio.current_time
    while (batch := await call.next_events()) is not None:
        if read_batch(tracker, batch, now() - origin, origin):
            usage_seen = True
    return usage_seen


async def follow_call(
    rt: Runtime,
    request: ChatRequest,
    phases: HttpPhases,
    follower: Follower,
    handed: Handed | None,
) -> tuple[float, ChatResult | None, SluiceError | None, bool]:
    """Send ``request`` (or take the call :mod:`.handover` submitted, ``handed``) and follow
    it to its end: when it ended (run-relative), its result or error, and whether usage was
    reported. ``follower`` reads its events as they arrive and is ended with a plain
    try/finally (no context manager's calls per request); only a call through the response
    cache is read from its channel. Raises what the submission raises."""
    origin = follower.origin
    submitted = (
        handed.submitted()
        if handed is not None
        else await rt.submit_followed(request, phases, follower)
    )
    if submitted is None:  # through the response cache
        async with rt.stream_with_phases(request, phases) as call:
            usage_seen = await follow(call, follower.tracker, origin)
            return trio.current_time() - origin, call.result, call.error, usage_seen
    try:
        await follower.next_events()  # read as they arrived: None at the end
    finally:
        rt.end_followed(submitted, follower)
    end = follower.now() - origin
    return end, follower.result, follower.error, follower.usage_seen


def read_batch(tracker: Tracker, batch: EventBatch, at: float, origin: float) -> bool:
    """Read ``batch``, arrived at ``at`` (``origin``: the run's start), into ``tracker``;
    True when it reports usage. Its output is handed to the tracker once (it merges a
    read's pieces anyway). Text deltas, by far the most common events, are picked out and
    counted by :func:`estimate_tokens`'s rule in C (:func:`text_tokens`), without a step of
    Python per delta; a batch with a :class:`StreamReset` is read event by event, since
    what came before the reset is dropped."""
    kinds = list(map(type, batch))
    texts = kinds.count(TextDelta)
    if texts == len(kinds):
        tracker.tokens(at, text_tokens(map(_TEXT, batch)))
        return False
    if StreamReset in kinds:
        return _read_each(tracker, batch, at, origin)
    tokens = 0
    if texts:
        tokens = text_tokens(map(_TEXT, compress(batch, map(is_, kinds, repeat(TextDelta)))))
    usage_seen = False
    for event in compress(batch, map(not_, map(_PASSED.__contains__, kinds))):
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
    tracker.tokens(at, tokens)
    return usage_seen


_TEXT = attrgetter("text")
_PASSED = frozenset(
    {TextDelta, Queued, FirstToken, ReasoningSignature, FallingBack, Completed, Failed}
)
"""The event types :func:`read_batch` passes over in its loop: text deltas (counted apart)
and those that tell the tracker nothing (no case of the loop matches them)."""


def text_tokens(texts: Iterable[str]) -> int:
    """The sum of :func:`estimate_tokens` over ``texts`` (0 for an empty one, else its
    whitespace-separated words, at least 1), counted by C functions alone."""
    return sum(map(max, repeat(1), map(len, map(str.split, filter(None, texts)))))


def _read_each(tracker: Tracker, batch: EventBatch, at: float, origin: float) -> bool:
    """:func:`read_batch` one event at a time, in order."""
    tokens = 0
    usage_seen = False
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
