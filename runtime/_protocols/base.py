"""What every wire protocol codec provides. Codecs are pure: no sockets, no tasks, no clock.

A ProviderActor asks its codec to build the HTTP request for an attempt, then feeds the reply's
body bytes, exactly as they come off the network, into a :class:`StreamDecoder`, and forwards the
events each ``feed`` returns as one batch. At the end it calls ``finish()`` for the assembled
output. Error replies go through :meth:`Codec.decode_error`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from .._messages import ChatRequest, FinishReason, Message, Usage
from .._record import Value

if TYPE_CHECKING:
    from .._embeddings import EmbedOutput, EmbedRequest
    from .._errors import CallError
    from .._events import DeltaEvent

__all__ = ["AttemptOutput", "Codec", "EmbedCodec", "HttpRequest", "StreamDecoder"]


@attrs.frozen(eq=False, kw_only=True, repr=False)
class HttpRequest(Value):
    """One HTTP request, ready to send. ``url`` is absolute."""

    method: str
    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes


@attrs.frozen(eq=False, kw_only=True, repr=False)
class AttemptOutput(Value):
    """What one successful attempt produced, assembled from the whole reply."""

    message: Message
    """The assistant message: reasoning, text and tool calls in the order the model gave them."""
    finish_reason: FinishReason
    raw_finish_reason: str | None = None
    usage: Usage | None = None
    """None when the provider never reported usage."""
    response_id: str | None = None
    stop_sequence: str | None = None
    logprobs: Mapping[str, Any] | None = None
    system_fingerprint: str | None = None
    service_tier: str | None = None
    """These four as :class:`~sluice._messages.ChatResult` holds them."""


class StreamDecoder(Protocol):
    """Incremental decoder of one streamed reply body."""

    @property
    def chunks_seen(self) -> int:
        """Data events decoded so far (comments and keep-alives do not count)."""
        ...

    def feed(self, data: bytes) -> list[DeltaEvent]:
        """Decode the next piece of the body; ``data`` may be cut anywhere (mid-line, mid-UTF-8).

        Returns the events completed by this piece, possibly none.

        Raises:
            CallError: the stream carried an error event, or is malformed (ProtocolError).
        """
        ...

    def finish(self) -> AttemptOutput:
        """The body ended: return the assembled output.

        Raises:
            StreamBroken: the body ended before the reply was complete.
        """
        ...


class Codec(Protocol):
    """A wire protocol: request building and reply decoding."""

    def build_request(
        self,
        request: ChatRequest,
        *,
        base_url: str,
        api_key: str | None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpRequest:
        """The HTTP request for one attempt of ``request`` (model name without provider prefix)."""
        ...

    def stream_decoder(
        self, call_id: str, *, max_line: int = ..., max_event: int = ...
    ) -> StreamDecoder:
        """A fresh decoder for a streamed reply; its events carry ``call_id``.

        A line longer than ``max_line`` bytes, or an event larger than ``max_event`` bytes,
        makes its ``feed`` raise a terminal :class:`~sluice._errors.ProtocolError` (defaults:
        :mod:`.decode_shared`).
        """
        ...

    def decode_body(self, body: bytes) -> AttemptOutput:
        """Decode a complete non-streamed reply body.

        Raises:
            CallError: the body is an error or malformed.
        """
        ...

    def decode_error(
        self, status: int, headers: Mapping[str, str], body: bytes, *, wall_now: float
    ) -> CallError:
        """Map an error reply (status >= 400) to the most specific :class:`CallError`.

        ``headers`` keys are lower case. ``wall_now`` (seconds since the epoch) is only used to
        read a ``Retry-After`` given as an HTTP date.
        """
        ...


class EmbedCodec(Protocol):
    """A wire protocol's embedding endpoint (OpenAI-compatible ``/embeddings``, Gemini
    ``batchEmbedContents``, Ollama ``/api/embed``). A codec class of a protocol that has one
    provides these two methods beside :class:`Codec`'s; error replies go through the same
    ``decode_error``. A protocol without embeddings does not have them (see
    :func:`sluice._protocols.embed_codec`)."""

    def build_embed_request(
        self,
        request: EmbedRequest,
        *,
        base_url: str,
        api_key: str | None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpRequest:
        """The HTTP request for one attempt of ``request`` (model name without provider
        prefix), every input in one request."""
        ...

    def decode_embed_body(self, body: bytes, *, inputs: int) -> EmbedOutput:
        """Decode a complete embedding reply that should hold ``inputs`` vectors.

        Raises:
            CallError: the body is an error, malformed, or holds another number of vectors
                (ProtocolError).
        """
        ...

    def decode_error(
        self, status: int, headers: Mapping[str, str], body: bytes, *, wall_now: float
    ) -> CallError:
        """As :meth:`Codec.decode_error`."""
        ...
