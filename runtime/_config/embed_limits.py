"""How much one embedding request may carry: :class:`EmbedLimits`."""

from __future__ import annotations

import attrs
from attrs.validators import ge, optional

from .._record import Value

__all__ = ["EmbedLimits"]


@attrs.frozen(eq=False, kw_only=True, repr=False)
class EmbedLimits(Value):
    """The most one embedding request to a provider (or one of its models) may hold.
    ``Runtime.embed_many`` packs inputs into requests up to both; None leaves that bound to
    the next level (model, then provider, then what sluice knows of the provider, then its
    protocol: OpenAI's 2048 inputs and 300,000 tokens, Gemini's 100 inputs)."""

    max_inputs: int | None = attrs.field(default=None, validator=optional(ge(1)))
    """Inputs per request."""
    max_tokens: int | None = attrs.field(default=None, validator=optional(ge(1)))
    """Input tokens per request, as sluice estimates them (about four characters a token)."""
