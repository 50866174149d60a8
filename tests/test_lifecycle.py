"""Daemon lifecycle: drain, health and reload, with the whole runtime on virtual time."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
import trio

import sluice
from sluice import RateLimitConfig, RetryConfig, RuntimeConfig, Secret
from sluice._config import LedgerConfig, ProviderConfig, TracingConfig
from sluice.simulator import SimulatorConfig, mock_transport

from .helpers import virtual_deadline

if TYPE_CHECKING:
    from collections.abc import Awaitable

MODEL = "sim:sim-small"


def keyed(key: str) -> RuntimeConfig:
    return RuntimeConfig(
        providers={
            "sim": ProviderConfig(
                api_key=Secret(key),
                breaker=None,
                rate_limit=RateLimitConfig(cooldown_jitter=0.0),
            )
        },
        # Fifty retries at once: a budget that allows them, no jitter for exact times.
        retry=RetryConfig(jitter=0.0, base_delay=0.5, budget_min_per_second=100.0),
    )


class KeyRecorder(httpx.AsyncBaseTransport):
    """The server side of a key rotation: records each request's key; a request with the old
    key takes 1 s and fails with a 500 (so its call retries), one with the new key is answered
    by the simulator."""

    def __init__(self, old: str) -> None:
        self.old = old
        self.sim = mock_transport(SimulatorConfig(ttft=0.2, tokens_per_second=50))
        self.seen: list[tuple[float, str]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        key = request.headers["authorization"].removeprefix("Bearer ")
        self.seen.append((trio.current_time(), key))
        if key == self.old:
            await trio.sleep(1.0)
            return httpx.Response(500, json={"error": {"message": "try again", "type": "server"}})
        return await self.sim.handle_async_request(request)


@virtual_deadline(60)
async def test_reload_with_a_new_key_while_50_calls_are_in_flight(autojump_clock):
    server = KeyRecorder("sk-old")
    results: list[sluice.ChatResult] = []
    async with sluice.open_runtime(keyed("sk-old"), transport=server) as rt:

        async def one(i: int) -> None:
            results.append(await rt.chat(MODEL, f"call {i}"))

        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(one, i)
            await trio.sleep(0.5)
            assert (await rt.statistics()).calls_in_flight == 50
            await rt.reload(keyed("sk-new"))
            reloaded_at = trio.current_time()
        after = await rt.chat(MODEL, "a new call")
    assert len(results) == 50 and {r.attempts for r in results} == {2}
    assert after.attempts == 1
    before = [key for at, key in server.seen if at < reloaded_at]
    later = [key for at, key in server.seen if at >= reloaded_at]
    assert before == ["sk-old"] * 50
    assert later == ["sk-new"] * 51  # every retry, and the new call


@virtual_deadline(60)
async def test_reload_takes_new_limits_for_new_calls_and_rejects_a_bad_config(autojump_clock):
    sim = SimulatorConfig(ttft=0.1, tokens_per_second=100)
    async with sluice.open_runtime(keyed("k"), transport=mock_transport(sim)) as rt:
        await rt.chat(MODEL, "warm up")
        tight = RuntimeConfig(
            providers={
                "sim": ProviderConfig(
                    api_key=Secret("k"), rate_limit=RateLimitConfig(max_pending=1)
                )
            }
        )
        await rt.reload(tight)
        assert rt.config is tight
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(rt.chat, MODEL, "hi")
            await trio.sleep(0.05)
            (quota,) = (await rt.statistics()).quotas.values()
            assert quota.pending == 1 and quota.pending_limit == 1


@virtual_deadline(60)
async def test_a_reload_that_cannot_resolve_a_provider_changes_nothing(autojump_clock):
    environ = {"MY_KEY": "sk-one"}
    config = RuntimeConfig(providers={"openai": ProviderConfig(api_key_env="MY_KEY")})
    async with sluice.open_runtime(config, transport=mock_transport(), environ=environ) as rt:
        await rt.chat("openai:gpt-4o-mini", "hi")
        before = rt.config
        broken = RuntimeConfig(providers={"openai": ProviderConfig(api_key_env="NO_SUCH_KEY")})
        with pytest.raises(sluice.ConfigError, match="needs an API key"):
            await rt.reload(broken)
        assert rt.config is before
        await rt.chat("openai:gpt-4o-mini", "still fine")


@virtual_deadline(60)
async def test_drain_stops_new_calls_and_waits_for_those_in_flight(autojump_clock):
    sim = SimulatorConfig(ttft=1.0, tokens_per_second=10, output_tokens=20)
    results: list[sluice.ChatResult] = []
    async with (
        sluice.open_runtime(RuntimeConfig(), transport=mock_transport(sim)) as rt,
        trio.open_nursery() as nursery,
    ):
        if True:
            for i in range(5):
                nursery.start_soon(_append, results, rt.chat(MODEL, f"call {i}"))
            await trio.sleep(0.5)
            assert not await rt.drain(timeout=1.0)  # the calls need about 3 s
            assert rt.draining
            with pytest.raises(sluice.RuntimeClosed, match="draining"):
                await rt.chat(MODEL, "too late")
            started = trio.current_time()
            assert await rt.drain(timeout=10.0)
            assert 1.0 < trio.current_time() - started < 2.0
            assert len(results) == 5
            assert (await rt.statistics()).calls_in_flight == 0


async def _append(results: list[sluice.ChatResult], call: Awaitable[sluice.ChatResult]) -> None:
    results.append(await call)


@virtual_deadline(60)
async def test_health_reports_a_cooldown_and_the_last_error(autojump_clock):
    sim = SimulatorConfig(script=("429:retry_after=5",))
    cfg = RuntimeConfig(
        providers={"sim": ProviderConfig(rate_limit=RateLimitConfig(cooldown_jitter=0.0))},
        retry=RetryConfig(jitter=0.0),
    )
    async with sluice.open_runtime(cfg, transport=mock_transport(sim)) as rt:
        assert await rt.health() == {}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(rt.chat, MODEL, "hi")
            await trio.sleep(1.0)
            health = (await rt.health())["sim"]
            assert not health.usable
            assert health.cooldown_left == pytest.approx(4.0)
            assert health.breaker == "closed"
            assert health.last_error is not None and health.last_error.startswith("RateLimited")
            assert health.last_error_age == pytest.approx(1.0)
        health = (await rt.health())["sim"]
        assert health.usable and health.cooldown_left == 0


class EchoingServer(httpx.AsyncBaseTransport):
    """Fails every request with a 400 whose message repeats the key it was sent."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        key = request.headers["authorization"].removeprefix("Bearer ")
        body = {"error": {"message": f"bad key {key}", "type": "invalid_request_error"}}
        return httpx.Response(400, json=body)


@virtual_deadline(60)
async def test_a_reloaded_key_is_masked_in_errors_logs_and_hooks(autojump_clock, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="sluice")
    records: list = []
    async with sluice.open_runtime(
        keyed("sk-old-0123456789"),
        transport=EchoingServer(),
        hooks=sluice.Hooks(on_call_end=records.append, on_attempt_end=records.append),
    ) as rt:
        with pytest.raises(sluice.BadRequest) as first:
            await rt.chat(MODEL, "hi")
        await rt.reload(keyed("sk-new-9876543210"))
        with pytest.raises(sluice.BadRequest) as second:
            await rt.chat(MODEL, "hi")
    seen = f"{first.value} {second.value} {records!r} {caplog.text}"
    assert "sk-old-0123456789" not in seen and "sk-new-9876543210" not in seen
    assert "bad key" in str(second.value)


class BrokenTracerProvider:
    """A tracer provider that cannot give a tracer (a misconfigured OpenTelemetry SDK)."""

    def get_tracer(self, *args: object, **kwargs: object) -> object:
        raise RuntimeError("no tracer from this provider")


def open_files(path: Path) -> list[str]:
    """This process's open file descriptors on ``path`` or its SQLite side files."""
    found = []
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith(str(path)):
                found.append(target)
    return found


async def test_a_runtime_whose_observer_fails_to_build_closes_its_ledger(tmp_path):
    path = tmp_path / "ledger.sqlite3"
    config = RuntimeConfig(ledger=LedgerConfig(path=str(path)), tracing=TracingConfig(enabled=True))
    async with sluice.open_runtime(config):  # the file opens and closes on a normal run
        pass
    assert path.is_file() and open_files(path) == []
    with pytest.raises(RuntimeError, match="no tracer from this provider"):
        async with sluice.open_runtime(config, tracer_provider=BrokenTracerProvider()):
            raise AssertionError("the runtime opened")
    assert open_files(path) == []
