"""A snapshot of one deployment of a model group (``Runtime.statistics``, health).

:mod:`sluice._routing` builds them and serves the name (PEP 562); the class lives apart so that
a program which never asks for statistics does not build it.
"""

from __future__ import annotations

import attrs

from ._record import Value

__all__ = ["DeploymentStatistics"]


@attrs.frozen(eq=False, repr=False)
class DeploymentStatistics(Value):
    """A snapshot of one deployment of a model group."""

    model: str
    """``provider:model``."""
    in_flight: int
    """Calls placed on it and not ended (queued for admission included)."""
    calls: int
    """Calls placed on it so far (first placements and failovers)."""
    ttft: float | None
    """Moving average of admission to first token, in seconds (None before its first)."""
    cooling_left: float
    """Seconds it is still passed over after a 429."""
    slow_left: float
    """Seconds it is still passed over after it missed the group's hedge time."""
    breaker: str
    """``closed``, ``open`` or ``half_open`` (``closed`` without a breaker)."""
