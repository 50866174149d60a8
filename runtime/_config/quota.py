"""Admission limits of one quota key: :class:`RateLimitConfig` and its :class:`WindowLimit` list
(in :mod:`.windows`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import attrs
from attrs.validators import ge, gt, optional

from .._record import Value, late_names

if TYPE_CHECKING:
    from .windows import WindowLimit  # noqa: TC004 (served below, PEP 562)

__all__ = ["RateLimitConfig", "WindowLimit"]


def __getattr__(name: str) -> Any:
    # WindowLimit loads with the first window asked for (a key without limits builds none) and
    # stays a name here, so the annotation of ``windows`` resolves (see the package's docstring).
    if name == "WindowLimit":
        from .windows import WindowLimit

        globals()[name] = WindowLimit
        return WindowLimit
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@late_names("WindowLimit")
@attrs.frozen(eq=False, kw_only=True, repr=False)
class RateLimitConfig(Value):
    """Admission limits for one quota key. Every limit is optional; none means unlimited."""

    key: Literal["provider", "model"] = "provider"
    """One quota per provider account, or one per account and model."""
    max_pending: int | None = attrs.field(default=None, validator=optional(ge(1)))
    """Calls that may wait for their first chunk at once; a call frees its slot at that chunk."""
    max_open_streams: int | None = attrs.field(default=None, validator=optional(ge(1)))
    """Calls open at once, first chunk to end (for providers that cap concurrency)."""
    requests_per_minute: int | None = attrs.field(default=None, validator=optional(ge(1)))
    tokens_per_minute: int | None = attrs.field(default=None, validator=optional(ge(1)))
    """Input plus output tokens in any 60-second window."""
    input_tokens_per_minute: int | None = attrs.field(default=None, validator=optional(ge(1)))
    output_tokens_per_minute: int | None = attrs.field(default=None, validator=optional(ge(1)))
    windows: tuple[WindowLimit, ...] = ()
    """Further windows of any length (per second, per day)."""
    expected_output_tokens: int = attrs.field(default=1024, validator=ge(0))
    """Output tokens reserved for a call that sets no ``max_tokens``."""
    default_cooldown: float = attrs.field(default=5.0, validator=ge(0))
    """Pause after a 429 that did not say how long to wait."""
    max_cooldown: float = attrs.field(default=120.0, validator=ge(0))
    """A 429 asking for a longer wait means the quota is exhausted: calls fail fast instead."""
    cooldown_jitter: float = attrs.field(default=0.5, validator=ge(0))
    """Calls waiting through a cooldown are admitted spread over this many seconds after it."""
    adaptive: bool = False
    """Adapt the pending-slot limit (below ``max_pending``) to 429s and overloads."""
    aging: float = attrs.field(default=10.0, validator=gt(0))
    """Seconds of waiting that lift a call one priority class, so none starves."""
    learn_from_headers: bool = True
    """Tighten limits to what the provider's rate-limit headers report."""

    def window_limits(self) -> tuple[WindowLimit, ...]:
        """Every window: the per-minute shorthands plus ``windows``."""
        shorthand = [
            (dimension, limit)
            for dimension, limit in (
                ("requests", self.requests_per_minute),
                ("total_tokens", self.tokens_per_minute),
                ("input_tokens", self.input_tokens_per_minute),
                ("output_tokens", self.output_tokens_per_minute),
            )
            if limit is not None
        ]
        if not shorthand:
            return self.windows  # no per-minute limit: WindowLimit need not be loaded
        from .windows import WindowLimit

        found = tuple(
            WindowLimit(dimension=d, limit=n)  # type: ignore[arg-type]
            for d, n in shorthand
        )
        return found + self.windows
