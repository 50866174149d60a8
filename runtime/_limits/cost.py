"""What one attempt may cost a quota: a request, and an estimate of its tokens.

The estimate is deliberately quick (about four characters a token, the usual rule for English
with BPE tokenizers, plus a small overhead per message): the RateLimiter reserves it at
admission and settles with the provider's real count when the attempt ends, so an estimate that
is off only delays or hastens the next admission a little.
"""

from __future__ import annotations

import attrs
import orjson

from .. import _conversation
from .._errors import ConfigError
from .._messages import ChatRequest, ReasoningPart, TextPart, Usage
from .._record import Value

__all__ = ["Cost", "estimate_cost", "estimate_prompt_tokens"]

_CHARS_PER_TOKEN = 4
_PER_MESSAGE = 4
_PER_IMAGE = 768  # a mid-size image at "auto" detail on the common vision models


@attrs.frozen(eq=False, repr=False)
class Cost(Value):
    """Units one attempt takes from each dimension of a quota."""

    requests: int = 1
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def amount(self, dimension: str) -> int:
        """The units this cost takes from a window of ``dimension`` (a
        :data:`~sluice._limits.headers.Dimension`; ``total_tokens`` for any other)."""
        if dimension == "requests":
            return self.requests
        if dimension == "input_tokens":
            return self.input_tokens
        if dimension == "output_tokens":
            return self.output_tokens
        return self.input_tokens + self.output_tokens

    @classmethod
    def from_usage(cls, usage: Usage) -> Cost:
        return cls(1, usage.input_tokens, usage.output_tokens)


def _chars(text: str) -> int:
    return -(-len(text) // _CHARS_PER_TOKEN)


def estimate_prompt_tokens(request: ChatRequest) -> int:
    """A quick upper-leaning estimate of the prompt's tokens, tools included."""
    tokens = 3
    for message in request.messages:
        tokens += _PER_MESSAGE
        for part in message.content:
            # Text first: the other parts' classes load with the first one met.
            match part:
                case TextPart(text=text) | ReasoningPart(text=text):
                    tokens += _chars(text)
                case _conversation.ToolCall(name=name, arguments=arguments):
                    tokens += _chars(name) + _chars(arguments) + 3
                case _conversation.ToolResultPart(content=content):
                    tokens += _chars(content) + 3
                case _conversation.ImagePart():
                    tokens += _PER_IMAGE
                case _conversation.FilePart(data=data):
                    tokens += _chars(data or "")
    for tool in request.tools:
        tokens += _chars(tool.name) + _chars(tool.description)
        try:
            tokens += _chars(orjson.dumps(dict(tool.parameters)).decode())
        except orjson.JSONEncodeError as exc:
            raise ConfigError(
                f"tool {tool.name!r}: its parameters cannot be written as JSON ({exc})"
            ) from None
    return tokens


def estimate_cost(request: ChatRequest, expected_output: int) -> Cost:
    """The reservation for one attempt: the prompt estimate plus ``max_tokens``, or else
    ``expected_output`` (the configured guess for calls that set no limit)."""
    output = request.max_tokens if request.max_tokens is not None else expected_output
    return Cost(1, estimate_prompt_tokens(request), output)
