"""OpenAI embeddings (``POST /v1/embeddings``): request parsing and the response. Pure.

``input`` is a string, a list of strings, a list of token ids or a list of such lists; each
input gets one unit-length vector of ``dimensions`` floats (the request's, else
:data:`DEFAULT_DIMENSIONS`) derived from the seed and the input alone, so the same text always
embeds the same. Usage counts the inputs' tokens by the simulator's token rule (a token id is
one token).
"""

from __future__ import annotations

import math
import random
from typing import Any

import attrs
import orjson

from ._request import RequestError
from ._text import count_tokens, derive_seed

__all__ = ["DEFAULT_DIMENSIONS", "EmbeddingRequest", "embeddings_body", "parse_embeddings"]

DEFAULT_DIMENSIONS = 32
MAX_DIMENSIONS = 8192


@attrs.frozen
class EmbeddingRequest:
    model: str
    inputs: tuple[str, ...]
    """Each input as text (token ids joined by spaces)."""
    tokens: int
    dimensions: int


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
    """Validate an embeddings request body.

    Raises:
        RequestError: bad JSON, no model, an input of another shape, or bad ``dimensions``.
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
        items = [_one(item) for item in raw]
    if not items or any(item is None for item in items):
        raise RequestError(
            "'input' must be a string, a list of strings, a list of token ids or a list of "
            "token-id lists, and not empty.",
            "input",
        )
    dimensions = data.get("dimensions", DEFAULT_DIMENSIONS)
    if (
        not isinstance(dimensions, int)
        or isinstance(dimensions, bool)
        or not 1 <= dimensions <= MAX_DIMENSIONS
    ):
        raise RequestError(
            f"Invalid 'dimensions': expected an integer from 1 to {MAX_DIMENSIONS}.",
            "dimensions",
        )
    found = [item for item in items if item is not None]
    return EmbeddingRequest(
        model=model,
        inputs=tuple(text for text, _ in found),
        tokens=sum(tokens for _, tokens in found),
        dimensions=dimensions,
    )


def _vector(seed: int, text: str, dimensions: int) -> list[float]:
    rng = random.Random(derive_seed(seed, "embedding", text))
    values = [rng.gauss(0.0, 1.0) for _ in range(dimensions)]
    norm = math.sqrt(math.fsum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def embeddings_body(request: EmbeddingRequest, *, seed: int) -> bytes:
    """The ``list`` of embeddings, one per input in order, with usage."""
    return orjson.dumps(
        {
            "object": "list",
            "data": [
                {
                    "object": "embedding",
                    "index": index,
                    "embedding": _vector(seed, text, request.dimensions),
                }
                for index, text in enumerate(request.inputs)
            ],
            "model": request.model,
            "usage": {"prompt_tokens": request.tokens, "total_tokens": request.tokens},
        }
    )
