"""OpenAI chat-completions wire format: SSE chunks, JSON bodies, error bodies. Pure.

A stream is: one opening chunk (``delta.role = "assistant"``, plus the tool call's id and name
when it is a tool call), one chunk per group of tokens, a finish chunk (``delta: {}`` and the
finish reason), a usage chunk (``choices: []``) when ``stream_options.include_usage`` asked for
it, then ``data: [DONE]``. Field names and order follow OpenAI's own streams.

Encoding cost matters (the simulator is a benchmark target): each response builds its shared
chunk prefix once, and a content chunk is then one ``orjson.dumps`` of the token and a join.
"""

from __future__ import annotations

import http
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ._reply import Reply

__all__ = [
    "DONE",
    "MALFORMED",
    "ChunkEncoder",
    "completion_body",
    "error_body",
    "group_tokens",
    "model_body",
    "models_body",
    "sse_events",
    "sse_slots",
    "status_error_body",
]

DONE = b"data: [DONE]\n\n"
"""The last event of every complete stream."""
MALFORMED = b'data: {"object":"chat.completion.chunk","choices":<simulated malformed event>\n\n'
"""The event the ``malformed`` fault inserts: its data is not JSON."""

_dumps = orjson.dumps


class ChunkEncoder:
    """Encodes the ``chat.completion.chunk`` SSE events of one response."""

    __slots__ = (
        "_content_head",
        "_content_tail",
        "_head",
        "_tail",
        "_usage_head",
        "_usage_null",
        "include_usage",
    )

    def __init__(self, *, completion_id: str, created: int, model: str, include_usage: bool):
        common = b"".join(
            (
                b'data: {"id":',
                _dumps(completion_id),
                b',"object":"chat.completion.chunk","created":',
                str(int(created)).encode(),
                b',"model":',
                _dumps(model),
                b',"choices":',
            )
        )
        self.include_usage = include_usage
        self._usage_null = b',"usage":null' if include_usage else b""
        self._head = common + b'[{"index":0,"delta":'
        self._tail = b',"logprobs":null,"finish_reason":null}]' + self._usage_null + b"}\n\n"
        self._content_head = self._head + b'{"content":'
        self._content_tail = b"}" + self._tail
        self._usage_head = common + b'[],"usage":'

    def opening(self, *, tool_call_id: str | None = None, tool_name: str | None = None) -> bytes:
        """The first chunk: the assistant role, and for a tool call its id and name."""
        if tool_name is None:
            delta = b'{"role":"assistant","content":"","refusal":null}'
        else:
            delta = b"".join(
                (
                    b'{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":',
                    _dumps(tool_call_id),
                    b',"type":"function","function":{"name":',
                    _dumps(tool_name),
                    b',"arguments":""}}],"refusal":null}',
                )
            )
        return self._head + delta + self._tail

    def content(self, text: str) -> bytes:
        """A chunk carrying ``text`` in ``delta.content``."""
        return b"".join((self._content_head, _dumps(text), self._content_tail))

    def arguments(self, fragment: str) -> bytes:
        """A chunk carrying a fragment of tool call 0's arguments (only index and arguments)."""
        return b"".join(
            (
                self._head,
                b'{"tool_calls":[{"index":0,"function":{"arguments":',
                _dumps(fragment),
                b"}}]}",
                self._tail,
            )
        )

    def finish(self, reason: str) -> bytes:
        """The chunk with an empty delta and the finish reason."""
        return b"".join(
            (
                self._head,
                b'{},"logprobs":null,"finish_reason":',
                _dumps(reason),
                b"}]",
                self._usage_null,
                b"}\n\n",
            )
        )

    def usage(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        """The usage chunk (``choices: []``)."""
        total = prompt_tokens + completion_tokens
        return self._usage_head + (
            b'{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}\n\n'
            % (prompt_tokens, completion_tokens, total)
        )


def sse_events(
    encoder: ChunkEncoder, reply: Reply, *, tokens_per_chunk: int, paced: bool
) -> list[list[bytes]]:
    """The stream's events, grouped into the slots that are sent at the same moment.

    Unpaced, everything is one slot. Paced, slot 0 holds the opening chunk and the first token
    chunk, each later slot one token chunk, and the last slot also the finish chunk, the usage
    chunk and ``[DONE]``. A reply without tokens is one slot however it is paced.
    """
    encode: Callable[[str], bytes]
    if reply.tool_name is None:
        first = encoder.opening()
        encode = encoder.content
    else:
        first = encoder.opening(tool_call_id=reply.tool_call_id, tool_name=reply.tool_name)
        encode = encoder.arguments
    chunks = [encode(text) for text in group_tokens(reply.tokens, tokens_per_chunk)]
    tail = [encoder.finish(reply.finish_reason)]
    if encoder.include_usage:
        tail.append(encoder.usage(reply.prompt_tokens, reply.completion_tokens))
    tail.append(DONE)
    if paced and chunks:
        slots = [[first, chunks[0]], *([c] for c in chunks[1:])]
        slots[-1].extend(tail)
        return slots
    return [[first, *chunks, *tail]]


def group_tokens(tokens: Sequence[str], size: int) -> Sequence[str]:
    """The text of each chunk of ``size`` tokens (the tokens themselves when ``size`` is 1)."""
    if size == 1:
        return tokens
    return ["".join(tokens[i : i + size]) for i in range(0, len(tokens), size)]


def sse_slots(
    encoder: ChunkEncoder, reply: Reply, *, tokens_per_chunk: int, paced: bool
) -> list[bytes]:
    """:func:`sse_events` with each slot's events joined into the bytes sent at once."""
    slots = sse_events(encoder, reply, tokens_per_chunk=tokens_per_chunk, paced=paced)
    return [b"".join(slot) for slot in slots]


def completion_body(*, completion_id: str, created: int, model: str, reply: Reply) -> bytes:
    """A non-streaming ``chat.completion`` object."""
    text = "".join(reply.tokens)
    message: dict[str, Any]
    if reply.tool_name is None:
        message = {"role": "assistant", "content": text, "refusal": None}
    else:
        call = {
            "id": reply.tool_call_id,
            "type": "function",
            "function": {"name": reply.tool_name, "arguments": text},
        }
        message = {"role": "assistant", "content": None, "tool_calls": [call], "refusal": None}
    return _dumps(
        {
            "id": completion_id,
            "object": "chat.completion",
            "created": int(created),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": reply.finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens,
                "total_tokens": reply.prompt_tokens + reply.completion_tokens,
            },
        }
    )


def error_body(
    message: str, type_: str, param: str | None = None, code: str | None = None
) -> bytes:
    """An OpenAI-style error: ``{"error": {"message", "type", "param", "code"}}``."""
    return _dumps({"error": {"message": message, "type": type_, "param": param, "code": code}})


_STATUS_ERRORS: dict[int, tuple[str, str, str | None]] = {
    429: (
        "Rate limit reached for requests (simulated). Please try again later.",
        "requests",
        "rate_limit_exceeded",
    ),
    500: (
        "The server had an error while processing your request (simulated).",
        "server_error",
        None,
    ),
    503: ("The server is overloaded or not ready yet (simulated).", "server_error", None),
    529: ("The server is overloaded (simulated).", "overloaded_error", None),
    401: ("Incorrect API key provided (simulated).", "authentication_error", "invalid_api_key"),
    403: ("You are not allowed to make this request (simulated).", "permission_error", None),
}


def status_error_body(status: int) -> bytes:
    """The error body a fault directive's ``status`` is answered with."""
    known = _STATUS_ERRORS.get(status)
    if known is not None:
        return error_body(known[0], known[1], None, known[2])
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    type_ = "server_error" if status >= 500 else "invalid_request_error"
    return error_body(f"{status} {phrase} (simulated).", type_)


def models_body(models: Sequence[str]) -> bytes:
    """The ``GET /v1/models`` list."""
    return _dumps({"object": "list", "data": [_model(m) for m in models]})


def model_body(model: str) -> bytes:
    """The ``GET /v1/models/{model}`` object."""
    return _dumps(_model(model))


def _model(model: str) -> dict[str, Any]:
    return {"id": model, "object": "model", "created": 0, "owned_by": "sluice-simulator"}
