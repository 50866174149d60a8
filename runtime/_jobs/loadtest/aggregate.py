"""From request records to the run's aggregates: latency summaries, throughput over time,
error rates, goodput under SLOs and the verdict on the client's own lag. Pure.

Every duration is in seconds, and every key holding one says so with ``_s`` (a summary such
as ``ttft_s`` holds its count, mean, percentiles and intervals in that unit). The dict
returned by :func:`aggregate` is what the results file holds under ``aggregates``;
``http_connect_s``, ``http_headers_s``, ``http_receive_s`` and ``http_reuse`` summarize the
HTTP phases sluice's transport noted per request.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from typing import TYPE_CHECKING, Any

from .stats import Samples, percentile

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

    from .metrics import RequestRecord
    from .slo import Slo

__all__ = [
    "DEFAULT_MAX_ERROR_RATE",
    "DEFAULT_MAX_LAG",
    "aggregate",
    "error_verdict",
    "lag_verdict",
    "length_verdict",
    "token_times",
]

DEFAULT_MAX_LAG = 0.010
"""Send-lag p99 beyond which a run is invalid (seconds). A request sent 10 ms late hides up
to 10 ms of the latency the schedule meant to expose."""

QUEUED = 0.001
"""Queue wait (seconds) from which a request counts as queued in sluice: below it the wait is
the message hop to the RateLimiter actor, not a quota or a cooldown holding the request."""

DEFAULT_MAX_ERROR_RATE = 0.05
"""Fraction of failed requests beyond which a run is invalid."""


def token_times(record: RequestRecord) -> Iterator[float]:
    """When each output token arrived (run-relative): the first chunk's tokens at the first
    token's time, then one per ITL sample."""
    first = record.first_token_at
    if first is None:
        return
    for _ in range(record.output_tokens - len(record.itls)):
        yield first
    yield from _after(first, record.itls)


def _after(first: float, itls: Sequence[float]) -> Iterator[float]:
    at = first
    for gap in itls:
        at += gap
        yield at


def lag_verdict(lag_p99: float | None, max_lag: float) -> str | None:
    """Why the run is invalid, or None when the client kept its schedule."""
    if lag_p99 is None or lag_p99 <= max_lag:
        return None
    return (
        f"the client fell behind its own schedule: send lag p99 {lag_p99 * 1000:.1f} ms is "
        f"above the {max_lag * 1000:g} ms limit, so requests went out later than planned and "
        "the latencies understate what the target rate would cause (the load generator, not "
        "the endpoint, is the bottleneck: lower the rate, raise --max-in-flight, or use a "
        "faster machine)"
    )


def error_verdict(failed: int, total: int, max_error_rate: float) -> str | None:
    """Why the run is invalid because too many requests failed, or None.

    A run whose requests mostly failed measured the errors, not the endpoint: its latencies
    describe the few that got through (or nothing at all), so it must not pass as valid.
    """
    if not total or failed / total <= max_error_rate:
        return None
    return (
        f"{failed} of {total} requests failed ({failed / total:.1%}), above the "
        f"{max_error_rate:.1%} allowed by --max-error-rate: the latencies describe the requests "
        "that got through, not the endpoint under this load"
    )


def length_verdict(short: int, asked: int, received: int, requested: int) -> str | None:
    """Why a run that asked for fixed output lengths is invalid (replies came back shorter
    than asked), or None."""
    if not short:
        return None
    return (
        f"{short} of {asked} replies came back shorter than the output length asked "
        f"({received} of {requested} tokens in all) although --fixed-output asked for exactly "
        "that length: the server ignored ignore_eos/min_tokens, so output lengths, E2E and "
        "throughput are not those of the workload asked for"
    )


def aggregate(
    records: Iterable[RequestRecord],
    *,
    slos: Sequence[Slo] = (),
    max_lag: float = DEFAULT_MAX_LAG,
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE,
    bin_seconds: float | None = None,
    span: tuple[float, float] | None = None,
    fixed_output: bool = False,
) -> dict[str, Any]:
    """The run's aggregates (see the module docstring).

    ``records`` is read one record at a time (a list, or a :class:`~.records.RecordFile`
    that reads them from disk): what is kept per record is at most a few numbers, and every
    distribution is a :class:`~.stats.Samples`, so the memory used does not grow with the
    run's length past :data:`~.stats.EXACT_LIMIT` samples. ``span``, the earliest time a
    request was due and the latest time one ended, places the timeline's bins; given, the
    records are read once, else twice (the first pass finds it).
    """
    if span is None:
        span = _span(records)
    start, end = span
    end = max(end, start)
    timeline = _Timeline(start, end, bin_seconds)
    acc = _Pass(slos)
    for r in records:
        acc.add(r)
        timeline.add(r)
    total, ok, failed = acc.total, acc.ok, acc.failed
    if not total:
        start = end = 0.0
    elapsed = max(end - start, 1e-9)
    lag = acc.lag.summary()
    rows = timeline.rows() if total else []
    reasons = [
        r
        for r in (
            error_verdict(failed, total, max_error_rate),
            lag_verdict(_number(lag["p99"]), max_lag),
            length_verdict(acc.short, acc.asked, acc.received, acc.requested)
            if fixed_output
            else None,
        )
        if r is not None
    ]
    reason = "; ".join(reasons) or None
    return {
        "requests": {
            "total": total,
            "ok": ok,
            "failed": failed,
            "error_rate": failed / total if total else 0.0,
            "errors": dict(acc.errors.most_common()),
            "statuses": {str(k): v for k, v in acc.statuses.items()},
        },
        "ttft_s": acc.ttft.summary(intervals=True),
        "ttst_s": acc.ttst.summary(intervals=True),
        "itl_s": acc.itl.summary(intervals=True),
        "icl_s": acc.icl.summary(intervals=True),
        "tpot_s": acc.tpot.summary(intervals=True),
        "e2e_s": acc.e2e.summary(intervals=True),
        "output_length": acc.lengths(),
        "sessions": acc.sessions.summary(),
        "token_counts": acc.token_counts(),
        "queue_wait_s": acc.queue_wait.summary(),
        "ttft_after_queue_s": acc.ttft_after_queue.summary(intervals=True),
        "e2e_after_queue_s": acc.e2e_after_queue.summary(intervals=True),
        "sluice_waits": acc.waits(),
        **acc.http_phases(),
        "client_lag_s": lag | {"max_allowed": max_lag},
        "throughput": _throughput(acc, elapsed, rows),
        "timeline": rows,
        "goodput": acc.goodput(elapsed),
        "valid": reason is None,
        "invalid_reason": reason,
    }


def _throughput(acc: _Pass, elapsed: float, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Requests and tokens per second over the run (and the busiest bin's output rate)."""
    ok, in_tokens, out_tokens = acc.ok, acc.input_tokens, acc.output_tokens
    return {
        "elapsed_s": elapsed,
        "requests_per_s": ok / elapsed,
        "output_tokens_per_s": out_tokens / elapsed,
        "input_tokens_per_s": in_tokens / elapsed,
        "total_tokens_per_s": (in_tokens + out_tokens) / elapsed,
        "peak_output_tokens_per_s": max((b["output_tokens_per_s"] for b in rows), default=0.0),
        "output_tokens": out_tokens,
        "input_tokens": in_tokens,
        "output_tokens_estimated": acc.estimated,
        "embeddings_per_s": acc.inputs / elapsed if acc.has_inputs else None,
    }


class _Pass:
    """Everything :func:`aggregate` needs but the timeline, from one pass over the records."""

    def __init__(self, slos: Sequence[Slo]) -> None:
        self.slos = slos
        self.total = self.ok = self.failed = 0
        self.errors: Counter[str] = Counter()
        self.statuses: Counter[int] = Counter()
        self.ttft, self.ttst, self.itl, self.icl = Samples(), Samples(), Samples(), Samples()
        self.tpot, self.e2e, self.lag, self.queue_wait = Samples(), Samples(), Samples(), Samples()
        self.connect, self.headers, self.receive = Samples(), Samples(), Samples()
        self.measured = self.reused = 0
        self.input_tokens = self.output_tokens = self.estimated = 0
        self.inputs = 0
        self.has_inputs = False
        self.asked = self.requested = self.received = self.short = self.long = 0
        self.ratio = Samples()
        self.compared = self.server_reported = self.client_counted = self.differing = 0
        self.sessions = _Sessions()
        self.ttft_after_queue, self.e2e_after_queue = Samples(), Samples()
        self.queued = self.retried = self.attempts = 0
        self.retry_wait = Samples()
        self.own = [Samples() for _ in slos]
        """Per SLO (but ITL ones, measured over every token): each ok request's own value."""
        self.good = 0

    def add(self, r: RequestRecord) -> None:
        self.total += 1
        self.lag.add(r.lag)
        self.queue_wait.add(r.queue_wait)
        self.queued += r.queue_wait >= QUEUED
        self.attempts += r.attempts
        if r.attempts > 1:
            self.retried += 1
            self.retry_wait.add(r.retry_wait)
        self.has_inputs = self.has_inputs or r.inputs is not None
        self.sessions.add(r)
        if not r.ok:
            self.failed += 1
            self.errors[r.error_type or "unknown"] += 1
            if r.status:
                self.statuses[r.status] += 1
            return
        self.ok += 1
        if r.ttft is not None:
            self.ttft.add(r.ttft)
        if r.ttst is not None:
            self.ttst.add(r.ttst)
        if r.tpot is not None:
            self.tpot.add(r.tpot)
        self.e2e.add(r.e2e)
        if r.admitted is not None:
            after = r.ttft_after_queue
            if after is not None:
                self.ttft_after_queue.add(after)
            self.e2e_after_queue.add(r.end - r.admitted)
        self.itl.extend(r.itls)
        self.icl.extend(r.icls)
        self.output_tokens += r.output_tokens
        self.input_tokens += r.input_tokens
        self.estimated += not r.output_tokens_reported
        self.inputs += r.inputs or 0
        if r.http_reused is not None:
            self.measured += 1
            self.reused += r.http_reused
            for samples, value in (
                (self.connect, r.http_connect),
                (self.headers, r.http_headers),
                (self.receive, r.http_receive),
            ):
                if value is not None:
                    samples.add(value)
        if r.requested_output_tokens is not None:
            self.asked += 1
            self.requested += r.requested_output_tokens
            self.received += r.output_tokens
            self.short += r.output_tokens < r.requested_output_tokens
            self.long += r.output_tokens > r.requested_output_tokens
            if r.requested_output_tokens:
                self.ratio.add(r.output_tokens / r.requested_output_tokens)
        if r.server_output_tokens is not None:
            self.compared += 1
            self.server_reported += r.server_output_tokens
            self.client_counted += r.client_output_tokens
            self.differing += r.server_output_tokens != r.client_output_tokens
        if self.slos:
            values = [_own_value(r, slo) for slo in self.slos]
            for samples, value in zip(self.own, values, strict=True):
                if value is not None:
                    samples.add(value)
            if all(
                v is not None and v <= slo.seconds for v, slo in zip(values, self.slos, strict=True)
            ):
                self.good += 1

    def waits(self) -> dict[str, Any]:
        """What sluice itself added (with ``--respect-limits``): requests that waited in its
        queue (a quota, a 429's cooldown: at least :data:`QUEUED`), requests it retried,
        their attempts and backoff."""
        return {
            "requests_queued": self.queued,
            "requests_retried": self.retried,
            "attempts": self.attempts,
            "retry_backoff_s": self.retry_wait.summary(),
        }

    def http_phases(self) -> dict[str, Any]:
        """The HTTP phases of the ok requests, as sluice's transport measured them: connect
        time over the requests that opened a connection, time to response headers and
        receive time over every measured request, and how many reused a kept-alive
        connection."""
        return {
            "http_connect_s": self.connect.summary(),
            "http_headers_s": self.headers.summary(),
            "http_receive_s": self.receive.summary(),
            "http_reuse": {
                "measured": self.measured,
                "reused": self.reused,
                "new": self.measured - self.reused,
                "fraction": self.reused / self.measured if self.measured else None,
            },
        }

    def lengths(self) -> dict[str, Any]:
        """Requested (``max_tokens``) against received output length, over the ok requests
        that asked for one: a server that stops early or overruns shows here."""
        return {
            "requested": self.requested,
            "received": self.received,
            "requests_short": self.short,
            "requests_long": self.long,
            "requests_exact": self.asked - self.short - self.long,
            "received_over_requested": self.ratio.summary(),
        }

    def token_counts(self) -> dict[str, Any]:
        """The server's reported output tokens against the client's own count by
        :data:`TOKEN_RULE`, over the requests where the server reported a count."""
        return {
            "client_rule": TOKEN_RULE,
            "server_reported": self.server_reported,
            "client_counted": self.client_counted,
            "requests_compared": self.compared,
            "requests_differing": self.differing,
            "server_unreported": self.ok - self.compared,
        }

    def goodput(self, elapsed: float) -> dict[str, Any]:
        """Goodput under the SLOs."""
        total = self.total
        if not self.slos:
            return {
                "slos": [],
                "good": self.ok,
                "requests_per_s": self.ok / elapsed,
                "fraction": self.ok / total if total else 0.0,
                "met": True,
            }
        checks = []
        for slo, own in zip(self.slos, self.own, strict=True):
            samples = self.itl if slo.metric == "itl" else own
            measured = samples.percentile(slo.percentile)
            checks.append(
                {
                    "slo": slo.name,
                    "bound_s": slo.seconds,
                    "measured_s": measured,
                    "met": measured is not None and measured <= slo.seconds,
                }
            )
        return {
            "slos": checks,
            "good": self.good,
            "requests_per_s": self.good / elapsed,
            "fraction": self.good / total if total else 0.0,
            "met": all(c["met"] for c in checks),
        }


class _Sessions:
    """Multi-turn runs: metrics per turn (how latency grows with the history) and per
    session (how long a whole conversation took, and how many completed). Per session it
    keeps four numbers in flat arrays, indexed by the session's number."""

    def __init__(self) -> None:
        self.turns: dict[int, list[Any]] = {}
        """turn -> [requests, ok, input tokens of the ok ones, TTFT samples, E2E samples]"""
        self.count = array("q")
        self.failed = array("q")
        self.first = array("d")
        self.last = array("d")
        self.seen = array("b")

    def add(self, r: RequestRecord) -> None:
        if r.session is None or r.turn is None:
            return
        turn = self.turns.setdefault(r.turn, [0, 0, 0, Samples(), Samples()])
        turn[0] += 1
        if r.ok:
            turn[1] += 1
            turn[2] += r.input_tokens
            if r.ttft is not None:
                turn[3].add(r.ttft)
            turn[4].add(r.e2e)
        s = r.session
        while len(self.count) <= s:
            self.count.append(0)
            self.failed.append(0)
            self.first.append(math.inf)
            self.last.append(-math.inf)
            self.seen.append(0)
        self.seen[s] = 1
        self.count[s] += 1
        self.failed[s] += not r.ok
        self.first[s] = min(self.first[s], r.sent)
        self.last[s] = max(self.last[s], r.end)

    def summary(self) -> dict[str, Any] | None:
        if not self.turns:
            return None
        per_turn = []
        for number in sorted(self.turns):
            requests, good, tokens, ttft, e2e = self.turns[number]
            per_turn.append(
                {
                    "turn": number,
                    "requests": requests,
                    "ok": good,
                    "input_tokens_mean": tokens / good if good else None,
                    "ttft_p50_s": ttft.percentile(50),
                    "ttft_p99_s": ttft.percentile(99),
                    "e2e_p50_s": e2e.percentile(50),
                    "e2e_p99_s": e2e.percentile(99),
                }
            )
        most = max(self.turns) + 1
        durations = Samples()
        complete = 0
        for s, seen in enumerate(self.seen):
            if seen and self.count[s] == most and not self.failed[s]:
                complete += 1
                durations.add(self.last[s] - self.first[s])
        duration = durations.summary()
        return {
            "count": sum(self.seen),
            "turns": most,
            "complete": complete,
            "duration_s": duration,
            "per_turn": per_turn,
        }


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


TOKEN_RULE = "words: each run of non-whitespace characters, with the whitespace before it"
"""How the client counts output tokens (:func:`~.metrics.estimate_tokens`)."""


def _span(records: Iterable[RequestRecord]) -> tuple[float, float]:
    """The earliest time a request was due and the latest time one ended (0, 0 for none)."""
    start, end = math.inf, -math.inf
    for r in records:
        start, end = min(start, r.scheduled), max(end, r.end)
    return (start, end) if start <= end else (0.0, 0.0)


class _Timeline:
    """Per time bin over ``start``..``end``: requests sent and completed, output tokens per
    second (by token arrival), and the median and p99 TTFT, ITL and lag of what happened in
    the bin."""

    def __init__(self, start: float, end: float, bin_seconds: float | None) -> None:
        span = end - start
        self.start = start
        self.width = bin_seconds or (_nice_bin(span) if span > 0 else 1.0)
        count = self.count = max(1, math.ceil(span / self.width)) if span > 0 else 0
        self.sent = [0] * count
        self.done = [0] * count
        self.failed = [0] * count
        self.tokens = [0] * count
        self.ttfts = [Samples(_BIN_LIMIT) for _ in range(count)]
        self.itls = [Samples(_BIN_LIMIT) for _ in range(count)]
        self.lags = [Samples(_BIN_LIMIT) for _ in range(count)]

    def slot(self, at: float) -> int:
        return min(self.count - 1, max(0, int((at - self.start) / self.width)))

    def add(self, r: RequestRecord) -> None:
        if not self.count:
            return
        slot = self.slot
        i = slot(r.sent)
        self.sent[i] += 1
        self.lags[i].add(r.lag)
        if not r.ok:
            self.failed[slot(r.end)] += 1
            return
        self.done[slot(r.end)] += 1
        if r.ttft is not None:
            self.ttfts[i].add(r.ttft)
        tokens = self.tokens
        for at in token_times(r):
            tokens[slot(at)] += 1
        at = r.first_token_at or 0.0
        itls = self.itls
        for gap in r.itls:
            at += gap
            itls[slot(at)].add(gap)

    def rows(self) -> list[dict[str, Any]]:
        width = self.width
        return [
            {
                "t_s": i * width,
                "width_s": width,
                "sent": self.sent[i],
                "completed": self.done[i],
                "failed": self.failed[i],
                "requests_per_s": self.done[i] / width,
                "output_tokens_per_s": self.tokens[i] / width,
                "ttft_p50_s": self.ttfts[i].percentile(50),
                "ttft_p99_s": self.ttfts[i].percentile(99),
                "itl_p50_s": self.itls[i].percentile(50),
                "itl_p99_s": self.itls[i].percentile(99),
                "lag_p99_s": self.lags[i].percentile(99),
            }
            for i in range(self.count)
        ]


_BIN_LIMIT = 2_000
"""Samples a timeline bin keeps exactly (a :class:`~.stats.Samples` past it)."""


def _nice_bin(span: float) -> float:
    """A round bin width giving 20 to 50 bins over ``span`` seconds."""
    for width in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600):
        if span / width <= 50:
            return float(width)
    return span / 50


def _own_value(record: RequestRecord, slo: Slo) -> float | None:
    match slo.metric:
        case "ttft":
            return record.ttft
        case "tpot":
            return record.tpot
        case "e2e":
            return record.e2e
        case _:
            return percentile(sorted(record.itls), slo.percentile) if record.itls else None
