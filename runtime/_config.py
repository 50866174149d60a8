"""Runtime configuration: frozen, keyword-only attrs classes loaded through :mod:`sluice._serde`.

A config is a value: derive variants with ``attrs.evolve``. Unknown keys and out-of-range values
fail at load time with a :class:`~sluice._errors.ConfigError` naming the path
(``unknown key 'brust' (did you mean 'burst'?); valid keys: ... @ $.providers.openai.rate_limit``).

Files: :func:`load_config_file` reads TOML (or JSON, for a ``.json`` file);
:func:`config_from_env` finds the file (``SLUICE_CONFIG``, else ``config.toml`` in the platform
config directory, :func:`default_config_path`) and lays environment overrides over it
(:func:`env_overrides`: ``SLUICE_PROVIDERS__OPENAI__BASE_URL=...`` sets
``providers.openai.base_url``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs
import orjson
from attrs.validators import ge, gt, le, optional

from ._capabilities import CapabilityOverride
from ._checks import check_env_name, check_http_url
from ._errors import ConfigError
from ._messages import Deadlines
from ._record import Record
from ._serde import EnvText, Secret, format_validation_error, get_converter

if TYPE_CHECKING:
    from cattrs.preconf.orjson import OrjsonConverter

__all__ = [
    "BreakerConfig",
    "BudgetConfig",
    "CacheConfig",
    "Deployment",
    "GatewayConfig",
    "LedgerConfig",
    "MetricsConfig",
    "TracingConfig",
    "ModelGroup",
    "PriceConfig",
    "ModelConfig",
    "QuirksConfig",
    "ProviderConfig",
    "RateLimitConfig",
    "ReplyLimits",
    "RetryConfig",
    "RuntimeConfig",
    "Secret",
    "WindowLimit",
    "config_from_env",
    "default_config_path",
    "env_overrides",
    "load_config",
    "load_config_file",
]


MAX_LINE_BYTES = 32 * 1024 * 1024
"""Default cap on one line of a streamed reply (an SSE line, an NDJSON line).

Generous: an image returned inline as base64 fits in one line."""
MAX_EVENT_BYTES = 32 * 1024 * 1024
"""Default cap on the data of one SSE event (all its ``data:`` lines together)."""


@attrs.frozen(kw_only=True, repr=False)
class WindowLimit(Record):
    """At most ``limit`` units of ``dimension`` admitted in any ``per`` seconds."""

    dimension: Literal["requests", "input_tokens", "output_tokens", "total_tokens"]
    limit: int = attrs.field(validator=ge(1))
    per: float = attrs.field(default=60.0, validator=gt(0))
    """Length of the window in seconds: 1, 60, 86400..."""
    counted_from: Literal["reply", "send"] = "reply"
    """When an admission starts to count. ``reply`` (a provider's limit): from its first chunk
    or reply, since the provider counts a request from when it arrived, and counting later
    keeps our window behind the provider's at every boundary. ``send``: from the admission,
    for a spread of one's own (``sluice batch --rpm``), whose rate then holds whatever the
    time to first token. A window the provider reports limits for (60 s) always counts from
    the reply, as does one a ``reply`` window of the same dimension and length shares."""


@attrs.frozen(kw_only=True, repr=False)
class RateLimitConfig(Record):
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


@attrs.frozen(kw_only=True, repr=False)
class RetryConfig(Record):
    """How the Supervisor retries a failed attempt."""

    max_attempts: int = attrs.field(default=4, validator=ge(1))
    """Attempts of a ``fail_fast`` call (an interactive one, by default) before it fails;
    waiting calls have ``wait_max_attempts``."""
    base_delay: float = attrs.field(default=0.5, validator=ge(0))
    """First backoff; each retry doubles it."""
    max_delay: float = attrs.field(default=8.0, validator=ge(0))
    jitter: float = attrs.field(default=0.25, validator=[ge(0), le(1)])
    """A backoff is shortened by up to this fraction, at random."""
    max_retry_after: float = attrs.field(default=120.0, validator=ge(0))
    """A provider's wait longer than this fails the call instead of waiting."""
    budget_ratio: float = attrs.field(default=0.2, validator=ge(0))
    """Process-wide: retries at most this fraction of recent first attempts (plus the floor)."""
    budget_min_per_second: float = attrs.field(default=10.0, validator=ge(0))
    """The floor of the retry budget, so isolated failures are always retried and a backend
    failing a share of requests at random is still retried at a useful rate (Finagle's and
    Linkerd's retry budgets use the same floor and ratio). However many calls wait out an
    outage, the backend sees at most this many retries per second beyond ``budget_ratio``."""
    budget_interval: float = attrs.field(default=10.0, validator=gt(0))
    """The interval the retry budget looks back over."""
    wait_max_attempts: int | None = attrs.field(default=None, validator=optional(ge(1)))
    """The attempt limit of a call in ``wait`` failure mode (see ``ChatRequest.failure_mode``).
    None (the default): no limit. Nobody waits on such a call, so it retries transient failures
    (429, 5xx, resets, timeouts, broken streams) until it succeeds or its wait deadline
    (``max_wait``, or the total deadline) passes; the backoff is capped at ``max_delay`` and the
    retry budget caps the rate of retries, so an outage brings no storm. ``max_attempts``
    limits ``fail_fast`` calls only."""
    hidden_retry_window: float = attrs.field(default=1.0, validator=ge(0))
    """For a call with ``retry_visible=False`` (the gateway's): seconds after submission within
    which a connection that failed before any reply byte is tried again. Its caller cannot see
    such a failure, and it waits for the answer, so the window is short."""
    wait_poll: float = attrs.field(default=1.0, validator=gt(0))
    """While a breaker probe is out, how often (seconds, jittered) a waiting call looks again."""
    fallback_on: tuple[str, ...] = (
        "Overloaded",
        "ContextTooLong",
        "CircuitOpen",
        "ContentFiltered",
    )
    """Error classes after which a call moves on to its next fallback model."""


@attrs.frozen(kw_only=True, repr=False)
class BreakerConfig(Record):
    """When a provider's circuit breaker opens, and for how long."""

    min_failures: int = attrs.field(default=5, validator=ge(1))
    """Failures in the window needed before it can open."""
    failure_rate: float = attrs.field(default=0.5, validator=[gt(0), le(1)])
    """Share of the attempts started in the window that must have failed for it to open."""
    window: float = attrs.field(default=30.0, validator=gt(0))
    open_for: float = attrs.field(default=10.0, validator=gt(0))
    """Seconds it stays open before one probe call may go."""
    scope: Literal["model", "provider"] = "model"
    """One breaker per model of the provider (one failing model does not block the others),
    or one for the whole provider (every model behind one endpoint)."""


@attrs.frozen(kw_only=True, repr=False)
class ModelConfig(Record):
    """Settings for one model of a provider: ``providers.NAME.models.MODEL`` (the model name
    without the provider prefix)."""

    tools: CapabilityOverride | None = None
    """What this model can do with tools, over the provider's known defaults; a call's own
    ``ToolOptions.capabilities`` goes over this. For a model that ignores ``tool_choice``::

        {"providers": {"ollama": {"models": {"llama3.1": {"tools": {"tool_choice": []}}}}}}
    """
    params: Mapping[str, Any] = attrs.field(factory=dict)
    """Generation parameters for this model, over the provider's ``params`` and under the
    call's own (see :func:`sluice.providers._params.merge_params`)."""


@attrs.frozen(kw_only=True, repr=False)
class QuirksConfig(Record):
    """Overrides of a provider's known quirks (see :class:`sluice._protocols.RequestQuirks`);
    every field left None keeps the provider's value."""

    omit_tool_choice: frozenset[str] | None = None
    """``tool_choice`` values the server rejects, e.g. ``["auto"]`` for vLLM."""
    echo_reasoning_content: bool | None = None
    max_tokens_field: str | None = None


AuthStyle = Literal["bearer", "x-api-key", "x-goog-api-key", "api-key", "none"]
"""Where the API key goes: ``Authorization: Bearer``, one of three key headers, or nowhere."""

_SENSITIVE_HEADER_PARTS = ("auth", "key", "token", "secret", "cookie", "signature")


def masked_headers(headers: Mapping[str, str]) -> str:
    """A repr of ``headers`` with the value of any header that may hold a secret masked."""
    shown = {
        name: "********" if any(p in name.lower() for p in _SENSITIVE_HEADER_PARTS) else value
        for name, value in headers.items()
    }
    return repr(shown)


@attrs.frozen(kw_only=True, repr=False)
class ProviderConfig(Record):
    """One backend. Builtin providers fill what is left unset here; any other name is a custom
    provider, which needs a ``base_url`` (and a ``protocol``, unless it is OpenAI-compatible)."""

    protocol: Literal["openai", "anthropic", "gemini", "ollama"] | None = None
    base_url: str | None = attrs.field(default=None, validator=check_http_url)
    """An absolute http(s) URL, with the protocol's version prefix (``.../v1``)."""
    region: str | None = None
    """One of a builtin's regional base URLs (``sluice providers list`` shows them)."""
    display_name: str | None = None
    api_key: Secret | None = None
    api_key_env: str | None = attrs.field(default=None, validator=check_env_name)
    """Environment variable that holds the key (read when the provider starts)."""
    auth: AuthStyle | None = None
    """Where the key is sent; by default the protocol's own way (the builtin's, if any)."""
    headers: Mapping[str, str] = attrs.field(factory=dict, repr=masked_headers)
    params: Mapping[str, Any] = attrs.field(factory=dict)
    """Generation parameters for every call to this provider (``temperature``, ``max_tokens``,
    ``top_k``, or any field of the protocol's request body); a model's and a call's own win."""
    drop_params: frozenset[str] = frozenset()
    """Parameters this provider rejects: left out of every request (logged at debug level)."""
    quirks: QuirksConfig | None = None
    rate_limit: RateLimitConfig = RateLimitConfig()
    breaker: BreakerConfig | None = BreakerConfig()
    """None turns the circuit breaker off for this provider."""
    deadlines: Deadlines | None = None
    connect_timeout: float = attrs.field(default=10.0, validator=gt(0))
    max_connections: int = attrs.field(default=2048, validator=ge(1))
    """Connections to this provider at most (its keep-alive pool's size)."""
    api_version: str | None = None
    """Azure OpenAI's ``api-version`` (``"2024-10-21"``): requests go to the deployment API,
    ``{base_url}/openai/deployments/{model}/chat/completions?api-version=...``, with the key in
    an ``api-key`` header, and the model name is the deployment's name. ``base_url`` is then the
    resource's root (``https://NAME.openai.azure.com``). Leave it unset for Azure's ``/openai/v1``
    API, which takes OpenAI's paths."""
    transport: Literal["fast", "httpx"] = "fast"
    """The hot path's HTTP client: sluice's own trio HTTP/1.1 client, or httpx (HTTP/2,
    SOCKS/HTTPS proxies and anything else the fast one does not cover)."""
    tools: CapabilityOverride | None = None
    """What every model of this provider can do with tools, over the known defaults (a
    model's own ``models.MODEL.tools`` and a call's ``ToolOptions.capabilities`` go over this).
    An OpenAI-compatible server is assumed to honour every ``tool_choice`` mode; for one that
    rejects ``required``::

        {"providers": {"local": {"tools": {"tool_choice": ["auto", "none", "specific"]}}}}
    """
    models: Mapping[str, ModelConfig] = attrs.field(factory=dict)
    """Per-model settings, by model name without the provider prefix."""


@attrs.frozen(kw_only=True, repr=False)
class PriceConfig(Record):
    """One model's price in US dollars per million tokens."""

    input: float = attrs.field(validator=ge(0))
    output: float = attrs.field(validator=ge(0))
    cache_read: float | None = attrs.field(default=None, validator=optional(ge(0)))
    """Prompt tokens read from the provider's cache; unset: the input price."""
    cache_write: float | None = attrs.field(default=None, validator=optional(ge(0)))
    """Prompt tokens written to the provider's cache; unset: the input price."""
    batch_discount: int = attrs.field(default=50, validator=[ge(0), le(100)])
    """Percent off every price above for lines sent through the provider's Batch API."""


def _check_budget(instance: BudgetConfig, _attribute: Any, _value: Any) -> None:
    if instance.max_usd is None and instance.max_tokens is None:
        raise ValueError("a budget needs max_usd, max_tokens or both")
    if (instance.scope == "tag") != (instance.tag is not None):
        raise ValueError("a budget names a tag exactly when its scope is 'tag'")


@attrs.frozen(kw_only=True, repr=False)
class BudgetConfig(Record):
    """A spending limit: calls that could pass it fail with ``BudgetExceeded`` unsent.

    ``global`` and ``tag`` budgets count what this runtime spends; a ``job`` budget also counts
    what the ledger already holds for the runtime's job (a resumed job keeps its budget).
    """

    scope: Literal["global", "tag", "job"] = attrs.field(default="global", validator=_check_budget)
    tag: str | None = None
    """The tag a ``tag`` budget covers (``ChatRequest.tag``)."""
    max_usd: float | None = attrs.field(default=None, validator=optional(ge(0)))
    max_tokens: int | None = attrs.field(default=None, validator=optional(ge(0)))
    """Input plus output tokens."""


@attrs.frozen(kw_only=True, repr=False)
class LedgerConfig(Record):
    """The TokenLedger: where it keeps its rows, what tokens cost, and spending budgets."""

    persist: bool = True
    """Keep the ledger in a SQLite file across runs."""
    path: str | None = None
    """The SQLite file. Unset: ``$SLUICE_LEDGER_DB`` (``off`` turns persistence off), else
    ``ledger.sqlite3`` in the platform's user data folder (``~/.local/share/sluice``)."""
    flush_interval: float = attrs.field(default=1.0, validator=gt(0))
    """Seconds between batched writes; a crash loses at most this much."""
    job: str | None = None
    """The job (run id) recorded with every call; unset: a new id per runtime."""
    prices: Mapping[str, PriceConfig] = attrs.field(factory=dict)
    """``provider:model`` (or ``provider:*``) to price, over the shipped table."""
    budgets: tuple[BudgetConfig, ...] = ()


@attrs.frozen(kw_only=True, repr=False)
class CacheConfig(Record):
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


_HEAD_TIMEOUT: float | None = 60.0
_READ_IDLE_TIMEOUT: float | None = 300.0


@attrs.frozen(kw_only=True, repr=False)
class ReplyLimits(Record):
    """Bounds on every reply, in force even when no deadline is configured.

    They keep a hostile or broken server from holding a call forever or growing its memory
    without end. A size limit passed is a terminal ``ProtocolError`` (the server would do it
    again, and each attempt may be billed); a time limit passed is a ``CallTimeout``, which is
    retried. The ``deadlines`` are usually tighter; these hold when a deadline is unset.
    """

    head_timeout: float | None = attrs.field(default=_HEAD_TIMEOUT, validator=optional(gt(0.0)))
    """Seconds from the first byte of a response head until the whole head has arrived, so a
    server trickling its head a byte at a time is cut off (sluice's own HTTP client; with the
    httpx transport the first-token deadline bounds the wait). None: no limit."""
    read_idle_timeout: float | None = attrs.field(
        default=_READ_IDLE_TIMEOUT, validator=optional(gt(0.0))
    )
    """Seconds a reply may go without progress (no event of a stream, no byte of a whole
    body), for calls whose ``deadlines.idle`` is unset. None: no limit."""
    max_line_bytes: int = attrs.field(default=MAX_LINE_BYTES, validator=ge(1024))
    """The longest line of a streamed reply (SSE or NDJSON)."""
    max_event_bytes: int = attrs.field(default=MAX_EVENT_BYTES, validator=ge(1024))
    """The most data one SSE event may carry."""
    max_body_bytes: int = attrs.field(default=64 * 1024 * 1024, validator=ge(1024))
    """The largest non-streamed reply body (after decompression)."""
    max_stream_bytes: int = attrs.field(default=256 * 1024 * 1024, validator=ge(1024))
    """The most a streamed reply may carry in all (after decompression): a server streaming
    valid events without end is cut off here, not when memory runs out. Set far above what
    the longest reply a model can give takes as SSE (a few hundred bytes per token)."""


def _deployment_model(_instance: Any, _attribute: Any, value: str) -> None:
    provider, sep, model = value.partition(":")
    if not sep or not provider or not model:
        raise ValueError(
            f"a deployment's model is 'provider:model' (a provider entry holds its base URL, key "
            f"and quotas), not {value!r}"
        )


@attrs.frozen(kw_only=True, repr=False)
class Deployment(Record):
    """One place a model group's calls can go: a provider entry and a model name there."""

    model: str = attrs.field(validator=_deployment_model)
    """``provider:model``. Each provider entry has its own base URL, key, quotas, cooldown and
    circuit breaker, so two deployments of one group are usually two provider entries (two keys,
    or an Azure deployment beside OpenAI)."""
    weight: float = attrs.field(default=1.0, validator=gt(0))
    """Its share of the traffic under ``weighted``; its capacity under ``least-busy`` when its
    provider sets no request limit."""


def _deployments(value: Any) -> tuple[Deployment, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"deployments is a list of deployments, not {value!r}")
    found = tuple(
        Deployment(model=d)
        if isinstance(d, str)
        else Deployment(**d)
        if isinstance(d, Mapping)
        else d
        for d in value
    )
    if not all(isinstance(d, Deployment) for d in found):
        raise TypeError("each deployment is a Deployment, a mapping or a 'provider:model' string")
    if not found:
        raise ValueError("a model group needs at least one deployment")
    models = [d.model for d in found]
    if len(set(models)) != len(models):
        raise ValueError(f"a model group names a deployment twice: {models}")
    return found


def _finite(_instance: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not math.isfinite(value):
        raise ValueError(f"'{attribute.name}' must be a finite number of seconds, got {value!r}")


RoutingStrategy = Literal["least-busy", "lowest-latency", "most-headroom", "weighted"]


@attrs.frozen(kw_only=True, repr=False)
class ModelGroup(Record):
    """One model name served by several deployments (``model="fast"`` in a call).

    Each call goes to one deployment, chosen by ``strategy`` among those not cooling down after a
    429 and whose circuit breaker is closed; a retryable failure moves the call to another
    deployment of the group at once, before any fallback model.
    """

    deployments: tuple[Deployment, ...] = attrs.field(converter=_deployments)
    """The deployments: ``Deployment`` entries, mappings of their fields, or plain
    ``"provider:model"`` strings."""
    strategy: RoutingStrategy = "least-busy"
    """``least-busy``: fewest calls in flight relative to capacity (the provider's request limit
    per minute, else the weight). ``lowest-latency``: lowest moving average of time to first
    token, exploring the others now and then so a recovered deployment wins traffic back.
    ``most-headroom``: largest share left of its binding request window. ``weighted``: at random
    by weight."""
    affinity: Literal["none", "prefix", "key"] = "none"
    """Keep calls together while their deployment is usable, so provider prompt caches hit:
    ``prefix`` by the first messages' text, ``key`` by ``ChatRequest.affinity_key``."""
    exploration: float = attrs.field(default=0.05, validator=[ge(0), le(1)])
    """``lowest-latency``: the share of calls sent to a deployment other than the fastest."""
    latency_halflife: float = attrs.field(default=20.0, validator=gt(0))
    """``lowest-latency``: calls after which an old time to first token counts half."""
    hedge: float = attrs.field(default=5.0, validator=[ge(0), _finite])
    """Seconds an attempt may go without an answer (a streamed call: its first chunk; any
    other: the reply's head) while another deployment of the group could take the call. Past
    it, the attempt is abandoned, the deployment is marked slow, and the call moves on; the
    first-token deadline still bounds the last deployment tried. Set it above the slowest
    time to first token the group's models normally take (reasoning models may think for
    long before their first chunk). 0: never move a call for slowness."""
    slow_for: float = attrs.field(default=30.0, validator=[gt(0), _finite])
    """Seconds a deployment that missed the hedge time is passed over by routing while
    another is usable."""


def _group_names(_instance: Any, _attribute: Any, value: Mapping[str, ModelGroup]) -> None:
    for name in value:
        if not name or ":" in name:
            raise ValueError(
                f"group name {name!r} must be non-empty and hold no ':' (calls name a group by "
                "its bare name, e.g. model=\"fast\"; 'provider:model' names one deployment)"
            )


@attrs.frozen(kw_only=True, repr=False)
class MetricsConfig(Record):
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


@attrs.frozen(kw_only=True, repr=False)
class TracingConfig(Record):
    """OpenTelemetry traces (needs ``opentelemetry-api``, the ``otel`` extra): one span per
    call, a child per attempt, GenAI semantic-convention attributes."""

    enabled: bool = False
    """Trace through the global tracer provider (or the one given to ``open_runtime``)."""


def _positive_or_none(_: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"'{attribute.name}' must be above 0 or null, got {value!r}")


def _model_names(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not all(isinstance(n, str) and n for n in value):
        raise ValueError(f"'{attribute.name}' must be a list of non-empty model names")


@attrs.frozen(kw_only=True, repr=False)
class GatewayConfig(Record):
    """Settings of the gateway (``sluice serve``) that live in the config file (``[gateway]``)."""

    models: tuple[str, ...] | None = attrs.field(
        default=None, converter=attrs.converters.optional(tuple), validator=_model_names
    )
    """The only model names the gateway serves: ``provider:model``, an alias or a group name
    (aliases and groups are always served). Any other name is refused with 404 before the
    runtime makes anything for it. None: every model a configured provider can serve.
    ``sluice serve --models`` overrides it."""


@attrs.frozen(kw_only=True, repr=False)
class RuntimeConfig(Record):
    """Everything :func:`sluice.open_runtime` needs; every field has a working default."""

    providers: Mapping[str, ProviderConfig] = attrs.field(factory=dict)
    retry: RetryConfig = RetryConfig()
    deadlines: Deadlines = Deadlines(total=600.0, first_token=120.0, idle=60.0)
    """Default deadlines for every call; a provider's or a call's own override them per field."""
    reply_limits: ReplyLimits = ReplyLimits()
    """Time and size bounds on every reply that hold whatever the deadlines say."""
    stream_buffer: int = attrs.field(default=8, validator=ge(0))
    """Event batches buffered per call before the producer waits for the consumer."""
    ledger: LedgerConfig = LedgerConfig()
    """Usage accounting, prices, persistence and budgets."""
    cache: CacheConfig = CacheConfig()
    """The response cache (off unless enabled here or by a call)."""
    store: str | None = None
    """Where quotas, cooldowns and budgets are kept: ``redis://host:6379/0`` shares them with
    every process using the same Redis and ``store_prefix``. Unset: ``$SLUICE_STORE``, else
    this process's memory."""
    store_prefix: str = "sluice"
    """One prefix per deployment: processes with the same prefix share one set of quotas."""
    on_store_error: Literal["fail", "local"] = "fail"
    """When Redis does not answer: refuse calls (``StoreUnavailable``), or admit against a
    local share of each limit until it answers again."""
    store_local_share: float = attrs.field(default=0.25, validator=[gt(0), le(1)])
    """The fraction of each limit, and of what was left of each shared budget, one process may
    use while Redis does not answer."""
    metrics: MetricsConfig = MetricsConfig()
    """Prometheus metrics (off unless enabled)."""
    tracing: TracingConfig = TracingConfig()
    """OpenTelemetry traces (off unless enabled)."""
    gateway: GatewayConfig = GatewayConfig()
    """What ``sluice serve`` reads from the config (the runtime itself ignores it)."""
    groups: Mapping[str, ModelGroup] = attrs.field(factory=dict, validator=_group_names)
    """Model groups by name: a call whose model is a group's name goes to one of its
    deployments (see :class:`ModelGroup`). A name holds no ``:``."""
    trim_memory_every: float | None = attrs.field(default=60.0, validator=_positive_or_none)
    """Seconds between giving the C allocator's free memory back to the system (glibc's
    ``malloc_trim``; elsewhere nothing), so that a long-running process's RSS follows what it
    uses instead of its highest peak. None: never (an application with its own policy)."""


def load_config(
    raw: bytes | str | Mapping[str, Any], *, format: Literal["json", "toml"] = "json"
) -> RuntimeConfig:
    """Load a config from JSON (or TOML) text or an already parsed mapping.

    Raises:
        ConfigError: the text does not parse, or a key or value is wrong (the message names the
            path of each problem, and for an unknown key the valid keys).
    """
    return _structure(_parse(raw, format) if isinstance(raw, bytes | str) else raw)


def _parse(raw: bytes | str, format: Literal["json", "toml"]) -> Any:
    if format == "toml":
        import tomllib  # only config files use it: not loaded by ``import sluice``

        try:
            return tomllib.loads(raw.decode() if isinstance(raw, bytes) else raw)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config is not valid TOML: {exc}") from None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"config is not valid JSON: {exc}") from None


def _structure(data: Any, note: str = "") -> RuntimeConfig:
    import cattrs  # on first use: `import sluice` does not load it

    try:
        return _config_converter().structure(data, RuntimeConfig)
    except (cattrs.BaseValidationError, ValueError, TypeError) as exc:
        raise ConfigError(f"invalid config: {format_validation_error(exc)}{note}") from None


_shorthands_added = False


def _config_converter() -> OrjsonConverter:
    """The converter, taught the config's shorthands before it first builds a config's hooks.

    A config file may name a deployment by its ``"provider:model"`` string and a group by the
    list of its deployments (``fast = ["openai:gpt-4o-mini", "groq:llama-3.1-8b"]``), as the
    classes themselves accept; cattrs would otherwise ask every entry for mapping keys.
    """
    global _shorthands_added
    converter = get_converter()
    if not _shorthands_added:
        deployment = converter.get_structure_hook(Deployment)
        converter.register_structure_hook(
            Deployment, lambda v, t: Deployment(model=v) if isinstance(v, str) else deployment(v, t)
        )
        group = converter.get_structure_hook(ModelGroup)  # built after, so it uses the above
        converter.register_structure_hook(
            ModelGroup,
            lambda v, t: ModelGroup(deployments=v) if isinstance(v, list) else group(v, t),
        )
        _shorthands_added = True
    return converter


def default_config_path() -> Path:
    """``config.toml`` in the platform's config directory (``~/.config/sluice`` on Linux)."""
    import platformdirs

    return Path(platformdirs.user_config_dir("sluice")) / "config.toml"


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The config entries set by environment variables, as a nested mapping.

    ``SLUICE_`` followed by a path whose parts are joined by ``__`` sets that entry:
    ``SLUICE_PROVIDERS__OPENAI__BASE_URL=http://...`` sets ``providers.openai.base_url`` and
    ``SLUICE_RETRY__MAX_ATTEMPTS=2`` sets ``retry.max_attempts``. Parts are lower-cased, and in
    a provider's name ``_`` stands for ``-`` (``SLUICE_PROVIDERS__KIMI_CN__REGION``). A value
    that parses as JSON (a number, ``true``, a list, an object) is that value, anything else
    the string itself; where the entry is a list, such a string is split at commas
    (``SLUICE_PROVIDERS__VLLM__DROP_PARAMS=seed,top_p``). Variables without ``__``
    (``SLUICE_CONFIG``, ``SLUICE_MASTER_KEY``) are not overrides.
    """
    env = os.environ if environ is None else environ
    found: dict[str, Any] = {}
    for name in sorted(env):
        if not name.startswith("SLUICE_") or "__" not in name:
            continue
        path = [part.lower() for part in name.removeprefix("SLUICE_").split("__")]
        if not all(path):
            raise ConfigError(f"environment variable {name}: empty part in the config path")
        if path[0] == "providers" and len(path) > 1:
            path[1] = path[1].replace("_", "-")
        try:
            value: Any = orjson.loads(env[name])
        except orjson.JSONDecodeError:
            value = EnvText(env[name])  # split at commas where a list is expected
        node = found
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"environment variable {name} conflicts with another override")
            node = child
        node[path[-1]] = value
    return found


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        current = merged.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            merged[key] = _deep_merge(current, value)
        else:
            merged[key] = value
    return merged


def load_config_file(
    path: str | os.PathLike[str], environ: Mapping[str, str] | None = None
) -> RuntimeConfig:
    """Load the TOML file ``path`` (JSON when its name ends in ``.json``), with the environment
    overrides of ``environ`` (default ``os.environ``; see :func:`env_overrides`) laid over it.

    Raises:
        ConfigError: the file cannot be read, does not parse, or holds a wrong key or value;
            the message starts with the file's path.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    fmt: Literal["json", "toml"] = "json" if path.suffix.lower() == ".json" else "toml"
    try:
        data = _parse(raw, fmt)
        overrides = env_overrides(environ)
        note = " (environment overrides: SLUICE_*__*)" if overrides else ""
        return _structure(_deep_merge(data, overrides) if overrides else data, note)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def config_from_env(environ: Mapping[str, str] | None = None) -> RuntimeConfig:
    """The config file named by ``SLUICE_CONFIG``, else :func:`default_config_path` if it
    exists, else the defaults; with the environment overrides laid over it.

    Raises:
        ConfigError: see :func:`load_config_file`.
    """
    env = os.environ if environ is None else environ
    named = env.get("SLUICE_CONFIG")
    if named:
        try:
            return load_config_file(named, env)
        except ConfigError as exc:
            raise ConfigError(f"{exc} (from SLUICE_CONFIG)") from None
    path = default_config_path()
    if path.is_file():
        return load_config_file(path, env)
    overrides = env_overrides(env)
    if not overrides:
        return RuntimeConfig()
    return _structure(overrides, " (environment overrides: SLUICE_*__*)")
