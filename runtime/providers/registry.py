"""Which providers exist, and how a ``provider:model`` string becomes a backend to call.

The builtin table is small for now (``sim`` and ``openai``); any other name works when the
config gives it a ``base_url``, and is then spoken to as an OpenAI-compatible server.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import attrs

from ..config import BreakerConfig, ProviderConfig, RateLimitConfig, RuntimeConfig, Secret
from ..errors import ConfigError
from ..messages import Deadlines

__all__ = ["BUILTIN_PROVIDERS", "BuiltinProvider", "ResolvedProvider", "resolve_provider"]


@attrs.frozen(kw_only=True)
class BuiltinProvider:
    name: str
    protocol: str
    base_url: str | None
    """None for ``sim``: the runtime starts the simulator and fills in its address."""
    key_env: tuple[str, ...] = ()
    needs_key: bool = True


BUILTIN_PROVIDERS: Mapping[str, BuiltinProvider] = {
    "sim": BuiltinProvider(name="sim", protocol="openai", base_url=None, needs_key=False),
    "openai": BuiltinProvider(
        name="openai",
        protocol="openai",
        base_url="https://api.openai.com/v1",
        key_env=("OPENAI_API_KEY",),
    ),
}


@attrs.frozen(kw_only=True)
class ResolvedProvider:
    """Everything a ProviderActor needs to reach one backend. The key never shows in its repr."""

    name: str
    protocol: str
    base_url: str | None
    api_key: Secret | None
    headers: Mapping[str, str]
    rate_limit: RateLimitConfig
    breaker: BreakerConfig | None
    deadlines: Deadlines
    connect_timeout: float
    max_connections: int
    transport: str = "fast"

    def quota_key(self, model: str) -> str:
        """The RateLimiter key: the provider account, or account and model (``rate_limit.key``)."""
        return f"{self.name}:{model}" if self.rate_limit.key == "model" else self.name


def _merge_deadlines(base: Deadlines, override: Deadlines | None) -> Deadlines:
    if override is None:
        return base
    return Deadlines(
        total=override.total if override.total is not None else base.total,
        first_token=override.first_token if override.first_token is not None else base.first_token,
        idle=override.idle if override.idle is not None else base.idle,
    )


def resolve_provider(
    name: str, config: RuntimeConfig, environ: Mapping[str, str] | None = None
) -> ResolvedProvider:
    """Combine the builtin entry (if any) with the config's entry for ``name``.

    Raises:
        ConfigError: the provider is unknown and has no ``base_url`` in the config, or it needs a
            key and none is configured or set in its environment variable.
    """
    env = os.environ if environ is None else environ
    builtin = BUILTIN_PROVIDERS.get(name)
    user = config.providers.get(name, ProviderConfig())
    if builtin is None and user.base_url is None:
        known = ", ".join(sorted(BUILTIN_PROVIDERS))
        raise ConfigError(
            f"unknown provider {name!r}: builtin providers are {known}; for any other "
            f"OpenAI-compatible server give providers.{name}.base_url in the config "
            "(or --base-url on the command line)"
        )
    protocol = user.protocol or (builtin.protocol if builtin else "openai")
    base_url = user.base_url or (builtin.base_url if builtin else None)
    key = user.api_key
    key_vars = ((user.api_key_env,) if user.api_key_env else ()) + (
        builtin.key_env if builtin else ()
    )
    if key is None:
        for var in key_vars:
            if env.get(var):
                key = Secret(env[var])
                break
    custom_url = user.base_url is not None and builtin is not None
    if key is None and builtin is not None and builtin.needs_key and not custom_url:
        where = " or ".join(key_vars)
        raise ConfigError(
            f"provider {name!r} needs an API key: set {where}, or give "
            f"providers.{name}.api_key in the config (or --api-key on the command line)"
        )
    return ResolvedProvider(
        name=name,
        protocol=protocol,
        base_url=base_url.rstrip("/") if base_url else None,
        api_key=key,
        headers=dict(user.headers),
        rate_limit=user.rate_limit,
        breaker=user.breaker,
        deadlines=_merge_deadlines(config.deadlines, user.deadlines),
        connect_timeout=user.connect_timeout,
        max_connections=user.max_connections,
        transport=user.transport,
    )
