"""The gateway's embeddings wire format, pure: bodies into EmbedRequest fields (errors naming
the field, token ids refused), results into OpenAI's list body, base64 as OpenAI packs it."""

import base64
import struct

import orjson
import pytest

from sluice._embeddings import EmbedRequest, EmbedResult
from sluice._errors import ConfigError
from sluice._gateway.embeddings_wire import (
    float32_base64,
    parse_embeddings_body,
    render_embeddings,
)
from sluice._messages import Usage


def test_a_body_becomes_embed_request_fields():
    fields, encoding = parse_embeddings_body(
        {"model": "x", "input": ["a", "b"], "dimensions": 8, "encoding_format": "base64",
         "user": "u-1"}
    )  # fmt: skip
    assert encoding == "base64"
    request = EmbedRequest(model="sim:e", **fields)
    assert request.input == ("a", "b")
    assert request.dimensions == 8
    assert request.encoding_format == "base64"
    assert request.extra_body == {"user": "u-1"}
    fields, encoding = parse_embeddings_body({"input": "one"})
    assert fields == {"input": ("one",)} and encoding == "float"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "body.input: missing"),
        ({"input": ""}, "body.input: must not be an empty string"),
        ({"input": []}, "body.input: must hold at least one string"),
        ({"input": ["a", ""]}, "body.input[1]: must not be an empty string"),
        ({"input": [1, 2, 3]}, "body.input: token-id arrays are not supported here"),
        ({"input": [[1, 2], [3]]}, "body.input: token-id arrays are not supported here"),
        ({"input": ["a", None]}, "body.input[1]: expected a string"),
        ({"input": {"a": 1}}, "body.input: expected a string or an array of strings"),
        ({"input": "a", "dimensions": 0}, "body.dimensions: expected an integer >= 1"),
        ({"input": "a", "dimensions": True}, "body.dimensions: expected an integer >= 1"),
        ({"input": "a", "encoding_format": "int8"}, "body.encoding_format: expected 'float'"),
    ],
)
def test_bad_bodies_name_the_field(body, message):
    with pytest.raises(ConfigError) as caught:
        parse_embeddings_body(body)
    assert str(caught.value).startswith(message)


def test_base64_is_little_endian_float32_as_openai_packs_it():
    vector = [0.5, -1.25, 3.0]
    assert base64.b64decode(float32_base64(vector)) == struct.pack("<3f", *vector)


def test_a_result_renders_as_openais_list_in_either_encoding():
    result = EmbedResult(
        call_id="c", provider="sim", model="e", vectors=([0.5, 1.0], [-2.0, 0.25]),
        usage=Usage(input_tokens=7),
    )  # fmt: skip
    floats = orjson.loads(render_embeddings(result, model="sim:e", encoding_format="float"))
    assert floats == {
        "object": "list",
        "data": [
            {"object": "embedding", "index": 0, "embedding": [0.5, 1.0]},
            {"object": "embedding", "index": 1, "embedding": [-2.0, 0.25]},
        ],
        "model": "sim:e",
        "usage": {"prompt_tokens": 7, "total_tokens": 7},
    }
    packed = orjson.loads(render_embeddings(result, model="sim:e", encoding_format="base64"))
    assert [d["embedding"] for d in packed["data"]] == [
        base64.b64encode(struct.pack("<2f", 0.5, 1.0)).decode(),
        base64.b64encode(struct.pack("<2f", -2.0, 0.25)).decode(),
    ]
