"""Retry delays: pure arithmetic, the rng injected so tests are exact."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import random

    from ._config import RetryConfig

__all__ = ["retry_delay"]

_MAX_DOUBLINGS = 64
"""2**64 times any base delay is past every sensible cap; 2.0**1024 would overflow."""


def retry_delay(
    attempt: int, policy: RetryConfig, rng: random.Random, retry_after: float | None = None
) -> float:
    """Seconds to wait before attempt ``attempt + 1``, after attempt ``attempt`` failed.

    Exponential (``base_delay * 2**(attempt-1)``, capped at ``max_delay``), shortened by a random
    fraction up to ``jitter`` so that calls failing together do not retry together. A wait the
    provider asked for (``retry_after``) is a floor: we never come back earlier than asked.
    Any ``attempt`` is valid: a waiting call has no attempt limit, so the doubling stops at an
    exponent whose delay is past any cap instead of overflowing a float.
    """
    doublings = min(max(attempt - 1, 0), _MAX_DOUBLINGS)
    delay = min(policy.max_delay, policy.base_delay * 2.0**doublings)
    delay *= 1.0 - policy.jitter * rng.random()
    if retry_after is not None:
        delay = max(delay, retry_after)
    return delay
