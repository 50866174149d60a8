"""OpenTelemetry traces, checked with the SDK's in-memory exporter."""

from __future__ import annotations

from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from collections.abc import Mapping

    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.util.types import AnyValue


def attrs(item: ReadableSpan | Event) -> Mapping[str, AnyValue]:
    """A span's or an event's attributes, which the SDK always records (never ``None``)."""
    assert item.attributes is not None
    return item.attributes


def start(span: ReadableSpan) -> int:
    assert span.start_time is not None
    return span.start_time


def end(span: ReadableSpan) -> int:
    assert span.end_time is not None
    return span.end_time


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
    attempts = sorted((s for s in spans if s.parent is not None), key=start)
    assert len(spans) == 3 and len(attempts) == 2
    assert call.context is not None
    assert all(s.parent is not None and s.parent.span_id == call.context.span_id for s in attempts)
    trace_id = call.context.trace_id
    assert all(s.context is not None and s.context.trace_id == trace_id for s in attempts)

    assert call.name == "chat sim-small" and call.kind is SpanKind.CLIENT
    a = attrs(call)
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
    assert attrs(call.events[0])["error.type"] == "ServerError"
    assert attrs(call.events[0])["sluice.attempt"] == 2

    first, second = attempts
    assert first.name == "attempt 1" and second.name == "attempt 2"
    assert attrs(first)["error.type"] == "ServerError"
    assert attrs(first)["sluice.outcome"] == "error"
    assert first.status.status_code is StatusCode.ERROR
    assert attrs(second)["sluice.outcome"] == "ok"
    assert "gen_ai.usage.output_tokens" not in attrs(second)  # the call span has it
    assert "error.type" not in attrs(second)

    # The spans carry trio's clock: the retry waited out its backoff between the two attempts,
    # inside the call's span, and the second attempt streamed for as long as the server took.
    def at(t: int) -> float:
        return round((t - start(call)) / 1e9, 6)

    # The 500 came at once; the backoff was 0.5 s; TTFT 0.2 s and 5 gaps of 20 ms followed.
    assert [at(start(first)), at(end(first))] == [0.0, 0.0]
    assert [at(start(second)), at(end(second)), at(end(call))] == [0.5, 0.8, 0.8]
    assert at(call.events[0].timestamp) == 0.5


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
    reset, failed = sorted(roots, key=start)
    assert [e.name for e in reset.events] == ["sluice.stream_reset", "sluice.retry"]
    assert attrs(reset.events[0])["error.type"] == "StreamBroken"
    assert failed.status.status_code is StatusCode.ERROR
    assert attrs(failed)["error.type"] == "BadRequest"
    assert attrs(failed)["sluice.outcome"] == "error"


async def test_tracing_off_by_default_starts_no_span(autojump_clock):
    provider, exporter = tracing()
    async with sluice.open_runtime(
        RuntimeConfig(), transport=mock_transport(), tracer_provider=provider
    ) as rt:
        await rt.chat("sim:sim-small", "hi")
        await trio.lowlevel.checkpoint()
    assert exporter.get_finished_spans() == ()


@virtual_deadline(60)
async def test_the_call_span_is_a_child_of_the_submitters_span_and_a_left_stream_ends_it(
    autojump_clock,
):
    provider, exporter = tracing()
    sim = SimulatorConfig(ttft=0.1, tokens_per_second=10, output_tokens=20)
    config = RuntimeConfig(tracing=TracingConfig(enabled=True))
    tracer = provider.get_tracer("app")  # type: ignore[attr-defined]
    async with sluice.open_runtime(
        config, transport=mock_transport(sim), tracer_provider=provider
    ) as rt:
        with tracer.start_as_current_span("request handler") as outer:
            async with rt.stream("sim:sim-small", "tell me a story") as call:
                async for _ in call:
                    break  # leave after the first delta: the attempt is still streaming
            await trio.sleep(1)  # the provider notices and stops; nothing more is traced
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"request handler", "chat sim-small"}  # one attempt: one span
    chat = spans["chat sim-small"]
    assert chat.parent is not None and chat.parent.span_id == outer.get_span_context().span_id
    assert attrs(chat)["sluice.outcome"] == "abandoned"
    assert "error.type" not in attrs(chat) and chat.status.status_code is StatusCode.UNSET
    assert round((end(chat) - start(chat)) / 1e9, 6) == 0.1  # left at the first delta


@virtual_deadline(60)
async def test_a_trace_the_sampler_leaves_out_records_no_span_of_any_shape(autojump_clock):
    """A retried call, a one-attempt call and one that waited for admission: none recorded."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sim = SimulatorConfig(script=("500",), ttft=0.1)
    config = RuntimeConfig(
        providers={"sim": ProviderConfig(rate_limit=RateLimitConfig(max_open_streams=1))},
        retry=RetryConfig(jitter=0.0),
        tracing=TracingConfig(enabled=True),
    )
    async with sluice.open_runtime(
        config, transport=mock_transport(sim), tracer_provider=provider
    ) as rt:
        retried = await rt.chat("sim:sim-small", "hello")
        results = []
        async with trio.open_nursery() as nursery:
            for text in ("first", "second"):

                async def one(text: str = text) -> None:
                    results.append(await rt.chat("sim:sim-small", text))

                nursery.start_soon(one)
    assert retried.attempts == 2
    assert [r.attempts for r in results] == [1, 1]
    assert sorted(round(r.timings.queued, 6) for r in results) == [0.0, 0.1]  # one waited
    assert exporter.get_finished_spans() == ()


@virtual_deadline(60)
async def test_sampling_as_documented_follows_the_parent_and_drops_untraced_root_calls(
    autojump_clock,
):
    """The README's sampling recipe: ``ParentBased(TraceIdRatioBased(ratio))`` on the tracer
    provider. A call made inside a traced request is traced with it whatever the ratio; root
    calls are kept at the ratio (here 0: none), each left out at the cost of one unrecorded
    span."""
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.0)))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app_provider, app_exporter = tracing()  # the application's own, recording every request
    app = app_provider.get_tracer("app")  # type: ignore[attr-defined]
    config = RuntimeConfig(tracing=TracingConfig(enabled=True))
    async with sluice.open_runtime(
        config, transport=mock_transport(), tracer_provider=provider
    ) as rt:
        for _ in range(20):
            await rt.chat("sim:sim-small", "a root call")
        with app.start_as_current_span("request handler") as outer:
            await rt.chat("sim:sim-small", "inside a traced request")
    finished = exporter.get_finished_spans()
    # only the call with a traced parent: its span (one attempt, so no attempt span)
    (chat,) = finished
    assert chat.name == "chat sim-small"
    assert chat.parent is not None and chat.parent.span_id == outer.get_span_context().span_id
    assert [s.name for s in app_exporter.get_finished_spans()] == ["request handler"]


@virtual_deadline(60)
async def test_a_call_of_one_attempt_is_one_span_with_the_calls_attributes(autojump_clock):
    """The common call: its attempt's span would repeat the call's, so there is none, and an
    attempt that started at once adds no event."""
    provider, exporter = tracing()
    sim = SimulatorConfig(ttft=0.2, tokens_per_second=50, output_tokens=6)
    config = RuntimeConfig(tracing=TracingConfig(enabled=True))
    async with sluice.open_runtime(
        config, transport=mock_transport(sim), tracer_provider=provider
    ) as rt:
        result = await rt.chat("sim:sim-small", "hello", max_tokens=50, top_p=0.9)
    assert result.attempts == 1
    (call,) = exporter.get_finished_spans()
    assert call.name == "chat sim-small" and call.kind is SpanKind.CLIENT
    assert call.parent is None
    assert dict(attrs(call)) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": "sim",
        "gen_ai.request.model": "sim-small",
        "sluice.call_id": result.call_id,
        "sluice.outcome": "ok",
        "gen_ai.request.max_tokens": 50,
        "gen_ai.request.top_p": 0.9,
        "gen_ai.response.model": "sim-small",
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.response.id": result.request_id,
        "gen_ai.usage.input_tokens": result.usage.input_tokens,
        "gen_ai.usage.output_tokens": 6,
    }
    assert call.events == () and call.status.status_code is StatusCode.UNSET
    assert round((end(call) - start(call)) / 1e9, 6) == 0.3  # TTFT 0.2 s, 5 gaps of 20 ms


@virtual_deadline(60)
async def test_a_one_attempt_call_that_waited_for_admission_has_an_admitted_event(
    autojump_clock,
):
    """One open stream at a time: the second call waits for the first to end (0.3 s), and
    its span says when its attempt was admitted; the first, admitted at once, says nothing."""
    provider, exporter = tracing()
    sim = SimulatorConfig(ttft=0.2, tokens_per_second=50, output_tokens=6)
    config = RuntimeConfig(
        providers={"sim": ProviderConfig(rate_limit=RateLimitConfig(max_open_streams=1))},
        tracing=TracingConfig(enabled=True),
    )
    async with (
        sluice.open_runtime(config, transport=mock_transport(sim), tracer_provider=provider) as rt,
        trio.open_nursery() as nursery,
    ):
        for text in ("first", "second"):
            nursery.start_soon(rt.chat, "sim:sim-small", text)
    first, second = sorted(exporter.get_finished_spans(), key=end)
    assert all(s.name == "chat sim-small" and s.parent is None for s in (first, second))
    # (each call's times go to the wall clock at its own end: compare within one span only)
    assert first.events == ()
    assert round((end(first) - start(first)) / 1e9, 6) == 0.3
    (admitted,) = second.events
    assert admitted.name == "sluice.admitted" and dict(attrs(admitted)) == {}
    assert round((admitted.timestamp - start(second)) / 1e9, 6) == 0.3
    assert round((end(second) - start(second)) / 1e9, 6) == 0.6


@virtual_deadline(60)
async def test_a_one_attempt_call_that_broke_mid_stream_is_one_span_saying_so(autojump_clock):
    """With no retry left, the attempt's error, its stream reset and the usage it was charged
    (the call has no result to carry it) are on the call's one span."""
    provider, exporter = tracing()
    sim = SimulatorConfig(script=("disconnect:3",), ttft=0.1, tokens_per_second=50)
    config = RuntimeConfig(retry=RetryConfig(max_attempts=1), tracing=TracingConfig(enabled=True))
    records: list[sluice.AttemptRecord] = []
    hooks = sluice.Hooks(on_attempt_end=records.append)
    async with (
        sluice.open_runtime(
            config, transport=mock_transport(sim), tracer_provider=provider, hooks=hooks
        ) as rt,
        rt.stream("sim:sim-small", "tell me a story") as call,
    ):
        events = [event async for event in call]
    (record,) = records
    assert record.usage is not None and record.usage.output_tokens > 0
    assert isinstance(events[-1], sluice.Failed)
    assert isinstance(events[-1].error, sluice.StreamBroken)
    deltas = sum(isinstance(event, sluice.TextDelta) for event in events)
    (span,) = exporter.get_finished_spans()
    assert attrs(span)["error.type"] == "StreamBroken"
    assert attrs(span)["sluice.outcome"] == "error"
    assert "sluice.attempt" not in attrs(span)
    assert attrs(span)["gen_ai.usage.input_tokens"] == record.usage.input_tokens
    assert attrs(span)["gen_ai.usage.output_tokens"] == record.usage.output_tokens
    assert span.status.status_code is StatusCode.ERROR
    (reset,) = span.events
    assert reset.name == "sluice.stream_reset"
    assert dict(attrs(reset)) == {"sluice.events_delivered": deltas, "error.type": "StreamBroken"}
    assert deltas == 2  # "disconnect:3": the connection broke in the third chunk
