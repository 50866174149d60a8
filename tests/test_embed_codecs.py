"""The Gemini (``batchEmbedContents``) and Ollama (``/api/embed``) embedding codecs on
hand-written requests and replies: exact request bytes, decoded vectors and usage, errors."""

from __future__ import annotations

import orjson
import pytest

from sluice._embeddings import EmbedOutput, EmbedRequest
from sluice._errors import (
    AuthenticationFailed,
    BadRequest,
    CallError,
    NotFound,
    ProtocolError,
    RateLimited,
)
from sluice._messages import Usage
from sluice._protocols import codec_for, embed_codec
from sluice._protocols.gemini import GeminiCodec
from sluice._protocols.ollama import OllamaCodec
from sluice._version import USER_AGENT

GEMINI = GeminiCodec()
OLLAMA = OllamaCodec()
GEMINI_BASE = "https://generativelanguage.googleapis.com/v1beta"


def test_both_protocols_have_embeddings_and_anthropic_has_none() -> None:
    assert embed_codec(codec_for("gemini")) is not None
    assert embed_codec(codec_for("ollama")) is not None
    assert embed_codec(codec_for("anthropic")) is None


# --- Gemini ---------------------------------------------------------------------------------


def test_gemini_one_entry_per_input_with_the_exact_bytes() -> None:
    request = EmbedRequest(model="gemini:gemini-embedding-001", input=["a", "b c"])
    http = GEMINI.build_embed_request(request, base_url=GEMINI_BASE + "/", api_key="k-1")
    assert http.method == "POST"
    assert http.url == GEMINI_BASE + "/models/gemini-embedding-001:batchEmbedContents"
    assert http.headers == (
        ("user-agent", USER_AGENT),
        ("content-type", "application/json"),
        ("accept", "application/json"),
        ("x-goog-api-key", "k-1"),
    )
    assert http.body == (
        b'{"requests":['
        b'{"model":"models/gemini-embedding-001","content":{"parts":[{"text":"a"}]}},'
        b'{"model":"models/gemini-embedding-001","content":{"parts":[{"text":"b c"}]}}]}'
    )


def test_gemini_dimensions_and_extra_body_go_into_every_entry() -> None:
    request = EmbedRequest(
        model="gemini:models/text-embedding-004",
        input="only",
        dimensions=256,
        encoding_format="base64",  # the API has no packed form: not sent
        extra_body={"taskType": "RETRIEVAL_DOCUMENT", "title": "T"},
        extra_headers={"x-trace": "1", "x-goog-api-key": "stolen"},
    )
    http = GEMINI.build_embed_request(
        request, base_url=GEMINI_BASE, api_key=None, headers={"X-Team": "t"}
    )
    assert http.url == GEMINI_BASE + "/models/text-embedding-004:batchEmbedContents"
    assert dict(http.headers) == {
        "user-agent": USER_AGENT,
        "content-type": "application/json",
        "accept": "application/json",
        "x-trace": "1",
        "x-team": "t",
    }
    assert http.body == (
        b'{"requests":[{"model":"models/text-embedding-004","content":{"parts":[{"text":"only"}]},'
        b'"outputDimensionality":256,"taskType":"RETRIEVAL_DOCUMENT","title":"T"}]}'
    )


def test_gemini_reply_decodes_in_order_without_usage() -> None:
    body = (
        b'{\n  "embeddings": [\n    {\n      "values": [0.5, -1, 2e-3]\n    },\n'
        b'    {"values": [1.25]}\n  ]\n}\n'
    )
    out = GEMINI.decode_embed_body(body, inputs=2)
    assert out == EmbedOutput(vectors=([0.5, -1, 0.002], [1.25]), usage=None)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"<html>", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"embedding": {"values": [1.0]}}', "no embeddings"),
        (b'{"embeddings": [{"values": [1.0]}]}', "1 embeddings for 2 inputs"),
        (b'{"embeddings": [{"values": [1.0]}, {"value": [1.0]}]}', "embedding 1 .* not a list"),
        (b'{"embeddings": [{"values": [1.0]}, {"values": []}]}', "embedding 1 .* not a list"),
        (b'{"embeddings": [{"values": [1.0]}, {"values": [1.0, "x"]}]}', "no number"),
        (b'{"embeddings": [{"values": [1.0]}, {"values": [null]}]}', "no number"),
    ],
)
def test_gemini_malformed_replies_are_protocol_errors(body: bytes, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        GEMINI.decode_embed_body(body, inputs=2)


def test_gemini_error_bodies() -> None:
    inside = (
        b'{"error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED"}}'
    )
    with pytest.raises(RateLimited, match="Resource exhausted"):
        GEMINI.decode_embed_body(inside, inputs=1)
    bad_key = (
        b'[{"error": {"code": 400, "message": "API key not valid.", "status": "INVALID_ARGUMENT",'
        b' "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",'
        b' "reason": "API_KEY_INVALID"}]}}]'
    )
    error = GEMINI.decode_error(400, {}, bad_key, wall_now=0.0)
    assert isinstance(error, AuthenticationFailed)
    not_found = (
        b'{"error": {"code": 404, "message": "models/x is not found", "status": "NOT_FOUND"}}'
    )
    assert isinstance(GEMINI.decode_error(404, {}, not_found, wall_now=0.0), NotFound)


# --- Ollama ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "base", ["http://localhost:11434", "http://localhost:11434/", "http://localhost:11434/v1"]
)
def test_ollama_request_exact_bytes(base: str) -> None:
    request = EmbedRequest(model="ollama:all-minilm", input=["Why is the sky blue?", "x"])
    http = OLLAMA.build_embed_request(request, base_url=base, api_key=None)
    assert http.url == "http://localhost:11434/api/embed"
    assert http.headers == (
        ("user-agent", USER_AGENT),
        ("content-type", "application/json"),
        ("accept", "application/json"),
    )
    assert http.body == b'{"model":"all-minilm","input":["Why is the sky blue?","x"]}'


def test_ollama_dimensions_truncate_and_options_through_extra_body() -> None:
    request = EmbedRequest(
        model="ollama:qwen3-embedding:0.6b",
        input="one",
        dimensions=128,
        encoding_format="base64",
        extra_body={"truncate": False, "keep_alive": "10m", "options": {"num_ctx": 512}},
    )
    http = OLLAMA.build_embed_request(request, base_url="https://ollama.com", api_key="key")
    assert dict(http.headers)["authorization"] == "Bearer key"
    assert http.body == (
        b'{"model":"qwen3-embedding:0.6b","input":["one"],"dimensions":128,"truncate":false,'
        b'"keep_alive":"10m","options":{"num_ctx":512}}'
    )


def test_ollama_reply_decodes_with_prompt_eval_count_as_input_tokens() -> None:
    body = (
        b'{"model":"all-minilm","embeddings":[[0.010071029,-0.0017594862],[0.5,0.25]],'
        b'"total_duration":14143917,"load_duration":1019500,"prompt_eval_count":8}'
    )
    out = OLLAMA.decode_embed_body(body, inputs=2)
    assert out == EmbedOutput(
        vectors=([0.010071029, -0.0017594862], [0.5, 0.25]), usage=Usage(input_tokens=8)
    )
    without = OLLAMA.decode_embed_body(b'{"embeddings":[[1.0]]}', inputs=1)
    assert without.usage is None


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"nope", "not JSON"),
        (b"[[1.0]]", "not a JSON object"),
        (b'{"embedding":[1.0]}', "no embeddings"),
        (b'{"embeddings":[[1.0],[2.0],[3.0]]}', "3 embeddings for 2 inputs"),
        (b'{"embeddings":[[1.0],{"x":1}]}', "embedding 1 .* not a list"),
        (b'{"embeddings":[[1.0],[[2.0]]]}', "no number"),
    ],
)
def test_ollama_malformed_replies_are_protocol_errors(body: bytes, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        OLLAMA.decode_embed_body(body, inputs=2)


def test_ollama_errors_keep_the_servers_text() -> None:
    body = b'{"error":"\\"llama3.2\\" does not support embeddings"}'
    with pytest.raises(CallError, match="does not support embeddings"):  # in a 200: no status
        OLLAMA.decode_embed_body(body, inputs=1)
    error = OLLAMA.decode_error(400, {}, body, wall_now=0.0)
    assert isinstance(error, BadRequest)
    assert "does not support embeddings" in str(error)
    missing = OLLAMA.decode_error(404, {}, b'{"error":"model \\"x\\" not found"}', wall_now=0.0)
    assert isinstance(missing, NotFound)


def test_large_vectors_pass_through_as_the_parsed_lists() -> None:
    values = [i / 4096 for i in range(3072)]
    body = orjson.dumps({"embeddings": [values] * 3, "prompt_eval_count": 9})
    out = OLLAMA.decode_embed_body(body, inputs=3)
    assert [len(v) for v in out.vectors] == [3072] * 3
    assert out.vectors[2][-1] == 3071 / 4096
