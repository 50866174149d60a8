"""The simulator's endpoints beyond chat: ``/health``, ``/v1/completions`` (streamed and not),
``/v1/embeddings``, and the keying of seeded latency draws on the request. Through the httpx
transport under the autojump clock: real request handling, virtual time, exact timings."""

from __future__ import annotations

import math

import httpx
import orjson
import pytest
import trio

from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport
from sluice.simulator._latency import draw_generation, request_rng
from sluice.simulator._text import count_tokens

from .helpers import virtual_deadline


def client(config: SimulatorConfig | SimulatorApp | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=mock_transport(config), base_url="http://sim")


def events(text: str) -> list[dict]:
    return [orjson.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


@virtual_deadline(10)
async def test_health_and_models_answer(autojump_clock):
    async with client() as http:
        for path in ("/health", "/v1/health"):
            response = await http.get(path)
            assert response.status_code == 200 and response.json() == {"status": "ok"}
        models = (await http.get("/v1/models")).json()
    assert [m["id"] for m in models["data"]] == ["sim-small", "sim-large", "sim-echo"]


@virtual_deadline(10)
async def test_a_completion_honours_max_tokens_min_tokens_and_ignore_eos(autojump_clock):
    async with client(SimulatorConfig(output_tokens=5)) as http:

        async def complete(**fields):
            body = {"model": "sim-small", "prompt": "one two three four", **fields}
            response = await http.post("/v1/completions", json=body)
            assert response.status_code == 200, response.text
            return response.json()

        plain = await complete(max_tokens=50)
        assert plain["object"] == "text_completion"
        choice = plain["choices"][0]
        assert choice["finish_reason"] == "stop" and count_tokens(choice["text"]) == 5
        assert plain["usage"] == {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9}
        eos = (await complete(max_tokens=50, ignore_eos=True))["choices"][0]
        assert eos["finish_reason"] == "length" and count_tokens(eos["text"]) == 50
        least = (await complete(max_tokens=50, min_tokens=9))["choices"][0]
        assert least["finish_reason"] == "stop" and count_tokens(least["text"]) == 9
        default = (await complete())["choices"][0]  # OpenAI's completions default: 16
        assert count_tokens(default["text"]) == 5
        ids = await complete(prompt=[11, 22, 33], max_tokens=2)
        assert ids["usage"]["prompt_tokens"] == 3
        bad = await http.post("/v1/completions", json={"model": "m", "prompt": ["a", "b"]})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "prompt"


@virtual_deadline(10)
async def test_a_streamed_completion_is_paced_per_chunk_and_reports_usage(autojump_clock):
    config = SimulatorConfig(ttft=0.5, tokens_per_second=10, tokens_per_chunk=2, output_tokens=5)
    async with client(config) as http:
        start = trio.current_time()
        body = {
            "model": "sim-small",
            "prompt": "a b c",
            "max_tokens": 100,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        response = await http.post("/v1/completions", json=body)
        elapsed = trio.current_time() - start
    chunks = events(response.text)
    texts = [c["choices"][0]["text"] for c in chunks if c["choices"]]
    assert [count_tokens(t) for t in texts] == [2, 2, 1, 0]  # then the finish chunk
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 5
    assert response.text.endswith("data: [DONE]\n\n")
    # TTFT 0.5 s, then a chunk every 2 tokens / 10 tokens/s: 0.5 + 0.2 + 0.2.
    assert elapsed == pytest.approx(0.9)


@virtual_deadline(10)
async def test_embeddings_one_unit_vector_per_input(autojump_clock):
    async with client(SimulatorConfig(ttft=0.25)) as http:
        start = trio.current_time()
        body = {"model": "emb", "input": ["alpha beta", "gamma", "alpha beta"], "dimensions": 8}
        response = await http.post("/v1/embeddings", json=body)
        assert trio.current_time() - start == pytest.approx(0.25)
        single = await http.post("/v1/embeddings", json={"model": "emb", "input": "gamma"})
        bad = await http.post("/v1/embeddings", json={"model": "emb", "input": []})
    data = response.json()
    assert data["usage"] == {"prompt_tokens": 5, "total_tokens": 5}
    vectors = [item["embedding"] for item in data["data"]]
    assert [item["index"] for item in data["data"]] == [0, 1, 2]
    # Unit length to float32 precision: the values are float32, as OpenAI's are.
    assert all(len(v) == 8 for v in vectors)
    assert all(math.isclose(math.fsum(x * x for x in v), 1.0, rel_tol=1e-6) for v in vectors)
    assert vectors[0] == vectors[2] != vectors[1]
    assert len(single.json()["data"][0]["embedding"]) == 768  # an unknown model's size
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "input"


@virtual_deadline(60)
async def test_seeded_draws_do_not_depend_on_other_requests(autojump_clock):
    # The same request gets the same drawn TTFT whether or not other requests came first, and
    # the draw is what request_rng replays offline.
    config = SimulatorConfig(ttft=0.2, ttft_jitter=0.05, output_tokens=3, latency_seed=7)
    target = {"model": "m", "messages": [{"role": "user", "content": "r1 measured"}]}

    async def ttft_of(warmups: int) -> float:
        async with client(SimulatorApp(config)) as http:
            for i in range(warmups):
                other = {"model": "m", "messages": [{"role": "user", "content": f"w{i}"}]}
                await http.post("/v1/chat/completions", json=other)
            start = trio.current_time()
            await http.post("/v1/chat/completions", json={**target, "max_tokens": 1})
            return trio.current_time() - start

    cold, warm = await ttft_of(0), await ttft_of(3)
    assert cold == pytest.approx(warm, abs=1e-9)  # the clock's arithmetic, not the draw
    import hashlib

    digest = hashlib.blake2b(
        orjson.dumps(target["messages"], option=orjson.OPT_SORT_KEYS), digest_size=16
    ).digest()
    replay = draw_generation(
        request_rng(7, digest),
        now=0.0,
        chunks=1,
        tokens=1,
        tokens_per_chunk=1,
        ttft=0.2,
        ttft_jitter=0.05,
        token_interval=0.0,
        itl_jitter=0.0,
        slots=None,
    )
    assert cold == pytest.approx(replay.ttft) and cold != 0.2
