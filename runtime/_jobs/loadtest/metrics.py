"""One request's measurements, on trio's clock. Pure.

The run loop feeds a :class:`Tracker` the moments things happened (sent, admitted, each chunk
of output with its size, the end); :meth:`Tracker.finish` turns them into a frozen
:class:`RequestRecord`.

Inter-token latency is measured per token, not per chunk. A chunk may carry several tokens
(a server batching its output, several deltas decoded from one network read); counting it
as one token would make ITL too long and the token count too small. Each chunk's tokens are
estimated from its text (word-ish pieces, a cheap tokenizer stand-in), and when the server
reported usage the estimates are scaled to its exact output count. A chunk of ``k`` tokens
that arrived ``g`` seconds after the previous one gives ``k`` samples of ``g / k``. The tokens
of the first chunk arrive at the time to first token and give no ITL samples.
"""

from __future__ import annotations

import math
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["RequestRecord", "Tracker", "estimate_tokens", "spread_tokens"]


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` by the word rule: each run of non-whitespace characters, with the
    whitespace before it, is one token (at least 1 for any text). The simulator counts its
    prompts and replies by the same rule, so against it the client's count is exact.
    (Counted by ``str.split``, whose whitespace is the regular expression ``\\s``'s: the
    same runs as the simulator's ``\\s*\\S+`` matches, without the regex machinery on
    every delta of every request.)"""
    if not text:
        return 0
    return max(1, len(text.split()))


def spread_tokens(weights: Sequence[int], total: int | None) -> list[int]:
    """Token counts per chunk: ``weights`` themselves when ``total`` is None, else ``total``
    shared out in proportion to ``weights`` by largest remainder, so they add up exactly to
    ``total`` and every chunk keeps at least one token while there are enough to go round."""
    if total is None or not weights:
        return list(weights)
    weight_sum = sum(weights)
    if total == weight_sum and weights.count(weights[0]) == len(weights):
        # The common case (the server's count agrees, every chunk the same size): the
        # shares below come out as the weights themselves, exactly, without their loops.
        return list(weights)
    return _largest_remainder(weights, weight_sum, total)


def _largest_remainder(weights: Sequence[int], weight_sum: int, total: int) -> list[int]:
    """:func:`spread_tokens`'s sharing out of ``total`` over ``weights`` (which sum to
    ``weight_sum``)."""
    if weight_sum == 0:
        return [0] * len(weights)
    if total >= len(weights):
        # One each first, the rest in proportion: no chunk that carried text counts as empty.
        base = [1] * len(weights)
        shares = [(total - len(weights)) * w / weight_sum for w in weights]
    else:
        base = [0] * len(weights)
        shares = [total * w / weight_sum for w in weights]
    whole = [math.floor(s) for s in shares]
    left = total - sum(base) - sum(whole)
    order = sorted(range(len(weights)), key=lambda i: (whole[i] - shares[i], i))
    for i in order[:left]:
        whole[i] += 1
    return [b + w for b, w in zip(base, whole, strict=True)]


@attrs.frozen(kw_only=True)
class RequestRecord:
    """Everything measured about one request. Times are seconds on trio's clock relative to
    the run's start; durations are seconds. A failed request has no TTFT/ITL unless output
    began before it failed."""

    index: int
    scheduled: float
    """When the schedule said to send it (closed loop: when its user became free)."""
    sent: float
    """When it was handed to the runtime."""
    lag: float
    """``sent - scheduled``: how late the client was."""
    queue_wait: float
    """Time in sluice's RateLimiter queue before admission (client side), summed over the
    attempts: with ``--respect-limits`` a quota or a 429's cooldown holds requests here."""
    ttft: float | None
    """Sent to the first chunk of output."""
    e2e: float
    """Sent to the end (last chunk, or the failure)."""
    itls: tuple[float, ...]
    """Per-token inter-token latencies (see the module docstring)."""
    tpot: float | None
    """Time per output token after the first chunk: the mean of ``itls``."""
    input_tokens: int
    output_tokens: int
    output_tokens_reported: bool
    """True when ``output_tokens`` is the server's count, False for an estimate."""
    chunks: int
    ok: bool
    ttst: float | None = None
    """Sent to the second output token (the first chunk's time when it carried two or more)."""
    icls: tuple[float, ...] = ()
    """Inter-chunk latencies: the gaps between consecutive chunks, whatever they carried."""
    requested_output_tokens: int | None = None
    """``max_tokens`` asked for (None when the request set none)."""
    requested_input_tokens: int | None = None
    """Prompt length asked of the synthetic workload (None for a dataset prompt)."""
    server_output_tokens: int | None = None
    """The output count the server reported in its usage (None when it reported none)."""
    client_output_tokens: int = 0
    """The output counted on the client by :func:`estimate_tokens` (the word rule)."""
    request_id: str | None = None
    """The server's request id, to find the request in its logs."""
    warmup: bool = False
    """A warm-up request: kept in the results, left out of every aggregate."""
    inputs: int | None = None
    """Embeddings tests: the inputs the request carried (its batch size)."""
    session: int | None = None
    """Multi-turn workloads: the session (conversation) the request belongs to."""
    turn: int | None = None
    """Multi-turn workloads: the turn within its session, from 0."""
    status: int | None = None
    """HTTP status of a failure, when there was one."""
    error_type: str | None = None
    error: str | None = None
    attempts: int = 1
    """HTTP attempts the request took (more than 1 when sluice retried it)."""
    retry_wait: float = 0.0
    """Seconds of backoff sluice waited between attempts."""
    admitted: float | None = None
    """When the attempt that ended the request left sluice's queue (run-relative; None when
    no attempt was admitted, or the endpoint is called without the runtime). TTFT and E2E
    measured from here leave out sluice's queueing, backoff and failed attempts."""
    http_connect: float | None = None
    """Seconds to open the connection the request went out on (DNS, TCP, TLS), as sluice's
    transport measured it; None when it reused a pooled connection, or when nothing was
    measured (see ``http_reused``)."""
    http_headers: float | None = None
    """Seconds from the request being written to the response's headers being parsed (the
    server's wait, its time to first byte and the network)."""
    http_receive: float | None = None
    """Seconds from the response's headers to the last byte of its body."""
    http_reused: bool | None = None
    """Whether the request reused a kept-alive connection; None when the phases were not
    measured (the httpx transport, ``--endpoint completions``/``embeddings``, a reply from
    the response cache). With retries, these four describe the last attempt."""

    @property
    def first_token_at(self) -> float | None:
        return None if self.ttft is None else self.sent + self.ttft

    @property
    def end(self) -> float:
        return self.sent + self.e2e

    @property
    def ttft_after_queue(self) -> float | None:
        """TTFT from the final attempt's admission (None without both)."""
        if self.ttft is None or self.admitted is None:
            return None
        return self.sent + self.ttft - self.admitted

    @property
    def e2e_after_queue(self) -> float | None:
        """E2E from the final attempt's admission (None when none was admitted)."""
        return None if self.admitted is None else self.end - self.admitted


class Tracker:
    """Collects one request's moments as they happen; :meth:`finish` makes the record.

    Chunks arriving at the same instant (one network read, handed over as one batch) are
    merged into one chunk, since nothing can tell their tokens apart in time.
    """

    __slots__ = (
        "_chunk_at",
        "_chunk_tokens",
        "admitted",
        "index",
        "lag",
        "queue_wait",
        "retry_wait",
        "scheduled",
        "sent",
    )

    def __init__(
        self, index: int, scheduled: float, sent: float, *, lag: float | None = None
    ) -> None:
        self.index = index
        self.scheduled = scheduled
        self.sent = sent
        self.lag = sent - scheduled if lag is None else lag
        """Given when the caller has it from absolute times, free of rounding."""
        self.queue_wait = 0.0
        """Seconds in sluice's queue, summed over the attempts."""
        self.retry_wait = 0.0
        """Seconds of retry backoff between the attempts."""
        self.admitted: float | None = None
        """When the latest attempt left sluice's queue (run-relative)."""
        self._chunk_at: list[float] = []
        self._chunk_tokens: list[int] = []

    def chunk(self, at: float, text: str) -> None:
        """Output ``text`` arrived at ``at``."""
        self.tokens(at, estimate_tokens(text))

    def tokens(self, at: float, tokens: int) -> None:
        """Output of ``tokens`` tokens (:func:`estimate_tokens` of its pieces, summed)
        arrived at ``at``: what :meth:`chunk` of each piece at ``at`` would record, in one
        call for everything one network read brought."""
        if not tokens:
            return
        if self._chunk_at and self._chunk_at[-1] == at:
            self._chunk_tokens[-1] += tokens
        else:
            self._chunk_at.append(at)
            self._chunk_tokens.append(tokens)

    def reset(self) -> None:
        """The attempt's output was discarded (a retry restarts the stream)."""
        self._chunk_at.clear()
        self._chunk_tokens.clear()

    def finish(
        self,
        at: float,
        *,
        input_tokens: int | None,
        output_tokens: int | None,
        ok: bool,
        status: int | None = None,
        error_type: str | None = None,
        error: str | None = None,
        attempts: int = 1,
        **extra: Any,
    ) -> RequestRecord:
        """The record of a request that ended at ``at``; the token counts are the server's
        usage, None when it reported none. ``extra`` sets the record's descriptive fields
        (``requested_output_tokens``, ``request_id``, ``warmup``, ``session``, ...)."""
        counts = spread_tokens(self._chunk_tokens, output_tokens if ok else None)
        times = self._chunk_at
        gaps = [b - a for a, b in pairwise(times)]  # the ICLs
        if counts[1:].count(1) == len(gaps):
            itls = gaps  # a token per chunk after the first: each gap is its sample (g / 1)
        else:
            itls = []
            for i, gap in enumerate(gaps, 1):
                k = counts[i]
                if k:
                    itls.extend([gap / k] * k)
        last = times[-1] if times else at
        ttst = None
        if times and counts and counts[0] >= 2:
            ttst = times[0] - self.sent
        elif len(times) >= 2:
            ttst = times[1] - self.sent
        return RequestRecord(
            ttst=ttst,
            icls=tuple(gaps),
            server_output_tokens=output_tokens if ok else None,
            client_output_tokens=sum(self._chunk_tokens),
            **extra,
            index=self.index,
            scheduled=self.scheduled,
            sent=self.sent,
            lag=self.lag,
            queue_wait=self.queue_wait,
            retry_wait=self.retry_wait,
            admitted=self.admitted,
            ttft=times[0] - self.sent if times else None,
            e2e=max(at, last) - self.sent,
            itls=tuple(itls),
            tpot=math.fsum(itls) / len(itls) if itls else None,
            input_tokens=input_tokens or 0,
            output_tokens=sum(counts),
            output_tokens_reported=output_tokens is not None and ok,
            chunks=len(times),
            ok=ok,
            status=status,
            error_type=error_type,
            error=error,
            attempts=attempts,
        )
