"""OpenAI embeddings bodies read into EmbedRequest and EmbedResult written back as OpenAI's
``list`` (sluice._embeddings_format), and the provider lane's journal keeping each batch's
endpoint and what its lines' results need."""

from __future__ import annotations

import base64
import struct

import pytest

from sluice._embeddings import EmbedRequest, EmbedResult
from sluice._embeddings_format import pack_vector, parse_embeddings_body, render_embeddings
from sluice._errors import ConfigError
from sluice._jobs.provider_batch.journal import Journal
from sluice._messages import Usage


def test_a_body_maps_to_the_request_and_the_rest_goes_to_extra_body() -> None:
    body = {
        "model": "openai:text-embedding-3-small",
        "input": ["a", "b"],
        "dimensions": 256,
        "encoding_format": "base64",
        "user": "u-1",
    }
    request = parse_embeddings_body(body, fields={"tag": "t"})
    assert request == EmbedRequest(
        model="openai:text-embedding-3-small",
        input=("a", "b"),
        dimensions=256,
        encoding_format="base64",
        extra_body={"user": "u-1"},
        tag="t",
    )
    one = parse_embeddings_body({"model": "x", "input": "only"}, model="sim:emb")
    assert (one.model, one.input, one.dimensions, one.encoding_format) == (
        "sim:emb",
        ("only",),
        None,
        None,
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "body: expected an object"),
        ({"input": "x"}, "body.model: missing"),
        ({"model": "text-embedding-3-small", "input": "x"}, "body.model: 'text-embedding-3"),
        ({"model": "p:m"}, "body.input: missing"),
        ({"model": "p:m", "input": []}, "body.input: expected a string or a non-empty list"),
        ({"model": "p:m", "input": [[1, 2, 3]]}, "token-id inputs are not supported"),
        ({"model": "p:m", "input": "x", "dimensions": 0}, "body.dimensions: expected a positive"),
        ({"model": "p:m", "input": "x", "dimensions": True}, "body.dimensions"),
        ({"model": "p:m", "input": "x", "encoding_format": "int8"}, "body.encoding_format"),
    ],
)
def test_a_bad_body_names_the_field(body: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        parse_embeddings_body(body)


def test_a_result_renders_as_openais_list_in_floats_or_base64() -> None:
    result = EmbedResult(
        call_id="c1",
        provider="openai",
        model="text-embedding-3-small",
        vectors=([0.5, -0.25], [1.0, 0.0]),
        usage=Usage(input_tokens=7),
    )
    assert render_embeddings(result) == {
        "object": "list",
        "data": [
            {"object": "embedding", "index": 0, "embedding": [0.5, -0.25]},
            {"object": "embedding", "index": 1, "embedding": [1.0, 0.0]},
        ],
        "model": "text-embedding-3-small",
        "usage": {"prompt_tokens": 7, "total_tokens": 7},
    }
    packed = render_embeddings(result, encoding_format="base64")["data"][0]["embedding"]
    assert packed == pack_vector([0.5, -0.25])
    assert struct.unpack("<2f", base64.b64decode(packed)) == (0.5, -0.25)


def test_the_journal_keeps_a_batchs_endpoint_and_its_lines_extras(tmp_path) -> None:
    path = str(tmp_path / "out.batches.jsonl")
    journal = Journal(path)
    journal.start("run-1")
    chat = journal.intend(
        provider="p", model="m", fingerprint="f1", at=1.0, lines=[("a", 1, "a")], tokens=1, micros=0
    )
    embed = journal.intend(
        provider="p",
        model="m",
        fingerprint="f2",
        at=2.0,
        lines=[("b", 2, "b"), ("c", 3, "c")],
        tokens=2,
        micros=0,
        endpoint="embeddings",
        extra={"c": {"encoding_format": "base64"}},
    )
    journal.close()
    again = Journal(path)
    subs = {s.fingerprint: s for s in again.active()}
    assert (subs["f1"].endpoint, subs["f2"].endpoint) == ("chat", "embeddings")
    assert again.extra(subs["f1"]) == {}
    assert again.extra(subs["f2"]) == {"c": {"encoding_format": "base64"}}
    assert again.lines(subs["f2"]) == [("b", 2, "b"), ("c", 3, "c")]
    assert (chat.seq, embed.seq) == (1, 2)
    again.close()
