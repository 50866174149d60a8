"""Embeddings in Ollama's native API: ``POST {base}/api/embed``. Pure.

The body is ``{"model", "input": [...]}``, with ``dimensions`` when the request asks for it.
``truncate`` (Ollama cuts an input longer than the model's context unless it is ``false``),
``keep_alive`` and ``options`` go through ``extra_body``, which is merged last. Ollama has no
packed encoding, so ``encoding_format`` is not sent (the result holds floats either way).

The reply is ``{"model", "embeddings": [[...], ...], "total_duration", "load_duration",
"prompt_eval_count"}``; ``prompt_eval_count`` is the input tokens of the whole request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from .._embeddings import EmbedOutput
from .._messages import Usage
from .._version import USER_AGENT
from .base import HttpRequest
from .decode_shared import count, malformed
from .embed_shared import checked_vector, request_headers, wrong_count
from .http_errors import error_for_status
from .ollama_decode import error_message
from .openai_request import merge_extra
from .wire import json_body

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._embeddings import EmbedRequest

__all__ = ["build_embed_body", "build_embed_request", "decode_embed_body", "embed_url"]


def embed_url(base_url: str) -> str:
    """``{base_url}/api/embed``; a trailing ``/v1`` (the OpenAI-compatible prefix) is dropped."""
    return base_url.rstrip("/").removesuffix("/v1") + "/api/embed"


def build_embed_request(
    request: EmbedRequest,
    *,
    base_url: str,
    api_key: str | None,
    headers: Mapping[str, str] | None = None,
) -> HttpRequest:
    """``POST {base_url}/api/embed`` for every input of ``request``.

    Headers: ``user-agent``, ``content-type``, ``accept``, ``authorization`` when ``api_key``
    is given, the request's ``extra_headers``, then ``headers``, which replace defaults of the
    same name.
    """
    own = {
        "user-agent": USER_AGENT,
        "content-type": "application/json",
        "accept": "application/json",
    }
    if api_key:
        own["authorization"] = f"Bearer {api_key}"
    return HttpRequest(
        method="POST",
        url=embed_url(base_url),
        headers=request_headers(own, request, headers),
        body=json_body(build_embed_body(request)),
    )


def build_embed_body(request: EmbedRequest) -> dict[str, Any]:
    """The JSON body for ``request``, before serialization."""
    body: dict[str, Any] = {"model": request.model_name, "input": list(request.input)}
    if request.dimensions is not None:
        body["dimensions"] = request.dimensions
    if request.extra_body:
        merge_extra(body, request.extra_body)
    return body


def decode_embed_body(body: bytes, *, inputs: int) -> EmbedOutput:
    """Decode a whole ``/api/embed`` reply that should hold ``inputs`` vectors.

    ``prompt_eval_count`` gives the usage's input tokens; a reply without it has no usage.

    Raises:
        CallError: the body is an ``error``.
        ProtocolError: the body is not such a reply, a vector is not a list of numbers, or
            the reply holds another number of vectors than ``inputs``.
    """
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise malformed("the reply body is not JSON", body) from None
    if type(reply) is not dict:
        raise malformed("the reply body is not a JSON object", body)
    embeddings = reply.get("embeddings")
    if reply.get("error") and embeddings is None:
        raise error_for_status(None, error_message(reply["error"]))
    if type(embeddings) is not list:
        raise malformed("the reply has no embeddings", body)
    if len(embeddings) != inputs:
        raise wrong_count(embeddings, inputs, body)
    vectors = tuple(checked_vector(values, i, body) for i, values in enumerate(embeddings))
    tokens = reply.get("prompt_eval_count")
    usage = Usage(input_tokens=count(tokens)) if tokens is not None else None
    return EmbedOutput(vectors=vectors, usage=usage)
