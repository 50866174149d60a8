"""OpenAI's legacy text completions (``POST /v1/completions``): request parsing and the wire
format. Pure.

The request becomes the same :class:`~.request.ChatRequest` the chat routes use (the prompt
is the one "user" text), so completions share the latency model, the faults and the quotas.
A prompt is a string, a list of one string, or a list of token ids (each id one token); the
simulator answers one prompt per request. vLLM's ``min_tokens`` and ``ignore_eos`` apply.

A stream is one ``text_completion`` chunk per group of tokens (``choices[0].text``), a finish
chunk (empty text and the finish reason), a usage chunk (``choices: []``) when
``stream_options.include_usage`` asks for it, then ``data: [DONE]``, as vLLM sends them.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import orjson

from ._request import ChatRequest, RequestError, generation_options
from ._text import count_tokens
from ._wire import DONE, group_tokens

if TYPE_CHECKING:
    from ._reply import Reply

__all__ = ["CompletionEncoder", "completion_events", "parse_completion_request", "text_body"]

_dumps = orjson.dumps


def parse_completion_request(body: bytes) -> ChatRequest:
    """Validate a completions request body.

    Raises:
        RequestError: bad JSON, no model, or a prompt that is not one string or token list.
    """
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise RequestError(
            "We could not parse the JSON body of your request. The body must be a JSON object."
        ) from None
    if not isinstance(data, dict):
        raise RequestError("The request body must be a JSON object.")
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("You must provide a model parameter.", "model")
    prompt = data.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        text, tokens = prompt, count_tokens(prompt)
    elif (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        text, tokens = " ".join(str(t) for t in prompt), len(prompt)
    else:
        raise RequestError(
            "'prompt' must be a string, a list of one string, or a list of token ids (the "
            "simulator answers one prompt per request).",
            "prompt",
        )
    stream = data.get("stream") or False
    if not isinstance(stream, bool):
        raise RequestError("Invalid type for 'stream': expected a boolean.", "stream")
    options = data.get("stream_options") or {}
    if not isinstance(options, dict):
        raise RequestError(
            "Invalid type for 'stream_options': expected an object.", "stream_options"
        )
    maximum = data.get("max_tokens", 16)  # OpenAI's default for completions
    if maximum is not None and (
        not isinstance(maximum, int) or isinstance(maximum, bool) or maximum < 1
    ):
        raise RequestError(
            f"Invalid 'max_tokens': expected an integer >= 1, got {maximum!r}.", "max_tokens"
        )
    return ChatRequest(
        model=model,
        stream=stream,
        include_usage=stream and bool(options.get("include_usage")),
        max_tokens=maximum,
        digest=hashlib.blake2b(_dumps(["completion", text]), digest_size=16).digest(),
        prompt_chars=len(text),
        prompt_tokens=tokens,
        last_user_text=text,
        tool=None,
        **generation_options(data),
    )


class CompletionEncoder:
    """Encodes the ``text_completion`` SSE events of one response."""

    __slots__ = ("_common", "_head", "_tail", "include_usage")

    def __init__(self, *, completion_id: str, created: int, model: str, include_usage: bool):
        self._common = b"".join(
            (
                b'data: {"id":',
                _dumps(completion_id),
                b',"object":"text_completion","created":',
                str(int(created)).encode(),
                b',"model":',
                _dumps(model),
                b',"choices":',
            )
        )
        self.include_usage = include_usage
        self._head = self._common + b'[{"index":0,"text":'
        self._tail = b',"logprobs":null,"finish_reason":null}]}\n\n'

    def text(self, text: str) -> bytes:
        return b"".join((self._head, _dumps(text), self._tail))

    def finish(self, reason: str) -> bytes:
        return b"".join(
            (self._head, b'"","logprobs":null,"finish_reason":', _dumps(reason), b"}]}\n\n")
        )

    def usage(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        total = prompt_tokens + completion_tokens
        return self._common + (
            b'[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}\n\n'
            % (prompt_tokens, completion_tokens, total)
        )


def completion_events(
    encoder: CompletionEncoder, reply: Reply, *, tokens_per_chunk: int, paced: bool
) -> list[list[bytes]]:
    """The stream's events grouped by when they go out: unpaced one slot; paced one slot per
    token chunk, the last one also carrying the finish chunk, the usage and ``[DONE]``."""
    chunks = [encoder.text(text) for text in group_tokens(reply.tokens, tokens_per_chunk)]
    tail = [encoder.finish(reply.finish_reason)]
    if encoder.include_usage:
        tail.append(encoder.usage(reply.prompt_tokens, reply.completion_tokens))
    tail.append(DONE)
    if paced and chunks:
        slots = [[chunk] for chunk in chunks]
        slots[-1].extend(tail)
        return slots
    return [[*chunks, *tail]]


def text_body(*, completion_id: str, created: int, model: str, reply: Reply) -> bytes:
    """A non-streaming ``text_completion`` object."""
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "text_completion",
        "created": int(created),
        "model": model,
        "choices": [
            {
                "index": 0,
                "text": "".join(reply.tokens),
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
    return _dumps(body)
