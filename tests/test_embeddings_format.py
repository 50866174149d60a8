"""An OpenAI embeddings body read into an EmbedRequest as a batch line's is
(sluice._embeddings_format.embed_request: the model handling on top of the gateway's reading,
tested in test_gateway_embeddings_wire.py), and the provider lane's journal keeping each
batch's endpoint and what its lines' results need."""

from __future__ import annotations

import pytest

from sluice._embeddings import EmbedRequest
from sluice._embeddings_format import embed_request
from sluice._errors import ConfigError
from sluice._jobs.provider_batch.journal import Journal


def test_a_body_maps_to_the_request_and_the_rest_goes_to_extra_body() -> None:
    body = {
        "model": "openai:text-embedding-3-small",
        "input": ["a", "b"],
        "dimensions": 256,
        "encoding_format": "base64",
        "user": "u-1",
    }
    request = embed_request(body, fields={"tag": "t"})
    assert request == EmbedRequest(
        model="openai:text-embedding-3-small",
        input=("a", "b"),
        dimensions=256,
        encoding_format="base64",
        extra_body={"user": "u-1"},
        tag="t",
    )
    one = embed_request({"model": "x", "input": "only"}, model="sim:emb")
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
        ({"model": "p:m", "input": []}, "body.input: must hold at least one string"),
        ({"model": "p:m", "input": [[1, 2, 3]]}, "token-id arrays are not supported"),
        ({"model": "p:m", "input": "x", "dimensions": 0}, "body.dimensions: expected an integer"),
        ({"model": "p:m", "input": "x", "dimensions": True}, "body.dimensions"),
        ({"model": "p:m", "input": "x", "encoding_format": "int8"}, "body.encoding_format"),
    ],
)
def test_a_bad_body_names_the_field(body: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        embed_request(body)


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
