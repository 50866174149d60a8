"""The OpenAI embeddings codec: exact request bytes and reply decoding (floats and base64)."""

from __future__ import annotations

import base64
import struct

import orjson
import pytest

from sluice._embeddings import EmbedRequest
from sluice._errors import BadRequest, ProtocolError, RateLimited
from sluice._messages import Usage
from sluice._protocols import codec_for, embed_codec
from sluice._protocols.openai_embed import decode_embed_body
from sluice._protocols.quirks import RequestQuirks


def packed(values: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()


def test_the_request_is_a_post_to_embeddings_with_the_inputs_as_a_list():
    codec = embed_codec(codec_for("openai"))
    assert codec is not None
    request = EmbedRequest(
        model="openai:text-embedding-3-small",
        input=["a", "b"],
        dimensions=256,
        encoding_format="base64",
        extra_body={"user": "u1", "dimensions": 128},
        extra_headers={"x-trace": "t", "authorization": "Bearer stolen"},
    )
    http = codec.build_embed_request(
        request, base_url="https://api.openai.com/v1/", api_key="sk-k", headers={"x-org": "o"}
    )
    assert http.method == "POST"
    assert http.url == "https://api.openai.com/v1/embeddings"
    headers = dict(http.headers)
    assert headers["authorization"] == "Bearer sk-k"  # extra headers never set credentials
    assert headers["x-trace"] == "t" and headers["x-org"] == "o"
    assert headers["content-type"] == "application/json"
    assert orjson.loads(http.body) == {
        "model": "text-embedding-3-small",
        "input": ["a", "b"],
        "dimensions": 128,  # extra_body is merged last
        "encoding_format": "base64",
        "user": "u1",
    }


def test_one_string_is_one_input_and_unset_fields_are_left_out():
    codec = embed_codec(codec_for("openai"))
    assert codec is not None
    http = codec.build_embed_request(
        EmbedRequest(model="openai:m", input="just one"), base_url="http://h/v1", api_key=None
    )
    assert orjson.loads(http.body) == {"model": "m", "input": ["just one"]}
    assert "authorization" not in dict(http.headers)


def test_an_azure_deployment_gets_the_deployment_path_and_api_version():
    codec = embed_codec(codec_for("openai", quirks=RequestQuirks(azure_api_version="2024-10-21")))
    assert codec is not None
    http = codec.build_embed_request(
        EmbedRequest(model="azure-openai:my emb", input=["x"]),
        base_url="https://res.openai.azure.com",
        api_key=None,
        headers={"api-key": "k"},
    )
    assert http.url == (
        "https://res.openai.azure.com/openai/deployments/my%20emb/embeddings?api-version=2024-10-21"
    )
    assert dict(http.headers)["api-key"] == "k"


def test_float_vectors_are_put_in_index_order_with_usage():
    body = orjson.dumps(
        {
            "object": "list",
            "data": [
                {"object": "embedding", "index": 1, "embedding": [0.5, -1]},
                {"object": "embedding", "index": 0, "embedding": [0.25, 2.0]},
            ],
            "model": "m",
            "usage": {"prompt_tokens": 7, "total_tokens": 7},
        }
    )
    out = decode_embed_body(body, inputs=2)
    assert out.vectors == ([0.25, 2.0], [0.5, -1])
    assert out.usage == Usage(input_tokens=7)


def test_base64_vectors_are_little_endian_float32():
    values = [0.5, -0.25, 1.0, 3.0]
    body = orjson.dumps(
        {"data": [{"index": 0, "embedding": packed(values)}], "usage": {"prompt_tokens": 1}}
    )
    out = decode_embed_body(body, inputs=1)
    assert out.vectors == (values,)


def test_a_reply_without_usage_has_none():
    body = orjson.dumps({"data": [{"index": 0, "embedding": [1.0]}]})
    assert decode_embed_body(body, inputs=1).usage is None


@pytest.mark.parametrize(
    ("data", "what"),
    [
        ([{"index": 0, "embedding": [1.0]}], "holds 1 vectors for 2 inputs"),
        ([{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}], "repeated"),
        ([{"index": 0, "embedding": [1.0]}, {"index": 5, "embedding": [1.0]}], "out-of-range"),
        ([{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": ["x"]}], "other than"),
        ([{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": "AAA"}], "base64"),
        ([{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": "AAAAAAA="}], "float32"),
        ([{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": None}], "neither"),
    ],
)
def test_a_reply_that_does_not_match_the_inputs_is_a_protocol_error(data, what):
    with pytest.raises(ProtocolError, match=what):
        decode_embed_body(orjson.dumps({"data": data}), inputs=2)


@pytest.mark.parametrize("body", [b"<html>", b"[1]", b'{"object": "list"}'])
def test_a_body_that_is_no_embeddings_list_is_a_protocol_error(body):
    with pytest.raises(ProtocolError):
        decode_embed_body(body, inputs=1)


def test_an_error_object_in_a_200_reply_is_that_error():
    body = orjson.dumps({"error": {"message": "slow down", "type": "rate_limit_exceeded"}})
    with pytest.raises(RateLimited):
        decode_embed_body(body, inputs=1)


def test_error_replies_go_through_the_chat_codecs_mapping():
    codec = embed_codec(codec_for("openai"))
    assert codec is not None
    error = codec.decode_error(
        400,
        {},
        orjson.dumps(
            {
                "error": {
                    "message": "bad dims",
                    "type": "invalid_request_error",
                    "param": "dimensions",
                }
            }
        ),
        wall_now=0.0,
    )
    assert isinstance(error, BadRequest) and error.param == "dimensions"


def test_the_anthropic_protocol_has_no_embeddings():
    assert embed_codec(codec_for("anthropic")) is None
