"""Anthropic messages wire format: SSE events, ``message`` bodies, error bodies. Pure.

A stream is, as in Anthropic's recordings: ``message_start`` (the message with empty content
and the input usage, cache fields included), ``content_block_start`` for block 0, a ``ping``,
the block's deltas (``text_delta``; for a ``tool_use`` block ``input_json_delta``s, the first
one empty), ``content_block_stop``, ``message_delta`` (stop reason and cumulative usage) and
``message_stop``. Every event has an ``event:`` line naming its type. A reply with no content
has no block at all. Paced streams repeat the ``ping`` every few slots.

Field order follows the recordings; the JSON is compact (the real server pads some events
with spaces before the last ``}``, which parsers must not care about).
"""

from __future__ import annotations

import http
from typing import TYPE_CHECKING, Any

import orjson

from ._wire import group_tokens

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._reply import Reply

__all__ = [
    "MALFORMED",
    "MESSAGE_STOP",
    "PING",
    "STOP_REASONS",
    "MessageEncoder",
    "anthropic_error_body",
    "anthropic_status_error",
    "message_body",
    "message_events",
    "tool_use_id",
]

_dumps = orjson.dumps

PING = b'event: ping\ndata: {"type": "ping"}\n\n'
"""A keep-alive event, spelled as Anthropic sends it (with a space)."""
MESSAGE_STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
"""The last event of every complete stream."""
MALFORMED = (
    b"event: content_block_delta\n"
    b'data: {"type":"content_block_delta","index":0,"delta":<simulated malformed event>\n\n'
)
"""The event the ``malformed`` fault inserts: its data is not JSON."""
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
"""Anthropic's ``stop_reason`` for each planned finish reason."""

_CACHE_ZERO = b'"cache_creation_input_tokens":0,"cache_read_input_tokens":0'


def tool_use_id(reply: Reply) -> str:
    """The ``toolu_`` id of the reply's tool call (the same digits as its OpenAI id)."""
    assert reply.tool_call_id is not None
    return "toolu_" + reply.tool_call_id.removeprefix("call_")


class MessageEncoder:
    """Encodes the SSE events of one ``/v1/messages`` stream (its content is block 0)."""

    __slots__ = ("_input_tokens", "_json_head", "_start", "_text_head")

    def __init__(self, *, message_id: str, model: str, input_tokens: int) -> None:
        self._input_tokens = input_tokens
        self._start = b"".join(
            (
                b'event: message_start\ndata: {"type":"message_start","message":{"model":',
                _dumps(model),
                b',"id":',
                _dumps(message_id),
                b',"type":"message","role":"assistant","content":[],"stop_reason":null,'
                b'"stop_sequence":null,"usage":{"input_tokens":%d,' % input_tokens,
                _CACHE_ZERO,
                b',"cache_creation":{"ephemeral_5m_input_tokens":0,'
                b'"ephemeral_1h_input_tokens":0},"output_tokens":',
            )
        )
        self._text_head = (
            b"event: content_block_delta\ndata: "
            b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":'
        )
        self._json_head = (
            b"event: content_block_delta\ndata: "
            b'{"type":"content_block_delta","index":0,"delta":'
            b'{"type":"input_json_delta","partial_json":'
        )

    def message_start(self, output_tokens: int) -> bytes:
        """The opening event: the message with no content yet."""
        return self._start + b'%d,"service_tier":"standard"}}}\n\n' % output_tokens

    @staticmethod
    def text_block_start() -> bytes:
        return (
            b"event: content_block_start\ndata: "
            b'{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}'
            b"\n\n"
        )

    @staticmethod
    def tool_block_start(tool_id: str, name: str) -> bytes:
        return b"".join(
            (
                b"event: content_block_start\ndata: "
                b'{"type":"content_block_start","index":0,"content_block":'
                b'{"type":"tool_use","id":',
                _dumps(tool_id),
                b',"name":',
                _dumps(name),
                b',"input":{}}}\n\n',
            )
        )

    def text_delta(self, text: str) -> bytes:
        return b"".join((self._text_head, _dumps(text), b"}}\n\n"))

    def json_delta(self, fragment: str) -> bytes:
        return b"".join((self._json_head, _dumps(fragment), b"}}\n\n"))

    @staticmethod
    def block_stop() -> bytes:
        return b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'

    def message_delta(self, stop_reason: str, output_tokens: int) -> bytes:
        """The stop reason and the final, cumulative usage."""
        return b"".join(
            (
                b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":',
                _dumps(stop_reason),
                b',"stop_sequence":null},"usage":{"input_tokens":%d,' % self._input_tokens,
                _CACHE_ZERO,
                b',"output_tokens":%d}}\n\n' % output_tokens,
            )
        )


def message_events(
    encoder: MessageEncoder,
    reply: Reply,
    *,
    tokens_per_chunk: int,
    paced: bool,
    ping_every: int = 0,
) -> list[list[bytes]]:
    """The stream's events, grouped into the slots sent at the same moment.

    Slots are laid out as for the OpenAI stream (:func:`~.wire.sse_events`): unpaced, one
    slot; paced, the opening events with the first delta, then one delta per slot, the last
    slot closing the message. With ``ping_every`` > 0 a paced stream also sends a ``ping``
    at the start of every ``ping_every``-th slot.
    """
    opening = [encoder.message_start(min(1, reply.completion_tokens))]
    encode: Callable[[str], bytes]
    if reply.tool_name is not None:
        opening += [
            encoder.tool_block_start(tool_use_id(reply), reply.tool_name),
            PING,
            encoder.json_delta(""),
        ]
        encode = encoder.json_delta
        closing = [encoder.block_stop()]
    elif reply.tokens:
        opening += [encoder.text_block_start(), PING]
        encode = encoder.text_delta
        closing = [encoder.block_stop()]
    else:
        opening.append(PING)
        encode = encoder.text_delta
        closing = []
    closing += [
        encoder.message_delta(STOP_REASONS[reply.finish_reason], reply.completion_tokens),
        MESSAGE_STOP,
    ]
    chunks = [encode(text) for text in group_tokens(reply.tokens, tokens_per_chunk)]
    if not (paced and chunks):
        return [[*opening, *chunks, *closing]]
    slots = [[*opening, chunks[0]]]
    for i, chunk in enumerate(chunks[1:], 1):
        slots.append([PING, chunk] if ping_every and i % ping_every == 0 else [chunk])
    slots[-1].extend(closing)
    return slots


def message_body(*, message_id: str, model: str, reply: Reply) -> bytes:
    """A non-streaming ``message`` object.

    A tool call's ``input`` is the parsed arguments, or ``{}`` when ``max_tokens`` cut them.
    """
    content: list[dict[str, Any]]
    if reply.tool_name is not None:
        try:
            arguments = orjson.loads("".join(reply.tokens))
        except orjson.JSONDecodeError:
            arguments = {}
        content = [
            {
                "type": "tool_use",
                "id": tool_use_id(reply),
                "name": reply.tool_name,
                "input": arguments,
            }
        ]
    elif reply.tokens:
        content = [{"type": "text", "text": "".join(reply.tokens)}]
    else:
        content = []
    return _dumps(
        {
            "model": model,
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "content": content,
            "stop_reason": STOP_REASONS[reply.finish_reason],
            "stop_sequence": None,
            "usage": {
                "input_tokens": reply.prompt_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
                "output_tokens": reply.completion_tokens,
                "service_tier": "standard",
            },
        }
    )


def anthropic_error_body(type_: str, message: str, request_id: str | None) -> bytes:
    """``{"type": "error", "error": {"type", "message"}, "request_id"}``."""
    return _dumps(
        {"type": "error", "error": {"type": type_, "message": message}, "request_id": request_id}
    )


_STATUS_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request (simulated)."),
    401: ("authentication_error", "invalid x-api-key (simulated)"),
    403: ("permission_error", "Your API key does not have permission (simulated)."),
    404: ("not_found_error", "Not found (simulated)."),
    413: ("request_too_large", "Request exceeds the maximum allowed size (simulated)."),
    429: ("rate_limit_error", "This request would exceed the rate limit (simulated)."),
    500: ("api_error", "Internal server error (simulated)"),
    529: ("overloaded_error", "Overloaded"),
}


def anthropic_status_error(status: int) -> tuple[str, str]:
    """The error ``(type, message)`` a fault directive's ``status`` is answered with."""
    known = _STATUS_ERRORS.get(status)
    if known is not None:
        return known
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    type_ = "api_error" if status >= 500 else "invalid_request_error"
    return type_, f"{status} {phrase} (simulated)."
