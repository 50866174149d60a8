"""What one load test is: :class:`LoadTest`, the job's own description of a run (the model,
the load shape, the bound, the workload, what counts as good). Pure data, checked when made;
:mod:`.run` carries it out, :mod:`.options` makes it from the command line's flags.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from .aggregate import DEFAULT_MAX_ERROR_RATE, DEFAULT_MAX_LAG
from .arrivals import ClosedLoop, LoadShape, OpenLoop
from .endpoints import ENDPOINTS
from .slo import Slo
from .workload import Workload

__all__ = ["LoadTest"]


def _positive_or_none(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"{attribute.name} must be above 0, got {value!r}")


@attrs.frozen(kw_only=True)
class LoadTest:
    """One load test: what to call, how hard, for how long, and what counts as good.

    At least one of ``duration`` and ``requests`` bounds the run; with both, whichever is
    reached first ends the sending. Requests already sent are always waited for (each within
    ``timeout``), so a run always ends by itself.
    """

    model: str
    shape: LoadShape
    duration: float | None = attrs.field(default=None, validator=_positive_or_none)
    """Seconds during which requests are sent."""
    requests: int | None = attrs.field(default=None, validator=_positive_or_none)
    workload: Workload = Workload()
    seed: int = 0
    slos: tuple[Slo, ...] = ()
    max_lag: float = DEFAULT_MAX_LAG
    """Send-lag p99 (seconds) beyond which the run is marked invalid."""
    max_error_rate: float = attrs.field(
        default=DEFAULT_MAX_ERROR_RATE, validator=[attrs.validators.ge(0), attrs.validators.le(1)]
    )
    """Fraction of failed requests beyond which the run is marked invalid."""
    timeout: float | None = attrs.field(default=600.0, validator=_positive_or_none)
    """Deadline of each request, queueing included."""
    warmup: int = attrs.field(default=1, validator=attrs.validators.ge(0))
    """Warm-up requests sent one after another before the clock starts (0 for none): the
    first call to a provider starts its actor, loads its codec and opens a connection, which
    would otherwise make the first scheduled request late. They are like the workload's own
    requests but drawn from a generator of their own and named apart (``w0``, ``w1``, ...
    where the measured ones say ``r0``, ``r1``, ...), so the measured requests are the same
    with or without a warm-up, and a simulator that keys its seeded latency draws on the
    request's content gives them the same draws. Their records are kept, marked ``warmup``,
    and left out of every aggregate."""
    endpoint: str = attrs.field(default="chat", validator=attrs.validators.in_(ENDPOINTS))
    """``chat``, ``embeddings`` or ``responses`` through the runtime (a responses test's
    model must speak the ``openai-responses`` protocol:
    :func:`~.endpoints.responses_config`), or ``completions`` sent straight to the
    provider's base URL (:mod:`.endpoints`)."""
    embedding_batch: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    """Inputs per embeddings request."""
    warmup_seconds: float = attrs.field(default=0.0, validator=attrs.validators.ge(0))
    """Warm up for this many seconds instead (requests one after another, at least one when
    above 0); with both, the warm-up ends when either is reached."""
    extra_body: Mapping[str, Any] = attrs.field(factory=dict)
    """Merged into every request's body as-is (``ChatRequest.extra_body``, which the
    responses codec merges too; an embeddings or completions request's by the same rules)."""
    headers: tuple[tuple[str, str], ...] = ()
    """HTTP headers added to every request (``ChatRequest.extra_headers``; the same for
    embeddings and completions)."""
    fixed_output: bool = False
    """Ask for replies exactly ``max_tokens`` long: each chat, responses or completions
    request also carries ``ignore_eos`` and ``min_tokens`` (for servers that honour them,
    such as vLLM), and a reply that comes back shorter makes the run invalid. Embeddings
    have no output length: :mod:`.options` refuses the flag for them."""

    def request_body(self, max_tokens: int | None) -> dict[str, Any]:
        """What a request asking for ``max_tokens`` adds to its body."""
        if not self.fixed_output:
            return dict(self.extra_body)
        return {**self.extra_body, "ignore_eos": True, "min_tokens": max_tokens}

    def __attrs_post_init__(self) -> None:
        if self.duration is None and self.requests is None:
            raise ValueError("bound the run with a duration or a request count")

    def describe(self) -> dict[str, Any]:
        """The test as plain data, for the results file."""
        shape = self.shape
        return {
            "model": self.model,
            "load": shape.describe,
            "rate": shape.rate if isinstance(shape, OpenLoop) else None,
            "concurrency": shape.concurrency if isinstance(shape, ClosedLoop) else None,
            "max_in_flight": shape.max_in_flight if isinstance(shape, OpenLoop) else None,
            "duration_s": self.duration,
            "requests": self.requests,
            "workload": self.workload.describe(),
            "seed": self.seed,
            "slos": [slo.describe() for slo in self.slos],
            "max_lag_s": self.max_lag,
            "timeout_s": self.timeout,
            "warmup": self.warmup,
            "warmup_s": self.warmup_seconds,
            "endpoint": self.endpoint,
            "embedding_batch": self.embedding_batch if self.endpoint == "embeddings" else None,
            "max_error_rate": self.max_error_rate,
            "extra_body": dict(self.extra_body),
            "header_names": [name for name, _ in self.headers],
            "fixed_output": self.fixed_output,
        }
