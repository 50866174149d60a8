"""Embeddings in the Gemini API: ``POST {base}/models/{model}:batchEmbedContents``. Pure.

Every input becomes one entry of ``requests``: ``{"model": "models/{model}", "content":
{"parts": [{"text": input}]}}``, with ``outputDimensionality`` when the request asks for
``dimensions``. The request's ``extra_body`` is merged into every entry, so per-text settings
of the API (``taskType``, ``title``) go there: ``extra_body={"taskType":
"RETRIEVAL_DOCUMENT"}``. The API has no packed encoding, so ``encoding_format`` is not sent
(the result holds floats either way).

The reply is ``{"embeddings": [{"values": [...]}, ...]}`` in input order. It carries no token
count, so the decoded output has no usage and the runtime keeps its own estimate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import orjson

from .._embeddings import EmbedOutput
from .._version import USER_AGENT
from .base import HttpRequest
from .decode_shared import malformed
from .embed_shared import checked_vector, request_headers, wrong_count
from .gemini_decode import error_from_payload
from .openai_request import merge_extra
from .wire import json_body

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._embeddings import EmbedRequest

__all__ = ["build_embed_body", "build_embed_request", "decode_embed_body"]


def build_embed_request(
    request: EmbedRequest,
    *,
    base_url: str,
    api_key: str | None,
    headers: Mapping[str, str] | None = None,
) -> HttpRequest:
    """``POST {base_url}/models/{model}:batchEmbedContents`` for every input of ``request``.

    ``base_url`` holds the version prefix, as for chat; a model name may carry its
    ``models/`` prefix. Headers: ``user-agent``, ``content-type``, ``accept``,
    ``x-goog-api-key`` when ``api_key`` is given, the request's ``extra_headers``, then
    ``headers``, which replace defaults of the same name.
    """
    model = request.model_name.removeprefix("models/")
    own = {
        "user-agent": USER_AGENT,
        "content-type": "application/json",
        "accept": "application/json",
    }
    if api_key:
        own["x-goog-api-key"] = api_key
    return HttpRequest(
        method="POST",
        url=f"{base_url.rstrip('/')}/models/{quote(model, safe='')}:batchEmbedContents",
        headers=request_headers(own, request, headers),
        body=json_body(build_embed_body(request)),
    )


def build_embed_body(request: EmbedRequest) -> dict[str, Any]:
    """The JSON body for ``request``, before serialization."""
    name = "models/" + request.model_name.removeprefix("models/")
    entries = []
    for text in request.input:
        entry: dict[str, Any] = {"model": name, "content": {"parts": [{"text": text}]}}
        if request.dimensions is not None:
            entry["outputDimensionality"] = request.dimensions
        if request.extra_body:
            merge_extra(entry, request.extra_body)
        entries.append(entry)
    return {"requests": entries}


def decode_embed_body(body: bytes, *, inputs: int) -> EmbedOutput:
    """Decode a whole ``batchEmbedContents`` reply that should hold ``inputs`` vectors.

    Raises:
        CallError: the body is a Google ``error`` object (alone or in a one-element list).
        ProtocolError: the body is not such a reply, a vector is not a list of numbers, or
            the reply holds another number of vectors than ``inputs``.
    """
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise malformed("the reply body is not JSON", body) from None
    if type(reply) is list and len(reply) == 1:
        reply = reply[0]
    if type(reply) is not dict:
        raise malformed("the reply body is not a JSON object", body)
    if reply.get("error"):
        raise error_from_payload(reply["error"])
    embeddings = reply.get("embeddings")
    if type(embeddings) is not list:
        raise malformed("the reply has no embeddings", body)
    if len(embeddings) != inputs:
        raise wrong_count(embeddings, inputs, body)
    vectors = []
    for index, item in enumerate(embeddings):
        values = item.get("values") if type(item) is dict else None
        vectors.append(checked_vector(values, index, body))
    return EmbedOutput(vectors=tuple(vectors), usage=None)
