"""The gateway's ``POST /v1/embeddings`` in virtual time, in front of the simulator: one input
and many (in order), ``dimensions``, base64 re-encoded from the runtime's floats, virtual keys,
the key's rpm/tpm and budget as for chat, and errors in OpenAI's shape."""

import base64
import struct

import orjson

from sluice._gateway import GatewaySettings, KeyRing, issue_key

from .gateway_helpers import gateway_harness
from .helpers import virtual_deadline

OPEN = GatewaySettings(require_key=False)
MODEL = "sim:text-embedding-3-small"


def _ring(**specs):
    keys: dict = {}
    tokens: dict[str, str] = {}
    for name, limits in specs.items():
        keys[name], tokens[name] = issue_key(keys, name, now=0.0, **limits)
    return KeyRing(None, keys), tokens


def _vectors(raw: bytes) -> list:
    reply = orjson.loads(raw)
    assert reply["object"] == "list"
    assert [d["index"] for d in reply["data"]] == list(range(len(reply["data"])))
    return [d["embedding"] for d in reply["data"]]


@virtual_deadline(60)
async def test_one_input_many_inputs_in_order_and_dimensions(autojump_clock):
    texts = [f"chunk number {i} of the corpus" for i in range(100)]
    async with gateway_harness(settings=OPEN) as gw:
        status, headers, raw = await gw.call("/v1/embeddings", {"model": MODEL, "input": "hi"})
        assert status == 200 and headers["content-type"] == "application/json"
        reply = orjson.loads(raw)
        assert reply["model"] == MODEL
        assert reply["usage"]["prompt_tokens"] == reply["usage"]["total_tokens"] > 0
        (one,) = _vectors(raw)
        assert all(isinstance(x, float) for x in one)

        status, _, raw = await gw.call("/v1/embeddings", {"model": MODEL, "input": texts})
        assert status == 200
        many = _vectors(raw)
        assert len(many) == 100
        status, _, raw = await gw.call(
            "/v1/embeddings", {"model": MODEL, "input": [texts[7], texts[3]]}
        )
        assert _vectors(raw) == [many[7], many[3]]  # each vector belongs to its own input

        status, _, raw = await gw.call(
            "/v1/embeddings", {"model": MODEL, "input": texts[:2], "dimensions": 16}
        )
        assert status == 200 and [len(v) for v in _vectors(raw)] == [16, 16]


@virtual_deadline(60)
async def test_base64_is_the_float32_packing_of_the_same_vectors(autojump_clock):
    async with gateway_harness(settings=OPEN) as gw:
        body = {"model": MODEL, "input": ["alpha", "beta"], "dimensions": 8}
        _, _, raw = await gw.call("/v1/embeddings", body)
        floats = _vectors(raw)
        _, _, raw = await gw.call("/v1/embeddings", {**body, "encoding_format": "base64"})
        packed = _vectors(raw)
    for text, vector in zip(packed, floats, strict=True):
        assert isinstance(text, str)
        assert struct.unpack("<8f", base64.b64decode(text)) == struct.unpack(
            "<8f", struct.pack("<8f", *vector)
        )


@virtual_deadline(60)
async def test_bad_bodies_and_unknown_models_are_openai_errors(autojump_clock):
    config = {
        "ledger": {"persist": False},
        "providers": {"simant": {"protocol": "anthropic", "base_url": "http://sim.invalid/v1"}},
    }
    async with gateway_harness(settings=OPEN, config=config) as gw:
        cases = [
            ({"model": MODEL, "input": [[1, 2, 3]]}, 400, "body.input: token-id arrays"),
            ({"model": MODEL}, 400, "body.input: missing"),
            ({"model": MODEL, "input": "x", "dimensions": -1}, 400, "body.dimensions"),
            ({"model": MODEL, "input": "x", "encoding_format": "int8"}, 400, "body.encoding"),
            ({"model": "bare", "input": "x"}, 400, "names no provider"),
            ({"model": "nosuch:m", "input": "x"}, 400, "nosuch"),
            ({"model": "simant:claude", "input": "x"}, 400, "embedding"),
        ]
        for body, status, words in cases:
            got, _, raw = await gw.call("/v1/embeddings", body)
            error = orjson.loads(raw)["error"]
            assert (got, error["type"]) == (status, "invalid_request_error"), raw
            assert words in error["message"]
        assert gw.gateway.requests[("/v1/embeddings", 400)] == len(cases)
        assert gw.sim.requests_seen == 0  # nothing went upstream


@virtual_deadline(300)
async def test_keys_rate_limits_and_budgets_hold_as_for_chat(autojump_clock):
    ring, tokens = _ring(
        alice={"rpm": 2},
        carol={"tpm": 100},
        frank={"budget_usd": 0.001},
        heidi={"models": ["sim:other"]},
    )
    body = {"model": MODEL, "input": "a short text"}
    async with gateway_harness(keys=ring) as gw:
        status, _, raw = await gw.call("/v1/embeddings", body)
        assert status == 401 and orjson.loads(raw)["error"]["code"] == "invalid_api_key"
        for _ in range(2):
            status, _, _ = await gw.call("/v1/embeddings", body, token=tokens["alice"])
            assert status == 200
        status, headers, raw = await gw.call("/v1/embeddings", body, token=tokens["alice"])
        assert status == 429 and headers["retry-after"] == "60"
        assert orjson.loads(raw)["error"]["code"] == "rate_limit_exceeded"

        # tpm: the inputs' estimated tokens (4 characters a token); more than a minute's worth
        # is refused outright, without a retry.
        long = {"model": MODEL, "input": ["x" * 300, "y" * 200]}
        status, headers, raw = await gw.call("/v1/embeddings", long, token=tokens["carol"])
        assert status == 429 and headers["x-should-retry"] == "false"
        assert "more than key 'carol' may use" in orjson.loads(raw)["error"]["message"]
        status, _, _ = await gw.call("/v1/embeddings", body, token=tokens["carol"])
        assert status == 200

        status, _, raw = await gw.call("/v1/embeddings", body, token=tokens["heidi"])
        assert status == 403 and orjson.loads(raw)["error"]["code"] == "model_not_allowed"

        # sim models cost $1/M input tokens: 200 words are 200 tokens, $0.0002 a call.
        costly = {"model": MODEL, "input": " ".join(["word"] * 200)}
        calls = 0
        while True:
            status, headers, raw = await gw.call("/v1/embeddings", costly, token=tokens["frank"])
            if status != 200:
                break
            calls += 1
            assert calls < 20
        assert 3 <= calls <= 6
        assert status == 429 and headers["x-should-retry"] == "false"
        assert orjson.loads(raw)["error"]["type"] == "insufficient_quota"
        rows = await gw.gateway.rt.ledger.snapshot(by=("tag",))
        by_tag = {row.tag: row.totals for row in rows}
        assert by_tag["alice"].calls == 2
        assert by_tag["frank"].input_tokens == 200 * calls
