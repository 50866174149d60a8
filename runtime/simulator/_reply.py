"""Decide the content of a reply: text tokens, JSON text or one tool call. Pure.

The same seed and the same request always give the same :class:`Reply`, tool-call id included.
How JSON text is broken (the ``broken_json`` fault) is the caller's choice, passed in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import orjson

from ._broken import FALLBACK, applicable_kinds, break_json
from ._request import RequestError
from ._schema import SchemaError, example_for_schema
from ._text import derive_seed, generate_tokens, split_fragments, split_words

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ._request import ChatRequest, ToolTarget

    ChooseKind = Callable[[Sequence[str]], str]
    """Picks a broken-JSON kind from the kinds that apply to a value."""

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
    broken: str | None = None
    """The broken-JSON kind applied to the reply's JSON text, if any."""

    @property
    def completion_tokens(self) -> int:
        return len(self.tokens)


def plan_reply(
    request: ChatRequest,
    *,
    seed: int,
    output_tokens: int,
    broken: ChooseKind | None = None,
) -> Reply:
    """The reply to ``request``.

    Text replies have ``output_tokens`` tokens, or the request's ``min_tokens`` if that is
    more (a model whose name ends in ``echo`` repeats the last user message instead), or
    ``max_tokens`` if that is smaller, with finish reason ``length``; with ``ignore_eos`` they
    run to ``max_tokens`` (finish ``length``). The prompt's tokens are counted by the
    simulator's token rule (:mod:`.text`), at least 1.

    A tool call's arguments, and the JSON text asked for by ``request.json_schema``,
    are JSON valid against the schema, split into fragments as a model streams them; a
    ``max_tokens`` smaller than the fragments cuts them (broken JSON, finish reason
    ``length``), as a real model does.

    Args:
        broken: when given, the JSON text (tool arguments or structured output) is broken the
            way it picks from the kinds that apply (see :func:`~.broken.applicable_kinds`).

    Raises:
        RequestError: the tool's or the response format's schema cannot be satisfied.
    """
    prompt_tokens = max(1, request.prompt_tokens)
    limit = request.max_tokens
    if request.tool is not None:
        return _tool_reply(request, request.tool, seed, broken, prompt_tokens)
    if request.json_schema is not None:
        return _json_reply(request, request.json_schema, seed, broken, prompt_tokens)
    if request.model.endswith("echo"):
        tokens = split_words(request.last_user_text)
        if limit is not None and len(tokens) > limit:
            return Reply(tokens=tokens[:limit], finish_reason="length", prompt_tokens=prompt_tokens)
        return Reply(tokens=tokens, finish_reason="stop", prompt_tokens=prompt_tokens)
    natural = max(output_tokens, request.min_tokens)
    if limit is not None and (limit < natural or request.ignore_eos):
        tokens = generate_tokens(seed, request.digest, limit)
        return Reply(tokens=tokens, finish_reason="length", prompt_tokens=prompt_tokens)
    tokens = generate_tokens(seed, request.digest, natural)
    return Reply(tokens=tokens, finish_reason="stop", prompt_tokens=prompt_tokens)


def _tool_reply(
    request: ChatRequest,
    tool: ToolTarget,
    seed: int,
    broken: ChooseKind | None,
    prompt_tokens: int,
) -> Reply:
    """A call of the one tool the request forces, with arguments valid against its schema."""
    limit = request.max_tokens
    arguments = _example(
        tool.parameters,
        derive_seed(seed, request.digest, tool.name),
        f"Invalid schema for function '{tool.name}'",
        "tools",
    )
    text, kind = _render(arguments, broken)
    fragments = split_fragments(text)
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
        broken=kind,
    )


def _json_reply(
    request: ChatRequest,
    schema: Any,
    seed: int,
    broken: ChooseKind | None,
    prompt_tokens: int,
) -> Reply:
    """JSON text valid against the response format's schema."""
    limit = request.max_tokens
    value = _example(
        schema,
        derive_seed(seed, request.digest, "response_format"),
        "Invalid schema for 'response_format'",
        "response_format",
    )
    text, kind = _render(value, broken)
    fragments = split_fragments(text)
    if limit is not None and len(fragments) > limit:
        return Reply(
            tokens=fragments[:limit],
            finish_reason="length",
            prompt_tokens=prompt_tokens,
            broken=kind,
        )
    return Reply(tokens=fragments, finish_reason="stop", prompt_tokens=prompt_tokens, broken=kind)


def _example(schema: Any, seed: int, what: str, param: str) -> Any:
    try:
        value = example_for_schema(schema, seed=seed)
        orjson.dumps(value)  # an integer too large for JSON, say
    except (SchemaError, orjson.JSONEncodeError) as exc:
        raise RequestError(f"{what}: {exc}", param) from None
    return value


def _render(value: Any, broken: ChooseKind | None) -> tuple[str, str | None]:
    """``value`` as JSON text, broken when ``broken`` is given; and the kind applied."""
    if broken is None:
        return orjson.dumps(value).decode(), None
    kinds = applicable_kinds(value)
    kind = broken(kinds)
    if kind not in kinds:
        kind = FALLBACK
    return break_json(value, kind), kind
