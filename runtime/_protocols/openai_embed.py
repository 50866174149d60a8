"""The OpenAI embeddings endpoint (``POST {base}/embeddings``): request building and reply
decoding. Pure.

The request: ``model`` (without the provider prefix), ``input`` as a list of strings (one per
vector wanted), ``dimensions`` and ``encoding_format`` when the call sets them, then the
call's ``extra_body`` merged last by the chat builder's rules. Headers and Azure's deployment
path are the chat request's (:func:`.openai_request.build_request`), with ``embeddings`` as the
operation.

The reply: ``{"data": [{"index", "embedding"}, ...], "usage": {"prompt_tokens"}}``. Each
``embedding`` is a list of numbers, or with ``encoding_format="base64"`` the base64 of packed
little-endian float32 values; both become lists of floats, put in order by ``index`` (a server
may answer out of order). A reply with another number of vectors than inputs, a missing or
repeated index, or a vector that is neither form is a :class:`~sluice._errors.ProtocolError`.
"""

from __future__ import annotations

import binascii
import sys
from array import array
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import orjson

from .._embeddings import EmbedOutput
from .._messages import Usage
from .base import HttpRequest
from .decode_shared import malformed
from .openai_decode import error_from_payload
from .openai_request import merge_extra
from .wire import json_body, request_headers

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from .._embeddings import EmbedRequest
    from .quirks import RequestQuirks

__all__ = ["build_embed_body", "build_embed_request", "decode_embed_body", "embed_url"]

_BIG_ENDIAN = sys.byteorder == "big"


def build_embed_request(
    request: EmbedRequest,
    *,
    base_url: str,
    api_key: str | None,
    headers: Mapping[str, str] | None = None,
    quirks: RequestQuirks | None = None,
) -> HttpRequest:
    """``POST {base_url}/embeddings`` for ``request`` (Azure's deployment path with
    ``quirks.azure_api_version``). Headers as a chat request's: ``user-agent``,
    ``content-type``, ``accept: application/json``, ``authorization`` when ``api_key`` is
    given, the request's ``extra_headers`` (credentials and framing never taken from there),
    then ``headers``, which replace defaults of the same name."""
    credential = ("authorization", f"Bearer {api_key}") if api_key else None
    built = request_headers("application/json", credential, request.extra_headers, headers)
    return HttpRequest(
        method="POST",
        url=embed_url(base_url, request.model_name, quirks),
        headers=built,
        body=json_body(build_embed_body(request)),
    )


def embed_url(base_url: str, model: str, quirks: RequestQuirks | None = None) -> str:
    """Where an embedding request for ``model`` goes: OpenAI's path, or Azure's deployment
    path (the model name is the deployment's)."""
    root = base_url.rstrip("/")
    version = quirks.azure_api_version if quirks is not None else None
    if version is None:
        return root + "/embeddings"
    deployment = quote(model, safe="")
    return f"{root}/openai/deployments/{deployment}/embeddings?api-version={quote(version)}"


def build_embed_body(request: EmbedRequest) -> dict[str, Any]:
    """The JSON body for ``request``, before serialization."""
    body: dict[str, Any] = {"model": request.model_name, "input": list(request.input)}
    if request.dimensions is not None:
        body["dimensions"] = request.dimensions
    if request.encoding_format is not None:
        body["encoding_format"] = request.encoding_format
    if request.extra_body:
        merge_extra(body, request.extra_body)
    return body


def decode_embed_body(body: bytes, *, inputs: int) -> EmbedOutput:
    """Decode a whole embeddings reply that should hold ``inputs`` vectors.

    Raises:
        CallError: the body is an ``error`` object.
        ProtocolError: it is no embeddings list, or its vectors do not match the inputs.
    """
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise malformed("the embeddings reply is not JSON", body) from None
    if type(reply) is not dict:
        raise malformed("the embeddings reply is not a JSON object", body)
    error = reply.get("error")
    if error:
        raise error_from_payload(error)
    data = reply.get("data")
    if type(data) is not list:
        raise malformed("the embeddings reply has no data list", body)
    if len(data) != inputs:
        raise malformed(
            f"the embeddings reply holds {len(data)} vectors for {inputs} inputs", body[:200]
        )
    vectors: list[Sequence[float] | None] = [None] * inputs
    for position, item in enumerate(data):
        if type(item) is not dict:
            raise malformed("an embeddings reply item is not an object", item)
        index = item.get("index", position)
        if type(index) is not int or not 0 <= index < inputs or vectors[index] is not None:
            raise malformed(
                f"an embeddings reply item has a missing, repeated or out-of-range index"
                f" ({index!r} for {inputs} inputs)",
                body[:200],
            )
        vectors[index] = _vector(item.get("embedding"))
    usage = reply.get("usage")
    tokens = usage.get("prompt_tokens") if type(usage) is dict else None
    response_id = reply.get("id")
    return EmbedOutput(
        vectors=tuple(v for v in vectors if v is not None),
        usage=Usage(input_tokens=tokens) if type(tokens) is int and tokens >= 0 else None,
        response_id=response_id if isinstance(response_id, str) else None,
    )


def _vector(value: object) -> Sequence[float]:
    """One embedding as floats: a JSON list of numbers, or base64 of little-endian float32."""
    if type(value) is list:
        if not all(type(x) is float or type(x) is int for x in value):
            raise malformed("an embedding holds something other than numbers", value[:8])
        return value
    if type(value) is str:
        try:
            raw = binascii.a2b_base64(value, strict_mode=True)
        except binascii.Error:
            raise malformed("a base64 embedding is not valid base64", value[:64]) from None
        if len(raw) % 4:
            raise malformed(
                f"a base64 embedding is {len(raw)} bytes, not whole float32 values", value[:64]
            )
        packed = array("f", raw)
        if _BIG_ENDIAN:
            packed.byteswap()
        return packed.tolist()
    raise malformed(
        "an embedding is neither a list of numbers nor base64 text", orjson.dumps(value)
    )
