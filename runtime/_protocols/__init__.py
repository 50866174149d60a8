"""Wire protocol codecs: pure request building and reply decoding, one module per protocol."""

from __future__ import annotations

from .._errors import ConfigError
from .base import AttemptOutput, Codec, EmbedCodec, HttpRequest, StreamDecoder
from .quirks import RequestQuirks

__all__ = [
    "AttemptOutput",
    "Codec",
    "EmbedCodec",
    "HttpRequest",
    "RequestQuirks",
    "StreamDecoder",
    "codec_for",
    "embed_codec",
]

PROTOCOLS = ("openai", "openai-responses", "anthropic", "gemini", "ollama")


def codec_for(protocol: str, *, quirks: RequestQuirks | None = None) -> Codec:
    """The codec for ``protocol``; ``quirks`` (the OpenAI protocols only) adapt its request
    bodies.

    Raises:
        ConfigError: no such protocol.
    """
    if protocol == "openai":
        from .openai import OpenAICodec

        return OpenAICodec(quirks)
    if protocol == "openai-responses":
        from .responses import ResponsesCodec

        return ResponsesCodec(quirks)
    if protocol == "anthropic":
        from .anthropic import AnthropicCodec

        return AnthropicCodec()
    if protocol == "gemini":
        from .gemini import GeminiCodec

        return GeminiCodec()
    if protocol == "ollama":
        from .ollama import OllamaCodec

        return OllamaCodec()
    raise ConfigError(f"unknown protocol {protocol!r}; known protocols: {', '.join(PROTOCOLS)}")


def embed_codec(codec: Codec) -> EmbedCodec | None:
    """``codec`` as an :class:`EmbedCodec`, or None when its protocol has no embeddings."""
    if hasattr(codec, "build_embed_request") and hasattr(codec, "decode_embed_body"):
        return codec  # type: ignore[return-value]
    return None
