"""OpenAI's Responses API (``POST /responses``) as a protocol: ``openai-responses``.

:class:`ResponsesCodec` ties together request building (:mod:`.responses_request`), reply
decoding (:mod:`.responses_decode`) and error mapping, which is the chat protocol's: the two
APIs answer errors alike. It holds no state, so one instance serves every call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .decode_shared import MAX_EVENT_BYTES, MAX_LINE_BYTES
from .openai import OpenAICodec
from .responses_decode import ResponsesStreamDecoder, decode_body
from .responses_request import build_request

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._errors import CallError
    from .._messages import ChatRequest
    from .base import AttemptOutput, HttpRequest
    from .quirks import RequestQuirks

__all__ = ["ResponsesCodec", "ResponsesStreamDecoder"]

_EMBED_METHODS = frozenset({"build_embed_request", "decode_embed_body"})


class ResponsesCodec:
    """The :class:`~sluice._protocols.base.Codec` for ``POST /responses``.

    Of ``quirks``, ``omit_tool_choice`` and ``azure_api_version`` apply (see
    :func:`.responses_request.build_request`).
    """

    __slots__ = ("_chat", "quirks")

    def __init__(self, quirks: RequestQuirks | None = None) -> None:
        self.quirks = quirks
        self._chat = OpenAICodec(quirks)

    def __getattr__(self, name: str) -> Any:
        """The embedding methods of the chat protocol's codec (``build_embed_request``,
        ``decode_embed_body``), where it has them: a server with the Responses API serves
        ``/embeddings`` as OpenAI's does. Anything else is an AttributeError, so
        :func:`sluice._protocols.embed_codec` sees exactly what the chat codec offers."""
        if name in _EMBED_METHODS:
            return getattr(self._chat, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def build_request(
        self,
        request: ChatRequest,
        *,
        base_url: str,
        api_key: str | None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpRequest:
        """See :func:`sluice._protocols.responses_request.build_request`."""
        return build_request(
            request, base_url=base_url, api_key=api_key, headers=headers, quirks=self.quirks
        )

    def stream_decoder(
        self, call_id: str, *, max_line: int = MAX_LINE_BYTES, max_event: int = MAX_EVENT_BYTES
    ) -> ResponsesStreamDecoder:
        """A fresh decoder for one streamed reply; its events carry ``call_id``."""
        return ResponsesStreamDecoder(call_id, max_line=max_line, max_event=max_event)

    def decode_body(self, body: bytes) -> AttemptOutput:
        """See :func:`sluice._protocols.responses_decode.decode_body`."""
        return decode_body(body)

    def decode_error(
        self, status: int, headers: Mapping[str, str], body: bytes, *, wall_now: float
    ) -> CallError:
        """As :meth:`.openai.OpenAICodec.decode_error`: the Responses API's error replies are
        the chat API's (``{"error": {"message", "type", "param", "code"}}``)."""
        return self._chat.decode_error(status, headers, body, wall_now=wall_now)
