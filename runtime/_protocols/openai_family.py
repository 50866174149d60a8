"""One provider that speaks both of OpenAI's APIs: chat completions for most models, the
Responses API for the models its config names (``providers.NAME.models.MODEL.protocol``).

:class:`OpenAIFamilyCodec` builds each request with its model's codec. A reply is read by the
codec of the API it came from, told from its first bytes: a Responses stream's events carry a
top-level ``type`` (``response.created``), a chat chunk never does; a whole Responses body is
an object ``"response"``. So a decoder needs no state shared between calls, and a provider
without per-model protocols never meets this module (its codec is its protocol's own).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from .decode_shared import MAX_EVENT_BYTES, MAX_LINE_BYTES
from .sse import SSEDecoder

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._errors import CallError
    from .._events import DeltaEvent
    from .._messages import ChatRequest
    from .base import AttemptOutput, Codec, HttpRequest, StreamDecoder

__all__ = ["OpenAIFamilyCodec", "is_responses_body", "is_responses_event"]


def is_responses_event(payload: bytes) -> bool:
    """Whether the first data payload of a stream is a Responses event (a JSON object with a
    string ``type``); a chat chunk, ``[DONE]`` or anything else is not."""
    try:
        event = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return False
    return type(event) is dict and isinstance(event.get("type"), str)


def is_responses_body(body: bytes) -> bool:
    """Whether a whole reply body is a Responses ``response`` object."""
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return type(reply) is dict and (
        reply.get("object") == "response" or ("output" in reply and "choices" not in reply)
    )


class OpenAIFamilyCodec:
    """A :class:`~sluice._protocols.base.Codec` over a chat and a Responses codec (see the
    module docstring). ``by_model`` names the codec of each model that does not use
    ``default``."""

    __slots__ = ("_by_model", "_chat", "_default", "_responses")

    def __init__(
        self, default: Codec, by_model: Mapping[str, Codec], *, chat: Codec, responses: Codec
    ) -> None:
        self._default = default
        self._by_model = dict(by_model)
        self._chat = chat
        self._responses = responses

    def __getattr__(self, name: str) -> Any:
        """The chat codec's embedding methods, where it has them (one server serves both APIs
        and ``/embeddings``); anything else is an AttributeError."""
        if name in ("build_embed_request", "decode_embed_body"):
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
        """The request its model's codec builds."""
        codec = self._by_model.get(request.model_name, self._default)
        return codec.build_request(request, base_url=base_url, api_key=api_key, headers=headers)

    def stream_decoder(
        self, call_id: str, *, max_line: int = MAX_LINE_BYTES, max_event: int = MAX_EVENT_BYTES
    ) -> StreamDecoder:
        """A decoder that reads the stream with the codec of the API it came from."""
        return _EitherDecoder(self, call_id, max_line, max_event)

    def decode_body(self, body: bytes) -> AttemptOutput:
        """The body decoded by the codec of the API it came from."""
        codec = self._responses if is_responses_body(body) else self._chat
        return codec.decode_body(body)

    def decode_error(
        self, status: int, headers: Mapping[str, str], body: bytes, *, wall_now: float
    ) -> CallError:
        """Both APIs answer errors alike: the chat codec reads them."""
        return self._chat.decode_error(status, headers, body, wall_now=wall_now)


class _EitherDecoder:
    """Holds the stream's bytes until its first event says which API sent it, then hands them
    and the rest to that API's decoder. What it holds is bounded by the same line and event
    limits as any decoder's."""

    __slots__ = ("_call_id", "_codec", "_held", "_inner", "_max_event", "_max_line", "_probe")

    def __init__(
        self, codec: OpenAIFamilyCodec, call_id: str, max_line: int, max_event: int
    ) -> None:
        self._codec = codec
        self._call_id = call_id
        self._max_line = max_line
        self._max_event = max_event
        self._probe: SSEDecoder | None = SSEDecoder(max_line=max_line, max_event=max_event)
        self._held: list[bytes] = []
        self._inner: StreamDecoder | None = None

    @property
    def chunks_seen(self) -> int:
        return 0 if self._inner is None else self._inner.chunks_seen

    def feed(self, data: bytes) -> list[DeltaEvent]:
        if self._inner is not None:
            return self._inner.feed(data)
        assert self._probe is not None
        self._held.append(data)
        for event in self._probe.feed(data):
            if event.data:
                return self._choose(is_responses_event(event.data))
        return []

    def finish(self) -> AttemptOutput:
        if self._inner is None:
            assert self._probe is not None
            first = next((e.data for e in self._probe.end() if e.data), b"")
            self._choose(is_responses_event(first))
        assert self._inner is not None
        return self._inner.finish()

    def _choose(self, responses: bool) -> list[DeltaEvent]:
        codec = self._codec._responses if responses else self._codec._chat
        self._inner = inner = codec.stream_decoder(
            self._call_id, max_line=self._max_line, max_event=self._max_event
        )
        held, self._held, self._probe = b"".join(self._held), [], None
        return inner.feed(held)
