"""Spreading one open-loop schedule over several processes (``--workers``). Pure.

One process sends a schedule on time only up to some rate: past it the scheduler task waits
behind the other requests' work and sends late (client lag). Several worker processes, each
with its own runtime, hold a higher rate. They all draw the one global schedule from the same
seed and start it at one shared instant; worker ``i`` of ``n`` sends the arrivals whose index
is ``i`` modulo ``n`` (:class:`Share`). The union of what they send is exactly the schedule one
process would have sent, request for request (same index, same due time, same prompt), so the
arrival distribution is kept whatever it is (Poisson, gamma, a ramp, a trace), and the merged
records are what one process would have written.

How many workers ``auto`` picks (:func:`choose_workers`): one below :data:`ONE_PROCESS_RATE`;
above it, the fewest that keep each worker under :data:`BUSY_TARGET` of a core at the
schedule's peak rate, from the client CPU one request cost in the warm-up (:func:`peak_rate`,
:func:`cpu_per_request`). Fewest, because a process more is not free: each runs a runtime of
its own, and processes that outnumber the free cores wait for one another (and for a server on
the same machine) at the moment a request is due.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, Any

import attrs

from .arrivals import OpenLoop
from .stats import percentile

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .spec import LoadTest

__all__ = [
    "BUSY_TARGET",
    "ONE_PROCESS_RATE",
    "Share",
    "Start",
    "choose_workers",
    "cpu_per_request",
    "peak_rate",
    "worker_summary",
]

ONE_PROCESS_RATE = 100.0
"""Peak requests per second below which ``--workers auto`` keeps one process without
measuring anything: one process holds such a rate on any machine sluice runs on."""

BUSY_TARGET = 0.9
"""The share of a core one worker may spend on its requests under ``auto``, by the warm-up's
measure. A request due while the loop runs other tasks waits only for the step in progress
(one network read's events, a few tens of microseconds), so a loop busy most of the time still
sends on time; only a loop with no idle time left falls behind. The warm-up's requests go one
after another, each paying the wake-ups a busy loop shares, so its measure is above what a
request costs at rate: on the machine of issue #35's measurements (2 cores, the server on the
same machine) one process with a warm-up measure of 0.6 ms held a p99 send lag under 1 ms up
to 1,960 requests/s (1.18 cores by that measure), while two processes at 1,000 requests/s
ranged from 0.2 to 4.2 ms as other work on the machine came and went."""

PEAK_WINDOW = 1.0
"""Seconds over which :func:`peak_rate` counts arrivals."""

PEAK_SCAN = 200_000
"""Arrivals :func:`peak_rate` looks at, at most (a long schedule's peak is found in its
first part; the cost of drawing more would come before every run)."""


@attrs.frozen
class Share:
    """Worker ``index`` of ``count``: the arrivals it sends (round robin over the global
    schedule's order)."""

    index: int = attrs.field(validator=attrs.validators.ge(0))
    count: int = attrs.field(validator=attrs.validators.ge(1))

    def __attrs_post_init__(self) -> None:
        if self.index >= self.count:
            raise ValueError(f"worker {self.index} of {self.count} does not exist")

    def mine(self, arrival: int) -> bool:
        """True when arrival ``arrival`` (its index in the global schedule) is this worker's."""
        return arrival % self.count == self.index


@attrs.frozen
class Start:
    """When a worker starts the schedule and which of its arrivals it sends."""

    t0: float
    """The shared start, on this process's trio clock."""
    share: Share


def peak_rate(test: LoadTest) -> float | None:
    """The highest arrival rate of ``test``'s schedule (requests per second, over any
    :data:`PEAK_WINDOW`), None for a closed loop. A constant rate is its own peak; a
    Poisson or gamma rate counts as its mean (its bursts are what the workers must absorb
    together, not what sizes them); a ramp or trace is scanned."""
    shape = test.shape
    if not isinstance(shape, OpenLoop):
        return None
    if shape.arrival is not None and shape.rate is not None:
        return shape.rate
    offsets: list[float] = []
    for index, offset in enumerate(shape.schedule(random.Random(f"{test.seed}:arrivals"))):
        if index >= PEAK_SCAN or (test.requests is not None and index >= test.requests):
            break
        if test.duration is not None and offset >= test.duration:
            break
        offsets.append(offset)
    peak, start = 0, 0
    for end, at in enumerate(offsets):
        while at - offsets[start] >= PEAK_WINDOW:
            start += 1
        peak = max(peak, end - start + 1)
    return peak / PEAK_WINDOW


def cpu_per_request(cpu_at_sends: Sequence[float], cpu_at_end: float) -> float | None:
    """The client CPU seconds one request costs, from requests sent one after another: the
    process's CPU time when each was sent, and when the last one had ended. The first
    request is left out when there are others (it starts the provider's connection and
    codec); None without any request."""
    if not cpu_at_sends:
        return None
    if len(cpu_at_sends) == 1:
        return max(cpu_at_end - cpu_at_sends[0], 0.0)
    return max(cpu_at_end - cpu_at_sends[1], 0.0) / (len(cpu_at_sends) - 1)


def choose_workers(rate: float | None, cost: float | None, cpus: int) -> int:
    """How many workers ``--workers auto`` runs for a peak ``rate`` (None: a closed loop)
    when one request costs ``cost`` client CPU seconds (None: not measured) on a machine
    with ``cpus`` cores: one when the rate is low, else enough to keep each worker under
    :data:`BUSY_TARGET`, never more than ``cpus``."""
    if rate is None or rate <= ONE_PROCESS_RATE or cost is None:
        return 1
    wanted = math.ceil(rate * cost / BUSY_TARGET)
    return max(1, min(wanted, max(cpus, 1)))


def worker_summary(index: int, lags: Sequence[float], cost: float | None) -> dict[str, Any]:
    """What the results say of one worker: how many requests it sent, its own send lag
    (``lags``: each request's, any order), its measured client CPU per request."""
    lags = sorted(lags)
    return {
        "worker": index,
        "requests": len(lags),
        "lag_p50_s": percentile(lags, 50) if lags else None,
        "lag_p99_s": percentile(lags, 99) if lags else None,
        "lag_max_s": lags[-1] if lags else None,
        "cpu_per_request_s": cost,
    }
