"""OpenTelemetry traces: one span per call, a child span per attempt, GenAI attributes.

Loaded only when tracing is enabled (and ``opentelemetry-api`` installed). The call span starts
at submit and ends when the consumer has the call's end; each attempt's span runs from the
provider taking it to its outcome. What happened between attempts shows as events on the call
span, told apart by the previous attempt's outcome: ``sluice.retry`` (it failed),
``sluice.stream_reset`` (it failed after deltas reached the consumer), ``sluice.fallback``
(the next attempt goes to another model) and ``sluice.correction`` (it succeeded, but its tool
calls broke the request's contract).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

if TYPE_CHECKING:
    from sluice._errors import SluiceError
    from sluice._mail import Call
    from sluice._messages import ChatResult, Usage

    from .records import Outcome

__all__ = ["Tracer"]


class _CallTrace:
    __slots__ = ("context", "last_error", "last_model", "last_ok", "span")

    def __init__(self, span: Any) -> None:
        self.span = span
        self.context = trace.set_span_in_context(span)
        """The parent of the call's attempt spans (made once per call)."""
        self.last_model: str | None = None
        self.last_ok = False
        self.last_error: SluiceError | None = None


class Tracer:
    """Keeps the open call spans, by call id, until each call ends."""

    def __init__(self, provider: Any = None) -> None:
        self._tracer = trace.get_tracer("sluice", tracer_provider=provider)
        self._calls: dict[str, _CallTrace] = {}

    def open_calls(self) -> int:
        return len(self._calls)

    def call_started(self, call: Call) -> None:
        request = call.request
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": call.provider.name,
            "gen_ai.request.model": call.model,
            "sluice.call_id": call.call_id,
        }
        if request.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = request.max_tokens
        if request.temperature is not None:
            attributes["gen_ai.request.temperature"] = request.temperature
        if request.top_p is not None:
            attributes["gen_ai.request.top_p"] = request.top_p
        span = self._tracer.start_span(
            f"chat {call.model}", kind=SpanKind.CLIENT, attributes=attributes
        )
        self._calls[call.call_id] = _CallTrace(span)

    def attempt_started(self, call: Call, attempt: int) -> Any:
        """The attempt's span (a child of its call's), after the events the previous
        attempt's outcome implies; None for a call not traced."""
        state = self._calls.get(call.call_id)
        if state is None:
            return None
        parent = state.span
        model = f"{call.provider.name}:{call.model}"
        if attempt > 1:
            if state.last_model is not None and state.last_model != model:
                parent.add_event("sluice.fallback", {"from": state.last_model, "to": model})
            elif state.last_ok:
                parent.add_event("sluice.correction", {"sluice.attempt": attempt})
            else:
                error = state.last_error
                parent.add_event(
                    "sluice.retry",
                    {
                        "sluice.attempt": attempt,
                        "error.type": type(error).__name__ if error is not None else "",
                    },
                )
        state.last_model = model
        # Few attributes: the SDK validates each one; the call's span holds the rest.
        return self._tracer.start_span(
            f"attempt {attempt}",
            context=state.context,
            kind=SpanKind.CLIENT,
            attributes={"gen_ai.request.model": call.model, "sluice.attempt": attempt},
        )

    def attempt_ended(
        self,
        span: Any,
        call: Call,
        outcome: Outcome,
        error: SluiceError | None,
        usage: Usage | None,
        delivered: int,
    ) -> None:
        state = self._calls.get(call.call_id)
        if state is not None:
            state.last_ok = outcome == "ok"
            state.last_error = error
            if error is not None and delivered:
                state.span.add_event(
                    "sluice.stream_reset",
                    {"sluice.events_delivered": delivered, "error.type": type(error).__name__},
                )
        # One set_attributes: the SDK takes a lock per call.
        # The winning attempt's usage is on the call's span; a lost attempt's is only here.
        attributes: dict[str, Any] = {"sluice.outcome": outcome}
        if usage is not None and outcome != "ok":
            attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
            attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
        if error is not None:
            attributes["error.type"] = type(error).__name__
            span.set_status(Status(StatusCode.ERROR, str(error)))
        span.set_attributes(attributes)
        span.end()

    def call_ended(
        self,
        call: Call,
        outcome: Outcome,
        result: ChatResult | None,
        error: SluiceError | None,
    ) -> None:
        state = self._calls.pop(call.call_id, None)
        if state is None:
            return
        span = state.span
        attributes: dict[str, Any] = {"sluice.outcome": outcome}
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
            span.set_status(Status(StatusCode.ERROR, str(error)))
        span.set_attributes(attributes)
        span.end()
