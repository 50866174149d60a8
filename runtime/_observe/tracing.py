"""OpenTelemetry traces: one span per call, a child span per attempt when there were several.

Loaded only when tracing is enabled (and ``opentelemetry-api`` installed). A call's span runs
from submit to the consumer having the call's end; it carries the GenAI attributes.

A call that made one attempt (the common call) is that one span: the attempt's span would have
repeated it (same model, same outcome, nearly the same times), and trace backends bill and store
per span. What the attempt said that the call does not is added to it: a lost attempt's usage,
its error type (and its error as the span's status when the call has none). An attempt that
started :data:`ADMITTED_EVENT_AFTER` or more after submit waited for admission: a
``sluice.admitted`` event at its start keeps that wait visible. A call of no attempt (it failed
before one) is one span too.

A call of two or more attempts has, besides its span, a child span per attempt (``attempt N``),
from the provider taking it to its outcome: there is something to tell apart. What happened
between attempts shows as events on the call's span, told apart by the previous attempt's
outcome: ``sluice.retry`` (it failed), ``sluice.fallback`` (the next attempt goes to another
model) and ``sluice.correction`` (it succeeded, but its tool calls broke the request's
contract). ``sluice.stream_reset`` (an attempt failed after deltas reached the consumer) is on
the call's span whatever the count.

The spans are made when the call ends, with the start and end times the call recorded on
trio's clock (converted to the wall clock then): while a call runs, the tracer keeps a few
numbers per attempt and nothing of the SDK's. That is the cheap way to trace. An SDK span is a
dozen objects that, held for a call's life, survive the garbage collector's young generations and
make its full collections more frequent; made and ended in one go they die young. The exported
spans are the same; what differs is that a span processor's ``on_start`` sees each span at the
call's end, not at its start. Each span gets its attributes whole at its start (the SDK checks
them once, and a sampler sees them). The trace's parent is the OpenTelemetry context current
where the call was submitted. An attempt still running when its call ends (the consumer left)
ends with it, as ``abandoned``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

if TYPE_CHECKING:
    from sluice._errors import SluiceError
    from sluice._mail import Call
    from sluice._messages import ChatResult, Usage

    from .records import Outcome

__all__ = ["ADMITTED_EVENT_AFTER", "Tracer"]

ADMITTED_EVENT_AFTER = 0.001
"""Seconds of trio's clock from submit to a one-attempt call's attempt starting from which its
span gets a ``sluice.admitted`` event: a wait for admission (a quota, a concurrency limit, a
cooldown, or a process so busy that trio's scheduler came round late) stays visible. Under it
the attempt went out as the call was handed on, the span's start says when, and the event
would only be the SDK's work (about a tenth of a span's)."""


class _Attempt:
    """What one attempt did, on trio's clock, until its call's spans are made."""

    __slots__ = (
        "delivered",
        "ended",
        "error",
        "number",
        "outcome",
        "provider",
        "request_model",
        "started",
        "usage",
    )

    def __init__(self, number: int, call: Call, started: float) -> None:
        self.number = number
        self.provider = call.provider.name
        self.request_model = call.model
        """With ``provider``: an attempt to another model than the last is a fallback."""
        self.started = started
        self.ended: float | None = None
        self.outcome: Outcome = "abandoned"
        self.error: SluiceError | None = None
        self.usage: Usage | None = None
        self.delivered = 0


class _CallTrace:
    __slots__ = ("attempts", "parent")

    def __init__(self, parent: Any) -> None:
        self.parent = parent
        """The OpenTelemetry context where the call was submitted (its span's parent)."""
        self.attempts: list[_Attempt] = []


class Tracer:
    """Keeps what each open call's attempts did, by call id, and traces the call at its end."""

    def __init__(self, provider: Any = None) -> None:
        self._tracer = trace.get_tracer("sluice", tracer_provider=provider)
        self._calls: dict[str, _CallTrace] = {}

    def call_started(self, call: Call) -> None:
        self._calls[call.call_id] = _CallTrace(otel_context.get_current())

    def attempt_started(self, call: Call, attempt: int, now: float) -> _Attempt | None:
        """The attempt's record, to hand back to :meth:`attempt_ended`; None for a call not
        traced. ``now``: trio's clock."""
        state = self._calls.get(call.call_id)
        if state is None:
            return None
        record = _Attempt(attempt, call, now)
        state.attempts.append(record)
        return record

    def attempt_ended(
        self,
        record: _Attempt,
        now: float,
        outcome: Outcome,
        error: SluiceError | None,
        usage: Usage | None,
        delivered: int,
    ) -> None:
        """The attempt ended at ``now`` (trio's clock)."""
        record.ended = now
        record.outcome = outcome
        record.error = error
        record.usage = usage
        record.delivered = delivered

    def call_ended(
        self,
        call: Call,
        outcome: Outcome,
        result: ChatResult | None,
        error: SluiceError | None,
        now: float,
    ) -> None:
        """The call's consumer has its end at ``now`` (trio's clock): make its spans, one for a
        call of at most one attempt, else the call's and one per attempt."""
        state = self._calls.pop(call.call_id, None)
        if state is None:
            return
        offset = time.time_ns() - int(now * 1e9)  # trio's clock to the wall clock, in ns
        attributes = _call_attributes(call, outcome, result, error)
        attempts = state.attempts
        if len(attempts) > 1:
            self._call_and_attempts(call, state, attributes, error, now, offset)
            return
        attempt = attempts[0] if attempts else None
        if attempt is not None and attempt.outcome != "ok":  # an attempt that won adds nothing
            _add_single_attempt(attributes, attempt)
        span = self._call_span(call, state, attributes, offset)
        end = int(now * 1e9) + offset
        if attempt is not None:  # a span the sampler left out ignores events and status
            if attempt.started - call.submitted_at >= ADMITTED_EVENT_AFTER:
                span.add_event("sluice.admitted", None, int(attempt.started * 1e9) + offset)
            if attempt.error is not None:
                if attempt.delivered:
                    _stream_reset(span, attempt, end, offset)
                if error is None:
                    error = attempt.error
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, str(error)))
        span.end(end_time=end)

    def _call_span(
        self, call: Call, state: _CallTrace, attributes: dict[str, Any], offset: int
    ) -> Any:
        """The call's span, started at its submission (``offset``: trio's clock to the wall
        clock, in ns) under the context it was submitted in."""
        return self._tracer.start_span(
            f"chat {call.model}",
            context=state.parent,
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=int(call.submitted_at * 1e9) + offset,
        )

    def _call_and_attempts(
        self,
        call: Call,
        state: _CallTrace,
        attributes: dict[str, Any],
        error: SluiceError | None,
        now: float,
        offset: int,
    ) -> None:
        """The spans of a call of several attempts: the call's, a child per attempt, and the
        events between attempts on the call's."""
        end = int(now * 1e9) + offset
        span = self._call_span(call, state, attributes, offset)
        if not span.is_recording():  # the sampler left this trace out: so are its attempts
            span.end(end_time=end)
            return
        parent = trace.set_span_in_context(span)
        previous: _Attempt | None = None
        for attempt in state.attempts:
            started = int(attempt.started * 1e9) + offset
            if previous is not None:
                _between(span, previous, attempt, started)
            ended = end if attempt.ended is None else int(attempt.ended * 1e9) + offset
            if attempt.error is not None and attempt.delivered:
                _stream_reset(span, attempt, end, offset)
            child = self._tracer.start_span(
                f"attempt {attempt.number}",
                context=parent,
                kind=SpanKind.CLIENT,
                attributes=_attempt_attributes(attempt),
                start_time=started,
            )
            if attempt.error is not None:
                child.set_status(Status(StatusCode.ERROR, str(attempt.error)))
            child.end(end_time=ended)
            previous = attempt
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, str(error)))
        span.end(end_time=end)


def _stream_reset(span: Any, attempt: _Attempt, end: int, offset: int) -> None:
    """The event on the call's span for an attempt that failed after deltas reached the
    consumer, at the attempt's end (the call's, for an attempt still running then)."""
    span.add_event(
        "sluice.stream_reset",
        {
            "sluice.events_delivered": attempt.delivered,
            "error.type": type(attempt.error).__name__,
        },
        end if attempt.ended is None else int(attempt.ended * 1e9) + offset,
    )


def _between(span: Any, previous: _Attempt, attempt: _Attempt, at: int) -> None:
    """The event on the call's span that says why ``attempt`` followed ``previous``."""
    if (previous.provider, previous.request_model) != (attempt.provider, attempt.request_model):
        before = f"{previous.provider}:{previous.request_model}"
        after = f"{attempt.provider}:{attempt.request_model}"
        span.add_event("sluice.fallback", {"from": before, "to": after}, at)
    elif previous.outcome == "ok":
        span.add_event("sluice.correction", {"sluice.attempt": attempt.number}, at)
    else:
        error = previous.error
        span.add_event(
            "sluice.retry",
            {
                "sluice.attempt": attempt.number,
                "error.type": type(error).__name__ if error is not None else "",
            },
            at,
        )


def _call_attributes(
    call: Call, outcome: Outcome, result: ChatResult | None, error: SluiceError | None
) -> dict[str, Any]:
    """The call span's attributes: the request's, then what came of it (GenAI conventions)."""
    request = call.request
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": call.provider.name,
        "gen_ai.request.model": call.model,
        "sluice.call_id": call.call_id,
        "sluice.outcome": outcome,
    }
    if request.max_tokens is not None:
        attributes["gen_ai.request.max_tokens"] = request.max_tokens
    if request.temperature is not None:
        attributes["gen_ai.request.temperature"] = request.temperature
    if request.top_p is not None:
        attributes["gen_ai.request.top_p"] = request.top_p
    if result is not None:
        attributes["gen_ai.response.model"] = result.model
        if result.provider != call.provider.name:
            attributes["sluice.provider"] = result.provider
        attributes["gen_ai.response.finish_reasons"] = (result.finish_reason,)
        if result.request_id:
            attributes["gen_ai.response.id"] = result.request_id
        attributes["gen_ai.usage.input_tokens"] = result.usage.input_tokens
        attributes["gen_ai.usage.output_tokens"] = result.usage.output_tokens
    if error is not None:
        attributes["error.type"] = type(error).__name__
    return attributes


def _add_single_attempt(attributes: dict[str, Any], attempt: _Attempt) -> None:
    """Adds to a one-attempt call's attributes what its attempt's span would have said and the
    call's does not: a lost attempt's usage and the attempt's error type (a winning attempt's
    span said nothing more). Its model and outcome are the call's, and ``sluice.attempt`` would
    always be 1."""
    usage = attempt.usage
    if (
        usage is not None
        and attempt.outcome != "ok"
        and "gen_ai.usage.input_tokens" not in attributes
    ):
        attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
        attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
    if attempt.error is not None and "error.type" not in attributes:
        attributes["error.type"] = type(attempt.error).__name__


def _attempt_attributes(attempt: _Attempt) -> dict[str, Any]:
    """Few attributes (the SDK checks each one): the call's span holds the rest. The winning
    attempt's usage is on the call's span; a lost attempt's is only here."""
    attributes: dict[str, Any] = {
        "gen_ai.request.model": attempt.request_model,
        "sluice.attempt": attempt.number,
        "sluice.outcome": attempt.outcome,
    }
    usage = attempt.usage
    if usage is not None and attempt.outcome != "ok":
        attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
        attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
    if attempt.error is not None:
        attributes["error.type"] = type(attempt.error).__name__
    return attributes
