"""OpenAI embeddings bodies to sluice's model and back, as a server speaks them. Pure: no I/O.

:func:`parse_embeddings_body` reads a ``POST /v1/embeddings`` body (or the ``body`` of a Batch
input line with that URL) into an :class:`~sluice._embeddings.EmbedRequest`;
:func:`render_embeddings` writes a finished :class:`~sluice._embeddings.EmbedResult` as the
``list`` object OpenAI answers with: one ``embedding`` per input in order, the ``model``, and
``usage`` (``prompt_tokens``, ``total_tokens``). Vectors are written as the request asked:
JSON numbers, or with ``encoding_format: "base64"`` their float32 values, little-endian, in
base64, as OpenAI packs them.

``input`` is a string or a list of strings (token-id inputs are refused: sluice's providers
take text); ``dimensions`` and ``encoding_format`` map to the request's fields; every other key
(``user``, a provider's own settings) goes to ``extra_body`` as sent. Every problem raises
:class:`~sluice._errors.ConfigError` naming the field path.
"""

from __future__ import annotations

import base64
import sys
from array import array
from typing import TYPE_CHECKING, Any

from ._embeddings import EmbedRequest
from ._messages import split_model
from ._openai_parse import expect_dict, expect_str, fail

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ._embeddings import EmbedResult, EncodingFormat

__all__ = ["pack_vector", "parse_embeddings_body", "render_embeddings"]

_MAPPED_KEYS = frozenset({"model", "input", "dimensions", "encoding_format"})


def parse_embeddings_body(
    body: Any,
    *,
    model: str | None = None,
    path: str = "body",
    fields: Mapping[str, Any] | None = None,
) -> EmbedRequest:
    """Read an embeddings request body into an :class:`EmbedRequest`.

    Args:
        body: the decoded JSON body.
        model: a ``provider:model`` that replaces the body's ``model``; without it the body's
            model must itself be written ``provider:model``.
        path: the prefix used in error messages.
        fields: more ``EmbedRequest`` fields set by the caller (a tag).

    Raises:
        ConfigError: the body is no object, the model or input is missing or of another
            shape, or ``dimensions`` or ``encoding_format`` is wrong; the message names the
            field.
    """
    b = expect_dict(body, path)
    if model is None:
        if "model" not in b:
            raise fail(f"{path}.model", "missing; write it as 'provider:model'")
        model = expect_str(b["model"], f"{path}.model")
        try:
            split_model(model)
        except ValueError:
            raise fail(
                f"{path}.model",
                f"{model!r} names no provider; write it as 'provider:model' "
                f"(for example 'openai:{model}') or pass a model override",
            ) from None
    raw = b.get("input")
    if isinstance(raw, str):
        inputs: Sequence[str] = (raw,)
    elif isinstance(raw, list) and raw and all(isinstance(item, str) for item in raw):
        inputs = raw
    elif raw is None:
        raise fail(f"{path}.input", "missing; send a string or a list of strings")
    else:
        raise fail(
            f"{path}.input",
            "expected a string or a non-empty list of strings (token-id inputs are not "
            "supported)",
        )
    dimensions = b.get("dimensions")
    if dimensions is not None and (
        not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1
    ):
        raise fail(f"{path}.dimensions", f"expected a positive integer, got {dimensions!r}")
    encoding = b.get("encoding_format")
    if encoding not in (None, "float", "base64"):
        raise fail(f"{path}.encoding_format", f"expected 'float' or 'base64', got {encoding!r}")
    return EmbedRequest(
        model=model,
        input=inputs,
        dimensions=dimensions,
        encoding_format=encoding,
        extra_body={k: v for k, v in b.items() if k not in _MAPPED_KEYS},
        **(fields or {}),
    )


def pack_vector(vector: Sequence[float]) -> str:
    """A vector as OpenAI's ``base64`` encoding carries it: float32, little-endian."""
    packed = array("f", vector)
    if sys.byteorder != "little":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def render_embeddings(
    result: EmbedResult, *, encoding_format: EncodingFormat | None = None
) -> dict[str, Any]:
    """Write ``result`` as OpenAI's embeddings ``list`` object (see the module docstring);
    ``encoding_format`` is the request's."""
    packed = encoding_format == "base64"
    tokens = result.usage.input_tokens
    return {
        "object": "list",
        "data": [
            {
                "object": "embedding",
                "index": index,
                "embedding": pack_vector(vector) if packed else list(vector),
            }
            for index, vector in enumerate(result.vectors)
        ],
        "model": result.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
