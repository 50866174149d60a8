"""Ollama's native chat protocol (``POST /api/chat``, NDJSON streams), and its embeddings
(``POST /api/embed``).

:class:`OllamaCodec` ties together request building (:mod:`.ollama_request`), reply decoding
(:mod:`.ollama_decode`), embeddings (:mod:`.ollama_embed`) and error mapping
(:mod:`.http_errors`). It holds no state, so one instance serves every call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from .decode_shared import MAX_EVENT_BYTES, MAX_LINE_BYTES
from .ollama_decode import OllamaStreamDecoder, decode_body, error_message
from .ollama_request import build_request

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._embeddings import EmbedOutput, EmbedRequest
    from .._errors import CallError
    from .._messages import ChatRequest
    from .base import AttemptOutput, HttpRequest

__all__ = ["OllamaCodec", "OllamaStreamDecoder"]


class OllamaCodec:
    """The :class:`~sluice._protocols.base.Codec` for Ollama's ``POST /api/chat``, and its
    :class:`~sluice._protocols.base.EmbedCodec` for ``POST /api/embed``."""

    __slots__ = ()

    def build_request(
        self,
        request: ChatRequest,
        *,
        base_url: str,
        api_key: str | None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpRequest:
        """See :func:`sluice._protocols.ollama_request.build_request`."""
        return build_request(request, base_url=base_url, api_key=api_key, headers=headers)

    def stream_decoder(
        self, call_id: str, *, max_line: int = MAX_LINE_BYTES, max_event: int = MAX_EVENT_BYTES
    ) -> OllamaStreamDecoder:
        """A fresh decoder for one streamed reply; its events carry ``call_id``.

        An NDJSON event is one line, so ``max_event`` only caps it further."""
        return OllamaStreamDecoder(call_id, max_line=min(max_line, max_event))

    def decode_body(self, body: bytes) -> AttemptOutput:
        """See :func:`sluice._protocols.ollama_decode.decode_body`."""
        return decode_body(body)

    def build_embed_request(
        self,
        request: EmbedRequest,
        *,
        base_url: str,
        api_key: str | None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpRequest:
        """See :func:`sluice._protocols.ollama_embed.build_embed_request`."""
        from .ollama_embed import build_embed_request

        return build_embed_request(request, base_url=base_url, api_key=api_key, headers=headers)

    def decode_embed_body(self, body: bytes, *, inputs: int) -> EmbedOutput:
        """See :func:`sluice._protocols.ollama_embed.decode_embed_body`."""
        from .ollama_embed import decode_embed_body

        return decode_embed_body(body, inputs=inputs)

    def decode_error(
        self, status: int, headers: Mapping[str, str], body: bytes, *, wall_now: float
    ) -> CallError:
        """The :class:`CallError` for an error reply (see :func:`.http_errors.error_for_status`).

        Reads ``{"error": "<text>"}`` and keeps the server's text as the message (for a model
        without tool support, a 400 ``... does not support tools``: :class:`BadRequest`); any
        other body gives a short excerpt. Ollama sends no error type or request id.
        """
        from .http_errors import error_for_status, excerpt, provider_wait  # errors only

        try:
            reply = orjson.loads(body)
        except orjson.JSONDecodeError:
            reply = None
        if type(reply) is dict and reply.get("error"):
            message = error_message(reply["error"])
        else:
            message = excerpt(body) or f"HTTP {status} with an empty body"
        return error_for_status(status, message, retry_after=provider_wait(headers, body, wall_now))
