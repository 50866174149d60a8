"""Runtime configuration: frozen, keyword-only attrs classes loaded through :mod:`sluice._serde`.

A config is a value: derive variants with ``attrs.evolve``. Unknown keys and out-of-range values
fail at load time with a :class:`~sluice._errors.ConfigError` naming the path
(``unknown key 'brust' (did you mean 'burst'?); valid keys: ... @ $.providers.openai.rate_limit``).

Files: :func:`load_config_file` reads TOML (or JSON, for a ``.json`` file);
:func:`config_from_env` finds the file (``SLUICE_CONFIG``, else ``config.toml`` in the platform
config directory, :func:`default_config_path`) and lays environment overrides over it
(:func:`env_overrides`: ``SLUICE_PROVIDERS__OPENAI__BASE_URL=...`` sets
``providers.openai.base_url``).

The classes live in modules of one concern each: :mod:`.quota` (admission limits),
:mod:`.failures` (retries and breakers), :mod:`.provider`, :mod:`.groups` (model groups),
:mod:`.ledger` (the ledger's settings), :mod:`.replies` (bounds on replies), :mod:`.services`
(cache, metrics, traces, gateway), :mod:`.runtime` (the whole) and :mod:`.load` (files and
environment). Import them from here.

What a config built in code for a plain chat never holds loads on first use: model groups
(:mod:`.groups`), prices and budgets (:mod:`.spending`), windows beyond the per-minute limits
(:mod:`.windows`), a model's settings and a provider's quirks (:mod:`.overrides`) and
embedding limits (:mod:`.embed_limits`). This package and the modules whose classes name them
serve them (PEP 562); each such module keeps them as its own names once loaded, so that its
annotations resolve; the classes whose annotations name them ask for them when those are first
read (:func:`sluice._record.late_names`), so cattrs and ``typing.get_type_hints`` resolve them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._serde import Secret
from .failures import BreakerConfig, RetryConfig
from .ledger import LedgerConfig
from .provider import AuthStyle as AuthStyle
from .provider import ProviderConfig
from .provider import masked_headers as masked_headers
from .quota import RateLimitConfig
from .replies import MAX_EVENT_BYTES as MAX_EVENT_BYTES
from .replies import MAX_LINE_BYTES as MAX_LINE_BYTES
from .replies import ReplyLimits
from .runtime import RuntimeConfig
from .services import CacheConfig, GatewayConfig, MetricsConfig, TracingConfig

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .embed_limits import EmbedLimits
    from .groups import Deployment, ModelGroup
    from .groups import RoutingStrategy as RoutingStrategy
    from .load import default_config_path, env_overrides, load_config, load_config_file
    from .overrides import ModelConfig, QuirksConfig
    from .spending import BudgetConfig, PriceConfig
    from .windows import WindowLimit

__all__ = [
    "BreakerConfig",
    "BudgetConfig",
    "CacheConfig",
    "Deployment",
    "EmbedLimits",
    "GatewayConfig",
    "LedgerConfig",
    "MetricsConfig",
    "TracingConfig",
    "ModelGroup",
    "PriceConfig",
    "ModelConfig",
    "QuirksConfig",
    "ProviderConfig",
    "RateLimitConfig",
    "ReplyLimits",
    "RetryConfig",
    "RuntimeConfig",
    "Secret",
    "WindowLimit",
    "config_from_env",
    "default_config_path",
    "env_overrides",
    "load_config",
    "load_config_file",
]


_LOADING = frozenset({"default_config_path", "env_overrides", "load_config", "load_config_file"})
_LATER = {
    "Deployment": "groups",
    "ModelGroup": "groups",
    "RoutingStrategy": "groups",
    "EmbedLimits": "embed_limits",
    "BudgetConfig": "spending",
    "PriceConfig": "spending",
    "ModelConfig": "overrides",
    "QuirksConfig": "overrides",
    "WindowLimit": "windows",
}
"""The classes a config for a plain chat never builds, by the module that defines them."""


def __getattr__(name: str) -> Any:
    # Files and the environment (:mod:`.load`) load on first use: a program that builds its
    # config in code never loads them; nor the classes such a config never holds.
    if name in _LOADING:
        from . import load

        return getattr(load, name)
    if name in _LATER:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{_LATER[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def config_from_env(environ: Mapping[str, str] | None = None) -> RuntimeConfig:
    """:func:`.load.config_from_env` (the config file and environment overrides), its module
    loaded on the first call: an ``open_runtime`` given a config never loads it."""
    from .load import config_from_env as from_env

    return from_env(environ)
