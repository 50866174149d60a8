"""The simulator's configuration: one frozen, keyword-only attrs value.

Every field has a default that gives an instant, fault-free, unlimited, deterministic server.
Derive variants with ``attrs.evolve``. Bad values fail at construction with a ``ValueError``
(attrs validators), and every ``script`` and ``fault_rates`` directive is parsed there too, so
a typo never reaches a running server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs
from attrs.validators import deep_iterable, ge, gt, instance_of, optional

from .._capabilities import WITHOUT_TOOLS, ToolCapabilities
from ._directives import parse_directive

__all__ = ["DEFAULT_MODELS", "SimulatorConfig"]

DEFAULT_MODELS: tuple[str, ...] = ("sim-small", "sim-large", "sim-echo")
"""Model ids listed by ``GET /v1/models``. Chat accepts any model name."""


def _probability(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"'{attribute.name}' must be a probability in [0, 1]: {value!r}")


def _check_script(_instance: object, _attribute: object, value: tuple[str, ...]) -> None:
    for index, directive in enumerate(value):
        try:
            parse_directive(directive)
        except ValueError as exc:
            raise ValueError(f"script[{index}]: {exc}") from None


def _rate_pairs(value: Mapping[str, float] | Iterable[tuple[str, float]]) -> tuple[Any, ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(tuple(item) for item in items)


def _check_fault_rates(_instance: object, _attribute: object, value: tuple[Any, ...]) -> None:
    for item in value:
        if len(item) != 2 or not isinstance(item[0], str):
            raise ValueError(f"fault_rates: expected (directive, probability) pairs, got {item!r}")
        directive, rate = item
        try:
            parse_directive(directive)
        except ValueError as exc:
            raise ValueError(f"fault_rates[{directive!r}]: {exc}") from None
        if not isinstance(rate, int | float) or isinstance(rate, bool) or not 0 <= rate <= 1:
            raise ValueError(
                f"fault_rates[{directive!r}] must be a probability in [0, 1]: {rate!r}"
            )


def _non_negative_or_none(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not value >= 0:
        raise ValueError(f"'{attribute.name}' must be >= 0 or None: {value!r}")


@attrs.frozen(kw_only=True)
class SimulatorConfig:
    """How the simulator answers: latency, content size and faults."""

    seed: int = 0
    """Mixed into every generated reply; the same seed and messages give the same reply."""
    ttft: float = attrs.field(default=0.0, validator=ge(0))
    """Seconds from the request to the first chunk. Response headers go out with that chunk."""
    tokens_per_second: float | None = attrs.field(default=0.0, validator=_non_negative_or_none)
    """Pace of the stream after the first chunk; 0 or None sends every chunk at once."""
    tokens_per_chunk: int = attrs.field(default=1, validator=ge(1))
    """Tokens carried by one streamed content (or tool-argument) chunk."""
    output_tokens: int = attrs.field(default=24, validator=ge(0))
    """Length of a text reply when ``max_tokens`` does not cut it shorter."""
    models: tuple[str, ...] = attrs.field(
        default=DEFAULT_MODELS, validator=deep_iterable(instance_of(str), instance_of(tuple))
    )
    """Model ids listed by ``GET /v1/models``."""

    rate_429: float = attrs.field(default=0.0, validator=_probability)
    """Probability that a chat request is refused with 429."""
    retry_after: float = attrs.field(default=1.0, validator=ge(0))
    """Seconds announced in ``Retry-After`` on a 429 whose directive does not say."""
    rate_500: float = attrs.field(default=0.0, validator=_probability)
    """Probability that a chat request fails with 500."""
    rate_disconnect: float = attrs.field(default=0.0, validator=_probability)
    """Probability that a chat reply is cut mid-body."""
    disconnect_after: int = attrs.field(default=3, validator=ge(0))
    """SSE data events sent before a random (or argument-less) disconnect cuts the stream."""
    fault_seed: int = 0
    """Seeds the fault dice, so a run's sequence of random faults repeats exactly."""
    rate_529: float = attrs.field(default=0.0, validator=_probability)
    """Probability that a generation request fails with 529 (overloaded)."""
    rate_broken_json: float = attrs.field(default=0.0, validator=_probability)
    """Probability that a reply's JSON text (structured output, tool arguments) is broken."""
    fault_rates: tuple[tuple[str, float], ...] = attrs.field(
        default=(), converter=_rate_pairs, validator=_check_fault_rates
    )
    """More random faults: directive text to probability (a mapping or pairs), for example
    ``{"stall:30": 0.01, "malformed:2": 0.02, "reset": 0.01}``. Drawn with the rates above in
    one roll per request, so all the probabilities together must be at most 1."""
    script: tuple[str, ...] = attrs.field(
        default=(),
        validator=[deep_iterable(instance_of(str), instance_of(tuple)), _check_script],
    )
    """Directives for the first generation requests (chat and messages), in arrival order
    (``"ok"``, ``"429:retry_after=2"``, ``"529"``, ``"disconnect:3"``, ``"stall_after:2:30"``,
    ...; see :mod:`.directives`); later requests fall back to the random rates."""

    ignore_tool_choice: bool = False
    """Act as a server without tool support: ignore ``tools`` and ``tool_choice`` and answer
    text, or JSON text when ``response_format``/``format`` asks for it. Models whose name ends
    in ``notools`` (``sim-notools``) behave so whatever this says."""
    rpm: int | None = attrs.field(default=None, validator=optional([instance_of(int), ge(1)]))
    """Requests per minute the server admits (a sliding window on trio's clock); None for no
    limit. Generation requests only; ones answered by an error fault, and refused ones, do not
    count. Every response then reports the limits in ``x-ratelimit-*`` headers."""
    tpm: int | None = attrs.field(default=None, validator=optional([instance_of(int), ge(1)]))
    """Tokens per minute (prompt plus reply) the server admits; None for no limit."""
    ping_interval: float = attrs.field(default=10.0, validator=gt(0))
    """Seconds between the ``ping`` events of a paced Anthropic stream (there is always one
    after the first block starts)."""

    # The latency model (:mod:`.latency`); at these defaults the pacing above is exact.
    ttft_jitter: float = attrs.field(default=0.0, validator=ge(0))
    """Standard deviation of the time to first token: each request draws it from a gamma
    distribution with mean ``ttft`` and this deviation (0: always exactly ``ttft``)."""
    itl_jitter: float = attrs.field(default=0.0, validator=ge(0))
    """Standard deviation of the time per output token: each gap between chunks is the later
    chunk's tokens times a gamma draw with mean ``1 / tokens_per_second`` and this deviation
    (0: evenly paced). Needs ``tokens_per_second``."""
    capacity: int | None = attrs.field(default=None, validator=optional([instance_of(int), ge(1)]))
    """Generations served at once; None for no limit. A request that finds them all busy
    waits, first come first served, for the earliest to finish, so beyond
    ``capacity / mean generation time`` requests per second (the saturation rate) queues and
    latency grow as on a real server at its batch limit."""
    latency_seed: int = 0
    """Seeds the latency draws, apart from the fault dice."""
    embedding_tokens_per_second: float | None = attrs.field(
        default=None, validator=_non_negative_or_none
    )
    """Input tokens an embeddings request is processed at, on top of its ``ttft`` draw (a
    request of N tokens answers ``N / this`` seconds later); 0 or None: no time per token."""

    # The batch APIs (OpenAI's Files + Batches, Anthropic's Message Batches; :mod:`.batch_core`).
    batch_time: float = attrs.field(default=0.0, validator=ge(0))
    """Seconds a batch takes from its create to its end, its lines processed evenly over it
    (0: ended at the next look)."""
    batch_error_rate: float = attrs.field(default=0.0, validator=_probability)
    """Probability that a batch line fails (an error line: 500 on OpenAI, ``errored`` on
    Anthropic)."""
    batch_expiry_rate: float = attrs.field(default=0.0, validator=_probability)
    """Probability that a batch line expires unprocessed (its batch then ends expired)."""
    batch_max_requests: int | None = attrs.field(
        default=None, validator=optional([instance_of(int), ge(1)])
    )
    """Requests one batch may hold; None for the API's own (OpenAI 50,000, Anthropic
    100,000)."""
    batch_max_bytes: int | None = attrs.field(
        default=None, validator=optional([instance_of(int), ge(1)])
    )
    """Bytes of an uploaded batch file (OpenAI) or a create body (Anthropic); None for the
    API's own (200 MB, 256 MB)."""
    batch_enqueued_tokens: int | None = attrs.field(
        default=None, validator=optional([instance_of(int), ge(1)])
    )
    """Prompt tokens per model that may wait in unfinished batches; a batch over it fails with
    ``token_limit_exceeded`` (OpenAI) or its create is refused with 429 (Anthropic). None: no
    limit."""
    batch_upload_delay: float = attrs.field(default=0.0, validator=ge(0))
    """Seconds a file upload waits, after the file is stored, before it answers."""
    batch_create_delay: float = attrs.field(default=0.0, validator=ge(0))
    """Seconds a batch create waits, after the batch exists, before it answers."""
    batch_download_rate: float | None = attrs.field(default=None, validator=optional(gt(0)))
    """Bytes per second at which file contents and batch results are sent; None: at once."""

    def __attrs_post_init__(self) -> None:
        total = self.rate_429 + self.rate_500 + self.rate_disconnect + self.rate_529
        total += self.rate_broken_json + sum(rate for _, rate in self.fault_rates)
        if total > 1:
            raise ValueError(
                "rate_429 + rate_500 + rate_disconnect + rate_529 + rate_broken_json + "
                f"fault_rates must be at most 1, got {total:g}"
            )
        if self.batch_error_rate + self.batch_expiry_rate > 1:
            raise ValueError("batch_error_rate + batch_expiry_rate must be at most 1")
        if self.itl_jitter and not self.tokens_per_second:
            raise ValueError("'itl_jitter' needs a pace: set 'tokens_per_second' too")

    @property
    def served_capabilities(self) -> ToolCapabilities | None:
        """What every model of a server with this config can do with tools, when the config
        decides it (``ignore_tool_choice``: nothing native); None when each model's entry in
        the provider registry holds. A runtime that starts this server uses it for ``sim``."""
        return WITHOUT_TOOLS if self.ignore_tool_choice else None

    @property
    def latency_modelled(self) -> bool:
        """True when timings are drawn (jitter) or requests can queue (``capacity``)."""
        return bool(self.ttft_jitter or self.itl_jitter or self.capacity is not None)

    @property
    def paced(self) -> bool:
        """True when chunks are spread out in time (``tokens_per_second`` > 0)."""
        return bool(self.tokens_per_second)

    @property
    def has_random_faults(self) -> bool:
        """True when any fault rate is above zero."""
        return bool(
            self.rate_429
            or self.rate_500
            or self.rate_disconnect
            or self.rate_529
            or self.rate_broken_json
            or any(rate for _, rate in self.fault_rates)
        )

    @property
    def has_quota(self) -> bool:
        """True when ``rpm`` or ``tpm`` is set."""
        return self.rpm is not None or self.tpm is not None
