"""The Gemini API protocol (``generateContent``, and ``streamGenerateContent`` with ``alt=sse``;
embeddings through ``batchEmbedContents``).

:class:`GeminiCodec` ties together request building (:mod:`.gemini_request`), reply decoding
(:mod:`.gemini_decode`), embeddings (:mod:`.gemini_embed`) and error mapping
(:mod:`.http_errors`). It holds no state, so one instance serves every call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from .decode_shared import MAX_EVENT_BYTES, MAX_LINE_BYTES
from .gemini_decode import GeminiStreamDecoder, decode_body, error_from_payload
from .gemini_request import build_request

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._embeddings import EmbedOutput, EmbedRequest
    from .._errors import CallError
    from .._messages import ChatRequest
    from .base import AttemptOutput, HttpRequest

__all__ = ["GeminiCodec", "GeminiStreamDecoder"]


class GeminiCodec:
    """The :class:`~sluice._protocols.base.Codec` for ``POST /v1beta/models/{model}:...``, and
    its :class:`~sluice._protocols.base.EmbedCodec` for ``:batchEmbedContents``."""

    __slots__ = ()

    def build_request(
        self,
        request: ChatRequest,
        *,
        base_url: str,
        api_key: str | None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpRequest:
        """See :func:`sluice._protocols.gemini_request.build_request`."""
        return build_request(request, base_url=base_url, api_key=api_key, headers=headers)

    def stream_decoder(
        self, call_id: str, *, max_line: int = MAX_LINE_BYTES, max_event: int = MAX_EVENT_BYTES
    ) -> GeminiStreamDecoder:
        """A fresh decoder for one streamed reply; its events carry ``call_id``."""
        return GeminiStreamDecoder(call_id, max_line=max_line, max_event=max_event)

    def decode_body(self, body: bytes) -> AttemptOutput:
        """See :func:`sluice._protocols.gemini_decode.decode_body`."""
        return decode_body(body)

    def build_embed_request(
        self,
        request: EmbedRequest,
        *,
        base_url: str,
        api_key: str | None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpRequest:
        """See :func:`sluice._protocols.gemini_embed.build_embed_request`."""
        from .gemini_embed import build_embed_request

        return build_embed_request(request, base_url=base_url, api_key=api_key, headers=headers)

    def decode_embed_body(self, body: bytes, *, inputs: int) -> EmbedOutput:
        """See :func:`sluice._protocols.gemini_embed.decode_embed_body`."""
        from .gemini_embed import decode_embed_body

        return decode_embed_body(body, inputs=inputs)

    def decode_error(
        self, status: int, headers: Mapping[str, str], body: bytes, *, wall_now: float
    ) -> CallError:
        """The :class:`CallError` for an error reply (see :func:`.error_from_payload`).

        Reads Google's ``{"error": {"code", "message", "status", "details"}}``, alone or in a
        one-element list; any other body gives a short excerpt as the message. A
        ``RetryInfo`` detail or a ``Retry-After`` header gives ``retry_after``
        (:func:`.http_errors.provider_wait`).
        """
        from .http_errors import error_for_status, excerpt, provider_wait  # errors only

        try:
            reply = orjson.loads(body)
        except orjson.JSONDecodeError:
            reply = None
        if type(reply) is list and reply:
            reply = reply[0]
        retry_after = provider_wait(headers, body, wall_now)
        request_id = headers.get("x-request-id")
        if type(reply) is dict and reply.get("error"):
            return error_from_payload(
                reply["error"], status, request_id=request_id, retry_after=retry_after
            )
        return error_for_status(
            status,
            excerpt(body) or f"HTTP {status} with an empty body",
            request_id=request_id,
            retry_after=retry_after,
        )
