"""Decide the content of a reply: text tokens or one tool call. Pure and deterministic.

The same seed and the same request always give the same :class:`Reply`, tool-call id included.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import orjson

from .request import RequestError
from .schema import SchemaError, example_for_schema
from .text import derive_seed, estimate_tokens, generate_tokens, split_fragments, split_words

if TYPE_CHECKING:
    from .request import ChatRequest

__all__ = ["Reply", "plan_reply"]


@attrs.frozen(kw_only=True)
class Reply:
    """The whole answer to one request, before encoding."""

    tokens: tuple[str, ...]
    """Content tokens, or the tool call's argument fragments; joined they give the full text."""
    finish_reason: str
    """``"stop"``, ``"length"`` (``max_tokens`` cut the reply) or ``"tool_calls"``."""
    prompt_tokens: int
    tool_name: str | None = None
    """Set when the reply is a tool call."""
    tool_call_id: str | None = None

    @property
    def completion_tokens(self) -> int:
        return len(self.tokens)


def plan_reply(request: ChatRequest, *, seed: int, output_tokens: int) -> Reply:
    """The reply to ``request``.

    Text replies have ``output_tokens`` tokens (a model whose name ends in ``echo`` repeats the
    last user message instead), or ``max_tokens`` if that is smaller, with finish reason
    ``length``. A tool call's arguments are JSON valid against the tool's schema; a
    ``max_tokens`` smaller than the argument fragments cuts them (broken JSON, finish reason
    ``length``), as a real model does.

    Raises:
        RequestError: the tool's parameter schema cannot be satisfied.
    """
    prompt_tokens = estimate_tokens(request.prompt_chars)
    limit = request.max_tokens
    tool = request.tool
    if tool is not None:
        try:
            arguments = example_for_schema(
                tool.parameters, seed=derive_seed(seed, request.digest, tool.name)
            )
        except SchemaError as exc:
            raise RequestError(
                f"Invalid schema for function '{tool.name}': {exc}", "tools"
            ) from None
        fragments = split_fragments(orjson.dumps(arguments).decode())
        finish = "tool_calls"
        if limit is not None and len(fragments) > limit:
            fragments, finish = fragments[:limit], "length"
        call_id = f"call_{derive_seed(seed, request.digest, 'call', tool.name):016x}"
        return Reply(
            tokens=fragments,
            finish_reason=finish,
            prompt_tokens=prompt_tokens,
            tool_name=tool.name,
            tool_call_id=call_id,
        )
    if request.model.endswith("echo"):
        tokens = split_words(request.last_user_text)
        if limit is not None and len(tokens) > limit:
            return Reply(tokens=tokens[:limit], finish_reason="length", prompt_tokens=prompt_tokens)
        return Reply(tokens=tokens, finish_reason="stop", prompt_tokens=prompt_tokens)
    if limit is not None and limit < output_tokens:
        tokens = generate_tokens(seed, request.digest, limit)
        return Reply(tokens=tokens, finish_reason="length", prompt_tokens=prompt_tokens)
    tokens = generate_tokens(seed, request.digest, output_tokens)
    return Reply(tokens=tokens, finish_reason="stop", prompt_tokens=prompt_tokens)
