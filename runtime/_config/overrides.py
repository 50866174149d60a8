"""What a provider's config may override: a model's own settings (:class:`ModelConfig`) and the
provider's known quirks (:class:`QuirksConfig`).

Loaded with the first model entry or quirks a config sets (or the first time these names are
asked for): a provider configured by its key and URL builds neither, so :mod:`.provider` and
the package serve them (PEP 562) instead of importing them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from .._capabilities import CapabilityOverride
from .._record import Value
from .embed_limits import EmbedLimits

__all__ = ["ModelConfig", "QuirksConfig"]


@attrs.frozen(eq=False, kw_only=True, repr=False)
class ModelConfig(Value):
    """Settings for one model of a provider: ``providers.NAME.models.MODEL`` (the model name
    without the provider prefix)."""

    tools: CapabilityOverride | None = None
    """What this model can do with tools, over the provider's known defaults; a call's own
    ``ToolOptions.capabilities`` goes over this. For a model that ignores ``tool_choice``::

        {"providers": {"ollama": {"models": {"llama3.1": {"tools": {"tool_choice": []}}}}}}
    """
    params: Mapping[str, Any] = attrs.field(factory=dict)
    """Generation parameters for this model, over the provider's ``params`` and under the
    call's own (see :func:`sluice.providers._params.merge_params`)."""
    embed_limits: EmbedLimits | None = None
    """How many inputs and tokens one embedding request to this model may hold (over the
    provider's ``embed_limits``)."""
    protocol: Literal["openai", "openai-responses"] | None = None
    """Which of OpenAI's two APIs this model's calls go to, on a provider that speaks one of
    them: ``openai-responses`` for a model served only by the Responses API (``o3-pro``,
    ``gpt-5-codex``) or whose reasoning summaries a caller wants; None: the provider's
    ``protocol``. A call chooses by its model, so one provider serves both::

        {"providers": {"openai": {"models": {"o3-pro": {"protocol": "openai-responses"}}}}}
    """


@attrs.frozen(eq=False, kw_only=True, repr=False)
class QuirksConfig(Value):
    """Overrides of a provider's known quirks (see :class:`sluice._protocols.RequestQuirks`);
    every field left None keeps the provider's value."""

    omit_tool_choice: frozenset[str] | None = None
    """``tool_choice`` values the server rejects, e.g. ``["auto"]`` for vLLM."""
    echo_reasoning_content: bool | None = None
    max_tokens_field: str | None = None
