"""When requests are sent: arrival schedules as offsets in seconds from the start. Pure.

An open-loop schedule is an iterator of non-decreasing offsets, drawn up front from a seeded
``random.Random`` so a run repeats exactly. The run loop sends each request at its offset
whatever happens to earlier ones; how late it manages to is the client's lag
(:mod:`.metrics`). A closed loop (a fixed number of users, each sending its next request when
the last one ends) has no schedule to keep and is described by :class:`ClosedLoop`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import attrs
import orjson

from ..._errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

    from .workload import TraceEntry

__all__ = [
    "ClosedLoop",
    "LoadShape",
    "constant_offsets",
    "OpenLoop",
    "Step",
    "gamma_offsets",
    "load_trace",
    "load_trace_entries",
    "poisson_offsets",
    "ramp_offsets",
]


def gamma_offsets(
    rate: float, rng: random.Random, *, burstiness: float = 1.0, start: float = 0.0
) -> Iterator[float]:
    """Endless arrivals at ``rate`` per second with gamma inter-arrival times.

    ``burstiness`` is the gamma shape: 1 gives a Poisson process (exponential gaps), below 1
    bursts (many short gaps and a few long ones), above 1 a steadier, more uniform stream. The
    mean gap is always ``1 / rate``.
    """
    if not rate > 0:
        raise ValueError(f"rate must be above 0, got {rate!r}")
    if not burstiness > 0:
        raise ValueError(f"burstiness must be above 0, got {burstiness!r}")
    scale = 1.0 / (rate * burstiness)
    at = start
    while True:
        at += rng.gammavariate(burstiness, scale)
        yield at


def constant_offsets(rate: float, *, start: float = 0.0) -> Iterator[float]:
    """Endless arrivals exactly ``1 / rate`` seconds apart, the first at ``start``. Each offset
    is computed from its index (not summed), so there is no drift over a long run."""
    if not rate > 0:
        raise ValueError(f"rate must be above 0, got {rate!r}")
    index = 0
    while True:
        yield start + index / rate
        index += 1


def poisson_offsets(rate: float, rng: random.Random, *, start: float = 0.0) -> Iterator[float]:
    """Endless Poisson arrivals at ``rate`` per second (exponential gaps, mean ``1/rate``)."""
    if not rate > 0:
        raise ValueError(f"rate must be above 0, got {rate!r}")
    at = start
    while True:
        at += rng.expovariate(rate)
        yield at


@attrs.frozen
class Step:
    """``rate`` requests per second for ``seconds``."""

    rate: float = attrs.field(validator=attrs.validators.gt(0))
    seconds: float = attrs.field(validator=attrs.validators.gt(0))


def ramp_offsets(
    steps: Sequence[Step], rng: random.Random, *, burstiness: float = 1.0
) -> Iterator[float]:
    """A stepped ramp: each step's arrivals at its own rate, then the next step. Finite."""
    start = 0.0
    for step in steps:
        end = start + step.seconds
        for at in gamma_offsets(step.rate, rng, burstiness=burstiness, start=start):
            if at >= end:
                break
            yield at
        start = end


def load_trace(path: Path) -> tuple[float, ...]:
    """Arrival offsets from a trace file, shifted so the first is 0, in order.

    One entry per line: a bare number of seconds, or a JSON object with ``timestamp`` (seconds)
    or ``timestamp_ms``; blank lines are skipped. Absolute timestamps (epoch seconds) work too,
    since only the differences matter.

    Raises:
        ConfigError: the file cannot be read, a line is neither form, or it holds no entries.
    """
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read trace file {path}: {exc}") from None
    times: list[float] = []
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            continue
        try:
            times.append(_trace_time(text))
        except ValueError as exc:
            raise ConfigError(f"trace file {path}, line {number}: {exc}") from None
    if not times:
        raise ConfigError(f"trace file {path} holds no timestamps")
    times.sort()
    first = times[0]
    return tuple(t - first for t in times)


def load_trace_entries(path: Path) -> tuple[TraceEntry, ...]:
    """The entries of a trace file in arrival order, offsets from the first.

    Besides :func:`load_trace`'s forms, takes Mooncake's JSONL: objects with ``timestamp``
    in **milliseconds**, ``input_length``, ``output_length`` and ``hash_ids`` (a line holding
    any of the last three is read so). The lengths and hash ids then shape each request
    (:class:`~.workload.Workload`).

    Raises:
        ConfigError: as :func:`load_trace`, or a length or hash id that is not a whole number.
    """

    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read trace file {path}: {exc}") from None
    entries: list[TraceEntry] = []
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            continue
        try:
            entries.append(_trace_entry(text))
        except ValueError as exc:
            raise ConfigError(f"trace file {path}, line {number}: {exc}") from None
    if not entries:
        raise ConfigError(f"trace file {path} holds no timestamps")
    entries.sort(key=lambda e: e.offset)
    first = entries[0].offset
    return tuple(attrs.evolve(e, offset=e.offset - first) for e in entries)


_MOONCAKE = ("input_length", "output_length", "hash_ids")


def _whole(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name!r} must be a whole number of at least {minimum}, got {value!r}")
    return value


def _trace_entry(text: str) -> TraceEntry:
    from .workload import TraceEntry

    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise ValueError("expected a number or a JSON object with 'timestamp'") from None
    if not isinstance(value, dict) or not any(key in value for key in _MOONCAKE):
        return TraceEntry(_trace_time(text))
    stamp = value.get("timestamp", 0)
    if isinstance(stamp, bool) or not isinstance(stamp, int | float) or not math.isfinite(stamp):
        raise ValueError(f"timestamp must be a finite number of milliseconds, got {stamp!r}")
    hashes = value.get("hash_ids", [])
    if not isinstance(hashes, list):
        raise ValueError(f"'hash_ids' must be a list of whole numbers, got {hashes!r}")
    return TraceEntry(
        offset=float(stamp) / 1000,
        input_length=(
            _whole(value["input_length"], "input_length", 1) if "input_length" in value else None
        ),
        output_length=(
            _whole(value["output_length"], "output_length", 1) if "output_length" in value else None
        ),
        hash_ids=tuple(_whole(h, "hash_ids[]", 0) for h in hashes),
    )


def _trace_time(text: str) -> float:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise ValueError("expected a number or a JSON object with 'timestamp'") from None
    if isinstance(value, dict):
        if "timestamp" in value:
            value = value["timestamp"]
        elif "timestamp_ms" in value:
            ms = value["timestamp_ms"]
            value = ms / 1000 if isinstance(ms, int | float) and not isinstance(ms, bool) else ms
        else:
            raise ValueError("the object has no 'timestamp' or 'timestamp_ms'")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"timestamp must be a finite number, got {value!r}")
    return float(value)


@attrs.frozen
class OpenLoop:
    """Requests sent on a schedule, whether or not earlier ones have finished.

    Build one with :meth:`at_rate`, :meth:`ramp` or :meth:`replay`.
    """

    describe: str
    """How the schedule was made, for the results file (``poisson 5/s``)."""
    rate: float | None
    """The offered mean rate, when there is one (a trace has none)."""
    schedule: Callable[[random.Random], Iterable[float]] = attrs.field(eq=False, repr=False)
    """The offsets, drawn from the run's seeded generator."""
    max_in_flight: int | None = None
    """Requests allowed to run at once (a client-side cap, like vLLM's ``--max-concurrency``).
    A request due while the cap is reached waits, and that wait counts as client lag."""
    arrival: str | None = None
    """``constant``, ``poisson`` or ``gamma`` for a rate; None for a ramp or a trace."""

    @classmethod
    def at_rate(
        cls,
        rate: float,
        *,
        burstiness: float = 1.0,
        max_in_flight: int | None = None,
        arrival: str | None = None,
    ) -> OpenLoop:
        """``rate`` per second. ``arrival`` ``constant`` sends exactly ``1 / rate`` apart
        (the first at 0), ``poisson`` draws exponential gaps, ``gamma`` gamma gaps of shape
        ``burstiness``; by default Poisson, or gamma when ``burstiness`` is not 1."""
        if not rate > 0:
            raise ValueError(f"rate must be above 0, got {rate!r}")
        if not burstiness > 0:
            raise ValueError(f"burstiness must be above 0, got {burstiness!r}")
        if arrival is None:
            arrival = "poisson" if burstiness == 1.0 else "gamma"
        if arrival == "constant":
            return cls(
                f"constant {rate:g}/s",
                rate,
                lambda _rng: constant_offsets(rate),
                max_in_flight,
                "constant",
            )
        if arrival == "poisson":
            return cls(
                f"poisson {rate:g}/s",
                rate,
                lambda rng: poisson_offsets(rate, rng),
                max_in_flight,
                "poisson",
            )
        if arrival != "gamma":
            raise ValueError(f"arrival must be constant, poisson or gamma, got {arrival!r}")
        return cls(
            f"gamma {rate:g}/s, burstiness {burstiness:g}",
            rate,
            lambda rng: gamma_offsets(rate, rng, burstiness=burstiness),
            max_in_flight,
            "gamma",
        )

    @classmethod
    def ramp(cls, steps: Sequence[Step], *, max_in_flight: int | None = None) -> OpenLoop:
        """A stepped ramp of Poisson arrivals."""
        if not steps:
            raise ValueError("a ramp needs at least one step")
        text = ", ".join(f"{s.rate:g}/s for {s.seconds:g} s" for s in steps)
        total = sum(s.seconds for s in steps)
        mean = sum(s.rate * s.seconds for s in steps) / total
        return cls(f"ramp {text}", mean, lambda rng: ramp_offsets(tuple(steps), rng), max_in_flight)

    @classmethod
    def replay(
        cls, offsets: Sequence[float], *, source: str = "trace", max_in_flight: int | None = None
    ) -> OpenLoop:
        """The arrivals of a trace (:func:`load_trace`), one request each."""
        kept = tuple(offsets)
        return cls(f"replay of {source}", None, lambda _rng: iter(kept), max_in_flight)


@attrs.frozen
class ClosedLoop:
    """``concurrency`` users, each sending its next request as soon as the last one ends."""

    concurrency: int = attrs.field(validator=attrs.validators.ge(1))

    @property
    def describe(self) -> str:
        return f"closed loop, concurrency {self.concurrency}"


LoadShape: TypeAlias = OpenLoop | ClosedLoop
