"""OpenTelemetry traces, checked with the SDK's in-memory exporter."""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel

# The SDK is a dev dependency (the runtime needs only the API, the ``otel`` extra).
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import sluice
from sluice import RateLimitConfig, RetryConfig, RuntimeConfig, TracingConfig
from sluice._config import ProviderConfig
from sluice.simulator import SimulatorConfig, mock_transport

from .helpers import virtual_deadline


def tracing() -> tuple[object, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@virtual_deadline(60)
async def test_a_call_retried_once_is_one_span_with_two_attempt_children(autojump_clock):
    provider, exporter = tracing()
    sim = SimulatorConfig(script=("500",), ttft=0.2, tokens_per_second=50, output_tokens=6)
    config = RuntimeConfig(
        providers={"sim": ProviderConfig(rate_limit=RateLimitConfig(cooldown_jitter=0.0))},
        retry=RetryConfig(jitter=0.0),
        tracing=TracingConfig(enabled=True),
    )
    async with sluice.open_runtime(
        config, transport=mock_transport(sim), tracer_provider=provider
    ) as rt:
        result = await rt.chat("sim:sim-small", "hello", max_tokens=50, temperature=0.5)
    assert result.attempts == 2

    spans = exporter.get_finished_spans()
    (call,) = [s for s in spans if s.parent is None]
    attempts = sorted((s for s in spans if s.parent is not None), key=lambda s: s.start_time)
    assert len(spans) == 3 and len(attempts) == 2
    assert all(s.parent.span_id == call.context.span_id for s in attempts)
    assert all(s.context.trace_id == call.context.trace_id for s in attempts)

    assert call.name == "chat sim-small" and call.kind is SpanKind.CLIENT
    a = call.attributes
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.system"] == "sim"
    assert a["gen_ai.request.model"] == "sim-small"
    assert a["gen_ai.request.max_tokens"] == 50
    assert a["gen_ai.request.temperature"] == 0.5
    assert a["gen_ai.response.model"] == "sim-small"
    assert a["gen_ai.response.finish_reasons"] == ("stop",)
    assert a["gen_ai.usage.input_tokens"] == result.usage.input_tokens
    assert a["gen_ai.usage.output_tokens"] == result.usage.output_tokens == 6
    assert a["sluice.call_id"] == result.call_id
    assert call.status.status_code is StatusCode.UNSET
    assert [e.name for e in call.events] == ["sluice.retry"]
    assert call.events[0].attributes["error.type"] == "ServerError"
    assert call.events[0].attributes["sluice.attempt"] == 2

    first, second = attempts
    assert first.name == "attempt 1" and second.name == "attempt 2"
    assert first.attributes["error.type"] == "ServerError"
    assert first.attributes["sluice.outcome"] == "error"
    assert first.status.status_code is StatusCode.ERROR
    assert second.attributes["sluice.outcome"] == "ok"
    assert "gen_ai.usage.output_tokens" not in second.attributes  # the call span has it
    assert "error.type" not in second.attributes
    # The retry waited out its backoff between the two attempts, inside the call's span.
    assert call.start_time <= first.start_time < first.end_time < second.start_time
    assert second.end_time <= call.end_time


@virtual_deadline(60)
async def test_a_stream_reset_and_a_failed_call_show_on_the_call_span(autojump_clock):
    provider, exporter = tracing()
    sim = SimulatorConfig(script=("disconnect:3", "ok", "400"), ttft=0.1, tokens_per_second=50)
    config = RuntimeConfig(retry=RetryConfig(jitter=0.0), tracing=TracingConfig(enabled=True))
    async with sluice.open_runtime(
        config, transport=mock_transport(sim), tracer_provider=provider
    ) as rt:
        async with rt.stream("sim:sim-small", "tell me a story") as call:
            async for _ in call:
                pass
        with pytest.raises(sluice.BadRequest):
            await rt.chat("sim:sim-small", "bad")
    roots = [s for s in exporter.get_finished_spans() if s.parent is None]
    reset, failed = sorted(roots, key=lambda s: s.start_time)
    assert [e.name for e in reset.events] == ["sluice.stream_reset", "sluice.retry"]
    assert reset.events[0].attributes["error.type"] == "StreamBroken"
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["error.type"] == "BadRequest"
    assert failed.attributes["sluice.outcome"] == "error"


async def test_tracing_off_by_default_starts_no_span(autojump_clock):
    provider, exporter = tracing()
    async with sluice.open_runtime(
        RuntimeConfig(), transport=mock_transport(), tracer_provider=provider
    ) as rt:
        await rt.chat("sim:sim-small", "hi")
        await trio.lowlevel.checkpoint()
    assert exporter.get_finished_spans() == ()
