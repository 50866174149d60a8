"""The runtime config a load test runs with. Pure.

By default the test measures the endpoint, not sluice's own admission control: the target
provider's RateLimiter gets no limits (calls are still admitted through it, so queue wait is
measured, and is then ~0), rate-limit headers do not tighten anything, a 429 starts no
cooldown (``max_cooldown`` 0: the RateLimiter's pause after a 429 would hold the next requests
in sluice's own queue and show up as TTFT the endpoint never caused), the circuit breaker is
off, and nothing is retried, so a 429 or a 500 counts as the failure it is. With
``respect_limits`` the configured quotas, breaker and retry policy stay as they are: the test
then measures goodput under the quota.
"""

from __future__ import annotations

import attrs

from ..._config import ProviderConfig, RateLimitConfig, RuntimeConfig

__all__ = ["loadtest_config"]


def loadtest_config(config: RuntimeConfig, provider: str, *, respect_limits: bool) -> RuntimeConfig:
    """``config`` prepared for a load test of ``provider`` (see the module docstring)."""
    if respect_limits:
        return config
    entry = config.providers.get(provider, ProviderConfig())
    entry = attrs.evolve(
        entry,
        rate_limit=RateLimitConfig(
            key=entry.rate_limit.key, learn_from_headers=False, max_cooldown=0.0
        ),
        breaker=None,
    )
    return attrs.evolve(
        config,
        providers={**config.providers, provider: entry},
        retry=attrs.evolve(config.retry, max_attempts=1),
    )
