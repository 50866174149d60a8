"""``Runtime.embed_many`` on virtual time over ``httpx.MockTransport``: requests packed to the
provider's limits, never over a token quota in any window, outcomes in input order, a failed
request losing only its own inputs, and inputs read only as far ahead as requests are held."""

from __future__ import annotations

import math
from typing import Any

import httpx
import orjson
import pytest
import trio

import sluice
from sluice import (
    EmbedLimits,
    EmbedRequest,
    ModelConfig,
    ProviderConfig,
    RateLimitConfig,
    RetryConfig,
    RuntimeConfig,
)
from sluice._config import LedgerConfig
from sluice._embed_calls import estimate_input_tokens
from sluice._embed_packing import Packer, request_limits
from sluice._errors import BadRequest
from sluice.providers._embedding import embed_limits
from sluice.providers._registry import resolve_provider

from .helpers import virtual_deadline

KEYS = {"OPENAI_API_KEY": "sk-test-key", "GEMINI_API_KEY": "g-key", "ANTHROPIC_API_KEY": "a"}
SMALL = "openai:text-embedding-3-small"


def vector(text: str) -> list[float]:
    return [float(len(text)), float(sum(map(ord, text)) % 997)]


class Server:
    """An OpenAI ``/embeddings`` server: counts ``prompt_tokens`` by sluice's own estimate,
    takes ``delay(n)`` seconds for its n-th request (0-based), answers ``fail`` (a set of
    request numbers) with a 400."""

    def __init__(self, delay: Any = None, fail: frozenset[int] = frozenset()) -> None:
        self.delay = delay
        self.fail = fail
        self.arrivals: list[tuple[float, int, int]] = []
        """``(trio time, inputs, tokens)`` per request, as they arrived."""

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content)
        inputs = body["input"]
        tokens = sum(estimate_input_tokens(t) for t in inputs)
        number = len(self.arrivals)
        self.arrivals.append((trio.current_time(), len(inputs), tokens))
        if self.delay is not None:
            await trio.sleep(self.delay(number))
        if number in self.fail:
            return httpx.Response(400, json={"error": {"message": "scripted refusal"}})
        data = [{"index": i, "embedding": vector(t)} for i, t in enumerate(inputs)]
        return httpx.Response(200, json={"data": data, "usage": {"prompt_tokens": tokens}})


def config(**provider: Any) -> RuntimeConfig:
    return RuntimeConfig(
        providers={"openai": ProviderConfig(**provider)},
        retry=RetryConfig(jitter=0.0),
        ledger=LedgerConfig(persist=False),
    )


def runtime(server: Server, cfg: RuntimeConfig):
    return sluice.open_runtime(cfg, transport=httpx.MockTransport(server), environ=KEYS)


async def collect(rt: sluice.Runtime, texts: Any, **options: Any):
    async with rt.embed_many(texts, model=SMALL, **options) as outcomes:
        found = [o async for o in outcomes]
    return found, outcomes


@virtual_deadline(3600)
async def test_a_tpm_limited_run_never_exceeds_the_limit_in_any_window(autojump_clock):
    """3,000 inputs of 40 characters (10 tokens each, 30,000 tokens) under 5,000 tokens a
    minute: requests are packed to the quota's window (500 inputs), and no 60-second window,
    counted at the server, ever holds more than 5,000 tokens."""
    limit = 5_000
    server = Server(delay=lambda n: 0.5)
    cfg = config(rate_limit=RateLimitConfig(tokens_per_minute=limit))
    texts = [f"{i:05d}" + "x" * 35 for i in range(3_000)]
    async with runtime(server, cfg) as rt:
        found, outcomes = await collect(rt, texts, max_in_flight=8)
    assert [o.index for o in found] == list(range(3_000))
    assert [o.vector for o in found] == [vector(t) for t in texts]
    assert [n for _, n, _ in server.arrivals] == [500] * 6
    assert outcomes.requests == 6 and outcomes.inputs == 3_000 and outcomes.failed == 0
    for start, _, _ in server.arrivals:
        window = sum(tokens for at, _, tokens in server.arrivals if start <= at < start + 60)
        assert window <= limit
    # As fast as the quota allows: a window counts a request from its reply (0.5 s after it
    # arrived), and the next full request goes when that one leaves the window.
    gaps = [b[0] - a[0] for a, b in zip(server.arrivals, server.arrivals[1:], strict=False)]
    assert gaps == [60.5] * 5


@virtual_deadline(600)
async def test_outcomes_come_in_input_order_when_requests_finish_out_of_order(autojump_clock):
    server = Server(delay=lambda n: [30, 1, 20, 2, 10][n % 5])
    texts = [f"t{i}" for i in range(1_000)]
    async with runtime(server, config()) as rt:
        found, outcomes = await collect(rt, texts, batch_size=100, max_in_flight=5)
    assert [o.text for o in found] == texts
    assert [o.index for o in found] == list(range(1_000))
    assert outcomes.requests == 10


@virtual_deadline(600)
async def test_requests_are_packed_to_the_providers_inputs_per_request(autojump_clock):
    server = Server()
    async with runtime(server, config()) as rt:
        found, outcomes = await collect(rt, (f"s{i}" for i in range(10_000)))
    assert len(found) == 10_000
    assert [n for _, n, _ in server.arrivals] == [2048] * 4 + [10_000 - 4 * 2048]
    assert outcomes.requests == 5


@virtual_deadline(600)
async def test_requests_are_packed_by_tokens_per_request(autojump_clock):
    """A provider limit of 1,000 tokens a request, inputs of 400 characters (100 tokens):
    ten inputs a request."""
    server = Server()
    cfg = config(embed_limits=EmbedLimits(max_tokens=1_000))
    async with runtime(server, cfg) as rt:
        found, _ = await collect(rt, ["y" * 400] * 95)
    assert len(found) == 95
    assert [n for _, n, _ in server.arrivals] == [10] * 9 + [5]
    assert all(tokens <= 1_000 for _, _, tokens in server.arrivals)


@virtual_deadline(600)
async def test_a_models_limits_go_over_the_providers_and_batch_size_under_both(autojump_clock):
    server = Server()
    cfg = config(
        embed_limits=EmbedLimits(max_inputs=50),
        models={"text-embedding-3-small": ModelConfig(embed_limits=EmbedLimits(max_inputs=30))},
    )
    async with runtime(server, cfg) as rt:
        await collect(rt, ["a"] * 70)
        assert [n for _, n, _ in server.arrivals] == [30, 30, 10]
        server.arrivals.clear()
        await collect(rt, ["a"] * 70, batch_size=20)
        assert [n for _, n, _ in server.arrivals] == [20, 20, 20, 10]
        server.arrivals.clear()
        await collect(rt, ["a"] * 70, batch_size=500)  # never over the model's limit
        assert [n for _, n, _ in server.arrivals] == [30, 30, 10]


@virtual_deadline(600)
async def test_a_failed_request_fails_only_its_own_inputs(autojump_clock):
    server = Server(fail=frozenset({1}))
    texts = [f"q{i}" for i in range(250)]
    async with runtime(server, config()) as rt:
        found, outcomes = await collect(rt, texts, batch_size=100)
    assert [o.index for o in found] == list(range(250))
    failed = [o.index for o in found if o.error is not None]
    assert failed == list(range(100, 200))
    assert all(isinstance(o.error, BadRequest) and o.vector is None for o in found[100:200])
    assert all(o.vector == vector(o.text) for o in found[:100] + found[200:])
    assert outcomes.failed == 100 and outcomes.requests == 3


@virtual_deadline(600)
async def test_an_input_that_is_no_string_fails_alone(autojump_clock):
    server = Server()
    async with runtime(server, config()) as rt:
        found, outcomes = await collect(rt, ["a", "b", 7, "c"])
    assert [(o.index, o.error is None) for o in found] == [
        (0, True),
        (1, True),
        (2, False),
        (3, True),
    ]
    assert "input 2 is a int, not a string" in str(found[2].error)
    assert [n for _, n, _ in server.arrivals] == [2, 1] and outcomes.requests == 2


@virtual_deadline(3600)
async def test_inputs_are_read_only_as_far_ahead_as_requests_are_held(autojump_clock):
    """A slow server and a generator that notes how far it was read: at any outcome, no more
    than (max_in_flight + 1) requests of inputs, plus the one that closed the last, were read
    beyond what the consumer has."""
    server = Server(delay=lambda n: 5)
    read = 0

    def texts():
        nonlocal read
        for i in range(5_000):
            read = i + 1
            yield f"w{i}"

    ahead = []
    async with (
        runtime(server, config()) as rt,
        rt.embed_many(texts(), model=SMALL, batch_size=50, max_in_flight=3) as outcomes,
    ):
        async for outcome in outcomes:
            ahead.append(read - outcome.index)
    assert len(ahead) == 5_000
    assert max(ahead) <= (3 + 1) * 50 + 1
    assert len(server.arrivals) == 100


@virtual_deadline(600)
async def test_an_async_iterable_streams_too(autojump_clock):
    server = Server()

    async def texts():
        for i in range(300):
            await trio.sleep(0.01)
            yield f"z{i}"

    async with runtime(server, config()) as rt:
        found, _ = await collect(rt, texts(), batch_size=128)
    assert [o.text for o in found] == [f"z{i}" for i in range(300)]
    assert [n for _, n, _ in server.arrivals] == [128, 128, 44]


@virtual_deadline(600)
async def test_leaving_early_cancels_the_rest(autojump_clock):
    server = Server(delay=lambda n: 10)
    async with runtime(server, config()) as rt:
        async with rt.embed_many(
            (f"e{i}" for i in range(100_000)), model=SMALL, batch_size=10, max_in_flight=2
        ) as outcomes:
            async for outcome in outcomes:
                if outcome.index == 25:
                    break
        stats = await rt.statistics()
    assert stats.calls_in_flight == 0
    assert len(server.arrivals) < 10


@virtual_deadline(60)
async def test_a_provider_without_embeddings_is_refused_before_any_input_is_read(autojump_clock):
    server = Server()
    read: list[str] = []

    def texts():
        read.append("a")
        yield "a"

    async with runtime(server, config()) as rt:
        with pytest.raises(BadRequest, match="no embeddings endpoint"):
            async with rt.embed_many(texts(), model="anthropic:claude-haiku-4-5"):
                pass
    assert server.arrivals == [] and read == []


def test_request_limits_keep_within_token_windows_and_protocol_limits():
    openai = resolve_provider("openai", RuntimeConfig(), KEYS)
    gemini = resolve_provider("gemini", RuntimeConfig(), KEYS)
    assert embed_limits(openai, None, "m") == EmbedLimits(max_inputs=2048, max_tokens=300_000)
    assert embed_limits(gemini, None, "m") == EmbedLimits(max_inputs=100)
    rate = RateLimitConfig(tokens_per_minute=50_000, input_tokens_per_minute=40_000)
    assert request_limits(embed_limits(openai, None, "m"), rate, None, 256) == (2048, 40_000)
    assert request_limits(EmbedLimits(), RateLimitConfig(), None, 256) == (256, None)
    assert request_limits(EmbedLimits(max_inputs=100), RateLimitConfig(), 500, 256) == (100, None)


def test_the_packer_closes_a_request_when_the_next_input_does_not_fit():
    packer = Packer(3, 10)
    assert packer.add("a" * 16) is None  # 4 tokens
    assert packer.add("a" * 16) is None  # 8
    assert packer.add("a" * 16) == ["a" * 16] * 2  # 12 > 10: the first two go
    assert packer.add("b" * 100) == ["a" * 16]  # 25 tokens: alone
    assert packer.add("c") == ["b" * 100]
    assert packer.add("c") is None and packer.add("c") is None
    assert packer.add("d") == ["c"] * 3  # three inputs is the most
    assert packer.flush() == ["d"] and packer.flush() is None
    assert math.isclose(estimate_input_tokens(""), 1)


def test_embed_request_fields_are_checked_before_any_input_is_read():
    with pytest.raises(TypeError):
        EmbedRequest(model=SMALL, input=(), nonsense=1)  # type: ignore[call-arg]


class Outage(Server):
    """Answers 503 until ``until`` (trio time), then as :class:`Server`."""

    def __init__(self, until: float) -> None:
        super().__init__()
        self.until = until
        self.refused = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if trio.current_time() < self.until:
            self.refused += 1
            return httpx.Response(503, json={"error": {"message": "down for maintenance"}})
        return await super().__call__(request)


@virtual_deadline(3600)
async def test_embed_many_waits_out_an_outage_instead_of_failing(autojump_clock):
    """Batch priority by default: its requests wait through five minutes of 503s (more than
    any retry count of an interactive call, within the default total deadline of ten) and
    end with every vector."""
    server = Outage(until=300.0)
    async with runtime(server, config()) as rt:
        found, outcomes = await collect(rt, [f"o{i}" for i in range(300)], batch_size=100)
    assert outcomes.failed == 0 and [o.index for o in found] == list(range(300))
    assert server.refused > 10 and trio.current_time() >= 300


@virtual_deadline(120)
async def test_an_embed_call_fails_at_its_total_deadline(autojump_clock):
    server = Server(delay=lambda n: 100)
    async with runtime(server, config()) as rt:
        with pytest.raises(sluice.CallTimeout):
            await rt.embed(
                EmbedRequest(model=SMALL, input="slow", deadlines=sluice.Deadlines(total=5))
            )
        assert trio.current_time() == pytest.approx(5, abs=0.01)
