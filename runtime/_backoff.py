"""Retry delays: pure arithmetic, the rng injected so tests are exact."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import random

    from ._config import RetryConfig

__all__ = ["STORE_RETRY_MAX", "retry_delay", "store_retry_delay"]

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


STORE_RETRY_FIRST = 0.25
STORE_RETRY_MAX = 2.0


def store_retry_delay(down_for: float) -> float:
    """Seconds until calls waiting for a shared store that has not answered for ``down_for``
    seconds ask it again: half the outage so far, at least ``STORE_RETRY_FIRST`` and at most
    ``STORE_RETRY_MAX``. A blip is noticed at once, and the end of a long outage within
    ``STORE_RETRY_MAX``, whatever the number of calls waiting (they ask as one)."""
    return min(STORE_RETRY_MAX, max(STORE_RETRY_FIRST, down_for / 2))
