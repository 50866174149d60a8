"""What the OpenTelemetry SDK alone costs for the spans sluice makes, measured by replaying them.

``benchmarks.overhead --observed`` compares a runtime with metrics and tracing on against one
with them off. That difference mixes sluice's own work with the SDK's. To tell them apart, the
benchmark collects the spans the observed runtime really made (after its measured rounds, so
the collecting does not touch them) and hands them here: :func:`replay_cost` makes the same
spans again (same names, kinds, attributes, events, status, parents and times) through a fresh
SDK tracer provider with the same sampler, in a tight loop with nothing of sluice's around, and
returns the CPU per call. That is the SDK's floor for what sluice asks of it; inside a running
runtime it costs more (its code and data are no longer hot in the CPU's caches).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.sampling import Sampler

__all__ = ["SpanCollector", "replay", "replay_cost", "whole_calls"]


class SpanCollector(SpanProcessor):
    """Keeps the first ``limit`` spans that end."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        if len(self.spans) < self.limit:
            self.spans.append(span)


def whole_calls(spans: list[ReadableSpan]) -> list[tuple[ReadableSpan, list[ReadableSpan]]]:
    """Each call's span with its attempts' spans (none for a call of one attempt), in start
    order. A call's attempt spans end before its own, so a call span the collector kept comes
    with all of them; attempt spans whose call span the collector's limit cut off are left
    out."""
    roots: dict[int, ReadableSpan] = {}
    children: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        context = span.get_span_context()
        assert context is not None
        if span.parent is None:
            roots[context.span_id] = span
        else:
            children.setdefault(span.parent.span_id, []).append(span)
    return [
        (root, sorted(children.get(span_id, ()), key=lambda s: s.start_time or 0))
        for span_id, root in roots.items()
    ]


def _start(tracer: Any, span: ReadableSpan, context: Any) -> Any:
    return tracer.start_span(
        span.name,
        context=context,
        kind=span.kind,
        attributes=dict(span.attributes or {}),
        start_time=span.start_time,
    )


def _end(made: Any, span: ReadableSpan) -> None:
    if not span.status.is_ok:
        made.set_status(span.status)
    made.end(end_time=span.end_time)


def replay(calls: list[tuple[ReadableSpan, list[ReadableSpan]]], tracer: Any) -> None:
    """Makes each call's spans again through ``tracer``, in the order sluice makes them."""
    for root, attempts in calls:
        made = _start(tracer, root, None)
        for event in root.events:
            made.add_event(event.name, dict(event.attributes or {}), event.timestamp)
        parent = trace.set_span_in_context(made)
        for attempt in attempts:
            _end(_start(tracer, attempt, parent), attempt)
        _end(made, root)


def replay_cost(spans: list[ReadableSpan], sampler: Sampler, rounds: int = 5) -> float | None:
    """CPU seconds per call to make the calls' spans again through a new SDK provider
    (median of ``rounds`` passes); None if ``spans`` holds no whole call."""
    calls = whole_calls(spans)
    if not calls:
        return None
    tracer = TracerProvider(sampler=sampler).get_tracer("sluice")

    def one_pass() -> float:
        started = time.process_time()
        replay(calls, tracer)
        return (time.process_time() - started) / len(calls)

    one_pass()  # warm-up
    costs = sorted(one_pass() for _ in range(rounds))
    return costs[len(costs) // 2]
