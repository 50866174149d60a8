"""The OpenAI chat-completions wire format, as the gateway serves it. Pure: no I/O, no clock.

Requests are read by the batch job's parser (:func:`sluice._openai_format.parse_chat_body`),
so a body means the same in a batch file and at the gateway. Replies: a ``chat.completion``
object (:func:`~sluice._openai_format.render_chat_completion`), or a stream of
``chat.completion.chunk`` events in OpenAI's order -- a role chunk, the content, reasoning and
tool-call deltas, a finish chunk, then (with ``stream_options.include_usage``) a usage chunk
with empty ``choices``, and ``data: [DONE]``. With ``include_usage`` every chunk carries
``"usage": null`` before the last, as OpenAI's do. Chunks are built from byte templates made
once per call: a text delta costs one ``orjson.dumps`` of its text. A text delta that came with
``logprobs`` carries them in its chunk; the upstream's ``system_fingerprint`` and
``service_tier``, known once the reply is complete, go on the finish and usage chunks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from .._openai_format import render_chat_completion

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._events import ReasoningSignature, ToolCallDelta
    from .._messages import ChatResult, Usage

__all__ = [
    "OpenAIChunks",
    "error_body",
    "render_completion",
    "stream_options",
    "usage_object",
]

_OPENAI_FINISH = frozenset({"stop", "length", "tool_calls", "content_filter"})


def error_body(
    message: str, type_: str, code: str | None = None, param: str | None = None
) -> bytes:
    """OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}``."""
    return orjson.dumps(
        {"error": {"message": message, "type": type_, "param": param, "code": code}}
    )


def stream_options(body: Any) -> bool:
    """Whether the body asks for a usage chunk (``stream_options.include_usage``)."""
    options = body.get("stream_options") if isinstance(body, dict) else None
    return isinstance(options, dict) and options.get("include_usage") is True


def usage_object(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def render_completion(result: ChatResult, *, completion_id: str, model: str, created: int) -> bytes:
    """The ``chat.completion`` body for ``result``, naming the model as the client did."""
    body = render_chat_completion(result, created=created)
    body["id"] = completion_id
    body["model"] = model
    return orjson.dumps(body)


def _finish_reason(result: ChatResult) -> str:
    if result.finish_reason in _OPENAI_FINISH:
        return result.finish_reason
    return result.raw_finish_reason or "stop"


class OpenAIChunks:
    """Encodes one call's events as ``chat.completion.chunk`` SSE events."""

    __slots__ = ("_include_usage", "_prefix", "_started_calls", "_suffix", "_tail")

    def __init__(self, chunk_id: str, model: str, created: int, *, include_usage: bool) -> None:
        self._prefix = (
            b'data: {"id":%s,"object":"chat.completion.chunk","created":%d,"model":%s'
            % (
                orjson.dumps(chunk_id),
                created,
                orjson.dumps(model),
            )
        )
        self._include_usage = include_usage
        self._tail = b',"usage":null}\n\n' if include_usage else b"}\n\n"
        self._suffix = b',"logprobs":null,"finish_reason":null}]' + self._tail
        self._started_calls: set[int] = set()

    def _delta(self, delta: bytes) -> bytes:
        return b'%s,"choices":[{"index":0,"delta":%s%s' % (self._prefix, delta, self._suffix)

    def role(self) -> bytes:
        """The first chunk: the assistant role with empty content."""
        return self._delta(b'{"role":"assistant","content":"","refusal":null}')

    def start(self, usage: Usage | None = None) -> bytes:
        """The opening chunk (:meth:`role`); OpenAI's stream tells no usage before the end."""
        return self.role()

    @staticmethod
    def signature(event: ReasoningSignature) -> bytes:
        """Nothing: this format has no place for a reasoning signature."""
        return b""

    def text(self, text: str, logprobs: Mapping[str, Any] | None = None) -> bytes:
        if logprobs is None:
            return self._delta(b'{"content":%s}' % orjson.dumps(text))
        return (
            b'%s,"choices":[{"index":0,"delta":{"content":%s},"logprobs":%s,'
            % (
                self._prefix,
                orjson.dumps(text),
                orjson.dumps(logprobs),
            )
            + b'"finish_reason":null}]'
            + self._tail
        )

    def reasoning(self, text: str) -> bytes:
        return self._delta(b'{"reasoning_content":%s}' % orjson.dumps(text))

    def tool_call(self, delta: ToolCallDelta) -> bytes:
        """A tool-call fragment: the first for its index names the id and function."""
        call: dict[str, Any] = {"index": delta.index}
        function: dict[str, Any] = {}
        if delta.index not in self._started_calls:
            self._started_calls.add(delta.index)
            call["id"] = delta.id or f"call_{delta.index}"
            call["type"] = "function"
            function["name"] = delta.name or ""
        function["arguments"] = delta.arguments
        call["function"] = function
        return self._delta(orjson.dumps({"tool_calls": [call]}))

    def finish(self, result: ChatResult) -> bytes:
        """The finish chunk, the usage chunk when asked for, and ``[DONE]``."""
        prefix = self._prefix
        if result.service_tier is not None:
            prefix += b',"service_tier":%s' % orjson.dumps(result.service_tier)
        if result.system_fingerprint is not None:
            prefix += b',"system_fingerprint":%s' % orjson.dumps(result.system_fingerprint)
        out = b'%s,"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":%s}]%s' % (
            prefix,
            orjson.dumps(_finish_reason(result)),
            self._tail,
        )
        if self._include_usage:
            out += b'%s,"choices":[],"usage":%s}\n\n' % (
                prefix,
                orjson.dumps(usage_object(result.usage)),
            )
        return out + b"data: [DONE]\n\n"

    @staticmethod
    def error(body: bytes) -> bytes:
        """An error after the stream began: the error object as the last event."""
        return b"data: %s\n\n" % body
