"""``Runtime.embed`` through the real actors, on virtual time over ``httpx.MockTransport``:
admission on estimated input tokens, retries, breakers, fallbacks, the ledger's prices, the
response cache and the metrics, exactly as for a chat call. The end-to-end test runs against
the in-process simulator over loopback on the real clock."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
import trio

import sluice
from sluice import (
    BreakerConfig,
    CacheConfig,
    EmbedRequest,
    EmbedResult,
    ProviderConfig,
    RateLimitConfig,
    RetryConfig,
    RuntimeConfig,
)
from sluice._config import LedgerConfig, MetricsConfig
from sluice._errors import BadRequest, CircuitOpen, ServerError
from sluice._ledger.store import MemoryLedgerStore

from .helpers import virtual_deadline

KEYS = {"OPENAI_API_KEY": "sk-test-key", "ANTHROPIC_API_KEY": "sk-ant-test"}
SMALL = "openai:text-embedding-3-small"


def vector(text: str) -> list[float]:
    """A vector that says which input it belongs to."""
    return [float(len(text)), float(sum(map(ord, text)) % 997)]


class Embeddings:
    """A scripted OpenAI ``/embeddings`` server: answers in reverse index order (a client must
    sort), counts ``prompt_tokens`` as the inputs' characters / 4 rounded up (sluice's own
    estimate, so admission and usage agree), and replays ``failures`` (statuses) first."""

    def __init__(
        self,
        failures: list[int] | None = None,
        delay: float = 0.0,
        down: frozenset[str] = frozenset(),
    ) -> None:
        self.failures = list(failures or [])
        self.down = down
        """Models that always answer 529 (overloaded)."""
        self.delay = delay
        self.requests: list[tuple[float, str, dict[str, Any]]] = []
        """``(trio time, url, body)`` of every request that arrived."""

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content)
        self.requests.append((trio.current_time(), str(request.url), body))
        if self.delay:
            await trio.sleep(self.delay)
        if self.failures or body["model"] in self.down:
            status = self.failures.pop(0) if self.failures else 529
            headers = {"retry-after": "1"} if status == 429 else {}
            return httpx.Response(
                status, headers=headers, json={"error": {"message": f"scripted {status}"}}
            )
        inputs = body["input"]
        data = [
            {"object": "embedding", "index": i, "embedding": vector(text)}
            for i, text in reversed(list(enumerate(inputs)))
        ]
        tokens = sum(max(1, -(-len(t) // 4)) for t in inputs)
        return httpx.Response(
            200,
            json={
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
            headers={"x-request-id": f"req-{len(self.requests)}"},
        )


def config(**changes: Any) -> RuntimeConfig:
    base: dict[str, Any] = {
        "retry": RetryConfig(jitter=0.0, base_delay=1.0),
        "ledger": LedgerConfig(persist=False),
    }
    base.update(changes)
    return RuntimeConfig(**base)


def runtime(server: Embeddings, cfg: RuntimeConfig | None = None, **kwargs: Any):
    return sluice.open_runtime(
        cfg or config(),
        transport=httpx.MockTransport(server),
        environ=KEYS,
        **kwargs,
    )


@virtual_deadline(30)
async def test_embed_returns_one_vector_per_input_in_order_and_books_the_price(autojump_clock):
    server = Embeddings()
    store = MemoryLedgerStore()
    async with runtime(server, ledger_store=store) as rt:
        texts = ["alpha", "be", "gamma delta epsilon"]
        result = await rt.embed(EmbedRequest(model=SMALL, input=texts, dimensions=2, tag="t1"))
        totals = await rt.ledger_totals()
    assert isinstance(result, EmbedResult)
    assert result.vectors == tuple(vector(t) for t in texts)
    assert (result.provider, result.model, result.attempts) == (
        "openai",
        "text-embedding-3-small",
        1,
    )
    assert result.usage.input_tokens == 2 + 1 + 5 and result.usage.output_tokens == 0
    assert result.request_id == "req-1" and not result.cached
    [(_, url, body)] = server.requests
    assert url == "https://api.openai.com/v1/embeddings"
    assert body == {"model": "text-embedding-3-small", "input": texts, "dimensions": 2}
    booked = totals[SMALL]
    assert (booked.calls, booked.input_tokens, booked.output_tokens) == (1, 8, 0)
    # 8 tokens at $0.02 / M = 0.16 micro-dollars, rounded half up to 0; a million tokens is
    # the exact check below.
    assert booked.unpriced == 0


@virtual_deadline(30)
async def test_the_ledger_prices_embedding_tokens_at_the_models_price(autojump_clock):
    server = Embeddings()
    async with runtime(server) as rt:
        # 250,000 characters -> 62,500 tokens per input, 4 inputs: 250,000 tokens.
        await rt.embed("openai:text-embedding-3-large", ["x" * 250_000] * 4)
        totals = await rt.ledger_totals()
    # 250,000 tokens at $0.13 / M = $0.0325.
    assert totals["openai:text-embedding-3-large"].cost_micros == 32_500


@virtual_deadline(60)
async def test_429_and_5xx_are_retried_like_a_chat_call(autojump_clock):
    server = Embeddings(failures=[429, 500, 503])
    async with runtime(server) as rt:
        result = await rt.embed(SMALL, ["a", "b"])
    assert result.attempts == 4
    assert result.vectors == (vector("a"), vector("b"))
    assert len(server.requests) == 4


@virtual_deadline(60)
async def test_a_failing_model_opens_its_breaker_and_later_calls_fail_fast(autojump_clock):
    server = Embeddings(failures=[500, 500, 500])
    cfg = config(
        retry=RetryConfig(jitter=0.0, max_attempts=1),
        providers={
            "openai": ProviderConfig(
                breaker=BreakerConfig(min_failures=2, failure_rate=0.5, open_for=30)
            )
        },
    )
    async with runtime(server, cfg) as rt:
        for _ in range(2):
            with pytest.raises(ServerError):
                await rt.embed(SMALL, "x")
        with pytest.raises(CircuitOpen):
            await rt.embed(SMALL, "x")
    assert len(server.requests) == 2  # the third never went out


@virtual_deadline(60)
async def test_a_call_falls_back_to_its_next_model(autojump_clock):
    server = Embeddings(down=frozenset({"text-embedding-3-small"}))
    async with runtime(server) as rt:
        result = await rt.embed(
            EmbedRequest(model=SMALL, input=["q"], fallbacks="openai:text-embedding-3-large")
        )
    assert result.model == "text-embedding-3-large"
    assert result.models_tried == (SMALL, "openai:text-embedding-3-large")
    assert [body["model"] for _, _, body in server.requests][-2:] == [
        "text-embedding-3-small",
        "text-embedding-3-large",
    ]


@virtual_deadline(30)
async def test_a_provider_without_embeddings_fails_at_once_with_what_to_do(autojump_clock):
    server = Embeddings()
    async with runtime(server) as rt:
        with pytest.raises(BadRequest, match=r"'anthropic'.*no embeddings endpoint") as caught:
            await rt.embed("anthropic:claude-haiku-4-5", "x")
        stats = await rt.statistics()
    assert "embed with a provider that has one" in str(caught.value)
    assert server.requests == []
    assert stats.calls_in_flight == 0


@virtual_deadline(60)
async def test_a_fallback_to_a_provider_without_embeddings_fails_with_the_same_words(
    autojump_clock,
):
    server = Embeddings(down=frozenset({"text-embedding-3-small"}))
    async with runtime(server) as rt:
        with pytest.raises(BadRequest, match="no embeddings endpoint"):
            await rt.embed(
                EmbedRequest(model=SMALL, input="x", fallbacks="anthropic:claude-haiku-4-5")
            )
    assert {body["model"] for _, _, body in server.requests} == {"text-embedding-3-small"}


@virtual_deadline(600)
async def test_admission_counts_estimated_input_tokens_against_the_tpm_limit(autojump_clock):
    """Each call is 3 inputs of 40 characters: 30 tokens estimated, and counted so by the
    server. A limit of 100 tokens a minute admits three calls per window, never a fourth."""
    server = Embeddings()
    cfg = config(
        providers={"openai": ProviderConfig(rate_limit=RateLimitConfig(tokens_per_minute=100))}
    )
    async with runtime(server, cfg) as rt, trio.open_nursery() as nursery:
        for _ in range(9):
            nursery.start_soon(rt.embed, SMALL, ["y" * 40] * 3)
    times = [at for at, _, _ in server.requests]
    assert len(times) == 9
    for start in times:
        in_window = [t for t in times if start <= t < start + 60]
        assert len(in_window) * 30 <= 100
    assert times[3] - times[0] >= 60


@virtual_deadline(30)
async def test_the_cache_replays_vectors_for_the_same_inputs_and_dimensions(autojump_clock):
    server = Embeddings()
    cfg = config(cache=CacheConfig(enabled=True))
    async with runtime(server, cfg) as rt:
        first = await rt.embed(SMALL, ["a", "b"], dimensions=2)
        again = await rt.embed(SMALL, ["a", "b"], dimensions=2)
        other_dims = await rt.embed(SMALL, ["a", "b"], dimensions=3)
        other_order = await rt.embed(SMALL, ["b", "a"], dimensions=2)
        fresh = await rt.embed(SMALL, ["a", "b"], dimensions=2, response_cache=False)
        stats = rt.cache.statistics() if rt.cache else None
    assert again.cached and again.vectors == first.vectors
    assert again.usage.input_tokens == 0 and again.call_id != first.call_id
    assert not other_dims.cached and not other_order.cached and not fresh.cached
    assert len(server.requests) == 4
    assert stats is not None and stats.hits == 1


@virtual_deadline(30)
async def test_metrics_count_embedding_calls_and_inputs(autojump_clock):
    server = Embeddings(failures=[400])
    cfg = config(metrics=MetricsConfig(enabled=True))
    async with runtime(server, cfg) as rt:
        with pytest.raises(BadRequest):
            await rt.embed(SMALL, "bad")
        await rt.embed(SMALL, ["a", "b", "c"])
        text = (await rt.render_metrics()).decode()
    model = 'model="text-embedding-3-small"'
    where = 'provider="openai"'
    assert f'sluice_embed_calls_total{{{model},outcome="ok",{where}}} 1.0' in text
    assert f'sluice_embed_calls_total{{{model},outcome="error",{where}}} 1.0' in text
    assert f"sluice_embed_inputs_total{{{model},{where}}} 3.0" in text
    assert f'sluice_tokens_total{{kind="input",{model},{where}}} 3.0' in text
    assert f'sluice_calls_total{{error_type="",{model},outcome="ok",{where}}} 1.0' in text


async def test_end_to_end_against_the_in_process_simulator():
    """Real clock, real loopback: the ``sim`` provider's in-process server."""
    with trio.fail_after(20):
        async with sluice.open_runtime(config()) as rt:
            result = await rt.embed("sim:emb", ["one", "two", "three"], dimensions=8)
            again = await rt.embed("sim:emb", ["three"], dimensions=8)
            totals = await rt.ledger_totals()
    assert len(result.vectors) == 3 and all(len(v) == 8 for v in result.vectors)
    assert again.vectors[0] == result.vectors[2]  # the simulator embeds a text the same way
    assert result.usage.input_tokens > 0
    assert totals["sim:emb"].calls == 2


@virtual_deadline(30)
async def test_an_azure_deployment_embeds_at_its_deployment_path_with_its_key(autojump_clock):
    server = Embeddings()
    cfg = config(
        providers={
            "azure-openai": ProviderConfig(
                base_url="https://contoso.openai.azure.com",
                api_version="2024-10-21",
                api_key=sluice.Secret("azure-key-0123456789abcdef"),
            )
        }
    )
    seen: list[httpx.Request] = []

    async def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return await server(request)

    async with sluice.open_runtime(cfg, transport=httpx.MockTransport(record), environ={}) as rt:
        result = await rt.embed("azure-openai:emb prod", ["x", "y"])
    assert len(result.vectors) == 2
    [request] = seen
    assert str(request.url) == (
        "https://contoso.openai.azure.com/openai/deployments/emb%20prod/embeddings"
        "?api-version=2024-10-21"
    )
    assert request.headers["api-key"] == "azure-key-0123456789abcdef"
    assert "authorization" not in request.headers
    assert orjson.loads(request.content)["model"] == "emb prod"


def test_the_ledger_command_shows_embedding_cost(tmp_path, capsys):
    """Real clock (the ledger file is written from a worker thread); the reply is scripted."""
    from sluice._cli import main

    path = tmp_path / "ledger.sqlite3"
    server = Embeddings()

    async def run() -> None:
        cfg = config(ledger=LedgerConfig(path=str(path)))
        async with runtime(server, cfg) as rt:
            # 1,000,000 characters -> 250,000 tokens per input, 2 inputs: 500,000 tokens.
            await rt.embed(SMALL, ["z" * 1_000_000] * 2)

    trio.run(run)
    assert main(["ledger", "--db", str(path), "--format", "json"]) == 0
    printed = orjson.loads(capsys.readouterr().out)
    [row] = printed["rows"]
    assert row["model"] == "text-embedding-3-small"
    assert row["input_tokens"] == 500_000 and row["output_tokens"] == 0
    assert row["cost_usd"] == "0.010000"  # 500,000 tokens at $0.02 / M


def test_a_cache_file_keeps_vectors_across_runtimes(tmp_path):
    """Real clock (the cache file opens in a worker thread); the reply is scripted."""
    server = Embeddings()
    cfg = config(cache=CacheConfig(enabled=True, path=str(tmp_path / "cache.sqlite3")))

    async def once() -> EmbedResult:
        async with runtime(server, cfg) as rt:
            result: EmbedResult = await rt.embed(SMALL, ["k", "l"], encoding_format="base64")
        return result

    first = trio.run(once)
    again = trio.run(once)
    assert again.cached and list(map(list, again.vectors)) == list(map(list, first.vectors))
    assert len(server.requests) == 1


@virtual_deadline(60)
async def test_a_model_group_of_embedding_deployments_fails_over(autojump_clock):
    """A group's call goes to a deployment, and an overloaded one moves it to the other."""
    from sluice import ModelGroup

    server = Embeddings(down=frozenset({"text-embedding-3-small"}))
    cfg = config(groups={"emb": ModelGroup(deployments=[SMALL, "openai:text-embedding-3-large"])})
    async with runtime(server, cfg) as rt:
        results = [await rt.embed("emb", [f"g{i}"]) for i in range(4)]
        stats = await rt.statistics()
    assert {r.model for r in results} == {"text-embedding-3-large"}
    assert all(r.vectors == (vector(f"g{i}"),) for i, r in enumerate(results))
    assert stats.calls_in_flight == 0
    assert sum(d.in_flight for group in stats.groups.values() for d in group) == 0
