"""Whether an open-loop run kept up with what it sent. Pure.

:func:`judge` decides a sweep point (:mod:`.sweep` describes its three signs: completions
falling behind the requests sent, latency growing through the run, too many failures).
:func:`load_figures` gives every open-loop run its measured load: the rate the schedule
asked for, the rate the client really sent at (``offered``), the rate requests completed at,
and, for a run at a steady rate, whether completions fell behind what was sent: such a run
measured a queue building up, not the endpoint at that rate, and is invalid.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import attrs

from .stats import percentile

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .metrics import RequestRecord
    from .spec import LoadTest

__all__ = ["MAX_GROWTH", "MIN_JUDGED", "MIN_RATIO", "Verdict", "judge", "load_figures"]

_MIN_SAMPLES = 5
"""Requests a third of the window needs before its latency is compared."""


@attrs.frozen
class Verdict:
    achieved: float
    """Completed requests per second over the run."""
    realized: float
    """Requests the schedule sent per second of its window."""
    growth: float | None
    error_rate: float
    saturated: bool
    reason: str | None


def judge(
    records: Sequence[RequestRecord],
    window: float,
    *,
    min_ratio: float = 0.95,
    max_growth: float = 1.5,
    max_error_rate: float = 0.05,
) -> Verdict:
    """Whether the run of ``records``, sent over ``window`` seconds, saturated the endpoint."""
    if not records:
        return Verdict(0.0, 0.0, None, 0.0, True, "no request was sent")
    third = window / 3
    thirds: tuple[list[float], list[float], list[float]] = ([], [], [])
    ok = 0
    first, last = math.inf, -math.inf
    for r in records:  # one pass, keeping one number per request: records may be on disk
        first, last = min(first, r.sent), max(last, r.end)
        if r.ok:
            ok += 1
            part = 0 if r.scheduled < third else 1 if r.scheduled < 2 * third else 2
            thirds[part].append(r.e2e)
    early, middle, late = (sorted(values) for values in thirds)
    typical = percentile(early, 50) if early else 0.0
    growth = None
    if len(middle) >= _MIN_SAMPLES and len(late) >= _MIN_SAMPLES:
        base = percentile(middle, 50)
        # A middle third answered in no time at all (a test clock) has no growth to measure.
        growth = percentile(late, 50) / base if base > 0 else None
    span = last - first - typical
    achieved = ok / max(span, window / 2)
    realized = len(records) / window
    error_rate = 1 - ok / len(records)
    reason = None
    if error_rate > max_error_rate:
        reason = f"{error_rate:.0%} of the requests failed"
    elif achieved < min_ratio * realized:
        reason = f"completed {achieved:.3g}/s of {realized:.3g}/s sent"
    elif growth is not None and growth > max_growth:
        reason = f"median latency grew {growth:.2f}x during the run"
    return Verdict(achieved, realized, growth, error_rate, reason is not None, reason)


MIN_RATIO = 0.95
"""Completions per request sent below which a run fell behind."""

MAX_GROWTH = 1.5
"""Growth of the median latency (last third over middle third) that shows a queue building."""

MIN_JUDGED = 20
"""Requests a run needs before :func:`load_figures` judges whether it kept up: with fewer,
one slow reply at the end moves the completion rate by more than the margin."""


def load_figures(test: LoadTest, records: Sequence[RequestRecord]) -> dict[str, Any]:
    """The run's load as planned and as it happened (requests per second), for the
    aggregates: ``scheduled_rate_per_s`` (the configured rate, or the schedule's own rate for
    a ramp or trace), ``offered_rate_per_s`` (requests sent over the time they were sent in),
    ``completed_rate_per_s`` and ``latency_growth`` (:func:`judge`'s), ``saturated`` (None
    when not judged: a closed loop, a ramp or trace, fewer than :data:`MIN_JUDGED` requests)
    and ``saturation_reason``.

    Saturated: both of :func:`judge`'s signs at once, completions below :data:`MIN_RATIO` of
    the rate sent and the median latency of the last third above :data:`MAX_GROWTH` times
    the middle third's, over at least :data:`MIN_JUDGED` requests. Either alone can come
    from the last replies' spread in a short run, or from a client stalled by its own
    machine; a queue that builds up shows both.

    The window a steady-rate run sent over is its ``duration`` when that bounded it (a sweep
    point's), else the span of the due times stretched by one gap (``n`` requests due over
    ``n - 1`` gaps).
    """
    from .arrivals import OpenLoop

    shape = test.shape
    n = len(records)
    first_due = first_sent = math.inf
    last_due = last_sent = -math.inf
    for r in records:
        first_due, last_due = min(first_due, r.scheduled), max(last_due, r.scheduled)
        first_sent, last_sent = min(first_sent, r.sent), max(last_sent, r.sent)
    figures: dict[str, Any] = {
        "scheduled_rate_per_s": None,
        "offered_rate_per_s": None,
        "completed_rate_per_s": None,
        "latency_growth": None,
        "saturated": None,
        "saturation_reason": None,
    }
    if n < 2:
        return figures
    sent_span, due_span = last_sent - first_sent, last_due - first_due
    if sent_span > 0:
        figures["offered_rate_per_s"] = (n - 1) / sent_span
    if not isinstance(shape, OpenLoop):
        return figures
    if shape.rate is not None:
        figures["scheduled_rate_per_s"] = shape.rate
    elif due_span > 0:
        figures["scheduled_rate_per_s"] = (n - 1) / due_span
    if shape.rate is None or due_span <= 0:
        return figures
    window = due_span * n / (n - 1)
    if test.requests is None and test.duration is not None:
        window = test.duration
    verdict = judge(records, window, max_error_rate=1.0)
    figures["completed_rate_per_s"] = verdict.achieved
    figures["latency_growth"] = verdict.growth
    growth = verdict.growth
    if n < MIN_JUDGED or growth is None:
        return figures
    behind = verdict.achieved < MIN_RATIO * verdict.realized and growth > MAX_GROWTH
    figures["saturated"] = behind
    if behind:
        figures["saturation_reason"] = (
            f"saturated: requests completed at {verdict.achieved:.3g}/s while "
            f"{verdict.realized:.3g}/s were sent, and the median latency grew {growth:.2f}x "
            "from the middle third of the run to the last, so a queue built up and the "
            "latencies measure that queue, not the endpoint at this rate (lower --rate, or "
            "--sweep to find the highest rate it sustains)"
        )
    return figures
