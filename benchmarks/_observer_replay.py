"""What sluice's own observability work costs per call, measured by replaying it.

``benchmarks.overhead --observability`` compares runtimes with metrics, or tracing through the
OpenTelemetry API's no-op provider, against one without. On a busy machine those ratios swing
by more than the few percent they are about. This measures the same work directly: it records
the arguments of every call the runtime makes into its observer (``sluice._observe``) during a
few hundred real calls, then hands the same arguments to fresh observers (nothing on; metrics
on; tracing on through the no-op provider) in a tight loop inside trio, and returns the CPU per
call of each. The difference to the observer with nothing on is sluice's own cost of that
part; the observer is never called per event, only at a call's and an attempt's start and end
and at admission, so this is all of it except what the extra objects cost the garbage
collector later. Like :mod:`benchmarks._otel_replay`, it is a floor: in the runtime the code
and data are not always hot in the caches.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sluice._observe.observer import Observer

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["CallTrail", "capture", "replay_calls", "replay_costs"]

_METHODS = ("call_started", "attempt_started", "attempt_ended", "call_ended")
_Args = tuple[Any, ...]


class CallTrail:
    """The observer calls of whole calls (one attempt each), in the order the runtime made
    them: ``call_started``, ``attempt_started``, ``attempt_ended``, ``call_ended``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.started: dict[str, _Args] = {}
        self.attempts: dict[str, list[tuple[str, _Args]]] = {}
        self.calls: list[tuple[_Args, list[tuple[str, _Args]], _Args]] = []

    def note(self, method: str, args: _Args) -> None:
        if len(self.calls) >= self.limit:
            return
        if method == "call_started":
            call_id = args[0].call_id
            self.started[call_id] = args
            self.attempts[call_id] = []
        elif method in ("attempt_started", "attempt_ended"):
            msg = args[0] if method == "attempt_started" else args[1]
            trail = self.attempts.get(msg.call.call_id)
            if trail is not None:
                trail.append((method, args))
        else:  # call_ended
            call_id = args[0].call_id
            start = self.started.pop(call_id, None)
            trail = self.attempts.pop(call_id, None)
            if start is not None and trail is not None and len(trail) == 2:
                self.calls.append((start, trail, args))


@contextmanager
def capture(limit: int) -> Iterator[CallTrail]:
    """Record the observer calls of up to ``limit`` whole calls made meanwhile, in this
    process (the methods are wrapped on the class for the duration and restored after)."""
    trail = CallTrail(limit)
    originals = {name: getattr(Observer, name) for name in _METHODS}

    def wrapped(name: str) -> Any:
        original = originals[name]

        def method(self: Observer, *args: Any) -> Any:
            trail.note(name, args)
            return original(self, *args)

        return method

    try:
        for name in _METHODS:
            setattr(Observer, name, wrapped(name))
        yield trail
    finally:
        for name, original in originals.items():
            setattr(Observer, name, original)


def replay_calls(observer: Observer, trail: CallTrail, admission_key: str) -> None:
    """Hands each of ``trail``'s calls to ``observer`` again, in the order the runtime did."""
    for start, attempts, end in trail.calls:
        observer.call_started(*start)
        (_, (msg,)), (_, ended) = attempts
        watch = observer.attempt_started(msg)
        observer.admitted(admission_key, 0.0)
        observer.attempt_ended(watch, *ended[1:])
        observer.call_ended(*end)


def replay_costs(
    trail: CallTrail, prices: Any, admission_key: str, rounds: int = 9
) -> dict[str, float] | None:
    """CPU seconds per call for observers with nothing on (``off``), metrics on
    (``metrics``) and tracing on through the API's no-op provider (``noop_tracing``), each the
    median of ``rounds`` passes over the recorded calls (interleaved); None if none was
    recorded. Must run inside trio (the observer reads trio's clock)."""
    if not trail.calls:
        return None
    from opentelemetry.trace import NoOpTracerProvider

    from sluice._observe.metrics import Metrics
    from sluice._observe.tracing import Tracer

    observers = {
        "off": Observer(prices),
        "metrics": Observer(prices, metrics=Metrics()),
        "noop_tracing": Observer(prices, tracer=Tracer(NoOpTracerProvider())),
    }
    costs: dict[str, list[float]] = {name: [] for name in observers}
    for observer in observers.values():
        replay_calls(observer, trail, admission_key)  # warm-up
    for _ in range(rounds):
        for name, observer in observers.items():
            started = time.process_time()
            replay_calls(observer, trail, admission_key)
            costs[name].append((time.process_time() - started) / len(trail.calls))
    return {name: sorted(found)[len(found) // 2] for name, found in costs.items()}
