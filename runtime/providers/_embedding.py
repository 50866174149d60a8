"""A provider's embeddings: the codec that builds and decodes its embedding requests, what to
say when its protocol has none, and how much one request may carry. Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .._config.embed_limits import EmbedLimits
from .._errors import BadRequest
from .._protocols import embed_codec
from ._codec import ParamsCodec

if TYPE_CHECKING:
    from .._config import ProviderConfig
    from .._embeddings import EmbedOutput, EmbedRequest
    from .._protocols.base import Codec, EmbedCodec, HttpRequest
    from ._registry import ResolvedProvider

__all__ = [
    "FALLBACK_BATCH",
    "PROTOCOL_EMBED_LIMITS",
    "build_embed",
    "decode_embed",
    "embed_limits",
    "embedding_codec",
    "no_embeddings",
]

PROTOCOL_EMBED_LIMITS: Final = {
    "openai": EmbedLimits(max_inputs=2048, max_tokens=300_000),
    "gemini": EmbedLimits(max_inputs=100),
}
"""What each protocol's reference server takes in one request: OpenAI's ``/embeddings``
2048 inputs and 300,000 tokens, Gemini's ``batchEmbedContents`` 100 requests."""

FALLBACK_BATCH: Final = 256
"""Inputs per request when nothing says how many a provider takes (Ollama's ``/api/embed``
documents no limit): enough to pack short texts, small enough for any server."""


def embedding_codec(codec: Codec) -> EmbedCodec | None:
    """The embedding side of a provider's codec (parameters for generation are not laid
    under embedding requests); None when its protocol has no embeddings."""
    if isinstance(codec, ParamsCodec):
        codec = codec.inner
    return embed_codec(codec)


def no_embeddings(provider: str, protocol: str) -> BadRequest:
    """The error for an embedding call to a provider whose protocol has no embeddings."""
    return BadRequest(
        f"provider {provider!r} speaks the {protocol} protocol, which has no embeddings "
        "endpoint: embed with a provider that has one (openai, azure-openai, gemini, ollama or "
        "another OpenAI-compatible server), or give the call such a model in fallbacks"
    )


def build_embed(
    codec: Codec,
    spec: ResolvedProvider,
    request: EmbedRequest,
    *,
    base_url: str,
    api_key: str | None,
) -> HttpRequest:
    """The HTTP request for one attempt of ``request`` to ``spec``'s backend.

    Raises:
        BadRequest: the provider's protocol has no embeddings.
    """
    found = embedding_codec(codec)
    if found is None:
        raise no_embeddings(spec.name, spec.protocol)
    return found.build_embed_request(
        request, base_url=base_url, api_key=api_key, headers=spec.headers
    )


def decode_embed(codec: Codec, body: bytes, inputs: int) -> EmbedOutput:
    """Decode an embedding reply of ``inputs`` vectors with ``codec`` (which built the
    request, so it has embeddings)."""
    found = embedding_codec(codec)
    assert found is not None  # build_embed refused the request otherwise
    return found.decode_embed_body(body, inputs=inputs)


def embed_limits(spec: ResolvedProvider, config: ProviderConfig | None, model: str) -> EmbedLimits:
    """How much one embedding request to ``model`` of ``spec`` may hold: each bound from the
    first place that sets it, in this order: the config's ``models.MODEL.embed_limits``, the
    config's ``embed_limits``, the provider's definition, the protocol's usual limits."""
    layers: list[EmbedLimits | None] = []
    if config is not None:
        entry = config.models.get(model)
        layers.append(entry.embed_limits if entry is not None else None)
        layers.append(config.embed_limits)
    definition = spec.definition
    layers.append(definition.embed_limits if definition is not None else None)
    layers.append(PROTOCOL_EMBED_LIMITS.get(spec.protocol))
    inputs = next((x.max_inputs for x in layers if x and x.max_inputs is not None), None)
    tokens = next((x.max_tokens for x in layers if x and x.max_tokens is not None), None)
    return EmbedLimits(max_inputs=inputs, max_tokens=tokens)
