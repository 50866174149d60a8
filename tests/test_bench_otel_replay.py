"""The overhead benchmark's replay of spans (``benchmarks._otel_replay``) makes the very spans
sluice made: otherwise its "SDK alone" number would not measure the SDK's share of a call."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON

import sluice
from benchmarks._otel_replay import SpanCollector, replay, replay_cost, whole_calls
from sluice import RetryConfig, RuntimeConfig, TracingConfig
from sluice.simulator import SimulatorConfig, mock_transport

from .helpers import virtual_deadline

if TYPE_CHECKING:
    import trio
    from opentelemetry.sdk.trace import ReadableSpan


def _shape(spans: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> list[Any]:
    """Everything a span says except its ids, in a comparable form, with its parent's name."""
    names = {s.context.span_id: s.name for s in spans if s.context is not None}
    return sorted(
        (
            s.name,
            s.kind.name,
            sorted((s.attributes or {}).items()),
            [(e.name, sorted((e.attributes or {}).items()), e.timestamp) for e in s.events],
            s.status.status_code.name,
            s.start_time,
            s.end_time,
            None if s.parent is None else names[s.parent.span_id],
        )
        for s in spans
    )


@virtual_deadline(60)
async def test_replayed_spans_are_the_spans_sluice_made(autojump_clock: trio.abc.Clock) -> None:
    provider = sdk_trace.TracerProvider()
    collector = SpanCollector(limit=100)
    provider.add_span_processor(collector)
    # One call retried after a 500, one whose stream broke after 3 deltas, one plain, one 400.
    sim = SimulatorConfig(
        script=("500", "ok", "disconnect:3", "ok", "ok", "400"), ttft=0.1, tokens_per_second=50
    )
    config = RuntimeConfig(retry=RetryConfig(jitter=0.0), tracing=TracingConfig(enabled=True))
    async with sluice.open_runtime(
        config, transport=mock_transport(sim), tracer_provider=provider
    ) as rt:
        await rt.chat("sim:sim-small", "one", max_tokens=20, temperature=0.3)
        async with rt.stream("sim:sim-small", "two") as call:
            async for _ in call:
                pass
        await rt.chat("sim:sim-small", "three")
        try:
            await rt.chat("sim:sim-small", "four")
        except sluice.BadRequest:
            pass
    made = collector.spans
    # four calls; an attempt span each for the two calls of two attempts, none for the others
    assert len(made) == 4 + 4

    calls = whole_calls(made)
    assert len(calls) == 4
    exporter = InMemorySpanExporter()
    again = sdk_trace.TracerProvider()
    again.add_span_processor(SimpleSpanProcessor(exporter))
    replay(calls, again.get_tracer("sluice"))
    assert _shape(exporter.get_finished_spans()) == _shape(made)

    cost = replay_cost(made, ALWAYS_ON, rounds=3)
    assert cost is not None and 0 < cost < 0.01
    assert replay_cost(made[:0], ALWAYS_ON) is None
