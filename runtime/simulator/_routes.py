"""The generation protocols behind one interface: what differs between them, and no more.

:data:`OPENAI` (``POST /v1/chat/completions``), :data:`ANTHROPIC` (``POST /v1/messages``),
:data:`COMPLETIONS` (``POST /v1/completions``) and :data:`RESPONSES` (``POST /v1/responses``)
each parse a request into a :class:`~.request.ChatRequest`, encode a planned reply as SSE
events or a JSON body, and write error bodies and response heads their own way. The app
sequences them, waits and applies faults identically for both. Pure.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from ._anthropic_request import parse_messages_request
from ._anthropic_wire import (
    MALFORMED as ANTHROPIC_MALFORMED,
)
from ._anthropic_wire import (
    MessageEncoder,
    anthropic_error_body,
    anthropic_status_error,
    message_body,
    message_events,
)
from ._request import parse_chat_request
from ._responses import MALFORMED as RESPONSES_MALFORMED
from ._responses import (
    parse_responses_request,
    reasoning_tokens,
    response_body,
    response_events,
)
from ._wire import (
    MALFORMED as OPENAI_MALFORMED,
)
from ._wire import (
    ChunkEncoder,
    completion_body,
    error_body,
    sse_events,
    status_error_body,
)

if TYPE_CHECKING:
    from ._reply import Reply
    from ._request import ChatRequest

__all__ = ["ANTHROPIC", "COMPLETIONS", "OPENAI", "RESPONSES", "Route"]

Header = tuple[bytes, bytes]

_JSON: Header = (b"content-type", b"application/json")
_NO_CACHE: Header = (b"cache-control", b"no-cache")


class Route(ABC):
    """One generation protocol; see :data:`OPENAI` and :data:`ANTHROPIC`."""

    name: str
    request_id_header: bytes
    """Header that carries the request id (``x-request-id``, ``request-id``)."""
    malformed: bytes
    """The not-JSON event the ``malformed`` fault inserts."""
    breaks_tool_json: bool
    """Whether ``broken_json`` applies to tool-call arguments (they travel as text)."""
    _stream_type: Header

    @abstractmethod
    def parse(self, body: bytes, *, ignore_tool_choice: bool) -> ChatRequest:
        """The request, validated (RequestError with a protocol-shaped error when it is not)."""

    @abstractmethod
    def stream_events(
        self,
        request: ChatRequest,
        reply: Reply,
        *,
        request_id: str,
        created: int,
        tokens_per_chunk: int,
        paced: bool,
        ping_every: int,
    ) -> list[list[bytes]]:
        """The stream's events, grouped by when they go out."""

    @abstractmethod
    def body(self, request: ChatRequest, reply: Reply, *, request_id: str, created: int) -> bytes:
        """The whole (non-streamed) reply body."""

    @abstractmethod
    def error(self, type_: str, message: str, request_id: str, param: str | None = None) -> bytes:
        """An error body in this protocol's shape."""

    @abstractmethod
    def status_error(self, status: int, request_id: str) -> bytes:
        """The body of a fault directive's error ``status``."""

    def hidden_tokens(self, request: ChatRequest) -> int:
        """Output tokens the reply spends beyond its planned tokens (reasoning), which the
        quotas count as usage reports them."""
        return 0

    def stream_head(self, request_id: bytes) -> list[Header]:
        return [self._stream_type, _NO_CACHE, (self.request_id_header, request_id)]

    def json_head(self, length: int, request_id: bytes) -> list[Header]:
        return [_JSON, (b"content-length", b"%d" % length), (self.request_id_header, request_id)]


class _OpenAI(Route):
    name = "openai"
    request_id_header = b"x-request-id"
    malformed = OPENAI_MALFORMED
    breaks_tool_json = True
    _stream_type = (b"content-type", b"text/event-stream")

    def parse(self, body: bytes, *, ignore_tool_choice: bool) -> ChatRequest:
        return parse_chat_request(body, ignore_tool_choice=ignore_tool_choice)

    def stream_events(
        self,
        request: ChatRequest,
        reply: Reply,
        *,
        request_id: str,
        created: int,
        tokens_per_chunk: int,
        paced: bool,
        ping_every: int,
    ) -> list[list[bytes]]:
        encoder = ChunkEncoder(
            completion_id=f"chatcmpl-{request_id}",
            created=created,
            model=request.model,
            include_usage=request.include_usage,
        )
        return sse_events(encoder, reply, tokens_per_chunk=tokens_per_chunk, paced=paced)

    def body(self, request: ChatRequest, reply: Reply, *, request_id: str, created: int) -> bytes:
        return completion_body(
            completion_id=f"chatcmpl-{request_id}",
            created=created,
            model=request.model,
            reply=reply,
        )

    def error(self, type_: str, message: str, request_id: str, param: str | None = None) -> bytes:
        return error_body(message, type_, param)

    def status_error(self, status: int, request_id: str) -> bytes:
        return status_error_body(status)


class _Anthropic(Route):
    name = "anthropic"
    request_id_header = b"request-id"
    malformed = ANTHROPIC_MALFORMED
    breaks_tool_json = False  # tool input is a JSON object in a non-streamed message
    _stream_type = (b"content-type", b"text/event-stream; charset=utf-8")

    def parse(self, body: bytes, *, ignore_tool_choice: bool) -> ChatRequest:
        return parse_messages_request(body, ignore_tool_choice=ignore_tool_choice)

    def stream_events(
        self,
        request: ChatRequest,
        reply: Reply,
        *,
        request_id: str,
        created: int,
        tokens_per_chunk: int,
        paced: bool,
        ping_every: int,
    ) -> list[list[bytes]]:
        encoder = MessageEncoder(
            message_id=f"msg_{request_id}", model=request.model, input_tokens=reply.prompt_tokens
        )
        return message_events(
            encoder, reply, tokens_per_chunk=tokens_per_chunk, paced=paced, ping_every=ping_every
        )

    def body(self, request: ChatRequest, reply: Reply, *, request_id: str, created: int) -> bytes:
        return message_body(message_id=f"msg_{request_id}", model=request.model, reply=reply)

    def error(self, type_: str, message: str, request_id: str, param: str | None = None) -> bytes:
        return anthropic_error_body(type_, message, request_id)

    def status_error(self, status: int, request_id: str) -> bytes:
        type_, message = anthropic_status_error(status)
        return anthropic_error_body(type_, message, request_id)


class _Completions(_OpenAI):
    """OpenAI text completions: OpenAI's errors and heads, its own request and chunks."""

    name = "completions"
    breaks_tool_json = False

    def parse(self, body: bytes, *, ignore_tool_choice: bool) -> ChatRequest:
        from ._completions import parse_completion_request

        return parse_completion_request(body)

    def stream_events(
        self,
        request: ChatRequest,
        reply: Reply,
        *,
        request_id: str,
        created: int,
        tokens_per_chunk: int,
        paced: bool,
        ping_every: int,
    ) -> list[list[bytes]]:
        from ._completions import CompletionEncoder, completion_events

        encoder = CompletionEncoder(
            completion_id=f"cmpl-{request_id}",
            created=created,
            model=request.model,
            include_usage=request.include_usage,
        )
        return completion_events(encoder, reply, tokens_per_chunk=tokens_per_chunk, paced=paced)

    def body(self, request: ChatRequest, reply: Reply, *, request_id: str, created: int) -> bytes:
        from ._completions import text_body

        return text_body(
            completion_id=f"cmpl-{request_id}", created=created, model=request.model, reply=reply
        )


class _Responses(_OpenAI):
    """OpenAI's Responses API: OpenAI's errors and heads, its own request and events."""

    name = "responses"
    malformed = RESPONSES_MALFORMED

    def parse(self, body: bytes, *, ignore_tool_choice: bool) -> ChatRequest:
        return parse_responses_request(body, ignore_tool_choice=ignore_tool_choice)

    def hidden_tokens(self, request: ChatRequest) -> int:
        return reasoning_tokens(request)

    def stream_events(
        self,
        request: ChatRequest,
        reply: Reply,
        *,
        request_id: str,
        created: int,
        tokens_per_chunk: int,
        paced: bool,
        ping_every: int,
    ) -> list[list[bytes]]:
        return response_events(
            request,
            reply,
            request_id=request_id,
            created=created,
            tokens_per_chunk=tokens_per_chunk,
            paced=paced,
        )

    def body(self, request: ChatRequest, reply: Reply, *, request_id: str, created: int) -> bytes:
        return response_body(request, reply, request_id=request_id, created=created)


OPENAI: Route = _OpenAI()
"""OpenAI chat completions."""
ANTHROPIC: Route = _Anthropic()
"""Anthropic messages."""
COMPLETIONS: Route = _Completions()
"""OpenAI text completions (``/v1/completions``)."""
RESPONSES: Route = _Responses()
"""OpenAI's Responses API (``/v1/responses``)."""
