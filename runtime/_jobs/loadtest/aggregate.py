"""From request records to the run's aggregates: latency summaries, throughput over time,
error rates, goodput under SLOs and the verdict on the client's own lag. Pure.

Every duration is in seconds. The dict returned by :func:`aggregate` is what the results file
holds under ``aggregates``; ``http_connect``, ``http_headers``, ``http_receive`` and
``http_reuse`` summarize the HTTP phases sluice's transport noted per request.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING, Any

from .stats import percentile, summarize

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from .metrics import RequestRecord
    from .slo import Slo

__all__ = [
    "DEFAULT_MAX_ERROR_RATE",
    "DEFAULT_MAX_LAG",
    "aggregate",
    "error_verdict",
    "lag_verdict",
    "token_times",
]

DEFAULT_MAX_LAG = 0.010
"""Send-lag p99 beyond which a run is invalid (seconds). A request sent 10 ms late hides up
to 10 ms of the latency the schedule meant to expose."""

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


def aggregate(
    records: Sequence[RequestRecord],
    *,
    slos: Sequence[Slo] = (),
    max_lag: float = DEFAULT_MAX_LAG,
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE,
    bin_seconds: float | None = None,
) -> dict[str, Any]:
    """The run's aggregates (see the module docstring)."""
    ok = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    start = min((r.scheduled for r in records), default=0.0)
    end = max((r.end for r in records), default=start)
    elapsed = max(end - start, 1e-9)
    itls = sorted(x for r in ok for x in r.itls)  # every token's; sorted once, used twice
    lag = summarize([r.lag for r in records])
    out_tokens = sum(r.output_tokens for r in ok)
    in_tokens = sum(r.input_tokens for r in ok)
    errors = Counter(r.error_type or "unknown" for r in failed)
    timeline = _timeline(records, start, end, bin_seconds)
    reasons = [
        r
        for r in (
            error_verdict(len(failed), len(records), max_error_rate),
            lag_verdict(_number(lag["p99"]), max_lag),
        )
        if r is not None
    ]
    reason = "; ".join(reasons) or None
    return {
        "requests": {
            "total": len(records),
            "ok": len(ok),
            "failed": len(failed),
            "error_rate": len(failed) / len(records) if records else 0.0,
            "errors": dict(errors.most_common()),
            "statuses": {
                str(k): v for k, v in Counter(r.status for r in failed if r.status).items()
            },
        },
        "ttft": summarize([r.ttft for r in ok if r.ttft is not None], intervals=True),
        "ttst": summarize([r.ttst for r in ok if r.ttst is not None], intervals=True),
        "itl": summarize(itls, intervals=True),
        "icl": summarize([x for r in ok for x in r.icls], intervals=True),
        "tpot": summarize([r.tpot for r in ok if r.tpot is not None], intervals=True),
        "e2e": summarize([r.e2e for r in ok], intervals=True),
        "output_length": _lengths(ok),
        "sessions": _sessions(records),
        "token_counts": _token_counts(ok),
        "queue_wait": summarize([r.queue_wait for r in records]),
        **_http_phases(ok),
        "client_lag": lag | {"max_allowed": max_lag},
        "throughput": {
            "elapsed_s": elapsed,
            "requests_per_s": len(ok) / elapsed,
            "output_tokens_per_s": out_tokens / elapsed,
            "input_tokens_per_s": in_tokens / elapsed,
            "total_tokens_per_s": (in_tokens + out_tokens) / elapsed,
            "peak_output_tokens_per_s": max(
                (b["output_tokens_per_s"] for b in timeline), default=0.0
            ),
            "output_tokens": out_tokens,
            "input_tokens": in_tokens,
            "output_tokens_estimated": sum(1 for r in ok if not r.output_tokens_reported),
            "embeddings_per_s": (
                sum(r.inputs or 0 for r in ok) / elapsed
                if any(r.inputs is not None for r in records)
                else None
            ),
        },
        "timeline": timeline,
        "goodput": _goodput(ok, itls, slos, elapsed, len(records)),
        "valid": reason is None,
        "invalid_reason": reason,
    }


def _sessions(records: Sequence[RequestRecord]) -> dict[str, Any] | None:
    """Multi-turn runs: metrics per turn (how latency grows with the history) and per
    session (how long a whole conversation took, and how many completed); None otherwise."""
    turned = [r for r in records if r.session is not None and r.turn is not None]
    if not turned:
        return None
    by_turn: dict[int, list[RequestRecord]] = {}
    by_session: dict[int, list[RequestRecord]] = {}
    for r in turned:
        by_turn.setdefault(r.turn or 0, []).append(r)
        by_session.setdefault(r.session or 0, []).append(r)
    turns = []
    for turn in sorted(by_turn):
        group = by_turn[turn]
        good = [r for r in group if r.ok]
        ttft = summarize([r.ttft for r in good if r.ttft is not None])
        e2e = summarize([r.e2e for r in good])
        turns.append(
            {
                "turn": turn,
                "requests": len(group),
                "ok": len(good),
                "input_tokens_mean": (
                    sum(r.input_tokens for r in good) / len(good) if good else None
                ),
                "ttft_p50": ttft["p50"],
                "ttft_p99": ttft["p99"],
                "e2e_p50": e2e["p50"],
                "e2e_p99": e2e["p99"],
            }
        )
    most = max(by_turn) + 1
    complete = [
        group for group in by_session.values() if len(group) == most and all(r.ok for r in group)
    ]
    return {
        "count": len(by_session),
        "turns": most,
        "complete": len(complete),
        "duration": summarize([max(r.end for r in g) - min(r.sent for r in g) for g in complete]),
        "per_turn": turns,
    }


def _http_phases(ok: Sequence[RequestRecord]) -> dict[str, Any]:
    """The HTTP phases of the ok requests, as sluice's transport measured them: connect time
    over the requests that opened a connection, time to response headers and receive time
    over every measured request, and how many reused a kept-alive connection."""
    measured = [r for r in ok if r.http_reused is not None]
    reused = sum(1 for r in measured if r.http_reused)
    return {
        "http_connect": summarize([x for r in measured if (x := r.http_connect) is not None]),
        "http_headers": summarize([x for r in measured if (x := r.http_headers) is not None]),
        "http_receive": summarize([x for r in measured if (x := r.http_receive) is not None]),
        "http_reuse": {
            "measured": len(measured),
            "reused": reused,
            "new": len(measured) - reused,
            "fraction": reused / len(measured) if measured else None,
        },
    }


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _lengths(ok: Sequence[RequestRecord]) -> dict[str, Any]:
    """Requested (``max_tokens``) against received output length, over the ok requests that
    asked for one: a server that stops early or overruns shows here."""
    asked = [r for r in ok if r.requested_output_tokens is not None]
    short = sum(1 for r in asked if r.output_tokens < (r.requested_output_tokens or 0))
    long = sum(1 for r in asked if r.output_tokens > (r.requested_output_tokens or 0))
    return {
        "requested": sum(r.requested_output_tokens or 0 for r in asked),
        "received": sum(r.output_tokens for r in asked),
        "requests_short": short,
        "requests_long": long,
        "requests_exact": len(asked) - short - long,
        "received_over_requested": summarize(
            [
                r.output_tokens / r.requested_output_tokens
                for r in asked
                if r.requested_output_tokens
            ]
        ),
    }


TOKEN_RULE = "words: each run of non-whitespace characters, with the whitespace before it"
"""How the client counts output tokens (:func:`~.metrics.estimate_tokens`)."""


def _token_counts(ok: Sequence[RequestRecord]) -> dict[str, Any]:
    """The server's reported output tokens against the client's own count by
    :data:`TOKEN_RULE`, over the requests where the server reported a count."""
    both = [r for r in ok if r.server_output_tokens is not None]
    differing = [r for r in both if r.server_output_tokens != r.client_output_tokens]
    return {
        "client_rule": TOKEN_RULE,
        "server_reported": sum(r.server_output_tokens or 0 for r in both),
        "client_counted": sum(r.client_output_tokens for r in both),
        "requests_compared": len(both),
        "requests_differing": len(differing),
        "server_unreported": len(ok) - len(both),
    }


def _timeline(
    records: Sequence[RequestRecord], start: float, end: float, bin_seconds: float | None
) -> list[dict[str, Any]]:
    """Per time bin: requests sent and completed, output tokens per second (by token arrival),
    and the median TTFT, ITL and lag of what happened in the bin."""
    span = end - start
    if not records or span <= 0:
        return []
    width = bin_seconds or _nice_bin(span)
    count = max(1, math.ceil(span / width))
    sent = [0] * count
    done = [0] * count
    failed = [0] * count
    tokens = [0] * count
    ttfts: list[list[float]] = [[] for _ in range(count)]
    itls: list[list[float]] = [[] for _ in range(count)]
    lags: list[list[float]] = [[] for _ in range(count)]

    def slot(at: float) -> int:
        return min(count - 1, max(0, int((at - start) / width)))

    for r in records:
        i = slot(r.sent)
        sent[i] += 1
        lags[i].append(r.lag)
        if r.ok:
            done[slot(r.end)] += 1
            if r.ttft is not None:
                ttfts[i].append(r.ttft)
            for at in token_times(r):
                tokens[slot(at)] += 1
            at = r.first_token_at or 0.0
            for gap in r.itls:
                at += gap
                itls[slot(at)].append(gap)
        else:
            failed[slot(r.end)] += 1

    def median(values: list[float]) -> float | None:
        return percentile(sorted(values), 50) if values else None

    def p99(values: list[float]) -> float | None:
        return percentile(sorted(values), 99) if values else None

    return [
        {
            "t": i * width,
            "width": width,
            "sent": sent[i],
            "completed": done[i],
            "failed": failed[i],
            "requests_per_s": done[i] / width,
            "output_tokens_per_s": tokens[i] / width,
            "ttft_p50": median(ttfts[i]),
            "ttft_p99": p99(ttfts[i]),
            "itl_p50": median(itls[i]),
            "itl_p99": p99(itls[i]),
            "lag_p99": p99(lags[i]),
        }
        for i in range(count)
    ]


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


def _goodput(
    ok: Sequence[RequestRecord],
    itls: Sequence[float],
    slos: Sequence[Slo],
    elapsed: float,
    total: int,
) -> dict[str, Any]:
    """Goodput under ``slos``; ``itls`` are the ok requests' per-token ITLs, sorted."""
    if not slos:
        return {
            "slos": [],
            "good": len(ok),
            "requests_per_s": len(ok) / elapsed,
            "fraction": len(ok) / total if total else 0.0,
            "met": True,
        }
    checks = []
    for slo in slos:
        if slo.metric == "itl":
            samples = itls
        else:
            samples = sorted(v for r in ok if (v := _own_value(r, slo)) is not None)
        measured = percentile(samples, slo.percentile) if samples else None
        checks.append(
            {
                "slo": slo.name,
                "bound": slo.seconds,
                "measured": measured,
                "met": measured is not None and measured <= slo.seconds,
            }
        )
    good = 0
    for r in ok:
        values = [_own_value(r, slo) for slo in slos]
        if all(v is not None and v <= slo.seconds for v, slo in zip(values, slos, strict=True)):
            good += 1
    return {
        "slos": checks,
        "good": good,
        "requests_per_s": good / elapsed,
        "fraction": good / total if total else 0.0,
        "met": all(c["met"] for c in checks),
    }
