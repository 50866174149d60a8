"""OpenAI's embeddings wire format, read and written by every door that speaks it (the
gateway's ``POST /v1/embeddings``, ``sluice batch`` lines with that URL). Pure: no I/O, no
clock.

:func:`parse_embeddings_body` reads a ``POST /v1/embeddings`` body into the fields of an
:class:`~sluice._embeddings.EmbedRequest`, and :func:`embed_request` into the request itself
(its ``model`` written ``provider:model``, or an override); :func:`render_embeddings` writes a
finished :class:`~sluice._embeddings.EmbedResult` as OpenAI's ``list`` of ``embedding``
objects.

The runtime always hands vectors back as floats, whatever the upstream sent; a client that
asks for ``encoding_format: "base64"`` (the openai SDK's default) gets each vector as the
base64 of its little-endian float32 values, as OpenAI sends it, re-encoded here. Token-id
inputs (arrays of integers) are refused: sluice embeds text, and a provider other than OpenAI
could not read OpenAI's token ids.
"""

from __future__ import annotations

import base64
import sys
from array import array
from typing import TYPE_CHECKING, Any

import orjson

from ._embeddings import EmbedRequest
from ._errors import ConfigError
from ._messages import split_model

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ._embeddings import EmbedResult

__all__ = ["embed_request", "float32_base64", "parse_embeddings_body", "render_embeddings"]

_MAPPED = frozenset({"model", "input", "dimensions", "encoding_format"})


def _fail(path: str, problem: str) -> ConfigError:
    return ConfigError(f"{path}: {problem}")


def _inputs(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        if not value:
            raise _fail("body.input", "must not be an empty string")
        return (value,)
    if not isinstance(value, list):
        raise _fail("body.input", "expected a string or an array of strings")
    if not value:
        raise _fail("body.input", "must hold at least one string")
    for index, item in enumerate(value):
        if isinstance(item, str):
            if not item:
                raise _fail(f"body.input[{index}]", "must not be an empty string")
            continue
        if isinstance(item, int | list) and not isinstance(item, bool):
            raise _fail(
                "body.input",
                "token-id arrays are not supported here; send the text itself (a string or "
                "an array of strings)",
            )
        raise _fail(f"body.input[{index}]", "expected a string")
    return tuple(value)


def parse_embeddings_body(body: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The :class:`~sluice._embeddings.EmbedRequest` fields a body asks for (all but
    ``model``, which the gateway resolves), and the encoding the client wants back
    (``float`` or ``base64``).

    ``encoding_format`` is also what the upstream is asked for (base64 replies are a quarter
    of the bytes); keys sluice does not model go to ``extra_body`` (``user``).

    Raises:
        ConfigError: naming the field that is missing or wrong.
    """
    if "input" not in body:
        raise _fail("body.input", "missing; send a string or an array of strings")
    fields: dict[str, Any] = {"input": _inputs(body["input"])}
    dimensions = body.get("dimensions")
    if dimensions is not None:
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
            raise _fail("body.dimensions", f"expected an integer >= 1, got {dimensions!r}")
        fields["dimensions"] = dimensions
    encoding = body.get("encoding_format")
    if encoding is not None:
        if encoding not in ("float", "base64"):
            raise _fail("body.encoding_format", f"expected 'float' or 'base64', got {encoding!r}")
        fields["encoding_format"] = encoding
    extra = {k: v for k, v in body.items() if k not in _MAPPED}
    if extra:
        fields["extra_body"] = extra
    return fields, encoding or "float"


_SWAP = sys.byteorder != "little"


def float32_base64(vector: Sequence[float]) -> str:
    """``vector`` as OpenAI's base64 encoding: little-endian float32 values."""
    packed = array("f", vector)
    if _SWAP:
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def render_embeddings(result: EmbedResult, *, model: str, encoding_format: str) -> bytes:
    """The ``list`` body for ``result``: one ``embedding`` object per input, in order, its
    vector as floats or (``encoding_format="base64"``) as :func:`float32_base64`; ``usage``
    counts the prompt tokens, which are all the tokens an embedding has."""
    encode = float32_base64 if encoding_format == "base64" else list
    tokens = result.usage.input_tokens
    return orjson.dumps(
        {
            "object": "list",
            "data": [
                {"object": "embedding", "index": index, "embedding": encode(vector)}
                for index, vector in enumerate(result.vectors)
            ],
            "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )


def embed_request(
    body: Any, *, model: str | None = None, fields: Mapping[str, Any] | None = None
) -> EmbedRequest:
    """The :class:`EmbedRequest` a body asks for (:func:`parse_embeddings_body`); ``model``
    replaces the body's, which must otherwise be written ``provider:model``; ``fields`` are
    more request fields set by the caller (a tag).

    Raises:
        ConfigError: naming the field that is missing or wrong.
    """
    if not isinstance(body, dict):
        raise _fail("body", "expected an object")
    if model is None:
        named = body.get("model")
        if not isinstance(named, str) or not named:
            raise _fail("body.model", "missing; write it as 'provider:model'")
        try:
            split_model(named)
        except ValueError:
            raise _fail(
                "body.model",
                f"{named!r} names no provider; write it as 'provider:model' "
                f"(for example 'openai:{named}') or pass a model override",
            ) from None
        model = named
    parsed, _ = parse_embeddings_body(body)
    return EmbedRequest(model=model, **parsed, **(fields or {}))
