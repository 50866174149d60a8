"""What observability adds to a call, in counts that do not depend on the machine's speed.

An observed call (metrics, tracing, or both) must take the same path as an unobserved one: the
same tasks, the same trips through trio's scheduler, no event channel; what it adds is the
observer's own work at the call's and its attempt's start and end, never per event. Each mode
runs the same calls as a plain runtime against ``tests/canned_sse_server.py`` (its own process,
every reply written in one piece), through ``Runtime.map`` and ``Runtime.chat``, and the counts
are set side by side: tasks spawned, the actors' task steps, and Python function calls
(cProfile).
"""

from __future__ import annotations

import cProfile
import pstats
from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio

# The SDK is a dev dependency (the runtime needs only the API, the ``otel`` extra).
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NoOpTracerProvider

import sluice
from sluice import ChatRequest, MetricsConfig, RuntimeConfig, TracingConfig
from sluice._config import ProviderConfig, Secret

from .call_counts import ActorCounts, canned_server

if TYPE_CHECKING:
    from collections.abc import Iterator

TEXT = "word0 word1 word2 word3 word4"
CALLS = 30
WINDOWS = 3
OWN_PYTHON_CALLS = 80
"""What sluice's own observer may add per call with metrics and tracing on (through the API's
no-op provider, so that none of it is the SDK's): a few counters and histograms, a record per
attempt and the call's trace context, all at the call's and the attempt's start and end. A call
that took the old path (an event channel, a task of its own, events made for the observer)
would add several hundred and a task."""

SDK_PYTHON_CALLS = 200
"""What the OpenTelemetry SDK may add per call on top of sluice's own work when it records every
call, each of one attempt here: one span with a dozen attributes (about 140 Python calls with
SDK 1.45). The call's span and an attempt span beside it, as every call had before, came to
about 250."""


@pytest.fixture
def canned() -> Iterator[str]:
    with canned_server() as (_, url):
        yield url


MODES: dict[str, tuple[bool, bool, Any]] = {
    "off": (False, False, None),
    "metrics": (True, False, None),
    "no-op tracing": (False, True, NoOpTracerProvider()),
    "metrics and no-op tracing": (True, True, NoOpTracerProvider()),
    "metrics and SDK tracing": (True, True, TracerProvider()),
}
"""Per mode: metrics on, tracing on, the tracer provider."""


async def _measure(url: str, mode: str, api: str) -> dict[str, Any]:
    metrics, tracing, provider = MODES[mode]
    config = RuntimeConfig(
        providers={
            "canned": ProviderConfig(
                base_url=f"{url}/v1", api_key=Secret("sk-test"), max_connections=4
            )
        }
    )
    config = attrs.evolve(
        config, metrics=MetricsConfig(enabled=metrics), tracing=TracingConfig(enabled=tracing)
    )
    request = ChatRequest(model="canned:m", messages="hi")
    async with sluice.open_runtime(config, tracer_provider=provider) as rt:

        async def calls() -> list[str | None]:
            if api == "chat":
                return [(await rt.chat(request)).text for _ in range(CALLS)]
            async with rt.map([request] * CALLS, max_in_flight=1) as outcomes:
                return [o.result.text if o.result else None async for o in outcomes]

        await calls()  # the connection open and every path warm
        windows = []
        for _ in range(WINDOWS):
            counts, profiler = ActorCounts(), cProfile.Profile()
            trio.lowlevel.add_instrument(counts)
            profiler.enable()
            try:
                texts = await calls()
            finally:
                profiler.disable()
                trio.lowlevel.remove_instrument(counts)
            assert texts == [TEXT] * CALLS
            total: int = pstats.Stats(profiler).total_calls  # type: ignore[attr-defined]
            windows.append((total, counts))
    # Tasks and steps are the same in every window; the fewest Python calls leave out a timer
    # of the runtime's that fired in another window, or a read that found no data yet.
    total, counts = min(windows, key=lambda window: window[0])
    per_call = [name for name in counts.spawned if "feed_map" not in name]
    return {
        "tasks_per_call": len(per_call) / CALLS,
        "steps": counts.steps,
        "python_calls_per_call": total / CALLS,
    }


@pytest.mark.parametrize("api", ["map", "chat"])
async def test_an_observed_call_takes_the_unobserved_path_plus_the_observers_own_work(
    canned, api
) -> None:
    """Every mode spawns the same two tasks per call and steps the actors as often as a plain
    runtime; metrics and tracing through the no-op provider add at most
    :data:`OWN_PYTHON_CALLS` Python calls per call, each part alone less than both."""
    found = {mode: await _measure(canned, mode, api) for mode in MODES}
    plain = found["off"]
    assert plain["tasks_per_call"] == 2, plain
    for mode, counted in found.items():
        assert counted["tasks_per_call"] == plain["tasks_per_call"], (mode, counted)
        assert counted["steps"] == plain["steps"], (mode, counted)
    extra = {
        m: c["python_calls_per_call"] - plain["python_calls_per_call"] for m, c in found.items()
    }
    both = extra["metrics and no-op tracing"]
    assert both <= OWN_PYTHON_CALLS, extra
    assert 0 < extra["metrics"] < both and 0 < extra["no-op tracing"] < both, extra
    # The SDK's spans are made at the call's end, in one go: they add Python calls (the SDK's
    # own), never a task or a scheduler step (checked above).
    assert extra["metrics and SDK tracing"] > both, extra
    # A call of one attempt is one span (``sluice._observe.tracing``): the SDK's part is one
    # span's work, not the call's span and its attempt's.
    assert extra["metrics and SDK tracing"] - both <= SDK_PYTHON_CALLS, extra
