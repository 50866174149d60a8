"""``Runtime.reload`` reaches each ProviderActor through its mailbox (``ReloadProvider``): the
runtime never writes the actor's state itself, the actor applies the message in its loop, and
what it applied survives the actor's restart. Whole runtime, virtual time, mock transports."""

from __future__ import annotations

import httpx
import trio
import trio.testing

import sluice
from sluice import RateLimitConfig, RetryConfig, RuntimeConfig, Secret
from sluice._config import ProviderConfig
from sluice.simulator import SimulatorConfig, mock_transport

from .helpers import virtual_deadline

MODEL = "sim:sim-small"


def keyed(key: str) -> RuntimeConfig:
    return RuntimeConfig(
        providers={
            "sim": ProviderConfig(
                api_key=Secret(key), breaker=None, rate_limit=RateLimitConfig(cooldown_jitter=0.0)
            )
        },
        retry=RetryConfig(jitter=0.0),
    )


class Recorder(httpx.AsyncBaseTransport):
    """Answers with the simulator and records each request's key; ``crash_next`` makes the
    next request raise a bug (not a transport error), which crashes the provider's actor."""

    def __init__(self) -> None:
        self.sim = mock_transport(SimulatorConfig(ttft=0.1, tokens_per_second=100))
        self.keys: list[str] = []
        self.crash_next = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.keys.append(request.headers["authorization"].removeprefix("Bearer "))
        if self.crash_next:
            self.crash_next = False
            raise RuntimeError("a bug in the provider's attempt")
        return await self.sim.handle_async_request(request)


def _key_of(rt: sluice.Runtime) -> str:
    """The key the provider's actor sends with now (its own state, as it last applied it)."""
    assert rt._providers is not None
    settings = rt._providers._contexts["sim"].state.settings
    assert settings.api_key is not None
    return settings.api_key.reveal()


@virtual_deadline(30)
async def test_reload_is_a_message_the_actor_applies_not_a_write_into_its_state(autojump_clock):
    server = Recorder()
    async with sluice.open_runtime(keyed("sk-old"), transport=server, environ={}) as rt:
        await rt.chat(MODEL, "start the provider")
        await rt.reload(keyed("sk-new"))
        # reload has returned without a checkpoint the actor could run in: the new settings
        # wait in its mailbox, and its state is as it was.
        assert rt.config.providers["sim"].api_key == Secret("sk-new")
        assert _key_of(rt) == "sk-old"
        await trio.testing.wait_all_tasks_blocked()
        assert _key_of(rt) == "sk-new"
        await rt.chat(MODEL, "after")
    assert server.keys == ["sk-old", "sk-new"]


@virtual_deadline(30)
async def test_a_call_submitted_right_after_reload_sends_with_the_new_key(autojump_clock):
    # The attempt's StartAttempt queues behind the ReloadProvider in the same mailbox.
    server = Recorder()
    async with sluice.open_runtime(keyed("sk-old"), transport=server, environ={}) as rt:
        await rt.chat(MODEL, "start the provider")
        await rt.reload(keyed("sk-new"))
        await rt.chat(MODEL, "at once")
    assert server.keys == ["sk-old", "sk-new"]


@virtual_deadline(30)
async def test_a_reload_survives_the_actors_restart(autojump_clock):
    server = Recorder()
    async with sluice.open_runtime(keyed("sk-old"), transport=server, environ={}) as rt:
        await rt.chat(MODEL, "start the provider")
        await rt.reload(keyed("sk-new"))
        server.crash_next = True
        result = await rt.chat(MODEL, "its actor crashes under this call's first attempt")
        assert result.attempts == 2  # the lost attempt, and its resubmission
        assert (await rt.statistics()).attempts_in_flight == {"sim": 0}
        await rt.chat(MODEL, "and after the restart")
    # The crashed attempt, its resubmission and the call after it: all with the new key.
    assert server.keys == ["sk-old", "sk-new", "sk-new", "sk-new"]
