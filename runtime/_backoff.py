"""Retry delays: pure arithmetic, the rng injected so tests are exact."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import random

    from ._config import RetryConfig

__all__ = ["retry_delay"]


def retry_delay(
    attempt: int, policy: RetryConfig, rng: random.Random, retry_after: float | None = None
) -> float:
    """Seconds to wait before attempt ``attempt + 1``, after attempt ``attempt`` failed.

    Exponential (``base_delay * 2**(attempt-1)``, capped at ``max_delay``), shortened by a random
    fraction up to ``jitter`` so that calls failing together do not retry together. A wait the
    provider asked for (``retry_after``) is a floor: we never come back earlier than asked.
    """
    delay = min(policy.max_delay, policy.base_delay * 2.0 ** (attempt - 1))
    delay *= 1.0 - policy.jitter * rng.random()
    if retry_after is not None:
        delay = max(delay, retry_after)
    return delay
