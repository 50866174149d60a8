"""OpenAI embeddings (``POST /v1/embeddings``): request parsing, OpenAI's limits and the
response. Pure.

``input`` is a string, a list of strings, a list of token ids or a list of such lists; each
input gets one unit-length vector derived from the seed and the input alone, so the same text
always embeds the same. Its length is the request's ``dimensions``, else the model's own
(:func:`model_dimensions`: OpenAI's sizes for OpenAI's model names, :data:`DEFAULT_DIMENSIONS`
for any other). ``encoding_format: "base64"`` sends each vector as OpenAI does: its float32
values, little-endian, in base64; ``"float"`` (the default) sends the same float32 values as
JSON numbers. Usage counts the inputs' tokens by the simulator's token rule (a token id is one
token). A vector is made of pairs of coordinates that lie on one circle, each at an angle
drawn from a hash of the input: its length is one by construction, and it is assembled from
precomputed pieces without a pass over its values in Python, so a corpus of millions of
inputs stays cheap to serve.

OpenAI's per-request limits are answered as OpenAI answers them, with a 400: more than
:data:`MAX_INPUTS` inputs, an input over :data:`MAX_INPUT_TOKENS` tokens (the model's context),
more than :data:`MAX_REQUEST_TOKENS` tokens in all (``max_tokens_per_request``), and
``dimensions`` for a model that cannot shorten its vectors or beyond its size.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import math
import struct
import sys
from array import array
from typing import Any, Literal

import attrs
import orjson

from ._batch_core import LineEndpoint
from ._request import RequestError
from ._text import count_tokens
from ._wire import error_body

__all__ = [
    "DEFAULT_DIMENSIONS",
    "EMBEDDING_LINES",
    "MAX_INPUTS",
    "MAX_INPUT_TOKENS",
    "MAX_REQUEST_TOKENS",
    "EmbeddingRequest",
    "EmbeddingsRefused",
    "embeddings_body",
    "model_dimensions",
    "parse_embeddings",
]

DEFAULT_DIMENSIONS = 768
"""Vector length of a model the simulator knows nothing about (a common open model's size)."""
MAX_DIMENSIONS = 8192
MAX_INPUTS = 2048
"""Inputs one request may hold."""
MAX_INPUT_TOKENS = 8192
"""Tokens one input may have (the context of OpenAI's embedding models)."""
MAX_REQUEST_TOKENS = 300_000
"""Tokens all the inputs of one request may have together."""

_OPENAI_MODELS: dict[str, tuple[int, bool]] = {
    "text-embedding-3-small": (1536, True),
    "text-embedding-3-large": (3072, True),
    "text-embedding-ada-002": (1536, False),
}
"""OpenAI's embedding models: their vector length, and whether ``dimensions`` can shorten it."""


class EmbeddingsRefused(RequestError):
    """A request OpenAI refuses with a typed error (``type`` and ``code`` beside the message)."""

    def __init__(self, message: str, param: str | None, type_: str, code: str | None) -> None:
        super().__init__(message, param)
        self.type_ = type_
        self.code = code


@attrs.frozen
class EmbeddingRequest:
    model: str
    inputs: tuple[str, ...]
    """Each input as text (token ids joined by spaces)."""
    tokens: int
    dimensions: int
    encoding: Literal["float", "base64"] = "float"


def model_dimensions(model: str) -> int:
    """The vector length ``model`` answers with when the request names none."""
    known = _OPENAI_MODELS.get(model)
    return known[0] if known is not None else DEFAULT_DIMENSIONS


def _one(item: Any) -> tuple[str, int] | None:
    if isinstance(item, str):
        return item, count_tokens(item)
    if (
        isinstance(item, list)
        and item
        and all(isinstance(t, int) and not isinstance(t, bool) for t in item)
    ):
        return " ".join(str(t) for t in item), len(item)
    return None


def parse_embeddings(body: bytes) -> EmbeddingRequest:
    """Validate an embeddings request body against OpenAI's rules and limits.

    Raises:
        RequestError: bad JSON, no model, an input of another shape, bad ``dimensions`` or
            ``encoding_format``, too many inputs, an input over the model's context.
        EmbeddingsRefused: more tokens in all than one request may carry.
    """
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise RequestError(
            "We could not parse the JSON body of your request. The body must be a JSON object."
        ) from None
    if not isinstance(data, dict):
        raise RequestError("The request body must be a JSON object.")
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("You must provide a model parameter.", "model")
    raw = data.get("input")
    single = _one(raw)
    items: list[tuple[str, int] | None] | None = [single] if single is not None else None
    if items is None and isinstance(raw, list) and raw:
        if len(raw) > MAX_INPUTS:
            raise RequestError(
                "'$.input' is invalid: an array of inputs holds at most "
                f"{MAX_INPUTS} items, this one {len(raw)}. Please check the API reference: "
                "https://platform.openai.com/docs/api-reference."
            )
        items = [_one(item) for item in raw]
    if not items or any(item is None for item in items):
        raise RequestError(
            "'input' must be a string, a list of strings, a list of token ids or a list of "
            "token-id lists, and not empty.",
            "input",
        )
    found = [item for item in items if item is not None]
    dimensions = _dimensions(model, data.get("dimensions"))
    encoding = data.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise RequestError(
            f"Invalid value for 'encoding_format': {encoding!r}. Expected 'float' or 'base64'.",
            "encoding_format",
        )
    longest = max(tokens for _, tokens in found)
    if longest > MAX_INPUT_TOKENS:
        raise RequestError(
            f"This model's maximum context length is {MAX_INPUT_TOKENS} tokens, however you "
            f"requested {longest} tokens ({longest} in your prompt; 0 for the completion). "
            "Please reduce your prompt; or completion length."
        )
    tokens = sum(tokens for _, tokens in found)
    if tokens > MAX_REQUEST_TOKENS:
        raise EmbeddingsRefused(
            f"Requested {tokens} tokens, max {MAX_REQUEST_TOKENS} tokens per request",
            None,
            "max_tokens_per_request",
            "max_tokens_per_request",
        )
    return EmbeddingRequest(
        model=model,
        inputs=tuple(text for text, _ in found),
        tokens=tokens,
        dimensions=dimensions,
        encoding=encoding,
    )


def _dimensions(model: str, value: Any) -> int:
    known = _OPENAI_MODELS.get(model)
    if value is None:
        return known[0] if known is not None else DEFAULT_DIMENSIONS
    if known is not None and not known[1]:
        raise RequestError("This model does not support specifying dimensions.", "dimensions")
    limit = known[0] if known is not None else MAX_DIMENSIONS
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= limit:
        raise RequestError(
            f"Invalid 'dimensions': expected an integer from 1 to {limit}.", "dimensions"
        )
    return value


@functools.lru_cache(maxsize=64)
def _pairs(dimensions: int) -> tuple[tuple[bytes, ...], tuple[str, ...]]:
    """The 256 pairs ``r * (cos a_k, sin a_k)`` of float32 values a vector of ``dimensions``
    values is made of, ``r`` such that ``dimensions // 2`` pairs have length one whatever
    their angles: as little-endian bytes, and as JSON text (``"x,y"``, each the shortest text
    that reads back as the float32, as OpenAI writes its floats)."""
    radius = math.sqrt(1 / (dimensions // 2))
    values = array("f")
    for k in range(256):
        angle = 2 * math.pi * (k + 0.5) / 256
        values.extend((radius * math.cos(angle), radius * math.sin(angle)))
    texts = tuple(f"{_shortest(values[2 * k])},{_shortest(values[2 * k + 1])}" for k in range(256))
    if sys.byteorder != "little":
        values.byteswap()
    raw = values.tobytes()
    return tuple(raw[8 * k : 8 * k + 8] for k in range(256)), texts


def _shortest(value: float) -> str:
    """The shortest decimal text that reads back as float32 ``value``, always with a point or
    an exponent (so JSON reads it as a float)."""
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        if struct.unpack("<f", struct.pack("<f", float(text)))[0] == value:
            break
    return text if "." in text or "e" in text else text + ".0"


def _drawn(seed: int, text: str, dimensions: int) -> bytes:
    """One byte per pair of coordinates (its angle), from a hash of ``seed``, ``text`` and
    ``dimensions``: the vector of ``text``, the same every time."""
    return hashlib.shake_128(orjson.dumps([seed, dimensions, text])).digest(max(1, dimensions // 2))


def _packed(drawn: bytes, dimensions: int) -> str:
    """The vector as OpenAI's ``base64``: its float32 values, little-endian, base64-encoded.

    The bytes are joined from the pairs' at C speed, with no pass over the values in Python,
    which keeps a corpus of millions of inputs cheap to serve. An odd last coordinate is 0; a
    vector of one value is 1 or -1.
    """
    if dimensions == 1:
        return base64.b64encode(struct.pack("<f", -1.0 if drawn[0] & 1 else 1.0)).decode()
    pairs = b"".join(map(_pairs(dimensions)[0].__getitem__, drawn))
    odd = b"\0\0\0\0" if dimensions % 2 else b""
    return base64.b64encode(pairs + odd).decode()


def _json_floats(drawn: bytes, dimensions: int) -> orjson.Fragment:
    """The same vector as a JSON array of numbers, joined from the pairs' texts."""
    if dimensions == 1:
        return orjson.Fragment(b"[-1.0]" if drawn[0] & 1 else b"[1.0]")
    texts = _pairs(dimensions)[1]
    odd = ",0.0" if dimensions % 2 else ""
    return orjson.Fragment(f"[{','.join(map(texts.__getitem__, drawn))}{odd}]")


def embeddings_body(request: EmbeddingRequest, *, seed: int) -> bytes:
    """The ``list`` of embeddings, one per input in order, with usage."""
    dimensions, base64_wanted = request.dimensions, request.encoding == "base64"
    data = []
    for index, text in enumerate(request.inputs):
        drawn = _drawn(seed, text, dimensions)
        embedding = _packed(drawn, dimensions) if base64_wanted else _json_floats(drawn, dimensions)
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    return orjson.dumps(
        {
            "object": "list",
            "data": data,
            "model": request.model,
            "usage": {"prompt_tokens": request.tokens, "total_tokens": request.tokens},
        }
    )


def refusal_body(error: RequestError) -> bytes:
    """The OpenAI error body of a refused embeddings request."""
    if isinstance(error, EmbeddingsRefused):
        return error_body(error.message, error.type_, error.param, error.code)
    return error_body(error.message, "invalid_request_error", error.param)


class _EmbeddingLines(LineEndpoint):
    """``/v1/embeddings`` lines of an OpenAI batch: each answered as the realtime route
    answers it."""

    def line_reply(self, body: bytes, *, seed: int) -> tuple[int, bytes]:
        try:
            request = parse_embeddings(body)
        except RequestError as exc:
            return 400, refusal_body(exc)
        return 200, embeddings_body(request, seed=seed)

    def line_check(self, body: bytes) -> tuple[str, int] | None:
        try:
            request = parse_embeddings(body)
        except RequestError:
            return None
        return request.model, request.tokens


EMBEDDING_LINES: LineEndpoint = _EmbeddingLines()
"""The batch endpoint ``/v1/embeddings``."""
