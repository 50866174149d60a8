"""What a batch reports: its counts, progress snapshots, log lines and summary. Pure: no I/O.

Everything here has a size independent of the input's: latencies go into a fixed histogram
(:class:`LatencyHistogram`), error counts are per error code.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs

from .._ledger.prices import format_usd
from .percentile import interpolate

if TYPE_CHECKING:
    from .._mail import KeyStatistics

__all__ = [
    "BatchProgress",
    "BatchSummary",
    "LatencyHistogram",
    "format_duration",
    "format_progress",
    "quota_limits",
    "format_summary",
    "summary_json",
    "summary_path",
]

Interrupted = Literal["drained", "cancelled"]


class LatencyHistogram:
    """Latencies in logarithmic buckets 2% wide, from 0.1 ms to a day: fixed memory (8 KB)
    whatever the number of calls, percentiles within 1% of the exact ones."""

    LOW = 1e-4
    RATIO = 1.02
    _LOG = math.log(RATIO)
    BUCKETS = math.ceil(math.log(86_400 / LOW) / _LOG) + 1

    def __init__(self) -> None:
        self._counts = array("q", bytes(8 * self.BUCKETS))
        self.count = 0
        self.low = math.inf
        self.high = 0.0

    def add(self, seconds: float) -> None:
        index = 0 if seconds <= self.LOW else int(math.log(seconds / self.LOW) / self._LOG) + 1
        self._counts[min(index, self.BUCKETS - 1)] += 1
        self.count += 1
        self.low = min(self.low, seconds)
        self.high = max(self.high, seconds)

    def percentile(self, p: float) -> float | None:
        """The ``p``-th percentile (0-100) as :mod:`sluice._jobs.percentile` defines it (linear
        interpolation between the closest ranks), None without samples. Each rank's value is
        the geometric middle of its bucket, clamped to the smallest and largest latency seen
        (so one sample gives itself back, and p0 and p100 are exact)."""
        if not self.count:
            return None
        return interpolate(self.count, p, self._at_rank)

    def _at_rank(self, rank: int) -> float:
        """The value of 0-based ``rank`` in sorted order, as well as the buckets know it."""
        if rank == 0:
            return self.low
        if rank == self.count - 1:
            return self.high
        seen = 0
        for index, n in enumerate(self._counts):
            seen += n
            if seen > rank:
                if index == 0:
                    return self.low  # at most LOW: the smallest seen is as good as any
                if index == self.BUCKETS - 1:
                    return self.high  # the overflow bucket
                middle: float = self.LOW * math.pow(self.RATIO, index - 0.5)
                return min(self.high, max(self.low, middle))
        return self.high  # not reached: the counts sum to count


@attrs.frozen(kw_only=True)
class BatchSummary:
    """Counts for a batch run: final, or so far inside a :class:`BatchProgress`."""

    lines: int = 0
    """Non-blank input lines read; each gets exactly one output line."""
    input_lines: int = 0
    """Non-blank lines in the input (0: an empty input)."""
    ok: int = 0
    failed: int = 0
    """Bad input lines plus calls that failed."""
    calls: int = 0
    """Finished calls, ok or failed (bad input lines never become calls)."""
    input_tokens: int = 0
    """Summed over successful calls."""
    output_tokens: int = 0
    """Summed over successful calls."""
    skipped: int = 0
    """Lines already answered in the output file (``resume``); not run again."""
    redone: int = 0
    """Error lines of an earlier run that this resume did again (``retry_errors``)."""
    kept_failed: int = 0
    """Error lines of earlier runs that this resume kept (terminal errors, or
    ``retry_errors="none"``): the output holds them besides this run's :attr:`failed`."""
    todo: int = 0
    """Lines this run had to answer (in its shard, not already answered), from the check
    before the run."""
    elapsed: float = 0.0
    """Seconds on trio's clock since the run started."""
    errors: Mapping[str, int] = attrs.field(factory=dict)
    """Failed lines per error code (``invalid_json_line``, ``RateLimited``, ``server_error``...)."""
    cost_micros: int = 0
    """What the ledger booked for this run's job since the run started, in micro-dollars."""
    job_cost_micros: int = 0
    """The same, with what earlier runs of the same job (``--job``) spent."""
    latency: Mapping[str, float] = attrs.field(factory=dict)
    """Seconds from a call's start to its outcome (waiting for the quota included):
    ``p50``, ``p90``, ``p99``, ``max``; empty without calls."""
    interrupted: Interrupted | None = None
    """``drained``: stopped reading lines and withdrew every call the RateLimiter had not
    admitted yet (or that waited to retry), while the admitted calls finished; ``cancelled``:
    the admitted calls were cancelled too. Lines not written stay for a resume."""
    job: str = ""
    batches: int = 0
    """Provider lane: batches this run submitted to providers' Batch APIs."""
    batch_lines: int = 0
    """Provider lane: lines answered from a batch (the rest of :attr:`calls` ran realtime)."""
    realtime_lines: int = 0
    """Provider lane: lines sent to the realtime lane instead (a provider without a batch
    API, a model group, or ``auto`` past its deadline's mark)."""
    resubmitted: int = 0
    """Provider lane: lines handed back to be sent again (expired, cancelled, failed batch)."""
    lane_note: str | None = None
    """Provider lane: why lines went realtime, for the summary."""

    @property
    def written(self) -> int:
        """Output lines written so far."""
        return self.ok + self.failed

    @property
    def failed_in_output(self) -> int:
        """Error lines the output holds at the end: this run's and those a resume kept."""
        return self.failed + self.kept_failed

    @property
    def left(self) -> int:
        """Lines of :attr:`todo` not answered (yet, or at all when interrupted)."""
        return max(0, self.todo - self.written)

    @property
    def calls_per_second(self) -> float:
        return self.calls / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def tokens_per_second(self) -> float:
        tokens = self.input_tokens + self.output_tokens
        return tokens / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def cost_usd(self) -> str:
        return format_usd(self.cost_micros)


@attrs.frozen(kw_only=True)
class BatchProgress:
    """A snapshot of a running batch, for a progress display."""

    summary: BatchSummary
    in_flight: int = 0
    """Calls of this run started in the runtime and not finished, ``queued`` included (at
    most ``max_in_flight``)."""
    queued: int = 0
    """Calls waiting for the RateLimiter (quota, pending slots or budget)."""
    cooldown: float = 0.0
    """Seconds left of the longest cooldown after a 429."""
    limits: tuple[str, ...] = ()
    """Each quota window in force: ``sim requests/60s 57/60``."""
    draining: bool = False
    """Admitting no more lines (first Ctrl-C): calls not admitted are withdrawn, the admitted
    ones finish."""
    batches_running: int = 0
    """Provider lane: batches submitted and not yet merged."""
    batch_lines: int = 0
    """Provider lane: lines in those batches, as the providers count them."""
    batch_lines_done: int = 0
    """Provider lane: of those, the lines the providers report finished."""
    batch_eta: float | None = None
    """Provider lane: seconds until the slowest running batch ends, at the rate its
    provider reports."""

    @property
    def eta(self) -> float | None:
        """Seconds to go at the rate so far (the providers' rate for running batches); None
        before the first line is written."""
        if self.batch_eta is not None:
            return self.batch_eta
        s = self.summary
        if s.written == 0 or s.elapsed <= 0:
            return None
        return s.left / (s.written / s.elapsed)


STALE_WINDOWS = 5.0
"""Seconds after which a window shown from a shared store's last report says how old it is."""


def quota_limits(name: str, key: KeyStatistics) -> list[str]:
    """The progress line's parts for one quota key: each window (``sim requests/60s 57/60``,
    with ``(12s ago)`` when a shared store last reported it :data:`STALE_WINDOWS` seconds ago
    or more), then the pending slots when limited."""
    old = f" ({key.windows_age:.0f}s ago)" if key.windows_age >= STALE_WINDOWS else ""
    parts = [f"{name} {window} {u}/{limit}{old}" for window, (u, limit) in key.windows.items()]
    if key.pending_limit is not None:
        parts.append(f"{name} pending {key.pending}/{key.pending_limit}")
    return parts


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def format_progress(p: BatchProgress) -> str:
    """One line: ``1200/20000 lines, ok 1190, failed 10, in flight 256 (queued 30), ...``."""
    s = p.summary
    parts = [
        f"{s.written}/{s.todo} lines",
        f"ok {s.ok}",
        f"failed {s.failed}",
        f"in flight {p.in_flight} (queued {p.queued})",
        f"{s.tokens_per_second:.0f} tok/s",
        f"${s.cost_usd}",
    ]
    if p.batches_running or s.batches:
        parts.append(
            f"batches {s.batches} submitted, {p.batches_running} running"
            f" ({p.batch_lines_done}/{p.batch_lines} lines done at the providers)"
        )
    eta = p.eta
    if p.draining:
        parts.append("stopping: the admitted calls finish")
    elif eta is not None:
        parts.append(f"ETA {format_duration(eta)}")
    if p.limits:
        parts.append("limit " + ", ".join(p.limits))
    if p.cooldown > 0:
        parts.append(f"cooldown {p.cooldown:.1f}s")
    return ", ".join(parts)


def format_summary(s: BatchSummary, output: str) -> str:
    """The lines printed when a batch ends."""
    lines = [
        f"batch {'interrupted' if s.interrupted else 'done'}: {s.written} lines written"
        f" -> {output}",
        f"  ok {s.ok}, failed {s.failed}"
        + (f", skipped {s.skipped} (already answered)" if s.skipped else "")
        + (f", redone {s.redone} (error lines tried again)" if s.redone else "")
        + (f", kept {s.kept_failed} earlier error lines" if s.kept_failed else "")
        + (f", not done {s.left} (run again with --resume)" if s.interrupted else ""),
    ]
    if s.batches or s.realtime_lines:
        lines.append(
            f"  provider batches: {s.batches} submitted, {s.batch_lines} lines from batches"
            + (f", {s.resubmitted} resubmitted" if s.resubmitted else "")
            + (f", {s.realtime_lines} realtime" if s.realtime_lines else "")
            + (f" ({s.lane_note})" if s.lane_note else "")
        )
    if s.errors:
        lines.append("  errors: " + ", ".join(f"{code} {n}" for code, n in s.errors.items()))
    lines.append(f"  tokens: {s.input_tokens} input, {s.output_tokens} output")
    lines.append(f"  cost: ${s.cost_usd} (job {s.job}: ${format_usd(s.job_cost_micros)})")
    lines.append(f"  elapsed {s.elapsed:.2f} s, {s.calls_per_second:.1f} calls/s")
    if s.latency:
        lines.append(
            "  latency "
            + ", ".join(f"{name} {value * 1000:.0f} ms" for name, value in s.latency.items())
        )
    return "\n".join(lines)


def summary_path(output: str) -> str:
    """Where the JSON summary of a run writing ``output`` goes: ``OUT.jsonl`` gives
    ``OUT.summary.json`` (any other name gets ``.summary.json`` appended)."""
    stem = output.removesuffix(".jsonl")
    return f"{stem}.summary.json"


def summary_json(s: BatchSummary, *, input: str, output: str) -> dict[str, Any]:
    """The summary file's content."""
    return {
        "input": input,
        "output": output,
        "job": s.job,
        "interrupted": s.interrupted,
        "lines": s.lines,
        "input_lines": s.input_lines,
        "todo": s.todo,
        "status": {
            "ok": s.ok,
            "failed": s.failed,
            "skipped": s.skipped,
            "redone": s.redone,
            "kept_failed": s.kept_failed,
            "failed_in_output": s.failed_in_output,
            "not_done": s.left,
        },
        "errors": dict(sorted(s.errors.items())),
        **(
            {
                "provider_batches": {
                    "batches": s.batches,
                    "batch_lines": s.batch_lines,
                    "realtime_lines": s.realtime_lines,
                    "resubmitted": s.resubmitted,
                    "note": s.lane_note,
                }
            }
            if s.batches or s.realtime_lines
            else {}
        ),
        "calls": s.calls,
        "tokens": {
            "input": s.input_tokens,
            "output": s.output_tokens,
            "total": s.input_tokens + s.output_tokens,
        },
        "cost_usd": s.cost_usd,
        "job_cost_usd": format_usd(s.job_cost_micros),
        "elapsed_s": round(s.elapsed, 3),
        "calls_per_s": round(s.calls_per_second, 2),
        "tokens_per_s": round(s.tokens_per_second, 1),
        "latency_s": {name: round(value, 4) for name, value in s.latency.items()},
    }
