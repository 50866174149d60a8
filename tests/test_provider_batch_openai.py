"""The OpenAI Files + Batches backend against the simulator, reached as the realtime lane
reaches it (``backend_for`` over the runtime's transport): upload, create, find, poll, the
results decoded into the realtime decoder's output, cancel, and the retry rules of control
calls. Socket-free, on ``autojump_clock``."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import httpx
import pytest
import trio

import sluice
from sluice import ChatRequest, RuntimeConfig
from sluice._errors import ConnectionFailed, ServerError
from sluice._jobs.provider_batch.backends import backend_for
from sluice._jobs.provider_batch.openai import OpenAIBatchBackend
from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from sluice._jobs.provider_batch.backend import BatchBackend, LineOutcome, RemoteBatch


def request(i: int) -> ChatRequest:
    return ChatRequest(model="sim:sim-small", messages=f"line {i}", stream=False)


@contextlib.asynccontextmanager
async def sim_backend(
    app: SimulatorApp, transport: httpx.AsyncBaseTransport | None = None
) -> AsyncIterator[tuple[sluice.Runtime, BatchBackend]]:
    wire = transport or mock_transport(app)
    async with sluice.open_runtime(RuntimeConfig(), transport=wire, environ={}) as rt:
        backend = backend_for(rt, "sim")
        assert isinstance(backend, OpenAIBatchBackend)
        yield rt, backend


async def wait_ended(backend: BatchBackend, batch: RemoteBatch) -> RemoteBatch:
    with trio.fail_after(100_000):
        while batch.state != "ended":
            await trio.sleep(60)
            batch = await backend.get(batch.id)
    return batch


async def collect(backend: BatchBackend, batch: RemoteBatch) -> dict[str, LineOutcome]:
    return {o.wire_id: o async for o in backend.results(batch)}


async def test_a_batch_round_trip_gives_what_the_realtime_lane_gives(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = SimulatorApp(SimulatorConfig(batch_time=600.0, seed=3))
    async with sim_backend(app) as (rt, backend):
        entries = [backend.entry(f"id-{i}", request(i)) for i in range(20)]
        assert entries[0].wire_id == "id-0" and entries[0].data.endswith(b"\n")
        assert entries[0].tokens > 0
        file_id = await backend.upload(entries)
        assert file_id is not None
        created = await backend.create(entries, file_id, "fp-abc")
        assert created.state == "running" and created.fingerprint == "fp-abc"
        assert created.total == 20
        await trio.sleep(300)
        half = await backend.get(created.id)
        assert half.state == "running" and half.done == 10
        ended = await wait_ended(backend, created)
        assert (ended.total, ended.done, ended.failed) == (20, 20, 0)
        outcomes = await collect(backend, ended)
        assert sorted(outcomes) == sorted(f"id-{i}" for i in range(20))
        for i in range(20):
            outcome = outcomes[f"id-{i}"]
            assert outcome.kind == "ok" and outcome.output is not None
            realtime = await rt.chat(request(i))
            assert outcome.output.message == realtime.message
            assert outcome.output.finish_reason == realtime.finish_reason
            assert outcome.output.usage == realtime.usage
        assert app.batch_stats.batches_created == 1


async def test_find_adopts_the_batch_whose_create_answer_was_lost(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = SimulatorApp(SimulatorConfig(batch_time=600.0, batch_create_delay=30.0))
    async with sim_backend(app) as (_, backend):
        import time

        since = time.time()
        entries = [backend.entry(f"{i}", request(i)) for i in range(3)]
        file_id = await backend.upload(entries)
        noise = await backend.upload(entries[:1])
        for _ in range(101):  # more than one page of the list, all older noise
            await backend.create(entries[:1], noise, "other")
        with trio.move_on_after(10):  # the process "dies" before the answer comes
            await backend.create(entries, file_id, "fp-lost")
        found = await backend.find("fp-lost", since=since)
        assert found is not None and found.fingerprint == "fp-lost" and found.total == 3
        assert await backend.find("fp-never", since=since) is None
        assert await backend.find("fp-lost", since=since + 3600) is None
        stats = app.batch_stats
        assert stats.batches_created == 102


async def test_errored_expired_and_refused_lines_come_back_as_their_kinds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = SimulatorConfig(batch_time=60.0, batch_error_rate=0.25, batch_expiry_rate=0.25)
    app = SimulatorApp(config)
    async with sim_backend(app) as (_, backend):
        entries = [backend.entry(f"{i}", request(i)) for i in range(40)]
        batch = await backend.create(entries, await backend.upload(entries), "fp")
        ended = await wait_ended(backend, batch)
        outcomes = await collect(backend, ended)
        assert len(outcomes) == 40
        kinds = {o.kind for o in outcomes.values()}
        assert kinds == {"ok", "error", "expired"}
        errors = [o for o in outcomes.values() if o.kind == "error"]
        assert all(isinstance(o.error, ServerError) and o.error.status == 500 for o in errors)
        assert all(o.request_id for o in errors)
        assert ended.failed == sum(o.kind != "ok" for o in outcomes.values())


async def test_a_failed_batch_says_why_and_yields_no_lines(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = SimulatorApp(SimulatorConfig(batch_enqueued_tokens=5))
    async with sim_backend(app) as (_, backend):
        entries = [backend.entry(f"{i}", request(i)) for i in range(3)]
        batch = await backend.create(entries, await backend.upload(entries), "fp")
        ended = await wait_ended(backend, batch)
        assert ended.problem is not None and "Enqueued token limit" in ended.problem
        assert await collect(backend, ended) == {}


async def test_cancel_keeps_what_was_done_and_leaves_the_rest_unreported(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = SimulatorApp(SimulatorConfig(batch_time=100.0))
    async with sim_backend(app) as (_, backend):
        entries = [backend.entry(f"{i}", request(i)) for i in range(10)]
        batch = await backend.create(entries, await backend.upload(entries), "fp")
        await trio.sleep(40)
        cancelling = await backend.cancel(batch.id)
        assert cancelling.state == "cancelling"
        ended = await wait_ended(backend, cancelling)
        assert sorted(await collect(backend, ended)) == ["0", "1", "2", "3"]
        assert (await backend.cancel(batch.id)).state == "ended"  # already over: as it is


def flaky(app: SimulatorApp, fail: dict[str, list[int | str]]) -> httpx.MockTransport:
    """The simulator behind a transport that answers the first requests to a path with the
    listed statuses (or ``"reset"``: a connection refused)."""
    inner = mock_transport(app)
    seen: list[str] = []

    async def handler(req: httpx.Request) -> httpx.Response:
        key = f"{req.method} {req.url.path}"
        seen.append(key)
        pending = fail.get(key)
        if pending:
            what = pending.pop(0)
            if what == "reset":
                raise httpx.ConnectError("refused", request=req)
            if what == "broken":
                raise httpx.ReadError("the connection broke", request=req)
            return httpx.Response(int(what), json={"error": {"message": "no", "type": "x"}})
        return await inner.handle_async_request(req)

    transport = httpx.MockTransport(handler)
    transport.seen = seen  # type: ignore[attr-defined]
    return transport


async def test_control_calls_retry_what_may_pass_and_create_only_what_was_not_sent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = SimulatorApp(SimulatorConfig())
    fail: dict[str, list[int | str]] = {
        "POST /v1/files": [503, "reset", 429],
        "POST /v1/batches": ["reset", 429, 500],
    }
    wire = flaky(app, fail)
    async with sim_backend(app, wire) as (_, backend):
        entries = [backend.entry("a", request(0))]
        file_id = await backend.upload(entries)  # three failures, then it goes through
        assert file_id is not None and app.batch_stats.files_uploaded == 1
        with pytest.raises(ServerError):  # refused and 429 retried; a 500 may have acted
            await backend.create(entries, file_id, "fp")
        assert wire.seen.count("POST /v1/batches") == 3  # type: ignore[attr-defined]
        fail["POST /v1/batches"] = ["broken"]
        with pytest.raises(ConnectionFailed):
            await backend.create(entries, file_id, "fp")
        assert app.batch_stats.batches_created == 0


async def test_a_key_never_shows_in_reprs_or_errors(autojump_clock: trio.testing.MockClock) -> None:
    key = "sk-test-secret-key-123456"
    app = SimulatorApp(SimulatorConfig())
    seen: list[httpx.Request] = []
    inner = mock_transport(app)

    async def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        if req.url.path == "/v1/batches/boom":
            return httpx.Response(
                401, json={"error": {"message": f"Incorrect API key provided: {key}", "type": "x"}}
            )
        return await inner.handle_async_request(req)

    environ = {"OPENAI_API_KEY": key}
    async with sluice.open_runtime(
        RuntimeConfig(), transport=httpx.MockTransport(handler), environ=environ
    ) as rt:
        backend = backend_for(rt, "openai")
        assert backend is not None
        assert key not in repr(backend)
        with pytest.raises(sluice.CallError) as caught:
            await backend.get("boom")
        assert key not in str(caught.value) and key not in repr(caught.value)
    assert seen[0].headers["authorization"] == f"Bearer {key}"
    assert seen[0].headers["user-agent"].startswith("sluice/")


async def test_providers_without_a_batch_api_get_none() -> None:
    async with sluice.open_runtime(RuntimeConfig(), environ={"DEEPSEEK_API_KEY": "k"}) as rt:
        assert backend_for(rt, "deepseek") is None


async def test_sim_without_a_base_url_gets_a_socket_free_simulator_of_the_runtime_config() -> None:
    simulator = SimulatorConfig(seed=11, output_tokens=5)
    async with sluice.open_runtime(RuntimeConfig(), environ={}, simulator=simulator) as rt:
        backend = backend_for(rt, "sim")
        assert backend is not None
        entries = [backend.entry(f"{i}", request(i)) for i in range(3)]
        batch = await backend.create(entries, await backend.upload(entries), "fp")
        with trio.fail_after(5):
            while batch.state != "ended":
                await trio.sleep(0.01)
                batch = await backend.get(batch.id)
        outcomes = await collect(backend, batch)
        for i in range(3):
            output = outcomes[f"{i}"].output
            assert output is not None
            assert output.message == (await rt.chat(request(i))).message  # the same seed
            assert output.usage is not None and output.usage.output_tokens == 5


class _CutOnce(httpx.AsyncByteStream):
    """A body that breaks after ``keep`` bytes, as a connection dropping mid-download."""

    def __init__(self, content: bytes, keep: int) -> None:
        self._content = content
        self._keep = keep

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self._content[: self._keep]
        raise httpx.ReadError("the connection broke mid-download")


async def test_a_broken_download_resumes_and_gives_each_line_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = SimulatorApp(SimulatorConfig())
    inner = mock_transport(app)
    cuts = [0]

    async def handler(req: httpx.Request) -> httpx.Response:
        response = await inner.handle_async_request(req)
        if req.url.path.endswith("/content") and cuts[0] < 2:
            cuts[0] += 1
            content = await response.aread()
            return httpx.Response(200, stream=_CutOnce(content, len(content) // 2 + 7 * cuts[0]))
        return response

    async with sim_backend(app, httpx.MockTransport(handler)) as (_, backend):
        entries = [backend.entry(f"{i}", request(i)) for i in range(30)]
        batch = await backend.create(entries, await backend.upload(entries), "fp")
        ended = await wait_ended(backend, batch)
        ids = [o.wire_id async for o in backend.results(ended)]
    assert cuts[0] == 2
    assert ids == [f"{i}" for i in range(30)]
