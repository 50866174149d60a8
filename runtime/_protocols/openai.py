"""The OpenAI chat-completions protocol, spoken by OpenAI and by the servers that copy it
(DeepSeek, OpenRouter, xAI, Moonshot, vLLM, ...).

:class:`OpenAICodec` ties together request building (:mod:`.openai_request`), reply decoding
(:mod:`.openai_decode`) and error mapping (:mod:`.http_errors`). It holds no state, so one
instance serves every call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import orjson

from .decode_shared import MAX_EVENT_BYTES, MAX_LINE_BYTES
from .openai_decode import OpenAIStreamDecoder, decode_body, error_fields
from .openai_request import build_request

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._embeddings import EmbedOutput, EmbedRequest
    from .._errors import CallError
    from .._messages import ChatRequest
    from .base import AttemptOutput, HttpRequest
    from .quirks import RequestQuirks

__all__ = ["OpenAICodec", "OpenAIStreamDecoder"]


class OpenAICodec:
    """The :class:`~sluice._protocols.base.Codec` for ``POST /chat/completions``, and the
    :class:`~sluice._protocols.base.EmbedCodec` for ``POST /embeddings``.

    ``quirks`` adapt every request body to one provider's server (see :mod:`.quirks`).
    """

    __slots__ = ("quirks",)

    def __init__(self, quirks: RequestQuirks | None = None) -> None:
        self.quirks = quirks

    def build_request(
        self,
        request: ChatRequest,
        *,
        base_url: str,
        api_key: str | None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpRequest:
        """See :func:`sluice._protocols.openai_request.build_request`."""
        return build_request(
            request, base_url=base_url, api_key=api_key, headers=headers, quirks=self.quirks
        )

    def stream_decoder(
        self, call_id: str, *, max_line: int = MAX_LINE_BYTES, max_event: int = MAX_EVENT_BYTES
    ) -> OpenAIStreamDecoder:
        """A fresh decoder for one streamed reply; its events carry ``call_id``."""
        return OpenAIStreamDecoder(call_id, max_line=max_line, max_event=max_event)

    def decode_body(self, body: bytes) -> AttemptOutput:
        """See :func:`sluice._protocols.openai_decode.decode_body`."""
        return decode_body(body)

    def build_embed_request(
        self,
        request: EmbedRequest,
        *,
        base_url: str,
        api_key: str | None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpRequest:
        """See :func:`sluice._protocols.openai_embed.build_embed_request`."""
        from .openai_embed import build_embed_request  # a chat never loads the embedding part

        return build_embed_request(
            request, base_url=base_url, api_key=api_key, headers=headers, quirks=self.quirks
        )

    def decode_embed_body(self, body: bytes, *, inputs: int) -> EmbedOutput:
        """See :func:`sluice._protocols.openai_embed.decode_embed_body`."""
        from .openai_embed import decode_embed_body

        return decode_embed_body(body, inputs=inputs)

    def decode_error(
        self, status: int, headers: Mapping[str, str], body: bytes, *, wall_now: float
    ) -> CallError:
        """The :class:`CallError` for an error reply (see :func:`.http_errors.error_for_status`).

        Reads ``{"error": {"message", "type", "code", "param"}}``, a bare ``{"error": "..."}``,
        vLLM's top-level ``{"message", "type", "code"}`` and Gemini's one-element list of those;
        any other body gives a short excerpt as the message. The request id comes from
        ``x-request-id`` or ``request-id``; ``retry_after`` from
        :func:`.http_errors.provider_wait`.
        """
        from .http_errors import error_for_status, provider_wait  # an error reply's only

        message, error_type, fields = _error_message(status, body)
        error = error_for_status(
            status,
            message,
            error_type=error_type,
            request_id=headers.get("x-request-id") or headers.get("request-id"),
            retry_after=provider_wait(headers, body, wall_now),
        )
        param, code = fields.get("param"), fields.get("code")
        if isinstance(param, str) or isinstance(code, str):
            # Kept verbatim, so a client behind the gateway sees what the provider said.
            error = attrs.evolve(
                error,
                param=param if isinstance(param, str) else None,
                code=code if isinstance(code, str) else None,
            )
        return error


def _error_message(status: int, body: bytes) -> tuple[str, str | None, dict[str, Any]]:
    """``(message, error_type, the error object or {})`` of an error reply's body."""
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError:
        reply = None
    if type(reply) is list and reply:
        reply = reply[0]
    if type(reply) is dict:
        error = reply.get("error")
        if error:
            message, error_type, _ = error_fields(error)
            return message, error_type, error if type(error) is dict else {}
        if isinstance(reply.get("message"), str) and reply["message"]:
            message, error_type, _ = error_fields(reply)
            return message, error_type, reply
    from .http_errors import excerpt

    return excerpt(body) or f"HTTP {status} with an empty body", None, {}
