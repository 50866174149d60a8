"""Prometheus metrics of one runtime, in its own registry.

Counters and histograms are updated where calls and attempts end (one label lookup, cached,
per update); gauges are read at scrape time from a snapshot of ``Runtime.statistics()``,
which costs the hot path nothing. Labels are bounded: provider, model, quota key, outcome,
error class, priority; never call ids, prompts or tags. docs/metrics.md lists every name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from prometheus_client.metrics import MetricWrapperBase

    from sluice._runtime import RuntimeStatistics
    from sluice.messages import Usage

__all__ = ["CONTENT_TYPE", "Metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300, 600)
_TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60)
_ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.15, 0.3, 0.6, 1.2)
_WAIT_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)
_BREAKER_STATES = ("closed", "open", "half_open")


class Metrics:
    """The runtime's metrics: ``registry`` for a scraper of one's own, :meth:`render` for
    the text exposition format (what ``GET /metrics`` answers)."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=False)
        self.calls = Counter(
            "sluice_calls",
            "Calls ended, by outcome (ok, error, abandoned) and error class.",
            ("provider", "model", "outcome", "error_type"),
            registry=registry,
        )
        self.attempts = Counter(
            "sluice_attempts",
            "Attempts ended, by outcome (ok, error, abandoned) and error class.",
            ("provider", "model", "outcome", "error_type"),
            registry=registry,
        )
        self.tokens = Counter(
            "sluice_tokens",
            "Tokens used by every attempt, by kind (input, output, cached, reasoning).",
            ("provider", "model", "kind"),
            registry=registry,
        )
        self.cost = Counter(
            "sluice_cost_usd",
            "Cost of every attempt at the ledger's prices, in US dollars.",
            ("provider", "model"),
            registry=registry,
        )
        self.unpriced = Counter(
            "sluice_unpriced_attempts",
            "Attempts whose usage has no known price.",
            ("provider", "model"),
            registry=registry,
        )
        self.duration = Histogram(
            "sluice_call_duration_seconds",
            "Submit to end of every call, whatever its outcome.",
            ("provider", "model", "outcome"),
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.ttft = Histogram(
            "sluice_time_to_first_token_seconds",
            "Submit to the first chunk of the winning attempt, per successful call.",
            ("provider", "model"),
            buckets=_TTFT_BUCKETS,
            registry=registry,
        )
        self.itl = Histogram(
            "sluice_inter_token_seconds",
            "Mean time between output tokens of each successful attempt (first chunk to end,"
            " over output tokens minus one).",
            ("provider", "model"),
            buckets=_ITL_BUCKETS,
            registry=registry,
        )
        self.admission_wait = Histogram(
            "sluice_admission_wait_seconds",
            "Time each attempt waited for admission, per quota key.",
            ("key",),
            buckets=_WAIT_BUCKETS,
            registry=registry,
        )
        self.restarts = Counter(
            "sluice_actor_restarts",
            "Actor crashes that were restarted.",
            ("actor",),
            registry=registry,
        )
        self._children: dict[tuple[Any, ...], Any] = {}
        self.gauges = _SnapshotCollector()
        registry.register(self.gauges)

    def child(self, metric: MetricWrapperBase, *labels: str) -> Any:
        """``metric.labels(*labels)``, cached: the hot path pays one dict lookup."""
        key = (id(metric), *labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def usage(self, provider: str, model: str, usage: Usage, cost_micros: int | None) -> None:
        child = self.child
        tokens = self.tokens
        if usage.input_tokens:
            child(tokens, provider, model, "input").inc(usage.input_tokens)
        if usage.output_tokens:
            child(tokens, provider, model, "output").inc(usage.output_tokens)
        if usage.cache_read_tokens:
            child(tokens, provider, model, "cached").inc(usage.cache_read_tokens)
        if usage.reasoning_tokens:
            child(tokens, provider, model, "reasoning").inc(usage.reasoning_tokens)
        if cost_micros is None:
            child(self.unpriced, provider, model).inc()
        elif cost_micros:
            child(self.cost, provider, model).inc(cost_micros / 1_000_000)

    def render(self) -> bytes:
        """The registry in Prometheus' text format, gauges as of the last :meth:`refresh`."""
        return generate_latest(self.registry)


class _SnapshotCollector(Collector):
    """Gauges read from the last snapshot of the runtime's statistics (see ``refresh``)."""

    def __init__(self) -> None:
        self.stats: RuntimeStatistics | None = None
        self.extra: Callable[[], dict[str, float]] = dict

    def collect(self) -> Iterator[Any]:
        stats = self.stats
        extra = self.extra()
        hooks = CounterMetricFamily(
            "sluice_hook_drops", "Hook records dropped because the hook queue was full."
        )
        hooks.add_metric([], extra.get("hook_drops", 0))
        yield hooks
        failures = CounterMetricFamily("sluice_hook_errors", "Hook calls that raised.")
        failures.add_metric([], extra.get("hook_errors", 0))
        yield failures
        lag = GaugeMetricFamily(
            "sluice_ledger_write_lag_seconds",
            "Age of the oldest usage record not yet written to the ledger's store.",
        )
        lag.add_metric([], extra.get("ledger_lag", 0.0))
        yield lag
        if stats is None:
            return
        g = GaugeMetricFamily("sluice_calls_in_flight", "Calls being supervised now.")
        g.add_metric([], stats.calls_in_flight)
        yield g
        g = GaugeMetricFamily(
            "sluice_attempts_in_flight", "Attempts running now, per provider.", labels=["provider"]
        )
        for provider, n in sorted(stats.attempts_in_flight.items()):
            g.add_metric([provider], n)
        yield g
        open_streams = GaugeMetricFamily(
            "sluice_open_streams", "Streams open now, per quota key.", labels=["key"]
        )
        pending = GaugeMetricFamily(
            "sluice_pending",
            "Attempts sent but without a first chunk, per quota key.",
            labels=["key"],
        )
        queued = GaugeMetricFamily(
            "sluice_queued",
            "Attempts waiting for admission, per quota key and priority.",
            labels=["key", "priority"],
        )
        used = GaugeMetricFamily(
            "sluice_window_used",
            "Use of each rate-limit window, per quota key.",
            labels=["key", "window"],
        )
        limit = GaugeMetricFamily(
            "sluice_window_limit",
            "Limit of each rate-limit window, per quota key.",
            labels=["key", "window"],
        )
        cooldown = GaugeMetricFamily(
            "sluice_cooldown_seconds",
            "Seconds left of each quota key's cooldown after a 429.",
            labels=["key"],
        )
        for key, ks in sorted(stats.quotas.items()):
            open_streams.add_metric([key], ks.open_streams)
            pending.add_metric([key], ks.pending)
            for priority, n in ks.queued.items():
                queued.add_metric([key, priority], n)
            for window, (u, lim) in ks.windows.items():
                used.add_metric([key, window], u)
                limit.add_metric([key, window], lim)
            cooldown.add_metric([key], max(ks.cooldown_left, ks.exhausted_left))
        yield from (open_streams, pending, queued, used, limit, cooldown)
        breaker = GaugeMetricFamily(
            "sluice_breaker_state",
            "1 for each provider's circuit breaker's current state.",
            labels=["provider", "state"],
        )
        for provider, state in sorted(stats.breakers.items()):
            for s in _BREAKER_STATES:
                breaker.add_metric([provider, s], 1.0 if s == state else 0.0)
        yield breaker
        budget = GaugeMetricFamily(
            "sluice_retry_budget_available", "Retries the process-wide retry budget allows now."
        )
        budget.add_metric([], stats.retry_budget_available)
        yield budget
