"""Wire protocol codecs: pure request building and reply decoding, one module per protocol."""

from __future__ import annotations

from ..errors import ConfigError
from .base import AttemptOutput, Codec, HttpRequest, StreamDecoder

__all__ = ["AttemptOutput", "Codec", "HttpRequest", "StreamDecoder", "codec_for"]

PROTOCOLS = ("openai",)


def codec_for(protocol: str) -> Codec:
    """The codec for ``protocol``.

    Raises:
        ConfigError: no such protocol.
    """
    if protocol == "openai":
        from .openai import OpenAICodec

        return OpenAICodec()
    raise ConfigError(f"unknown protocol {protocol!r}; known protocols: {', '.join(PROTOCOLS)}")
