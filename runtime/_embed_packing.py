"""How ``Runtime.embed_many`` packs many inputs into requests. Pure.

Inputs are packed in order, each request as full as the provider takes: at most
``max_inputs`` inputs and ``max_tokens`` estimated tokens
(:func:`sluice._embed_calls.estimate_input_tokens`). An input too large for ``max_tokens`` on
its own goes alone (the provider is the judge of it, and only its own outcome can fail).

The token bound is also kept within the provider's token quotas (:func:`request_limits`): a
request larger than a tokens-per-minute window could never be admitted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._embed_calls import estimate_input_tokens

if TYPE_CHECKING:
    from ._config import EmbedLimits, RateLimitConfig

__all__ = ["Packer", "request_limits"]

_TOKEN_DIMENSIONS = ("total_tokens", "input_tokens")


def request_limits(
    limits: EmbedLimits, rate: RateLimitConfig, batch_size: int | None, fallback: int
) -> tuple[int, int | None]:
    """``(max_inputs, max_tokens)`` for each request: ``batch_size`` (the caller's) or the
    provider's inputs per request (``fallback`` when nothing is known), and the least of the
    provider's tokens per request and every token window of its quota (None: no bound)."""
    inputs = batch_size if batch_size is not None else limits.max_inputs or fallback
    if limits.max_inputs is not None:
        inputs = min(inputs, limits.max_inputs)
    bounds = [w.limit for w in rate.window_limits() if w.dimension in _TOKEN_DIMENSIONS]
    if limits.max_tokens is not None:
        bounds.append(limits.max_tokens)
    return inputs, min(bounds) if bounds else None


class Packer:
    """Collects inputs into requests: :meth:`add` each one, in order; it hands back the
    request it closed (the one the new input did not fit in), and :meth:`flush` the last."""

    __slots__ = ("_texts", "_tokens", "max_inputs", "max_tokens")

    def __init__(self, max_inputs: int, max_tokens: int | None) -> None:
        if max_inputs < 1:
            raise ValueError("a request holds at least one input")
        self.max_inputs = max_inputs
        self.max_tokens = max_tokens
        self._texts: list[str] = []
        self._tokens = 0

    def add(self, text: str) -> list[str] | None:
        """Add ``text``; the full request it did not fit in, if it closed one."""
        tokens = estimate_input_tokens(text)
        texts = self._texts
        closed = None
        if texts and (
            len(texts) >= self.max_inputs
            or (self.max_tokens is not None and self._tokens + tokens > self.max_tokens)
        ):
            closed = texts
            texts = self._texts = []
            self._tokens = 0
        texts.append(text)
        self._tokens += tokens
        return closed

    def flush(self) -> list[str] | None:
        """The request being filled, if it holds anything (the inputs have ended)."""
        texts, self._texts, self._tokens = self._texts, [], 0
        return texts or None
