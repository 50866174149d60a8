"""``Runtime.embed`` to the Gemini and Ollama builtins: the runtime picks each protocol's
embedding codec, and a test server of our own answers with the replies recorded from the real
services (tests/conformance_data/embeddings). Virtual time over ``httpx.MockTransport``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

import sluice
from sluice import EmbedRequest, RuntimeConfig
from sluice._config import LedgerConfig
from sluice._errors import NotFound
from sluice._messages import Usage

from .helpers import virtual_deadline

CORPUS = Path(__file__).resolve().parent / "conformance_data" / "embeddings"


class Recorded:
    """Answers every request with one recorded reply; keeps what it was sent."""

    def __init__(self, case: str, status: int = 200) -> None:
        self.reply = (CORPUS / f"{case}.json").read_bytes()
        self.status = status
        self.requests: list[tuple[str, dict[str, str], Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(
            (str(request.url), dict(request.headers), orjson.loads(request.content))
        )
        head = {"content-type": "application/json; charset=UTF-8"}
        return httpx.Response(self.status, headers=head, content=self.reply)


def runtime(server: Recorded) -> Any:
    return sluice.open_runtime(
        RuntimeConfig(ledger=LedgerConfig(persist=False)),
        transport=httpx.MockTransport(server),
        environ={"GEMINI_API_KEY": "g-key"},
    )


@virtual_deadline(30)
async def test_gemini_embeds_through_batch_embed_contents(autojump_clock):
    server = Recorded("gemini/batch_embed_contents_three")
    texts = ["hello world", "goodbye world", "hello world"]
    async with runtime(server) as rt:
        result = await rt.embed(
            EmbedRequest(
                model="gemini:embedding-001",
                input=texts,
                extra_body={"taskType": "RETRIEVAL_DOCUMENT"},
            )
        )
        totals = await rt.ledger_totals()
    [(url, headers, body)] = server.requests
    assert url == (
        "https://generativelanguage.googleapis.com/v1beta/models/embedding-001:batchEmbedContents"
    )
    assert headers["x-goog-api-key"] == "g-key"
    assert body == {
        "requests": [
            {
                "model": "models/embedding-001",
                "content": {"parts": [{"text": t}]},
                "taskType": "RETRIEVAL_DOCUMENT",
            }
            for t in texts
        ]
    }
    assert [len(v) for v in result.vectors] == [768, 768, 768]
    assert result.vectors[0][0] == 0.049097817 and result.vectors[1][-1] == -0.054475877
    assert result.vectors[0] == result.vectors[2]
    # Gemini reports no token count (the codec's usage is None, test_embed_codecs.py): the call
    # is booked at its admission estimate, never at zero, and the result says the same.
    assert result.usage.output_tokens == 0
    assert result.usage.input_tokens > 0
    [booked] = totals.values()
    assert booked.input_tokens == result.usage.input_tokens


@virtual_deadline(30)
async def test_ollama_embeds_through_api_embed_with_its_token_count(autojump_clock):
    server = Recorded("ollama/embed_nomic_one")
    async with runtime(server) as rt:
        result = await rt.embed("ollama:nomic-embed-text", "Hello world", dimensions=768)
    [(url, _, body)] = server.requests
    assert url == "http://127.0.0.1:11434/api/embed"
    assert body == {"model": "nomic-embed-text", "input": ["Hello world"], "dimensions": 768}
    assert len(result.vectors) == 1 and len(result.vectors[0]) == 768
    assert result.vectors[0][0] == -0.006746773
    assert result.usage == Usage(input_tokens=2)


@virtual_deadline(30)
async def test_a_recorded_gemini_404_is_not_found_and_not_retried(autojump_clock):
    server = Recorded("gemini/batch_embed_error_not_found", status=404)
    async with runtime(server) as rt:
        with pytest.raises(NotFound, match="nonexistent-model is not found"):
            await rt.embed("gemini:nonexistent-model", "Hello, world!")
    assert len(server.requests) == 1
