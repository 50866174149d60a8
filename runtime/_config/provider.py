"""One backend's settings: :class:`ProviderConfig`, with its per-model :class:`ModelConfig` and
its :class:`QuirksConfig` (in :mod:`.overrides`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs
from attrs.validators import ge, gt

from .._checks import check_env_name, check_http_url
from .._messages import Deadlines
from .._record import Value, late_names
from .._serde import Secret
from .failures import BreakerConfig
from .quota import RateLimitConfig

if TYPE_CHECKING:  # each served below (PEP 562)
    from .._capabilities import CapabilityOverride as CapabilityOverride  # noqa: TC004
    from .embed_limits import EmbedLimits as EmbedLimits  # noqa: TC004
    from .overrides import ModelConfig, QuirksConfig  # noqa: TC004

__all__ = ["AuthStyle", "ModelConfig", "ProviderConfig", "QuirksConfig", "masked_headers"]


def __getattr__(name: str) -> Any:
    # A model's settings, quirks, tool capabilities and embedding limits load with the first
    # one asked for (a provider configured by its key and URL builds none) and stay names here,
    # so the annotations below resolve (see the package's docstring).
    if name in ("CapabilityOverride", "EmbedLimits", "ModelConfig", "QuirksConfig"):
        from .. import _capabilities
        from . import embed_limits, overrides

        globals().update(
            CapabilityOverride=_capabilities.CapabilityOverride,
            EmbedLimits=embed_limits.EmbedLimits,
            ModelConfig=overrides.ModelConfig,
            QuirksConfig=overrides.QuirksConfig,
        )
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


AuthStyle = Literal["bearer", "x-api-key", "x-goog-api-key", "api-key", "none"]
"""Where the API key goes: ``Authorization: Bearer``, one of three key headers, or nowhere."""

_SENSITIVE_HEADER_PARTS = ("auth", "key", "token", "secret", "cookie", "signature")


def masked_headers(headers: Mapping[str, str]) -> str:
    """A repr of ``headers`` with the value of any header that may hold a secret masked."""
    shown = {
        name: "********" if any(p in name.lower() for p in _SENSITIVE_HEADER_PARTS) else value
        for name, value in headers.items()
    }
    return repr(shown)


@late_names("QuirksConfig")
@attrs.frozen(eq=False, kw_only=True, repr=False)
class ProviderConfig(Value):
    """One backend. Builtin providers fill what is left unset here; any other name is a custom
    provider, which needs a ``base_url`` (and a ``protocol``, unless it is OpenAI-compatible)."""

    protocol: Literal["openai", "openai-responses", "anthropic", "gemini", "ollama"] | None = None
    base_url: str | None = attrs.field(default=None, validator=check_http_url)
    """An absolute http(s) URL, with the protocol's version prefix (``.../v1``)."""
    region: str | None = None
    """One of a builtin's regional base URLs (``sluice providers list`` shows them)."""
    display_name: str | None = None
    api_key: Secret | None = None
    api_key_env: str | None = attrs.field(default=None, validator=check_env_name)
    """Environment variable that holds the key (read when the provider starts)."""
    auth: AuthStyle | None = None
    """Where the key is sent; by default the protocol's own way (the builtin's, if any)."""
    headers: Mapping[str, str] = attrs.field(factory=dict, repr=masked_headers)
    params: Mapping[str, Any] = attrs.field(factory=dict)
    """Generation parameters for every call to this provider (``temperature``, ``max_tokens``,
    ``top_k``, or any field of the protocol's request body); a model's and a call's own win."""
    drop_params: frozenset[str] = frozenset()
    """Parameters this provider rejects: left out of every request (logged at debug level)."""
    quirks: QuirksConfig | None = None
    rate_limit: RateLimitConfig = RateLimitConfig()
    breaker: BreakerConfig | None = BreakerConfig()
    """None turns the circuit breaker off for this provider."""
    deadlines: Deadlines | None = None
    connect_timeout: float = attrs.field(default=10.0, validator=gt(0))
    max_connections: int = attrs.field(default=2048, validator=ge(1))
    """Connections to this provider at most (its keep-alive pool's size)."""
    api_version: str | None = None
    """Azure OpenAI's ``api-version`` (``"2024-10-21"``): requests go to the deployment API,
    ``{base_url}/openai/deployments/{model}/chat/completions?api-version=...``, with the key in
    an ``api-key`` header, and the model name is the deployment's name. ``base_url`` is then the
    resource's root (``https://NAME.openai.azure.com``). Leave it unset for Azure's ``/openai/v1``
    API, which takes OpenAI's paths."""
    transport: Literal["fast", "httpx"] = "fast"
    """The hot path's HTTP client: sluice's own trio HTTP/1.1 client, or httpx (HTTP/2,
    SOCKS/HTTPS proxies and anything else the fast one does not cover)."""
    tools: CapabilityOverride | None = None
    """What every model of this provider can do with tools, over the known defaults (a
    model's own ``models.MODEL.tools`` and a call's ``ToolOptions.capabilities`` go over this).
    An OpenAI-compatible server is assumed to honour every ``tool_choice`` mode; for one that
    rejects ``required``::

        {"providers": {"local": {"tools": {"tool_choice": ["auto", "none", "specific"]}}}}
    """
    models: Mapping[str, ModelConfig] = attrs.field(factory=dict)
    """Per-model settings, by model name without the provider prefix."""
    embed_limits: EmbedLimits | None = None
    """How many inputs and tokens one embedding request may hold, when they differ from what
    sluice knows of this provider (see :class:`EmbedLimits`)."""
