"""How long each observer method takes inside a running runtime, and the same calls replayed.

:mod:`benchmarks._observer_replay` and :mod:`benchmarks._otel_replay` measure observability's
work in a tight loop, where its code and data stay in the CPU's caches: a floor. Inside a
runtime each call's observer work runs once between a millisecond of other work (the reply's
chunks), so it starts cold. This times it there: while :func:`timed` is active, every call into
:class:`~sluice._observe.observer.Observer`'s four per-call methods is timed
(``perf_counter_ns``) and its arguments recorded; :func:`replayed` then hands the same
arguments to a fresh observer built like the runtime's and times each method again, hot. The
two medians per method, side by side, say how much of observability's in-situ cost is its own
instructions and how much is coming to them cold (the SDK's part included, when the observer
traces through the SDK). The timer adds about a tenth of a microsecond per method to both.
"""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sluice._observe.observer import Observer

from ._observer_replay import capture

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from ._observer_replay import CallTrail

__all__ = ["METHODS", "Timings", "replayed", "timed"]

METHODS = ("call_started", "attempt_started", "attempt_ended", "call_ended")


class Timings:
    """Nanoseconds per call of each observer method, as found."""

    def __init__(self) -> None:
        self.found: dict[str, list[int]] = {name: [] for name in METHODS}

    def medians_us(self) -> dict[str, float]:
        """The median of each method in microseconds (0 for a method never called), and
        their ``sum``."""
        medians = {
            name: statistics.median(found) / 1000 if found else 0.0
            for name, found in self.found.items()
        }
        medians["sum"] = sum(medians.values())
        return {name: round(us, 2) for name, us in medians.items()}


@contextmanager
def _timing(timings: Timings) -> Iterator[None]:
    """Times every call of the observer's per-call methods meanwhile (wrapped on the class,
    over whatever is there now, and restored after)."""
    before = {name: getattr(Observer, name) for name in METHODS}

    def wrapped(method: Callable[..., Any], into: list[int]) -> Callable[..., Any]:
        clock = time.perf_counter_ns

        def timed_method(self: Observer, *args: Any) -> Any:
            started = clock()
            result = method(self, *args)
            into.append(clock() - started)
            return result

        return timed_method

    try:
        for name in METHODS:
            setattr(Observer, name, wrapped(before[name], timings.found[name]))
        yield
    finally:
        for name, method in before.items():
            setattr(Observer, name, method)


@contextmanager
def timed(limit: int) -> Iterator[tuple[Timings, CallTrail]]:
    """While active: each observer method's time per call, and the arguments of up to
    ``limit`` whole calls for :func:`replayed`."""
    timings = Timings()
    with capture(limit) as trail, _timing(timings):
        yield timings, trail


def replayed(trail: CallTrail, observer: Observer, admission_key: str, passes: int = 3) -> Timings:
    """Each method's time per call when ``trail``'s calls are handed to ``observer`` again,
    ``passes`` times after one untimed pass (what the observer costs hot). Must run inside
    trio (the observer reads trio's clock)."""
    from ._observer_replay import replay_calls

    replay_calls(observer, trail, admission_key)  # warm-up
    timings = Timings()
    with _timing(timings):
        for _ in range(passes):
            replay_calls(observer, trail, admission_key)
    return timings
