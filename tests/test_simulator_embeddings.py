"""The simulator's ``/v1/embeddings`` as OpenAI serves it: model-sized vectors, ``dimensions``,
``encoding_format: base64``, OpenAI's per-request limits, latency per input token and the
quotas; and its OpenAI Batch API taking ``/v1/embeddings`` and ``/v1/responses`` lines. Through
the httpx transport under the autojump clock: exact virtual timings."""

from __future__ import annotations

import base64
import math
import struct

import httpx
import orjson
import pytest
import trio

from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport

from .helpers import virtual_deadline


def client(config: SimulatorConfig | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=mock_transport(config), base_url="http://sim")


def words(n: int, word: str = "w") -> str:
    return " ".join([word] * n)


@virtual_deadline(10)
async def test_each_model_answers_with_its_own_size(autojump_clock):
    sizes = {
        "text-embedding-3-small": 1536,
        "text-embedding-3-large": 3072,
        "text-embedding-ada-002": 1536,
        "nomic-embed-text": 768,
    }
    async with client() as http:
        for model, size in sizes.items():
            reply = await http.post("/v1/embeddings", json={"model": model, "input": ["a", "b"]})
            assert reply.status_code == 200, reply.text
            data = reply.json()
            assert data["model"] == model and data["object"] == "list"
            assert [len(d["embedding"]) for d in data["data"]] == [size, size]


@virtual_deadline(10)
async def test_dimensions_as_openai_takes_and_refuses_them(autojump_clock):
    async with client() as http:

        async def post(model: str, dimensions: object) -> httpx.Response:
            body = {"model": model, "input": "x", "dimensions": dimensions}
            return await http.post("/v1/embeddings", json=body)

        short = await post("text-embedding-3-large", 256)
        assert len(short.json()["data"][0]["embedding"]) == 256
        fixed = await post("text-embedding-ada-002", 256)
        assert fixed.status_code == 400
        assert fixed.json()["error"]["message"] == (
            "This model does not support specifying dimensions."
        )
        for model, too_many in (("text-embedding-3-small", 1537), ("other", 8193)):
            refused = await post(model, too_many)
            assert refused.status_code == 400 and refused.json()["error"]["param"] == "dimensions"
        assert (await post("other", 0)).status_code == 400


@virtual_deadline(10)
async def test_base64_carries_the_same_float32_vector(autojump_clock):
    async with client() as http:
        body = {"model": "text-embedding-3-small", "input": ["same text", "other"]}
        floats = (await http.post("/v1/embeddings", json=body)).json()
        packed = (
            await http.post("/v1/embeddings", json={**body, "encoding_format": "base64"})
        ).json()
        bad = await http.post("/v1/embeddings", json={**body, "encoding_format": "int8"})
    assert floats["usage"] == packed["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    for plain, wire in zip(floats["data"], packed["data"], strict=True):
        raw = base64.b64decode(wire["embedding"])
        assert len(raw) == 4 * 1536
        # The JSON numbers are the shortest texts of the same float32 values.
        as_float32 = [struct.unpack("<f", struct.pack("<f", x))[0] for x in plain["embedding"]]
        assert list(struct.unpack("<1536f", raw)) == as_float32
        assert math.isclose(math.fsum(x * x for x in as_float32), 1.0, rel_tol=1e-6)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "encoding_format"


@virtual_deadline(30)
async def test_openais_per_request_limits(autojump_clock):
    async with client() as http:

        async def post(inputs: object) -> httpx.Response:
            body = {"model": "text-embedding-3-small", "input": inputs, "dimensions": 4}
            return await http.post("/v1/embeddings", json=body)

        most = await post(["x"] * 2048)
        assert most.status_code == 200 and len(most.json()["data"]) == 2048
        over = await post(["x"] * 2049)
        assert over.status_code == 400
        assert over.json()["error"]["message"].startswith("'$.input' is invalid")

        longest = await post([words(8192)])
        assert longest.status_code == 200
        too_long = await post([words(8193)])
        assert too_long.status_code == 400
        assert "maximum context length is 8192 tokens" in too_long.json()["error"]["message"]
        assert "requested 8193 tokens" in too_long.json()["error"]["message"]

        full = [words(8000)] * 37 + [words(4000)]  # 300,000 tokens
        assert (await post(full)).json()["usage"]["prompt_tokens"] == 300_000
        over_tokens = await post([*full, "one more"])
    assert over_tokens.status_code == 400
    assert over_tokens.json() == {
        "error": {
            "message": "Requested 300002 tokens, max 300000 tokens per request",
            "type": "max_tokens_per_request",
            "param": None,
            "code": "max_tokens_per_request",
        }
    }


@virtual_deadline(10)
async def test_latency_is_a_base_plus_time_per_input_token(autojump_clock):
    config = SimulatorConfig(ttft=0.2, embedding_tokens_per_second=1000)
    async with client(config) as http:
        start = trio.current_time()
        body = {"model": "m", "input": [words(100), words(300)]}
        reply = await http.post("/v1/embeddings", json=body)
        elapsed = trio.current_time() - start
    assert reply.json()["usage"]["prompt_tokens"] == 400
    assert elapsed == pytest.approx(0.2 + 400 / 1000)


@virtual_deadline(200)
async def test_tokens_count_against_the_tpm_quota_as_chat_does(autojump_clock):
    app = SimulatorApp(SimulatorConfig(tpm=1000))
    async with client(app) as http:  # type: ignore[arg-type]
        body = {"model": "m", "input": [words(300), words(300)]}
        first = await http.post("/v1/embeddings", json=body)
        assert first.status_code == 200
        assert first.headers["x-ratelimit-remaining-tokens"] == "400"
        second = await http.post("/v1/embeddings", json=body)
        assert second.status_code == 429
        assert second.json()["error"]["code"] == "rate_limit_exceeded"
        wait = float(second.headers["retry-after"])
        assert 0 < wait <= 60
        chat = {"model": "m", "messages": [{"role": "user", "content": words(500)}]}
        assert (await http.post("/v1/chat/completions", json=chat)).status_code == 429
        await trio.sleep(wait)
        assert (await http.post("/v1/embeddings", json=body)).status_code == 200


@virtual_deadline(60)
async def test_a_provider_batch_of_embeddings_lines_answers_each_as_the_realtime_route(
    autojump_clock,
):
    url = "/v1/embeddings"
    bodies = [
        {"model": "text-embedding-3-small", "input": ["first text", "second"], "dimensions": 4},
        {"model": "text-embedding-3-small", "input": "third", "encoding_format": "base64"},
        {"model": "text-embedding-3-small", "input": ["x"] * 2049},  # refused as realtime is
    ]
    content = b"".join(
        orjson.dumps({"custom_id": f"e{i}", "method": "POST", "url": url, "body": b}) + b"\n"
        for i, b in enumerate(bodies)
    )
    app = SimulatorApp(SimulatorConfig(batch_time=10.0))
    async with httpx.AsyncClient(transport=mock_transport(app), base_url="http://sim/v1") as c:
        form = {"purpose": "batch"}
        file_id = (await c.post("/files", files={"file": ("in", content)}, data=form)).json()["id"]
        fields = {"input_file_id": file_id, "endpoint": url, "completion_window": "24h"}
        batch = (await c.post("/batches", json=fields)).json()
        assert batch["status"] == "validating", batch
        await trio.sleep(11.0)
        done = (await c.get(f"/batches/{batch['id']}")).json()
        assert done["status"] == "completed" and done["request_counts"]["total"] == 3
        out = (await c.get(f"/files/{done['output_file_id']}/content")).content.splitlines()
        errors = (await c.get(f"/files/{done['error_file_id']}/content")).content.splitlines()
        realtime = [(await c.post("/embeddings", json=b)).json() for b in bodies]
    records = {r["custom_id"]: r for r in map(orjson.loads, out + errors)}
    assert sorted(records) == ["e0", "e1", "e2"]
    for i in range(3):
        record = records[f"e{i}"]
        assert record["error"] is None
        assert record["response"]["body"] == realtime[i]
    assert records["e0"]["response"]["status_code"] == 200
    assert [len(d["embedding"]) for d in records["e0"]["response"]["body"]["data"]] == [4, 4]
    assert records["e0"]["response"]["body"]["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    assert records["e2"]["response"]["status_code"] == 400


async def test_simulators_sharing_a_redis_quota_count_embedding_tokens_as_one_account(
    redis_url,
):
    """Two apps on one Redis quota of 1,000 tokens a minute: 600 embedding tokens pass on the
    first, the next 600 are refused on the second, as one account would refuse them."""
    import uuid

    from sluice._limits.redis_store import open_redis_store
    from sluice.simulator._shared_quota import SharedServerQuota

    body = {"model": "m", "input": [words(300), words(300)], "dimensions": 4}
    statuses = []
    with trio.fail_after(30):
        async with open_redis_store(redis_url, prefix=f"sim-{uuid.uuid4().hex}") as store:
            apps = [
                SimulatorApp(
                    SimulatorConfig(tpm=1000),
                    shared_quota=SharedServerQuota(store, rpm=None, tpm=1000),
                )
                for _ in range(2)
            ]
            for app in apps:
                async with httpx.AsyncClient(transport=mock_transport(app)) as http:
                    reply = await http.post("http://sim/v1/embeddings", json=body)
                    statuses.append(reply.status_code)
    assert statuses == [200, 429]


@virtual_deadline(30)
async def test_rt_embed_through_an_azure_deployment_reaches_the_simulators_route(autojump_clock):
    """Azure OpenAI's deployment path for embeddings: the deployment's name is the model, and
    its vectors are that model's size."""
    import sluice
    from sluice import ProviderConfig, RuntimeConfig, Secret

    seen: list[httpx.Request] = []
    inner = mock_transport(SimulatorApp())

    async def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return await inner.handle_async_request(request)

    azure = ProviderConfig(
        base_url="https://contoso.openai.azure.com",
        api_version="2024-10-21",
        api_key=Secret("azure-key-0123456789abcdef"),
    )
    config = RuntimeConfig(providers={"azure-openai": azure})
    transport = httpx.MockTransport(record)
    async with sluice.open_runtime(config, transport=transport, environ={}) as rt:
        result = await rt.embed("azure-openai:text-embedding-3-large", ["one", "two three"])
    (request,) = seen
    assert request.url.path == "/openai/deployments/text-embedding-3-large/embeddings"
    assert [len(v) for v in result.vectors] == [3072, 3072]
    assert result.usage.input_tokens == 3


@virtual_deadline(60)
async def test_a_provider_batch_of_responses_lines_answers_with_response_objects(autojump_clock):
    """OpenAI's Batch API takes /v1/responses lines too: each answered as the realtime route
    answers it (ids and timestamps aside)."""
    url = "/v1/responses"
    bodies = [
        {"model": "sim-small", "input": f"question {i}", "max_output_tokens": 30} for i in range(3)
    ]
    content = b"".join(
        orjson.dumps({"custom_id": f"r{i}", "method": "POST", "url": url, "body": b}) + b"\n"
        for i, b in enumerate(bodies)
    )
    app = SimulatorApp(SimulatorConfig(batch_time=5.0))
    async with httpx.AsyncClient(transport=mock_transport(app), base_url="http://sim/v1") as c:
        form = {"purpose": "batch"}
        file_id = (await c.post("/files", files={"file": ("in", content)}, data=form)).json()["id"]
        fields = {"input_file_id": file_id, "endpoint": url, "completion_window": "24h"}
        batch = (await c.post("/batches", json=fields)).json()
        await trio.sleep(6.0)
        done = (await c.get(f"/batches/{batch['id']}")).json()
        assert done["status"] == "completed", done
        out = (await c.get(f"/files/{done['output_file_id']}/content")).content.splitlines()
        realtime = [(await c.post("/responses", json=b)).json() for b in bodies]
    records = {r["custom_id"]: r for r in map(orjson.loads, out)}
    for i in range(3):
        body = records[f"r{i}"]["response"]["body"]
        assert body["object"] == "response" and body["status"] == "completed"
        assert (
            body["output"][0]["content"][0]["text"]
            == realtime[i]["output"][0]["content"][0]["text"]
        )
        assert body["usage"] == realtime[i]["usage"]
