"""The Anthropic messages protocol, spoken by Anthropic and by servers that copy it (MiniMax).

:class:`AnthropicCodec` ties together request building (:mod:`.anthropic_request`), reply
decoding (:mod:`.anthropic_decode`) and error mapping (:mod:`.http_errors`). It holds no state,
so one instance serves every call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from .anthropic_decode import AnthropicStreamDecoder, decode_body, error_fields
from .anthropic_request import build_request
from .decode_shared import MAX_EVENT_BYTES, MAX_LINE_BYTES

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._errors import CallError
    from .._messages import ChatRequest
    from .base import AttemptOutput, HttpRequest

__all__ = ["AnthropicCodec", "AnthropicStreamDecoder"]


class AnthropicCodec:
    """The :class:`~sluice._protocols.base.Codec` for ``POST /v1/messages``."""

    __slots__ = ()

    def build_request(
        self,
        request: ChatRequest,
        *,
        base_url: str,
        api_key: str | None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpRequest:
        """See :func:`sluice._protocols.anthropic_request.build_request`."""
        return build_request(request, base_url=base_url, api_key=api_key, headers=headers)

    def stream_decoder(
        self, call_id: str, *, max_line: int = MAX_LINE_BYTES, max_event: int = MAX_EVENT_BYTES
    ) -> AnthropicStreamDecoder:
        """A fresh decoder for one streamed reply; its events carry ``call_id``."""
        return AnthropicStreamDecoder(call_id, max_line=max_line, max_event=max_event)

    def decode_body(self, body: bytes) -> AttemptOutput:
        """See :func:`sluice._protocols.anthropic_decode.decode_body`."""
        return decode_body(body)

    def decode_error(
        self, status: int, headers: Mapping[str, str], body: bytes, *, wall_now: float
    ) -> CallError:
        """The :class:`CallError` for an error reply (see :func:`.http_errors.error_for_status`).

        Reads ``{"type": "error", "error": {"type", "message"}, "request_id"}``; any other body
        gives a short excerpt as the message. 529 and ``overloaded_error`` (which has also come
        with a 500) are :class:`Overloaded`. The request id comes from the ``request-id``
        header, else the body; ``retry_after`` from :func:`.http_errors.provider_wait`.
        """
        from .http_errors import error_for_status, excerpt, provider_wait  # errors only

        try:
            reply = orjson.loads(body)
        except orjson.JSONDecodeError:
            reply = None
        request_id = headers.get("request-id")
        error_type = None
        if type(reply) is dict and reply.get("error"):
            message, error_type, body_request_id = error_fields(reply)
            request_id = request_id or body_request_id
        else:
            message = excerpt(body) or f"HTTP {status} with an empty body"
        return error_for_status(
            status,
            message,
            error_type=error_type,
            request_id=request_id,
            retry_after=provider_wait(headers, body, wall_now),
        )
