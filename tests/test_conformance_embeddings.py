"""Embedding replies recorded from public test suites (``tests/conformance_data/embeddings``,
see its PROVENANCE.md) decode exactly through our codecs.

The expected values (vector count and length, the first and last value of each vector, the
usage) were read off the recordings; a base64 vector's values are its float32 values as Python
floats. Every file the manifest lists must exist with its recorded size and digest, so a corpus
edit cannot pass unnoticed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson
import pytest

from sluice._errors import NotFound, ProtocolError
from sluice._messages import Usage
from sluice._protocols import EmbedCodec, codec_for, embed_codec

CORPUS = Path(__file__).resolve().parent / "conformance_data" / "embeddings"
MANIFEST = orjson.loads((CORPUS / "manifest.json").read_bytes())["cases"]

# case -> (protocol, [(length, first, last) per vector], usage)
REPLIES: dict[str, tuple[str, list[tuple[int, float, float]], Usage | None]] = {
    "openai/embeddings_float_ada002_one": (
        "openai",
        [(1536, -0.005540426, -0.0070824116)],
        Usage(input_tokens=2),
    ),
    "openai/embeddings_float_3small_dimensions_256": (
        "openai",
        [(256, -0.0039325873, 0.0011830473)],
        Usage(input_tokens=2),
    ),
    "openai/embeddings_base64_3small_two": (
        "openai",
        [
            (1536, 0.01681816205382347, -0.017478562891483307),
            (1536, -0.010592407546937466, -0.006824782583862543),
        ],
        Usage(input_tokens=2),
    ),
    "openai/embeddings_base64_3small_one": (
        "openai",
        [(1536, -0.019193023443222046, -0.010618705302476883)],
        Usage(input_tokens=4),
    ),
    "gemini/batch_embed_contents_three": (
        "gemini",
        [
            (768, 0.049097817, -0.017375154),
            (768, 0.06869802, -0.054475877),
            (768, 0.049097817, -0.017375154),  # the first text again
        ],
        None,
    ),
    "gemini/batch_embed_contents_dimensions_768": (
        "gemini",
        [(768, -0.039718185, 0.017630955)],
        None,
    ),
    "ollama/embed_nomic_one": (
        "ollama",
        [(768, -0.006746773, -0.004468476)],
        Usage(input_tokens=2),
    ),
    "ollama/embed_nomic_fox": ("ollama", [(768, -0.01224925, 0.0035748677)], Usage(input_tokens=9)),
}

ERRORS = {
    "openai/embeddings_error_model_not_found": ("openai", "does not exist"),
    "gemini/batch_embed_error_not_found": ("gemini", "is not found"),
}


def _codec(protocol: str) -> EmbedCodec:
    codec = embed_codec(codec_for(protocol))
    assert codec is not None, f"the {protocol} codec has no embeddings"
    return codec


def _read(case: str, suffix: str) -> bytes:
    return (CORPUS / f"{case}{suffix}").read_bytes()


def test_the_manifest_lists_every_file_with_its_size_and_digest() -> None:
    listed = set()
    for entry in MANIFEST:
        assert entry["licence"] == "MIT"
        assert len(entry["commit"]) == 40
        for file in entry["files"]:
            data = (CORPUS / file["path"]).read_bytes()
            assert (len(data), hashlib.sha256(data).hexdigest()) == (file["bytes"], file["sha256"])
            listed.add(file["path"])
    on_disk = {
        p.relative_to(CORPUS).as_posix() for p in CORPUS.rglob("*.json") if p.parent != CORPUS
    }
    assert on_disk == listed
    cases = {f"{e['provider']}/{e['case']}" for e in MANIFEST}
    assert cases == set(REPLIES) | set(ERRORS)


@pytest.mark.parametrize(
    "case",
    [pytest.param(case, id=case) for case in REPLIES],
)
def test_a_recorded_reply_decodes_exactly(case: str) -> None:
    protocol, vectors, usage = REPLIES[case]
    codec = _codec(protocol)
    out = codec.decode_embed_body(_read(case, ".json"), inputs=len(vectors))
    got = [(len(v), v[0], v[-1]) for v in out.vectors]
    assert got == vectors
    assert all(type(x) is float for v in out.vectors for x in v)
    assert out.usage == usage


@pytest.mark.parametrize(
    "case",
    [pytest.param(case, id=case) for case in ERRORS],
)
def test_a_recorded_error_maps_to_not_found(case: str) -> None:
    protocol, text = ERRORS[case]
    head = orjson.loads(_read(case, ".headers.json"))
    headers = {name.lower(): value for name, value in head["headers"]}
    error = _codec(protocol).decode_error(
        head["status"], headers, _read(case, ".json"), wall_now=0.0
    )
    assert isinstance(error, NotFound)
    assert text in str(error)


@pytest.mark.parametrize(
    "case",
    [pytest.param(case, id=case) for case in REPLIES],
)
def test_a_reply_with_fewer_vectors_than_inputs_is_refused(case: str) -> None:
    """A reply is checked against the number of inputs sent: one more input than the recorded
    reply answered is a protocol error, never a short result."""
    protocol, vectors, _ = REPLIES[case]
    with pytest.raises(ProtocolError):
        _codec(protocol).decode_embed_body(_read(case, ".json"), inputs=len(vectors) + 1)
