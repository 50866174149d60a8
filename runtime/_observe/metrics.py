"""Prometheus metrics of one runtime, in its own registry.

Counters and histograms are updated where calls and attempts end, as plain numbers in dicts
(a dict update per count, a bisect per observation: no locks, no objects), and handed to
prometheus_client as metric families at scrape time, which renders them; gauges are read at
scrape time from a snapshot of ``Runtime.statistics()``, which a scrape refreshes only if the
runtime answers within a short bound (else it shows the last one: a scrape never waits for a
quota store that does not answer). So the hot path pays almost nothing
(measured in ``benchmarks/overhead.py --observed``), and the exposition is the library's.
Labels are bounded: provider, model, quota key, outcome, error class, priority; never call
ids, prompts or tags. The values a caller chooses (the model, and so a per-model quota key or
breaker) are capped per label by :class:`LabelValues`: the first ``max_label_values`` distinct
values keep their own series, every later one is counted under ``other``. docs/metrics.md lists
every name.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING, Any

import trio
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from sluice._mail import KeyStatistics
    from sluice._messages import Usage
    from sluice._runtime import RuntimeStatistics

__all__ = ["CONTENT_TYPE", "OTHER", "LabelValues", "Metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300, 600)
_TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60)
_ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.15, 0.3, 0.6, 1.2)
_WAIT_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)
_BREAKER_STATES = ("closed", "open", "half_open")

OTHER = "other"
"""The label value every value past a label's cap is counted under."""


class LabelValues:
    """The values one caller-chosen label may take: the first ``cap`` distinct values seen,
    then :data:`OTHER` for any value not among them. So the series a label makes are at most
    ``cap + 1`` whatever names callers send, and a value once admitted keeps its series (a
    counter never moves between series). Memory: at most ``cap`` strings."""

    __slots__ = ("_seen", "cap")

    def __init__(self, cap: int) -> None:
        if cap < 1:
            raise ValueError("a label needs room for at least one value")
        self.cap = cap
        self._seen: set[str] = set()

    def fold(self, value: str) -> str:
        """``value`` if it has (or now gets) a series of its own, else :data:`OTHER`."""
        seen = self._seen
        if value in seen:
            return value
        if len(seen) < self.cap:
            seen.add(value)
            return value
        return OTHER

    def __len__(self) -> int:
        return len(self._seen)


class Counter:
    """A counter family: a number per tuple of label values."""

    __slots__ = ("doc", "labels", "name", "values")

    def __init__(self, name: str, doc: str, labels: tuple[str, ...]) -> None:
        self.name, self.doc, self.labels = name, doc, labels
        self.values: dict[tuple[str, ...], float] = {}

    def inc(self, key: tuple[str, ...], amount: float = 1.0) -> None:
        values = self.values
        values[key] = values.get(key, 0.0) + amount

    def family(self) -> CounterMetricFamily:
        family = CounterMetricFamily(self.name, self.doc, labels=self.labels)
        for key, value in sorted(list(self.values.items())):  # list(): one atomic copy
            family.add_metric(key, value)
        return family


class Histogram:
    """A histogram family: per tuple of label values, a count per bucket and the sum."""

    __slots__ = ("bounds", "doc", "labels", "name", "series")

    def __init__(
        self, name: str, doc: str, labels: tuple[str, ...], bounds: tuple[float, ...]
    ) -> None:
        self.name, self.doc, self.labels, self.bounds = name, doc, labels, bounds
        self.series: dict[tuple[str, ...], list[float]] = {}
        """Per key: the count of each bucket (not cumulative; the last is +Inf), then the sum."""

    def observe(self, key: tuple[str, ...], value: float) -> None:
        series = self.series.get(key)
        if series is None:
            series = self.series[key] = [0.0] * (len(self.bounds) + 2)
        series[bisect_left(self.bounds, value)] += 1  # le: a value on a bound counts in it
        series[-1] += value

    def family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(self.name, self.doc, labels=self.labels)
        names = [*map(floatToGoString, self.bounds), "+Inf"]
        for key, series in sorted(list(self.series.items())):
            counts = series[:-1]
            running = 0.0
            buckets = []
            for name, count in zip(names, counts, strict=True):
                running += count
                buckets.append((name, running))
            family.add_metric(key, buckets, sum_value=series[-1])
        return family


class Metrics:
    """The runtime's metrics: ``registry`` for a scraper of one's own, :meth:`render` for
    the text exposition format (what ``GET /metrics`` answers)."""

    def __init__(self, max_label_values: int = 100) -> None:
        self.models = LabelValues(max_label_values)
        """The ``model`` label's values (fold a model name through it before counting)."""
        self.keys = LabelValues(max_label_values)
        """The ``key`` label's values (quota keys: per model with ``rate_limit.key = "model"``)."""
        self.breakers = LabelValues(max_label_values)
        """The breaker gauge's ``provider`` values (``provider:model`` with per-model breakers)."""
        self.calls = Counter(
            "sluice_calls",
            "Calls ended, by outcome (ok, error, abandoned) and error class.",
            ("provider", "model", "outcome", "error_type"),
        )
        self.attempts = Counter(
            "sluice_attempts",
            "Attempts ended, by outcome (ok, error, abandoned) and error class.",
            ("provider", "model", "outcome", "error_type"),
        )
        self.tokens = Counter(
            "sluice_tokens",
            "Tokens used by every attempt, by kind (input, output, cached, reasoning).",
            ("provider", "model", "kind"),
        )
        self.cost = Counter(
            "sluice_cost_usd",
            "Cost of every attempt at the ledger's prices, in US dollars.",
            ("provider", "model"),
        )
        self.unpriced = Counter(
            "sluice_unpriced_attempts",
            "Attempts whose usage has no known price.",
            ("provider", "model"),
        )
        self.duration = Histogram(
            "sluice_call_duration_seconds",
            "Submit to end of every call, whatever its outcome.",
            ("provider", "model", "outcome"),
            _LATENCY_BUCKETS,
        )
        self.ttft = Histogram(
            "sluice_time_to_first_token_seconds",
            "Submit to the first chunk of the winning attempt, per successful call.",
            ("provider", "model"),
            _TTFT_BUCKETS,
        )
        self.itl = Histogram(
            "sluice_inter_token_seconds",
            "Mean time between output tokens of each successful attempt (first chunk to end,"
            " over output tokens minus one).",
            ("provider", "model"),
            _ITL_BUCKETS,
        )
        self.admission_wait = Histogram(
            "sluice_admission_wait_seconds",
            "Time each attempt waited for admission, per quota key.",
            ("key",),
            _WAIT_BUCKETS,
        )
        self.embed_calls = Counter(
            "sluice_embed_calls",
            "Embedding calls ended, by outcome (ok, error, abandoned); also in sluice_calls.",
            ("provider", "model", "outcome"),
        )
        self.embed_inputs = Counter(
            "sluice_embed_inputs",
            "Inputs embedded by successful embedding calls (one vector each).",
            ("provider", "model"),
        )
        self.restarts = Counter(
            "sluice_actor_restarts", "Actor crashes that were restarted.", ("actor",)
        )
        self.gauges = _SnapshotCollector(self.keys, self.breakers)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Families(self))
        self.registry.register(self.gauges)

    def usage(self, provider: str, model: str, usage: Usage, cost_micros: int | None) -> None:
        tokens = self.tokens
        if usage.input_tokens:
            tokens.inc((provider, model, "input"), usage.input_tokens)
        if usage.output_tokens:
            tokens.inc((provider, model, "output"), usage.output_tokens)
        if usage.cache_read_tokens:
            tokens.inc((provider, model, "cached"), usage.cache_read_tokens)
        if usage.reasoning_tokens:
            tokens.inc((provider, model, "reasoning"), usage.reasoning_tokens)
        if cost_micros is None:
            self.unpriced.inc((provider, model))
        elif cost_micros:
            self.cost.inc((provider, model), cost_micros / 1_000_000)

    def render(self) -> bytes:
        """The registry in Prometheus' text format, gauges as of the last refresh."""
        return generate_latest(self.registry)


class _Families(Collector):
    """The counters and histograms, as prometheus_client's metric families."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        m = self.metrics
        counters = (m.calls, m.attempts, m.tokens, m.cost, m.unpriced, m.embed_calls)
        for counter in (*counters, m.embed_inputs, m.restarts):
            yield counter.family()
        for histogram in (m.duration, m.ttft, m.itl, m.admission_wait):
            yield histogram.family()


class _SnapshotCollector(Collector):
    """Gauges read from the last snapshot of the runtime's statistics (see ``refresh``)."""

    def __init__(self, keys: LabelValues, breakers: LabelValues) -> None:
        self.keys, self.breakers = keys, breakers
        self.stats: RuntimeStatistics | None = None
        self.taken_at = 0.0
        """When ``stats`` was taken (trio's clock): it ages the windows' values."""
        self.extra: Callable[[], dict[str, float]] = dict

    def update(self, stats: RuntimeStatistics) -> None:
        """Show ``stats``, taken now."""
        self.stats = stats
        self.taken_at = trio.current_time()

    def _since_taken(self) -> float:
        """Seconds since the snapshot was taken (0 when read outside trio, e.g. by a
        scraper's own thread: the windows' ages are then those of the snapshot)."""
        try:
            return max(0.0, trio.current_time() - self.taken_at)
        except RuntimeError:
            return 0.0

    def collect(self) -> Iterator[Any]:
        yield from _process_families(self.extra())
        stats = self.stats
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
        yield from self._quota_families(stats)
        yield self._breaker_family(stats)
        budget = GaugeMetricFamily(
            "sluice_retry_budget_available", "Retries the process-wide retry budget allows now."
        )
        budget.add_metric([], stats.retry_budget_available)
        yield budget

    def _quota_families(self, stats: RuntimeStatistics) -> Iterator[Any]:
        """The gauges of every quota key: slots, queues, windows, their age, cooldowns."""
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
        age = GaugeMetricFamily(
            "sluice_window_age_seconds",
            "Seconds since the values of each quota key's window gauges were current (0 with"
            " the in-memory store; with a shared store, since it last reported them).",
            labels=["key"],
        )
        cooldown = GaugeMetricFamily(
            "sluice_cooldown_seconds",
            "Seconds left of each quota key's cooldown after a 429.",
            labels=["key"],
        )
        sums = _QuotaSums()
        since = self._since_taken()
        for name, ks in sorted(stats.quotas.items()):
            sums.add(self.keys.fold(name), ks, since)
        for gauge, values in (
            (open_streams, sums.streams),
            (pending, sums.pending),
            (cooldown, sums.cooldown),
            (age, sums.age),
        ):
            for key, value in values.items():
                gauge.add_metric([key], value)
        for gauge, pairs in ((queued, sums.queued), (used, sums.used), (limit, sums.limit)):
            for labels, value in pairs.items():
                gauge.add_metric(list(labels), value)
        yield from (open_streams, pending, queued, used, limit, age, cooldown)

    def _breaker_family(self, stats: RuntimeStatistics) -> GaugeMetricFamily:
        breaker = GaugeMetricFamily(
            "sluice_breaker_state",
            "1 for each provider's circuit breaker's current state (under 'other': how many"
            " breakers past the label cap are in it).",
            labels=["provider", "state"],
        )
        states: dict[str, dict[str, float]] = {}
        fold = self.breakers.fold
        for provider, state in sorted(stats.breakers.items()):
            counts = states.setdefault(fold(provider), dict.fromkeys(_BREAKER_STATES, 0.0))
            counts[state] += 1.0
        for provider, counts in states.items():
            for s, count in counts.items():
                breaker.add_metric([provider, s], count)
        return breaker


def _process_families(extra: dict[str, float]) -> Iterator[Any]:
    """The process's own health: hook records dropped, hook calls that raised, ledger lag."""
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


class _QuotaSums:
    """The quota keys' values by label: keys past the cap are summed under ``other`` (the
    longest cooldown for cooldowns, the oldest age for ages), so used over limit of ``other``
    is the use of all of them together."""

    def __init__(self) -> None:
        self.streams: dict[str, float] = {}
        self.pending: dict[str, float] = {}
        self.queued: dict[tuple[str, str], float] = {}
        self.used: dict[tuple[str, str], float] = {}
        self.limit: dict[tuple[str, str], float] = {}
        self.cooldown: dict[str, float] = {}
        self.age: dict[str, float] = {}

    def add(self, key: str, ks: KeyStatistics, since: float) -> None:
        """Count quota key statistics ``ks`` under label ``key``, its windows ``since``
        seconds older than the snapshot says."""
        self.streams[key] = self.streams.get(key, 0) + ks.open_streams
        self.pending[key] = self.pending.get(key, 0) + ks.pending
        for priority, n in ks.queued.items():
            self.queued[key, priority] = self.queued.get((key, priority), 0) + n
        for window, (u, lim) in ks.windows.items():
            self.used[key, window] = self.used.get((key, window), 0) + u
            self.limit[key, window] = self.limit.get((key, window), 0) + lim
        if ks.windows:
            self.age[key] = max(self.age.get(key, 0.0), ks.windows_age + since)
        left = max(ks.cooldown_left, ks.exhausted_left)
        self.cooldown[key] = max(self.cooldown.get(key, 0.0), left)
