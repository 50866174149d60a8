"""The one place the runtime tells about calls and attempts: metrics, traces, hooks, logs.

The runtime calls :meth:`Observer.call_started` at submit and :meth:`Observer.call_ended` when
the consumer has the call's end (or left); each ProviderActor calls
:meth:`Observer.attempt_started` and :meth:`Observer.attempt_ended` around every attempt. Each
part is optional and costs nothing when off; every method is synchronous, allocates little and
never raises into a call (a hook's work is queued, see :mod:`.hooks`).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import trio

from sluice._errors import ConfigError
from sluice._mail import AttemptSucceeded, attempt_failure
from sluice._messages import Usage

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice._config import RuntimeConfig
    from sluice._embeddings import EmbedResult
    from sluice._errors import SluiceError
    from sluice._ledger.book import LedgerBook
    from sluice._ledger.prices import PriceTable
    from sluice._mail import AttemptOutcome, Call, RecordUsage, StartAttempt
    from sluice._messages import ChatResult

    from .hooks import HookRunner
    from .metrics import Metrics
    from .records import Hooks, Outcome
    from .tracing import Tracer

__all__ = ["Observer", "build_observer"]

log = logging.getLogger("sluice.calls")


class _AttemptWatch:
    __slots__ = ("span", "started")

    def __init__(self, span: Any, started: float) -> None:
        self.span = span
        self.started = started


_WATCHED = _AttemptWatch(None, 0.0)
"""The watch of every attempt when only metrics are on (they need nothing from its start)."""


class Observer:
    """Hands what calls and attempts did to the parts that are on."""

    def __init__(
        self,
        prices: PriceTable | None,
        *,
        metrics: Metrics | None = None,
        tracer: Tracer | None = None,
        hooks: HookRunner | None = None,
    ) -> None:
        self.prices = prices
        self.metrics = metrics
        self.tracer = tracer
        self.hooks = hooks
        self.last_errors: dict[str, tuple[float, str]] = {}
        """Per provider: when (trio's clock) and what its last failed attempt was."""
        self._watch = metrics is not None or tracer is not None or hooks is not None
        self._now = _clock()

    def _cost(self, provider: str, model: str, usage: Any) -> int | None:
        return None if self.prices is None else self.prices.cost(provider, model, usage)

    # calls ---------------------------------------------------------------------------------

    def call_started(self, call: Call) -> None:
        if self.tracer is not None:
            self.tracer.call_started(call)

    def call_ended(self, call: Call, result: ChatResult | None, error: SluiceError | None) -> None:
        outcome: Outcome = (
            "ok" if result is not None else "error" if error is not None else "abandoned"
        )
        if outcome == "error" and log.isEnabledFor(logging.INFO):
            log.info(
                "call %s to %s:%s failed: %s", call.call_id, call.provider.name, call.model, error
            )
        if not self._watch:
            return
        provider, model, duration, error_type = _ended_where(call, result, error)
        metrics = self.metrics
        if metrics is not None:
            label = metrics.models.fold(model)  # a caller names models: capped, then "other"
            metrics.calls.inc((provider, label, outcome, error_type))
            metrics.duration.observe((provider, label, outcome), duration)
            if result is not None and result.timings.time_to_first_token is not None:
                metrics.ttft.observe((provider, label), result.timings.time_to_first_token)
        if self.tracer is not None:
            self.tracer.call_ended(call, outcome, result, error, self._now())
        if self.hooks is not None and self.hooks.hooks.on_call_end is not None:
            from .records import CallRecord  # loaded by the first hook's record

            request = call.request
            usage = result.usage if result is not None else None
            cost = None if usage is None else self._cost(provider, model, usage)
            self.hooks.call_ended(
                CallRecord(
                    call_id=call.call_id,
                    provider=provider,
                    model=model,
                    tag=request.tag,
                    priority=request.priority,
                    stream=request.stream,
                    messages=len(request.messages),
                    tools=len(request.tools or ()),
                    outcome=outcome,
                    result=result,
                    error=error,
                    usage=usage if usage is not None else _ZERO,
                    cost_usd=None if cost is None else cost / 1_000_000,
                    attempts=result.attempts if result is not None else _attempts(error),
                    submitted_at=call.submitted_at,
                    duration=duration,
                    time_to_first_token=(
                        result.timings.time_to_first_token if result is not None else None
                    ),
                    queued=result.timings.queued if result is not None else None,
                )
            )

    def embed_ended(
        self, call: Call, result: EmbedResult | None, error: SluiceError | None
    ) -> None:
        """An embedding call ended: counted as a call (``sluice_calls``, its duration) and as
        an embedding call with its inputs; its attempts' tokens and cost were counted as they
        ended."""
        outcome: Outcome = (
            "ok" if result is not None else "error" if error is not None else "abandoned"
        )
        if outcome == "error" and log.isEnabledFor(logging.INFO):
            log.info(
                "embedding call %s to %s:%s failed: %s",
                call.call_id,
                call.provider.name,
                call.model,
                error,
            )
        metrics = self.metrics
        if metrics is None:
            return
        provider, model, duration, error_type = _ended_where(call, result, error)
        label = metrics.models.fold(model)
        metrics.calls.inc((provider, label, outcome, error_type))
        metrics.duration.observe((provider, label, outcome), duration)
        metrics.embed_calls.inc((provider, label, outcome))
        if result is not None:
            metrics.embed_inputs.inc((provider, label), len(result.vectors))

    # attempts ------------------------------------------------------------------------------

    def attempt_started(self, msg: StartAttempt) -> _AttemptWatch | None:
        if msg.attempt > 1 and log.isEnabledFor(logging.INFO):
            call = msg.call
            log.info(
                "call %s: retry, attempt %d to %s:%s",
                call.call_id,
                msg.attempt,
                call.provider.name,
                call.model,
            )
        if not self._watch:
            return None
        tracer = self.tracer
        timed = self.hooks is not None and self.hooks.hooks.on_attempt_end is not None
        if tracer is None and not timed:
            return _WATCHED  # metrics alone keep nothing per attempt: no object either
        now = self._now()  # only the trace and a hook's record need the start time
        span = tracer.attempt_started(msg.call, msg.attempt, now) if tracer is not None else None
        if span is None and not timed:
            return _WATCHED
        return _AttemptWatch(span, now)

    def attempt_ended(
        self,
        watch: _AttemptWatch | None,
        msg: StartAttempt,
        outcome: AttemptOutcome | None,
        first_token_at: float | None,
        usage: RecordUsage | None,
        delivered: int,
    ) -> None:
        call = msg.call
        provider, model = call.provider.name, call.model
        error: SluiceError | None = None
        result: Outcome
        failed = attempt_failure(outcome)  # (a success's path never loads a failure's class)
        if isinstance(outcome, AttemptSucceeded):
            result = "ok"
        elif failed is not None:
            result = "error"
            error = failed.error
            self.last_errors[provider] = (
                self._now(),
                f"{type(error).__name__}: {error.message}",
            )
            if log.isEnabledFor(logging.INFO):
                log.info(
                    "call %s attempt %d to %s:%s failed: %s: %s%s",
                    call.call_id,
                    msg.attempt,
                    provider,
                    model,
                    type(error).__name__,
                    error.message,
                    f" (stream reset after {delivered} deltas)" if delivered else "",
                )
        else:
            result = "abandoned"
        if watch is None:
            return
        now = self._now()  # one clock read for the metrics, the trace and the hook
        metrics = self.metrics
        hooked = self.hooks is not None and self.hooks.hooks.on_attempt_end is not None
        # The price lookup only for the parts that report cost (tracing does not).
        priced = usage is not None and (metrics is not None or hooked)
        cost = self._cost(provider, model, usage.usage) if priced and usage is not None else None
        if metrics is not None:
            error_type = type(error).__name__ if error is not None else ""
            label = metrics.models.fold(model)
            metrics.attempts.inc((provider, label, result, error_type))
            if usage is not None:
                metrics.usage(provider, label, usage.usage, cost)
                out = usage.usage.output_tokens
                if result == "ok" and first_token_at is not None and out > 1:
                    metrics.itl.observe((provider, label), (now - first_token_at) / (out - 1))
        if self.tracer is not None and watch.span is not None:
            self.tracer.attempt_ended(
                watch.span, now, result, error, usage.usage if usage else None, delivered
            )
        if hooked and self.hooks is not None:
            from .records import AttemptRecord  # loaded by the first hook's record

            self.hooks.attempt_ended(
                AttemptRecord(
                    call_id=call.call_id,
                    attempt=msg.attempt,
                    provider=provider,
                    model=model,
                    outcome=result,
                    error=error,
                    usage=usage.usage if usage is not None else None,
                    cost_usd=None if cost is None else cost / 1_000_000,
                    started_at=watch.started,
                    duration=now - watch.started,
                    time_to_first_token=(
                        None if first_token_at is None else first_token_at - watch.started
                    ),
                    delivered=delivered,
                )
            )

    def admitted(self, key: str, waited: float) -> None:
        """An attempt under quota key ``key`` was admitted after ``waited`` seconds."""
        metrics = self.metrics
        if metrics is not None:
            metrics.admission_wait.observe((metrics.keys.fold(key),), waited)

    def logs_changes(self) -> bool:
        """Whether to watch breakers and cooldowns for log lines: ``sluice`` logs at INFO."""
        return logging.getLogger("sluice").isEnabledFor(logging.INFO)

    def extra_gauges(self, book: LedgerBook | None) -> Callable[[], dict[str, float]]:
        """What the metrics read at scrape time besides the runtime's statistics."""

        def read() -> dict[str, float]:
            hooks = self.hooks
            since = book.dirty_since if book is not None else None
            return {
                "hook_drops": hooks.dropped if hooks is not None else 0,
                "hook_errors": hooks.failed if hooks is not None else 0,
                "ledger_lag": 0.0 if since is None else max(0.0, time.monotonic() - since),
            }

        return read

    def actor_restarted(self, name: str) -> None:
        if self.metrics is not None:
            # Provider actors are named "provider NAME": one label value per provider.
            self.metrics.restarts.inc((name,))


def _clock() -> Callable[[], float]:
    """What reads trio's clock: the run's clock's own reader (a call, where
    ``trio.current_time`` makes three to find it), or outside a run ``trio.current_time``."""
    try:
        return trio.lowlevel.current_clock().current_time
    except RuntimeError:
        return trio.current_time


def _ended_where(
    call: Call, result: ChatResult | EmbedResult | None, error: SluiceError | None
) -> tuple[str, str, float, str]:
    """Where and how a call ended, for its metrics and span: the provider and model that
    answered (the error's, else the call's last route, when it failed), its duration, and the
    error's type name ("" for a success)."""
    if result is not None:
        return result.provider, result.model, result.timings.total, ""
    provider = getattr(error, "provider", None) or call.provider.name
    model = getattr(error, "model", None) or call.model
    duration = trio.current_time() - call.submitted_at
    return provider, model, duration, type(error).__name__ if error is not None else ""


def _attempts(error: SluiceError | None) -> int:
    attempt = getattr(error, "attempt", 0)
    return attempt if isinstance(attempt, int) else 0


_ZERO = Usage()


def build_observer(
    config: RuntimeConfig,
    book: LedgerBook,
    store: object | None,
    hooks: Hooks | None,
    tracer_provider: Any,
) -> Observer:
    """The observer ``config`` asks for; ``prometheus_client`` and ``opentelemetry`` are
    imported only when metrics or tracing are on.

    Raises:
        ConfigError: tracing is enabled but ``opentelemetry-api`` is not installed.
    """
    metrics = None
    if config.metrics.active:
        from .metrics import Metrics

        metrics = Metrics(config.metrics.max_label_values)
    tracer = None
    if config.tracing.enabled:
        try:
            from .tracing import Tracer
        except ImportError:
            raise ConfigError(
                "tracing.enabled needs opentelemetry-api: pip install 'sluice[otel]'"
            ) from None
        tracer = Tracer(tracer_provider)
    runner = None
    if hooks is not None and (hooks.on_call_end is not None or hooks.on_attempt_end is not None):
        from .hooks import HookRunner

        runner = HookRunner(hooks)
    observer = Observer(book.prices, metrics=metrics, tracer=tracer, hooks=runner)
    if metrics is not None:
        metrics.gauges.extra = observer.extra_gauges(book if store is not None else None)
    return observer
