"""Opening the quota store a :class:`~sluice._config.RuntimeConfig` names, for ``open_runtime``.

``config.store`` (else ``$SLUICE_STORE``) names a Redis URL; without either, the RateLimiter
keeps its quotas in memory as always. The Redis modules (and coredis) load only when one is
named, so ``import sluice`` stays as light as before.
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from .._errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from .._config import RuntimeConfig
    from .store import QuotaStore

__all__ = ["STORE_ENV", "open_quota_store", "store_url"]

STORE_ENV = "SLUICE_STORE"


def store_url(config: RuntimeConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """The store URL the config (else the environment) names; None for memory."""
    env = os.environ if environ is None else environ
    url = config.store or env.get(STORE_ENV) or None
    if url is None or url.strip().lower() in ("memory", "off", "none"):
        return None
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(
            f"store {url!r}: give a redis://host:port/db URL (or leave it unset for memory)"
        )
    return url


@asynccontextmanager
async def open_quota_store(
    config: RuntimeConfig, environ: Mapping[str, str] | None = None
) -> AsyncIterator[QuotaStore | None]:
    """Yield the shared store the config names (None: the RateLimiter's memory store).

    Raises:
        ConfigError: the URL is malformed, coredis is missing, or Redis does not answer.
    """
    url = store_url(config, environ)
    if url is None:
        yield None
        return
    from .fallback import FallbackQuotaStore
    from .redis_store import open_redis_store

    async with open_redis_store(url, prefix=config.store_prefix) as redis:
        yield FallbackQuotaStore(redis, config.on_store_error, config.store_local_share)
