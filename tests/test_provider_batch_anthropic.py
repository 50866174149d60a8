"""The Message Batches backend against the simulator, reached as the realtime lane reaches
Anthropic (``backend_for`` over the runtime's transport): wire ids Anthropic accepts, create,
find without metadata, poll, results decoded into the realtime decoder's output, cancel.
Socket-free, on ``autojump_clock``."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import trio

import sluice
from sluice import ChatRequest, RuntimeConfig
from sluice._errors import BadRequest, ServerError
from sluice._jobs.provider_batch.anthropic import AnthropicBatchBackend, custom_id_for
from sluice._jobs.provider_batch.backends import backend_for
from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from sluice._jobs.provider_batch.backend import BatchBackend, LineOutcome, RemoteBatch


def request(i: int) -> ChatRequest:
    return ChatRequest(
        model="anthropic:sim-small", messages=f"line {i}", max_tokens=64, stream=False
    )


@contextlib.asynccontextmanager
async def anthropic_backend(
    app: SimulatorApp,
) -> AsyncIterator[tuple[sluice.Runtime, BatchBackend]]:
    environ = {"ANTHROPIC_API_KEY": "sk-ant-test-key-0000"}
    async with sluice.open_runtime(
        RuntimeConfig(), transport=mock_transport(app), environ=environ
    ) as rt:
        backend = backend_for(rt, "anthropic")
        assert isinstance(backend, AnthropicBatchBackend)
        yield rt, backend


async def wait_ended(backend: BatchBackend, batch: RemoteBatch) -> RemoteBatch:
    with trio.fail_after(100_000):
        while batch.state != "ended":
            await trio.sleep(60)
            batch = await backend.get(batch.id)
    return batch


async def collect(backend: BatchBackend, batch: RemoteBatch) -> dict[str, LineOutcome]:
    return {o.wire_id: o async for o in backend.results(batch)}


def test_wire_ids_are_what_anthropic_accepts() -> None:
    assert custom_id_for("row_17-a") == "row_17-a"
    mapped = custom_id_for("user/17 é")
    assert mapped.startswith("h-") and len(mapped) == 34
    assert custom_id_for("user/17 é") == mapped  # deterministic
    assert custom_id_for("x" * 65) != custom_id_for("x" * 66)


async def test_a_message_batch_round_trip_gives_what_the_realtime_lane_gives(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = SimulatorApp(SimulatorConfig(batch_time=600.0, seed=9))
    async with anthropic_backend(app) as (rt, backend):
        ids = [f"line {i}" for i in range(10)]  # not custom_ids Anthropic would take
        entries = [backend.entry(user_id, request(i)) for i, user_id in enumerate(ids)]
        assert [e.wire_id for e in entries] == [custom_id_for(u) for u in ids]
        assert entries[0].tokens >= 64
        assert await backend.upload(entries) is None
        created = await backend.create(entries, None, "fp-1")
        assert created.state == "running" and created.fingerprint == "fp-1"
        assert created.total == 10 and created.done == 0
        await trio.sleep(300)
        assert (await backend.get(created.id)).done == 5
        ended = await wait_ended(backend, created)
        assert (ended.total, ended.done, ended.failed) == (10, 10, 0)
        outcomes = await collect(backend, ended)
        assert sorted(outcomes) == sorted(e.wire_id for e in entries)
        for i, entry in enumerate(entries):
            outcome = outcomes[entry.wire_id]
            assert outcome.kind == "ok" and outcome.output is not None
            realtime = await rt.chat(request(i))
            assert outcome.output.message == realtime.message
            assert outcome.output.finish_reason == realtime.finish_reason
            assert outcome.output.usage == realtime.usage


async def test_find_adopts_the_batch_created_since(
    autojump_clock: trio.testing.MockClock,
) -> None:
    wall = [1_700_000_000.0]
    config = SimulatorConfig(batch_time=600.0, batch_create_delay=30.0)
    app = SimulatorApp(config, wall_clock=lambda: wall[0])
    async with anthropic_backend(app) as (_, backend):
        entries = [backend.entry(f"{i}", request(i)) for i in range(3)]
        await backend.create(entries[:1], None, "earlier")
        wall[0] += 60.0
        since = wall[0] - 0.5  # recorded just before the create
        with trio.move_on_after(10):  # the process "dies" before the answer comes
            await backend.create(entries, None, "fp-lost")
        wall[0] += 60.0
        await backend.create(entries[:2], None, "later")  # made after the resume's look
        found = await backend.find("fp-lost", since=since)
        assert found is not None and found.fingerprint == "fp-lost" and found.total == 3
        assert await backend.find("fp-lost", since=wall[0] + 1.0) is None


async def test_errored_expired_and_cancelled_lines(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = SimulatorConfig(batch_time=60.0, batch_error_rate=0.25, batch_expiry_rate=0.25)
    app = SimulatorApp(config)
    async with anthropic_backend(app) as (_, backend):
        entries = [backend.entry(f"r{i}", request(i)) for i in range(40)]
        ended = await wait_ended(backend, await backend.create(entries, None, "fp"))
        outcomes = await collect(backend, ended)
        assert {o.kind for o in outcomes.values()} == {"ok", "error", "expired"}
        errors = [o for o in outcomes.values() if o.kind == "error"]
        assert all(isinstance(o.error, ServerError) and o.error.status == 500 for o in errors)
        assert all(o.request_id for o in errors)

    plain = SimulatorApp(SimulatorConfig(batch_time=100.0))
    async with anthropic_backend(plain) as (_, backend):
        entries = [backend.entry(f"r{i}", request(i)) for i in range(10)]
        batch = await backend.create(entries, None, "fp")
        await trio.sleep(40)
        assert (await backend.cancel(batch.id)).state == "cancelling"
        ended = await wait_ended(backend, batch)
        kinds = [o.kind for o in (await collect(backend, ended)).values()]
        assert kinds == ["ok"] * 4 + ["cancelled"] * 6
        assert (await backend.cancel(batch.id)).state == "ended"


async def test_a_refused_params_line_is_a_bad_request_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = SimulatorApp(SimulatorConfig())
    async with anthropic_backend(app) as (_, backend):
        entry = backend.entry("x", request(0))
        broken = type(entry)(entry.wire_id, entry.data.replace(b'"messages"', b'"mess"'), 1)
        ended = await wait_ended(backend, await backend.create([broken], None, "fp"))
        [outcome] = (await collect(backend, ended)).values()
        assert outcome.kind == "error" and isinstance(outcome.error, BadRequest)
