"""Hooks run off the hot path: a hook that raises or sleeps changes no call's result or timing."""

from __future__ import annotations

import random

import trio

import sluice
from sluice import CallRecord, Hooks, MetricsConfig, RateLimitConfig, RetryConfig, RuntimeConfig
from sluice._config import ProviderConfig
from sluice.simulator import SimulatorConfig, mock_transport

from .helpers import virtual_deadline

# Two calls fail once and are retried; calls start 0.13 s apart, so that no two requests
# ever reach the simulator at the same virtual instant (whose order trio would shuffle).
SCRIPT = ("ok", "500", "ok", "500")


def config() -> RuntimeConfig:
    return RuntimeConfig(
        providers={"sim": ProviderConfig(rate_limit=RateLimitConfig(cooldown_jitter=0.0))},
        retry=RetryConfig(jitter=0.0),
        metrics=MetricsConfig(enabled=True),
    )


async def run_calls(hooks: Hooks | None):
    """Ten calls, staggered, through one runtime; what each call returned, and when."""
    sim = SimulatorConfig(script=SCRIPT, ttft=0.3, tokens_per_second=20, output_tokens=8)
    outcomes: dict[int, tuple] = {}
    async with sluice.open_runtime(
        config(), transport=mock_transport(sim), rng=random.Random(7), hooks=hooks
    ) as rt:

        async def one(i: int) -> None:
            await trio.sleep(i * 0.13)
            started = trio.current_time()
            result = await rt.chat("sim:sim-small", f"call {i}")
            t = result.timings
            # Rounded: the second run starts later on the virtual clock, so the same
            # durations differ in the last bits of their floats.
            outcomes[i] = (
                result.text,
                result.attempts,
                result.usage,
                tuple(round(x, 9) for x in (t.queued, t.time_to_first_token or -1, t.total)),
                round(trio.current_time() - started, 9),
            )

        async with trio.open_nursery() as nursery:
            for i in range(10):
                nursery.start_soon(one, i)
    # After the runtime's end, which gives the hooks what is still queued.
    assert rt.metrics is not None
    return outcomes, rt.hook_statistics(), rt.metrics.render().decode()


@virtual_deadline(120)
async def test_a_raising_hook_and_a_sleeping_hook_change_no_call(autojump_clock):
    baseline, _, _ = await run_calls(None)

    seen: list[CallRecord] = []
    slept: list[int] = []

    def explode(record: CallRecord) -> None:
        seen.append(record)
        raise RuntimeError("a broken hook")

    async def dawdle(record: sluice.AttemptRecord) -> None:
        await trio.sleep(1.0)
        slept.append(record.attempt)

    hooks = Hooks(on_call_end=explode, on_attempt_end=dawdle, queue_size=3)
    hooked, stats, rendered = await run_calls(hooks)

    assert hooked == baseline  # same results, same timings, to the last virtual microsecond
    assert len(baseline) == 10
    # The raising hook saw every call and failed each time; the sleeping one fell behind and
    # lost records, counted, instead of holding anything up.
    assert len(seen) == 10 and stats["failed"] == 10
    assert {r.outcome for r in seen} == {"ok"}
    assert sorted(r.attempts for r in seen) == [1] * 8 + [2] * 2
    assert stats["dropped"] > 0
    assert len(slept) + stats["dropped"] == 12  # every attempt: kept or counted as dropped
    assert f"sluice_hook_drops_total {float(stats['dropped'])}" in rendered
    assert "sluice_hook_errors_total 10.0" in rendered


@virtual_deadline(60)
async def test_call_records_hold_a_summary_and_never_the_key(autojump_clock):
    records: list[CallRecord] = []
    cfg = RuntimeConfig(
        providers={"sim": ProviderConfig(api_key=sluice.Secret("sk-very-secret"))}
    )
    async with sluice.open_runtime(
        cfg, transport=mock_transport(), hooks=Hooks(on_call_end=records.append)
    ) as rt:
        result = await rt.chat("sim:sim-small", "hello there", tag="t1")
    (record,) = records
    assert record.call_id == result.call_id and record.result == result
    assert (record.provider, record.model, record.tag, record.messages) == (
        "sim", "sim-small", "t1", 1,
    )
    assert record.outcome == "ok" and record.error is None
    assert record.usage == result.usage and record.duration == result.timings.total
    assert "sk-very-secret" not in repr(record)


async def test_hooks_still_run_when_the_quotas_live_in_redis(redis_url):
    """A store named by the config (not passed in) reopens the runtime over it: the hooks (and
    the tracer) must come along, not be dropped on the way."""
    records: list[CallRecord] = []
    cfg = RuntimeConfig(store=redis_url, store_prefix="hooks-through-redis")
    with trio.fail_after(30):
        async with sluice.open_runtime(
            cfg, transport=mock_transport(), hooks=Hooks(on_call_end=records.append)
        ) as rt:
            result = await rt.chat("sim:sim-small", "hello")
    assert [r.call_id for r in records] == [result.call_id]
