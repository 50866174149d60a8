"""A model group's hedge time: a deployment that does not answer costs a call at most that long.

Under virtual time over httpx.MockTransport, so every duration is exact. Each host is a server
of the test's own: ``hang`` accepts and never answers, ``head`` sends a stream's head and then
nothing, ``slow-body`` sends a whole reply's head at once and its body 8 s later, ``ok`` answers
0.25 s after the request arrives.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from typing import Any

import attrs
import httpx
import orjson
import pytest
import trio

import sluice
from sluice import (
    BreakerConfig,
    CallTimeout,
    ChatRequest,
    Deadlines,
    ModelGroup,
    ProviderConfig,
    RateLimitConfig,
    RuntimeConfig,
)
from sluice._config import load_config
from sluice._errors import ConfigError
from sluice._events import FallingBack

from .helpers import virtual_deadline

OK_AFTER = 0.25
BODY_AFTER = 8.0


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    body = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


STREAM = (
    _chunk({"role": "assistant", "content": "ok"})
    + _chunk({}, "stop", usage={"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4})
    + b"data: [DONE]\n\n"
)
WHOLE = orjson.dumps(
    {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
)


class Hosts:
    """The servers, by host name: what each does, and what each saw."""

    def __init__(self, kinds: dict[str, str]) -> None:
        self.kinds = kinds
        self.arrivals: dict[str, list[float]] = defaultdict(list)
        self.open = Counter[str]()
        """Requests whose exchange has not ended (the transport has not let go of them)."""

    async def handle(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        self.arrivals[host].append(trio.current_time())
        kind = self.kinds[host]
        streamed = orjson.loads(request.content).get("stream", False)
        if kind == "hang":
            self.open[host] += 1
            try:
                await trio.sleep_forever()
            finally:
                self.open[host] -= 1
        if kind == "head":
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, stream=_Never(self, host)
            )
        if kind == "429":
            await trio.sleep(OK_AFTER)
            body = {"error": {"type": "rate_limit_error", "message": "slow down"}}
            return httpx.Response(429, headers={"retry-after": "10"}, json=body)
        if kind == "slow-body":
            return httpx.Response(
                200, headers={"content-type": "application/json"}, stream=_Late(WHOLE)
            )
        await trio.sleep(OK_AFTER)
        if streamed:
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, content=STREAM
            )
        return httpx.Response(200, headers={"content-type": "application/json"}, content=WHOLE)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)


class _Never(httpx.AsyncByteStream):
    """A body that never sends a byte; counted open until the client closes it."""

    def __init__(self, hosts: Hosts, host: str) -> None:
        self.hosts, self.host = hosts, host
        hosts.open[host] += 1

    async def __aiter__(self) -> Any:
        await trio.sleep_forever()
        yield b""  # pragma: no cover

    async def aclose(self) -> None:
        self.hosts.open[self.host] -= 1


class _Late(httpx.AsyncByteStream):
    def __init__(self, body: bytes) -> None:
        self.body = body

    async def __aiter__(self) -> Any:
        await trio.sleep(BODY_AFTER)
        yield self.body


def config(
    kinds: dict[str, str],
    weights: dict[str, float] | None = None,
    first_token: float = 120.0,
    **group: Any,
) -> RuntimeConfig:
    weights = weights or {}
    return RuntimeConfig(
        providers={
            host: ProviderConfig(
                base_url=f"http://{host}/v1",
                deadlines=Deadlines(total=600.0, first_token=first_token, idle=60.0),
            )
            for host in kinds
        },
        groups={
            "g": ModelGroup(
                deployments=[{"model": f"{h}:m", "weight": weights.get(h, 1.0)} for h in kinds],
                **group,
            )
        },
    )


async def assert_nothing_held(rt: sluice.Runtime) -> None:
    stats = await rt.statistics()
    assert stats.calls_in_flight == 0
    assert all(n == 0 for n in stats.attempts_in_flight.values()), stats.attempts_in_flight
    for key in stats.quotas.values():
        assert key.pending == 0 and key.open_streams == 0, key
    assert all(d.in_flight == 0 for d in stats.groups["g"])


@virtual_deadline(200)
async def test_a_hung_deployment_costs_each_call_the_hedge_time_and_then_is_passed_over(
    autojump_clock,
):
    """The issue's case: ``weighted`` over three deployments, one of which accepts and never
    answers. Each call placed there moves on after exactly the hedge time; while it is marked
    slow no call goes there; after ``slow_for`` it is tried again, at the same cost."""
    hosts = Hosts({"h1": "hang", "h2": "ok", "h3": "ok"})
    cfg = config(hosts.kinds, strategy="weighted", hedge=2.0, slow_for=30.0)
    async with sluice.open_runtime(
        cfg, transport=hosts.transport(), environ={}, rng=random.Random(3)
    ) as rt:

        async def wave(n: int) -> list[sluice.ChatResult]:
            results = []
            requests = (ChatRequest(model="g", messages=f"q{i}") for i in range(n))
            async with rt.map(requests, max_in_flight=n) as outcomes:
                async for outcome in outcomes:
                    assert outcome.result is not None, outcome.error
                    results.append(outcome.result)
            return results

        first = await wave(30)  # all placed at once, before any attempt could be hedged
        moved = [r for r in first if r.models_tried[0] == "h1:m"]
        assert 5 <= len(moved) <= 15  # weighted placed about a third on the hung one
        for r in first:
            assert r.models_tried[-1] in ("h2:m", "h3:m")
            expected = 2.0 + OK_AFTER if r.models_tried[0] == "h1:m" else OK_AFTER
            assert r.timings.total == pytest.approx(expected, abs=1e-9), r.models_tried
        stats = (await rt.statistics()).groups["g"]
        assert stats[0].slow_left == pytest.approx(30.0 - OK_AFTER, abs=1e-9)
        assert len(hosts.arrivals["h1"]) == len(moved)
        assert hosts.open["h1"] == 0  # every abandoned exchange was cancelled and let go

        await trio.sleep(10.0)
        second = await wave(30)  # h1 is still marked slow: nothing goes there
        assert all(r.models_tried == (r.models_tried[-1],) for r in second)
        assert all(r.timings.total == pytest.approx(OK_AFTER, abs=1e-9) for r in second)
        assert len(hosts.arrivals["h1"]) == len(moved)

        await trio.sleep(30.0)  # past slow_for: h1 gets calls again, each at the hedge's cost
        third = await wave(30)
        again = [r for r in third if r.models_tried[0] == "h1:m"]
        assert again
        for r in third:
            assert r.timings.total <= 2.0 + OK_AFTER + 1e-9
        await assert_nothing_held(rt)
    assert hosts.open["h1"] == 0


@virtual_deadline(60)
async def test_a_stream_whose_head_came_but_no_chunk_is_hedged_too(autojump_clock):
    hosts = Hosts({"h1": "head", "h2": "ok"})
    cfg = config(hosts.kinds, weights={"h1": 1e9}, hedge=3.0)
    async with sluice.open_runtime(
        cfg, transport=hosts.transport(), environ={}, rng=random.Random(1)
    ) as rt:
        moves: list[FallingBack] = []
        async with rt.stream(ChatRequest(model="g", messages="hi")) as call:
            async for event in call:
                if isinstance(event, FallingBack):
                    moves.append(event)
        result = call.result
        assert result is not None
        assert result.models_tried == ("h1:m", "h2:m")
        assert result.timings.total == pytest.approx(3.0 + OK_AFTER, abs=1e-9)
        [move] = moves
        assert isinstance(move.error, CallTimeout) and move.error.timeout_kind == "hedge"
        assert "no first chunk" in move.error.message and "3 s" in move.error.message
        await assert_nothing_held(rt)
    assert hosts.open["h1"] == 0  # the body the attempt gave up on was closed


@virtual_deadline(60)
async def test_a_whole_reply_whose_head_came_is_not_hedged_while_its_body_comes(autojump_clock):
    """The hedge ends with the reply's head: a whole reply's body may take the generation."""
    hosts = Hosts({"h1": "slow-body", "h2": "ok"})
    cfg = config(hosts.kinds, weights={"h1": 1e9}, hedge=2.0)
    async with sluice.open_runtime(
        cfg, transport=hosts.transport(), environ={}, rng=random.Random(1)
    ) as rt:
        result = await rt.chat(ChatRequest(model="g", messages="hi", stream=False))
        assert result.models_tried == ("h1:m",)
        assert result.timings.total == pytest.approx(BODY_AFTER, abs=1e-9)
        assert (await rt.statistics()).groups["g"][0].slow_left == 0.0
    assert hosts.arrivals["h2"] == []


@virtual_deadline(60)
async def test_the_last_deployment_tried_keeps_the_first_token_deadline(autojump_clock):
    """Nothing to move to: the call waits for its first-token deadline, as without groups."""
    hosts = Hosts({"h1": "hang", "h2": "hang"})
    cfg = config(hosts.kinds, weights={"h1": 1e9}, first_token=10.0, hedge=2.0)
    cfg = attrs.evolve(cfg, retry=sluice.RetryConfig(max_attempts=1))
    async with sluice.open_runtime(
        cfg, transport=hosts.transport(), environ={}, rng=random.Random(1)
    ) as rt:
        start = trio.current_time()
        with pytest.raises(CallTimeout) as caught:
            await rt.chat(ChatRequest(model="g", messages="hi"))
        assert trio.current_time() - start == pytest.approx(2.0 + 10.0, abs=1e-9)
        assert caught.value.timeout_kind == "first_token"
        assert hosts.arrivals["h1"] == [start] and hosts.arrivals["h2"] == [start + 2.0]
        await assert_nothing_held(rt)
    assert hosts.open["h1"] == hosts.open["h2"] == 0


@virtual_deadline(60)
async def test_hedge_zero_never_moves_a_call_for_slowness(autojump_clock):
    hosts = Hosts({"h1": "hang", "h2": "ok"})
    cfg = config(hosts.kinds, weights={"h1": 1e9}, first_token=10.0, hedge=0)
    async with sluice.open_runtime(
        cfg, transport=hosts.transport(), environ={}, rng=random.Random(1)
    ) as rt:
        result = await rt.chat(ChatRequest(model="g", messages="hi"))
        assert result.models_tried == ("h1:m", "h2:m")
        assert result.timings.total == pytest.approx(10.0 + OK_AFTER, abs=1e-9)
        assert (await rt.statistics()).groups["g"][0].slow_left == 0.0


@virtual_deadline(60)
async def test_hedged_attempts_count_against_the_breaker_and_free_its_probe(autojump_clock):
    """Every hedged attempt is a failure of its deployment's breaker; once open, the breaker
    keeps calls away; its probe, hedged in turn, is given back (the breaker opens again)."""
    hosts = Hosts({"h1": "hang", "h2": "ok"})
    breaker = BreakerConfig(min_failures=3, failure_rate=0.5, window=60.0, open_for=5.0)
    cfg = config(hosts.kinds, weights={"h1": 1e9}, hedge=1.0, slow_for=1.0)
    cfg = attrs.evolve(
        cfg,
        providers={name: attrs.evolve(p, breaker=breaker) for name, p in cfg.providers.items()},
    )
    async with sluice.open_runtime(
        cfg, transport=hosts.transport(), environ={}, rng=random.Random(1)
    ) as rt:
        for i in range(12):
            result = await rt.chat(ChatRequest(model="g", messages=f"q{i}"))
            assert result.models_tried[-1] == "h2:m"
            assert result.timings.total <= 1.0 + OK_AFTER + 1e-9
            await trio.sleep(1.0)
        assert (await rt.statistics()).groups["g"][0].breaker == "open"
        await assert_nothing_held(rt)
    # A call every 2.25 s while h1 takes them (1 s hedge, 0.25 s on h2, 1 s pause), else every
    # 1.25 s. Three hedged attempts open the breaker at 5.5 for 5 s; its probe at 10.5 is
    # hedged and opens it again until 16.5, when the next probe goes: each probe was settled.
    assert hosts.arrivals["h1"] == [0.0, 2.25, 4.5, 10.5, 16.5]


@virtual_deadline(60)
async def test_a_call_queued_on_a_deployment_whose_429_arrives_moves_on_at_once(autojump_clock):
    """The second call waits for x's one pending slot; x's answer to the first is a 429 with a
    10 s pause: the waiting call leaves the queue then, instead of waiting out the pause."""
    hosts = Hosts({"x": "429", "y": "ok"})
    cfg = config(hosts.kinds, weights={"x": 1e9})
    limited = attrs.evolve(cfg.providers["x"], rate_limit=RateLimitConfig(max_pending=1))
    cfg = attrs.evolve(cfg, providers={**cfg.providers, "x": limited})
    async with sluice.open_runtime(
        cfg, transport=hosts.transport(), environ={}, rng=random.Random(1)
    ) as rt:
        results: dict[int, sluice.ChatResult] = {}

        async def one(i: int) -> None:
            results[i] = await rt.chat(ChatRequest(model="g", messages=f"q{i}"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, 0)
            await trio.sleep(0.01)
            nursery.start_soon(one, 1)
        first, second = results[0], results[1]
        assert first.models_tried == second.models_tried == ("x:m", "y:m")
        assert first.timings.total == pytest.approx(2 * OK_AFTER, abs=1e-9)
        assert second.timings.total == pytest.approx(2 * OK_AFTER - 0.01, abs=1e-9)
        assert len(hosts.arrivals["x"]) == 1  # the queued call never reached x
        await assert_nothing_held(rt)


def test_a_bad_hedge_or_slow_for_is_a_clear_config_error():
    base = '[providers.a]\nbase_url = "http://a/v1"\n[groups.g]\ndeployments = [{model = "a:m"}]\n'
    cases = {
        "hedge = -1": "'hedge' must be >= 0",
        'hedge = "soon"': "expected float",
        "hedge = inf": "'hedge' must be a finite number of seconds",
        "slow_for = 0": "'slow_for' must be > 0",
        "hedge_time = 3": "unknown key 'hedge_time'",
    }
    for line, message in cases.items():
        with pytest.raises(ConfigError, match="groups") as caught:
            load_config(base + line, format="toml")
        assert message in str(caught.value), (line, caught.value)
    group = load_config(base + "hedge = 2.5\nslow_for = 10", format="toml").groups["g"]
    assert (group.hedge, group.slow_for) == (2.5, 10.0)
    defaults = ModelGroup(deployments=["a:m"])
    assert 0 < defaults.hedge <= 10 and defaults.slow_for > 0
