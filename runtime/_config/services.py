"""The runtime's optional services: the response cache (:class:`CacheConfig`), Prometheus
metrics (:class:`MetricsConfig`), OpenTelemetry traces (:class:`TracingConfig`) and what the
gateway reads from the config (:class:`GatewayConfig`)."""

from __future__ import annotations

from typing import Any

import attrs
from attrs.validators import ge, gt, le, optional

from .._record import Value

__all__ = ["CacheConfig", "GatewayConfig", "MetricsConfig", "TracingConfig"]


@attrs.frozen(eq=False, kw_only=True, repr=False)
class CacheConfig(Value):
    """The response cache: identical requests answered from memory (and optionally a file).

    Off by default: a model may answer the same prompt differently each time, and only the
    caller knows whether replaying an earlier answer is right. A call's
    ``ChatRequest.response_cache`` overrides ``enabled`` for that call. See :mod:`sluice._cache`.
    """

    enabled: bool = False
    """Every call uses the cache unless it opts out (``response_cache=False``)."""
    max_entries: int = attrs.field(default=1024, validator=ge(1))
    """Results kept in memory; the least recently used goes first."""
    ttl: float | None = attrs.field(default=None, validator=optional(gt(0)))
    """Seconds a stored result stays valid, on the wall clock (so it holds across runs);
    None: no expiry."""
    path: str | None = None
    """A SQLite file that keeps results across runs (created if missing); None: memory only."""
    max_stored: int = attrs.field(default=100_000, validator=ge(1))
    """Results kept in the file: the oldest beyond this are dropped when it is opened, and
    during a run every ``max_stored // 10`` stores (so it never holds more than a tenth over)."""


@attrs.frozen(eq=False, kw_only=True, repr=False)
class MetricsConfig(Value):
    """Prometheus metrics: a registry per runtime (``rt.metrics``), and optionally an HTTP
    endpoint served by the runtime itself (see docs/metrics.md for the names)."""

    enabled: bool = False
    """Keep the metrics (implied by ``port``)."""
    port: int | None = attrs.field(default=None, validator=optional([ge(0), le(65535)]))
    """Serve ``GET /metrics`` on this port (0: any free port; ``rt.metrics_port`` says which)."""
    host: str = "127.0.0.1"
    """The address the endpoint listens on."""
    max_label_values: int = attrs.field(default=100, validator=ge(1))
    """Distinct values each caller-chosen label (model, quota key, breaker) keeps a series for;
    later values are counted under ``other``, so callers naming models cannot grow the series
    without bound."""

    @property
    def active(self) -> bool:
        return self.enabled or self.port is not None


@attrs.frozen(eq=False, kw_only=True, repr=False)
class TracingConfig(Value):
    """OpenTelemetry traces (needs ``opentelemetry-api``, the ``otel`` extra): one span per
    call, a child per attempt, GenAI semantic-convention attributes."""

    enabled: bool = False
    """Trace through the global tracer provider (or the one given to ``open_runtime``)."""


def _optional_tuple(value: Any) -> tuple[str, ...] | None:
    # A function of ours, not attrs.converters.optional(tuple): attrs reads a converter's
    # signature, and a builtin's costs a tokenizer regex compiled on import.
    return None if value is None else tuple(value)


def _model_names(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not all(isinstance(n, str) and n for n in value):
        raise ValueError(f"'{attribute.name}' must be a list of non-empty model names")


@attrs.frozen(eq=False, kw_only=True, repr=False)
class GatewayConfig(Value):
    """Settings of the gateway (``sluice serve``) that live in the config file (``[gateway]``)."""

    models: tuple[str, ...] | None = attrs.field(
        default=None, converter=_optional_tuple, validator=_model_names
    )
    """The only model names the gateway serves: ``provider:model``, an alias or a group name
    (aliases and groups are always served). Any other name is refused with 404 before the
    runtime makes anything for it. None: every model a configured provider can serve.
    ``sluice serve --models`` overrides it."""
