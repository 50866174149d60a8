"""The whole runtime on its default hot path: sluice's HTTP/1.1 transport, real HTTP bytes to
the simulator's server over in-memory streams, virtual time."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import sluice
from sluice import ChatRequest, RateLimitConfig, RetryConfig, RuntimeConfig, TextDelta
from sluice._config import ProviderConfig
from sluice._events import Admitted, FirstToken, StreamReset
from sluice.simulator import SimulatorApp, SimulatorConfig

from .helpers import collect, memory_transport, virtual_deadline


def config(**limits) -> RuntimeConfig:
    return RuntimeConfig(
        providers={"sim": ProviderConfig(rate_limit=RateLimitConfig(**limits))},
        retry=RetryConfig(jitter=0.0),
    )


@virtual_deadline(60)
async def test_streamed_call_over_the_fast_transport(autojump_clock, nursery):
    app = SimulatorApp(SimulatorConfig(ttft=0.5, tokens_per_second=10, output_tokens=5))
    transport = memory_transport(app, nursery)
    async with sluice.open_runtime(config(), transport=transport) as rt:
        events, call = await collect(rt, "sim:sim-small", "Say hi")
        again = await rt.chat("sim:sim-small", "Say hi", stream=False)
    assert call.result is not None
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == call.result.text
    assert call.result.timings.time_to_first_token == 0.5
    assert call.result.timings.total == pytest.approx(0.9)
    assert again.text == call.result.text
    assert transport.statistics().connections == 1  # kept alive and reused
    await transport.aclose()


@virtual_deadline(60)
async def test_pending_slot_hand_over_over_the_fast_transport(autojump_clock, nursery):
    app = SimulatorApp(SimulatorConfig(ttft=1.0, tokens_per_second=10, output_tokens=21))
    results: dict[str, list] = {}
    async with sluice.open_runtime(
        config(max_pending=1), transport=memory_transport(app, nursery)
    ) as rt:

        async def run(name: str) -> None:
            results[name], _ = await collect(rt, "sim:sim-small", name)

        async with trio.open_nursery() as calls:
            calls.start_soon(run, "first")
            await trio.testing.wait_all_tasks_blocked()
            calls.start_soon(run, "second")
    second_admitted = next(e.at for e in results["second"] if isinstance(e, Admitted))
    first_token = next(e.at for e in results["first"] if isinstance(e, FirstToken))
    assert second_admitted == first_token == 1.0


@virtual_deadline(60)
async def test_disconnect_mid_stream_resets_then_completes_over_the_fast_transport(
    autojump_clock, nursery
):
    app = SimulatorApp(SimulatorConfig(script=("disconnect:3",), tokens_per_second=20))
    async with sluice.open_runtime(config(), transport=memory_transport(app, nursery)) as rt:
        events, call = await collect(rt, "sim:sim-small", "story")
        clean = await rt.chat("sim:sim-small", "story")
    assert any(isinstance(e, StreamReset) for e in events)
    assert call.result is not None and call.result.attempts == 2
    assert call.result.text == clean.text


@virtual_deadline(60)
async def test_consumer_leaving_early_over_the_fast_transport(autojump_clock, nursery):
    app = SimulatorApp(SimulatorConfig(ttft=0.5, tokens_per_second=10, output_tokens=30))
    transport = memory_transport(app, nursery)
    async with sluice.open_runtime(config(), transport=transport) as rt:
        async with rt.stream(ChatRequest(model="sim:sim-small", messages="leaver")) as call:
            async for event in call:
                if isinstance(event, TextDelta):
                    break
        after = await rt.chat("sim:sim-small", "after")
        stats = await rt.statistics()
    assert after.finish_reason == "stop"
    assert stats.attempts_in_flight == {"sim": 0}
    assert stats.quotas["sim"].open_streams == 0
    # the abandoned response's connection was closed, never returned to the pool
    assert transport.statistics().in_use == 0
    await transport.aclose()
