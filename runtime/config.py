"""Runtime configuration: frozen, keyword-only attrs classes loaded through :mod:`sluice.serde`.

A config is a value: derive variants with ``attrs.evolve``. Unknown keys and out-of-range values
fail at load time with a :class:`~sluice.errors.ConfigError` naming the path
(``extra fields found (brust) @ $.providers.openai.rate_limit``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

import attrs
import cattrs
import orjson
from attrs.validators import ge, gt, le, optional

from .errors import ConfigError
from .messages import Deadlines
from .serde import converter, format_validation_error

__all__ = [
    "BreakerConfig",
    "ProviderConfig",
    "RateLimitConfig",
    "RetryConfig",
    "RuntimeConfig",
    "Secret",
    "WindowLimit",
    "load_config",
]


@attrs.frozen(repr=False)
class Secret:
    """An API key. Its repr and str never show the value; only :meth:`reveal` does."""

    _value: str

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__


@attrs.frozen(kw_only=True)
class WindowLimit:
    """At most ``limit`` units of ``dimension`` admitted in any ``per`` seconds."""

    dimension: Literal["requests", "input_tokens", "output_tokens", "total_tokens"]
    limit: int = attrs.field(validator=ge(1))
    per: float = attrs.field(default=60.0, validator=gt(0))
    """Length of the window in seconds: 1, 60, 86400..."""


@attrs.frozen(kw_only=True)
class RateLimitConfig:
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
        shorthand = (
            ("requests", self.requests_per_minute),
            ("total_tokens", self.tokens_per_minute),
            ("input_tokens", self.input_tokens_per_minute),
            ("output_tokens", self.output_tokens_per_minute),
        )
        found = tuple(
            WindowLimit(dimension=d, limit=n)  # type: ignore[arg-type]
            for d, n in shorthand
            if n is not None
        )
        return found + self.windows


@attrs.frozen(kw_only=True)
class RetryConfig:
    """How the Supervisor retries a failed attempt."""

    max_attempts: int = attrs.field(default=4, validator=ge(1))
    base_delay: float = attrs.field(default=0.5, validator=ge(0))
    """First backoff; each retry doubles it."""
    max_delay: float = attrs.field(default=8.0, validator=ge(0))
    jitter: float = attrs.field(default=0.25, validator=[ge(0), le(1)])
    """A backoff is shortened by up to this fraction, at random."""
    max_retry_after: float = attrs.field(default=120.0, validator=ge(0))
    """A provider's wait longer than this fails the call instead of waiting."""
    budget_ratio: float = attrs.field(default=0.2, validator=ge(0))
    """Process-wide: retries at most this fraction of recent first attempts (plus the floor)."""
    budget_min_per_second: float = attrs.field(default=1.0, validator=ge(0))
    """The floor of the retry budget, so isolated failures are always retried."""
    budget_interval: float = attrs.field(default=10.0, validator=gt(0))
    """The interval the retry budget looks back over."""
    fallback_on: tuple[str, ...] = (
        "Overloaded",
        "ContextTooLong",
        "CircuitOpen",
        "ContentFiltered",
    )
    """Error classes after which a call moves on to its next fallback model."""


@attrs.frozen(kw_only=True)
class BreakerConfig:
    """When a provider's circuit breaker opens, and for how long."""

    min_failures: int = attrs.field(default=5, validator=ge(1))
    """Failures in the window needed before it can open."""
    failure_rate: float = attrs.field(default=0.5, validator=[gt(0), le(1)])
    """Share of the attempts started in the window that must have failed for it to open."""
    window: float = attrs.field(default=30.0, validator=gt(0))
    open_for: float = attrs.field(default=10.0, validator=gt(0))
    """Seconds it stays open before one probe call may go."""


@attrs.frozen(kw_only=True)
class ProviderConfig:
    """One backend. Builtin providers fill what is left unset here."""

    protocol: Literal["openai"] | None = None
    base_url: str | None = None
    api_key: Secret | None = None
    api_key_env: str | None = None
    """Environment variable that holds the key (read when the provider starts)."""
    headers: Mapping[str, str] = attrs.field(factory=dict)
    rate_limit: RateLimitConfig = RateLimitConfig()
    breaker: BreakerConfig | None = BreakerConfig()
    """None turns the circuit breaker off for this provider."""
    deadlines: Deadlines | None = None
    connect_timeout: float = attrs.field(default=10.0, validator=gt(0))
    max_connections: int = attrs.field(default=2048, validator=ge(1))
    """Connections to this provider at most (its keep-alive pool's size)."""
    transport: Literal["fast", "httpx"] = "fast"
    """The hot path's HTTP client: sluice's own trio HTTP/1.1 client, or httpx (HTTP/2,
    SOCKS/HTTPS proxies and anything else the fast one does not cover)."""


@attrs.frozen(kw_only=True)
class RuntimeConfig:
    """Everything :func:`sluice.open_runtime` needs; every field has a working default."""

    providers: Mapping[str, ProviderConfig] = attrs.field(factory=dict)
    retry: RetryConfig = RetryConfig()
    deadlines: Deadlines = Deadlines(total=600.0, first_token=120.0, idle=60.0)
    """Default deadlines for every call; a provider's or a call's own override them per field."""
    stream_buffer: int = attrs.field(default=8, validator=ge(0))
    """Event batches buffered per call before the producer waits for the consumer."""


converter.register_structure_hook(
    Secret, lambda v, _: Secret(v) if isinstance(v, str) else _bad_key()
)
converter.register_unstructure_hook(Secret, lambda s: "********")


def _bad_key() -> Secret:
    raise ValueError("an API key must be a string")


def load_config(raw: bytes | str | Mapping[str, Any]) -> RuntimeConfig:
    """Load a config from JSON text or an already parsed mapping.

    Raises:
        ConfigError: the text is not JSON, or a key or value is wrong (the message names each).
    """
    try:
        data = orjson.loads(raw) if isinstance(raw, bytes | str) else raw
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"config is not valid JSON: {exc}") from None
    try:
        return converter.structure(data, RuntimeConfig)
    except (cattrs.BaseValidationError, ValueError, TypeError) as exc:
        raise ConfigError(f"invalid config: {format_validation_error(exc)}") from None


def config_from_env(environ: Mapping[str, str] | None = None) -> RuntimeConfig:
    """The config named by ``SLUICE_CONFIG`` (a JSON file), else the defaults."""
    env = os.environ if environ is None else environ
    path = env.get("SLUICE_CONFIG")
    if not path:
        return RuntimeConfig()
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path} (from SLUICE_CONFIG): {exc}") from None
    try:
        return load_config(raw)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
